"""Loading a kubeconfig, with a refusal that says what to fix (:class:`KubeconfigError`).

kubernetes-asyncio's ``load_kube_config`` merges the files of a ``:``-separated list and *skips the ones that do
not exist*; so a mistyped ``--kubeconfig`` becomes an empty configuration, refused with "Expected key
current-context in kube-config" — which blames the file's content for a file that is not there. A file that is
not YAML surfaces as a parser traceback. Here the files are checked first, in the order the library reads them:

1. at least one file of the list exists (kubectl's rule: missing entries of ``KUBECONFIG`` are skipped);
2. each is YAML, and a mapping;
3. the library loads the merged configuration; its refusals (no current-context, a context that is not there, a
   user or cluster entry it cannot use) are rephrased with the context names the files do have.

Every refusal is one :class:`KubeconfigError` (a ``ValueError``) naming the file(s) and the flag to change.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import yaml
from kubernetes_asyncio import client, config

DEFAULT = "~/.kube/config"


class KubeconfigError(ValueError):
    """A kubeconfig that cannot be used; the message says which file and what to do."""


def kubeconfig_files(spec: str | None) -> list[Path]:
    """The files of ``spec`` (a path or a ``:``-separated list), else of ``$KUBECONFIG``, else ``~/.kube/config``."""
    chosen = spec or os.environ.get("KUBECONFIG") or DEFAULT
    return [Path(part).expanduser() for part in chosen.split(os.pathsep) if part]


def _yaml_problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or getattr(exc, "context", None) or "not YAML"
    mark = getattr(exc, "problem_mark", None) or getattr(exc, "context_mark", None)
    return f"{problem} at line {mark.line + 1}, column {mark.column + 1}" if mark is not None else str(problem)


def read_kubeconfigs(spec: str | None, *, flag: str = "--kubeconfig") -> list[tuple[Path, dict[str, Any]]]:
    """The existing files of ``spec`` with their parsed content (steps 1 and 2 of the module doc)."""
    files = kubeconfig_files(spec)
    present = [path for path in files if path.is_file()]
    if not present:
        where = ", ".join(str(p) for p in files)
        raise KubeconfigError(f"no kubeconfig at {where}: pass {flag} PATH or set KUBECONFIG to an existing file"
                              + (" (or use --in-cluster in a pod)" if flag == "--kubeconfig" else ""))
    parsed: list[tuple[Path, dict[str, Any]]] = []
    for path in present:
        try:
            content = yaml.safe_load(path.read_text())
        except yaml.YAMLError as exc:
            raise KubeconfigError(f"kubeconfig {path} is not valid YAML ({_yaml_problem(exc)}): fix it, or point "
                                  f"{flag} at another file") from exc
        except (OSError, UnicodeDecodeError) as exc:
            raise KubeconfigError(f"kubeconfig {path} cannot be read ({exc}): check its permissions") from exc
        if not isinstance(content, dict):
            raise KubeconfigError(f"kubeconfig {path} is not a kubeconfig (a YAML mapping with clusters, contexts "
                                  f"and users): point {flag} at one")
        parsed.append((path, content))
    return parsed


def _context_names(parsed: list[tuple[Path, dict[str, Any]]]) -> list[str]:
    names: list[str] = []
    for _, content in parsed:
        for entry in content.get("contexts") or []:
            name = entry.get("name") if isinstance(entry, dict) else None
            if isinstance(name, str) and name not in names:
                names.append(name)
    return names


async def load_kubeconfig(configuration: client.Configuration, *, spec: str | None, context: str | None,
                          flag: str = "--kubeconfig") -> None:
    """Fill ``configuration`` from the kubeconfig ``spec`` (module doc), or raise :class:`KubeconfigError`."""
    parsed = read_kubeconfigs(spec, flag=flag)
    where = ":".join(str(path) for path, _ in parsed)
    names = _context_names(parsed)
    has = f"it has: {', '.join(names)}" if names else "it has none"
    if context is not None and context not in names:
        raise KubeconfigError(f"kubeconfig {where} has no context {context!r} ({has}): fix --context")
    if context is None and not any(content.get("current-context") for _, content in parsed):
        raise KubeconfigError(f"kubeconfig {where} sets no current-context ({has}): pass --context NAME, or run "
                              "kubectl config use-context NAME")
    try:
        await config.load_kube_config(config_file=where, context=context, client_configuration=configuration)
    except config.ConfigException as exc:
        raise KubeconfigError(f"kubeconfig {where}: {' '.join(str(exc).split())} ({has}): fix the file, or "
                              f"choose another context with --context") from exc
    except Exception as exc:  # a malformed entry (a cluster without server...) fails as KeyError, TypeError...
        raise KubeconfigError(f"kubeconfig {where} cannot be used ({type(exc).__name__}: {exc}): check it with "
                              f"kubectl --kubeconfig {where} config view") from exc


def load_in_cluster(configuration: client.Configuration) -> None:
    """Fill ``configuration`` from the pod's service account, or raise :class:`KubeconfigError`."""
    try:
        config.load_incluster_config(client_configuration=configuration)
    except config.ConfigException as exc:
        raise KubeconfigError(f"--in-cluster: {exc} (this is not a pod with a service account): use --kubeconfig "
                              "instead") from exc
