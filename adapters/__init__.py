"""One module (or package) per outside system: logs, Kubernetes, catalogs, HTTP endpoints, the CLI."""
