"""What the daemon checks before it starts, so that a mistake is one sentence saying what to fix.

Each check runs before anything is started or logged, and raises :class:`StartupError`, whose message names the
flag, file or server to fix; ``tether run`` shows it as one line with exit code 2 (``adapters/cli/errors.py``).
In order:

1. **the API client** — the kubeconfig exists, is YAML, has the context (``adapters/kubernetes/kubeconfig.py``), or
   ``--in-cluster`` is in a pod;
2. **the log** — its URL parses (a Kafka broker's port is a number), a SQLite file can be a log (not a directory,
   in a directory that exists, a SQLite database if it exists) and a Kafka log's servers answer
   (``open_log(connect=True)``): a Kafka log otherwise connects on its first append, in the middle of the start;
3. **the API server** — it answers, accepts the credentials, and serves the resources tether cannot work without:
   DataSourceClaims and DataSources (tether's CRDs) and Karmada's ResourceBindings and Clusters. Without them every
   list would 404 and be retried for ever, and the decider, which waits for every list to end, would decide
   nothing — silently. The resources a deployment may lack (Volcano's Queues and Jobs, PriorityClasses) are not
   required: their sources list them as absent (``WatchSource.absent_ok``).

4. **certificates** — the TLS certificate and key of the endpoints (``--http-tls-cert``/``--http-tls-key``) and
   of the webhook server (``--webhook-cert-dir``, unless self-signed) load and match;
5. **the ports** — the endpoints' (``--http-address``/``--http-port``) and the webhook server's
   (``--webhook-address``/``--webhook-port``) sockets are bound here (:func:`listen`) and handed to the servers: a
   port another process holds, an address this host does not have or a name that does not resolve is one line —
   not a traceback from the middle of the start, with the log's threads left running and the process never
   exiting.

A failure of the API server during the run is not a startup error: watches retry with backoff. Only the first
contact is checked, where a wrong address or missing CRDs are far likelier than an outage — and where a
controller that cannot discover its resources conventionally exits (a supervisor restarts it).
"""

from __future__ import annotations

import socket
import ssl

from kubernetes_asyncio import client

from tether.adapters.kubernetes.client import BINDINGS, CLAIMS, CLUSTERS, DATASOURCES, KubeClient, KubeError, Resource
from tether.adapters.kubernetes.kubeconfig import KubeconfigError, load_in_cluster, load_kubeconfig
from tether.adapters.kubernetes.webhook_certs import ServingCertificate
from tether.adapters.log import EventLog
from tether.adapters.log.url import LogUnreachable, LogUnusable, open_log

#: What ``tether run`` cannot work without (module doc, 3).
REQUIRED: tuple[Resource, ...] = (CLAIMS, DATASOURCES, BINDINGS, CLUSTERS)


class StartupError(Exception):
    """The daemon cannot start, for a reason the user can fix; the message says what to fix."""


async def api_client(*, kubeconfig: str | None, context: str | None, in_cluster: bool) -> client.ApiClient:
    configuration = client.Configuration()
    try:
        if in_cluster:
            load_in_cluster(configuration)
        else:
            await load_kubeconfig(configuration, spec=kubeconfig, context=context)
    except KubeconfigError as exc:
        raise StartupError(str(exc)) from exc
    return client.ApiClient(configuration)


async def event_log(url: str) -> EventLog:
    try:
        return await open_log(url, connect=True)
    except ValueError as exc:
        raise StartupError(f"--log {url}: {exc}") from exc
    except LogUnreachable as exc:
        raise StartupError(str(exc)) from exc
    except LogUnusable as exc:
        raise StartupError(f"--log: {exc}") from exc
    except OSError as exc:  # a SQLite file in a directory that does not exist, or is not writable
        raise StartupError(f"--log {url}: cannot open it ({exc}): check the path and its permissions") from exc


def _names(resources: list[Resource]) -> str:
    return ", ".join(f"{r.plural}.{r.group}/{r.version}" for r in resources)


async def require_served(kube: KubeClient, *, server: str) -> None:
    """Raise :class:`StartupError` unless ``server`` serves every resource of :data:`REQUIRED` (module doc, 3)."""
    served: dict[tuple[str, str], set[str]] = {}
    try:
        for resource in REQUIRED:
            key = (resource.group, resource.version)
            if key not in served:
                served[key] = await kube.served(*key)
    except KubeError as exc:
        if exc.status == 0:
            why = " ".join(str(exc.__cause__ or exc.message).split())[:200]
            raise StartupError(f"cannot reach the API server at {server} ({why}): is it running, and is the "
                               "kubeconfig's server address right?") from exc
        if exc.status == 401:
            raise StartupError(f"the API server at {server} refuses the kubeconfig's credentials (401 "
                               f"{exc.reason}): renew them, or use another --context") from exc
        raise StartupError(f"the API server at {server} answered discovery with {exc.status} {exc.reason} "
                           f"({exc.message[:200]})") from exc
    missing = [r for r in REQUIRED if r.plural not in served[(r.group, r.version)]]
    if not missing:
        return
    if len(missing) == len(REQUIRED):
        raise StartupError(f"the API server at {server} serves no tether CRDs (none of {_names(missing)}): point "
                           "--kubeconfig at the Karmada API server, and install tether's CRDs there (kubectl apply "
                           "-k ops/crds)")
    raise StartupError(f"the API server at {server} does not serve {_names(missing)}: install the missing CRDs "
                       "(tether's: kubectl apply -k ops/crds; Karmada's come with Karmada), or point --kubeconfig "
                       "at the Karmada API server")


def serving_certificate(cert_file: str, key_file: str, *, flags: str) -> ServingCertificate:
    """The certificate of a TLS port, loaded once to check it (module doc, 4); ``flags`` names where it came from."""
    certificate = ServingCertificate(cert_file, key_file)
    try:
        certificate.context()
    except (OSError, ssl.SSLError) as exc:
        raise StartupError(f"{flags}: cannot load the TLS certificate {cert_file} and key {key_file} ({exc})") from exc
    return certificate


def listen(host: str, port: int, *, flags: str) -> socket.socket:
    """A TCP socket listening on ``host:port`` (``""`` or ``0.0.0.0``: every IPv4 address; ``::`` every address),
    for a server to serve on (module doc, 5); ``flags`` names the options that chose it."""
    where = f"[{host}]:{port}" if ":" in host else f"{host or '0.0.0.0'}:{port}"
    try:
        family, kind, proto, _, address = socket.getaddrinfo(host or None, port, type=socket.SOCK_STREAM,
                                                             flags=socket.AI_PASSIVE)[0]
        sock = socket.socket(family, kind, proto)
        try:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # (as asyncio's servers: TIME_WAIT is fine)
            sock.bind(address)
            sock.listen(128)
            sock.setblocking(False)
        except BaseException:
            sock.close()
            raise
    except (OSError, OverflowError) as exc:
        why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise StartupError(f"{flags}: cannot listen on {where} ({why}): free the port, or choose another address "
                           "or port") from exc
    return sock
