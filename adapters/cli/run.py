"""``tether run``: the long-running daemon (see ``adapters/daemon/daemon.py`` for what it runs).

What can be checked before the daemon starts is checked by click (a log URL that does not parse, a log level that
does not exist, a push-token file that is not there) or by the daemon's preflight (``adapters/daemon/preflight.py``:
the kubeconfig, reaching the log, the API server's CRDs); both end as one line with exit code 2
(``adapters/cli/errors.py``). The push token is a secret, so it is read from a file (``--push-token-file``, e.g. a
mounted Secret) or from ``TETHER_PUSH_TOKEN`` — never from the command line, which every user of the host can read.
"""

from __future__ import annotations

import asyncio
import logging
import os
import re
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import click
import structlog

from tether.adapters.cli import COMMANDS
from tether.adapters.cli.errors import UserError
from tether.adapters.daemon.daemon import Daemon, DaemonConfig
from tether.adapters.daemon.preflight import StartupError
from tether.adapters.kubernetes.kubeconfig import KubeconfigError, read_kubeconfigs
from tether.adapters.log.url import check_log_url
from tether.core.identity import is_valid_object_name
from tether.core.plugin_config import parse_duration

F = TypeVar("F", bound=Callable[..., object])


def configure_logging(level: str, *, json_logs: bool) -> None:
    """structlog → JSON lines (for log pipelines) or a readable console renderer (for people)."""
    renderers: list[structlog.types.Processor] = (  # (JSON needs the traceback as text; the console renders its own)
        [structlog.processors.format_exc_info, structlog.processors.JSONRenderer()] if json_logs
        else [structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())])
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), *renderers],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )


LOG_LEVELS = ("debug", "info", "warning", "error", "critical")
PUSH_TOKEN_ENV = "TETHER_PUSH_TOKEN"


def log_level_option(default: str) -> Callable[[F], F]:
    return click.option("--log-level", type=click.Choice(LOG_LEVELS, case_sensitive=False), default=default,
                        show_default=True, help="Level of the daemon's own log lines.")


def check_log_url_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--log``: refuse a URL that does not parse before anything starts (a Kafka port that is not a number)."""
    try:
        check_log_url(value)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from exc
    return value


_NAMESPACE = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")  # a DNS-1123 label


def configmap_option(ctx: click.Context, param: click.Parameter, value: str) -> str:
    """``--plugin-configmap``/``--admission-configmap``: ``NAMESPACE/NAME`` of a ConfigMap, refused otherwise — a
    name without its namespace watched nothing, and every claim went ``UnknownSystem``."""
    namespace, slash, name = value.partition("/")
    if not slash or not _NAMESPACE.match(namespace) or not is_valid_object_name(name):
        raise click.BadParameter(f"{value!r} is not NAMESPACE/NAME of a ConfigMap (e.g. {param.default})")
    return value


def push_token(token_file: str | None) -> str:
    """The push endpoint's token: ``--push-token-file``'s content or ``$TETHER_PUSH_TOKEN`` (module doc); empty
    (the endpoint disabled) when neither is given."""
    from_env = os.environ.get(PUSH_TOKEN_ENV, "")
    if token_file is None:
        return from_env.strip()
    if from_env:
        raise click.BadParameter(f"the push token is given twice (the file and ${PUSH_TOKEN_ENV}): keep one",
                                 param_hint="--push-token-file")
    try:
        token = Path(token_file).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise click.BadParameter(f"cannot read {token_file}: {exc}", param_hint="--push-token-file") from exc
    if not token:
        raise click.BadParameter(f"{token_file} is empty (the token would disable the endpoint)",
                                 param_hint="--push-token-file")
    return token


def parse_members(values: tuple[str, ...]) -> dict[str, str]:
    """``NAME=KUBECONFIG`` pairs → {name: path}; a malformed or repeated name is a usage error, not a crash later."""
    out: dict[str, str] = {}
    for value in values:
        name, sep, path = value.partition("=")
        if not sep or not name or not path:
            raise click.BadParameter(f"{value!r}: expected NAME=KUBECONFIG", param_hint="--member")
        if ":" in name or "/" in name:  # a member name is part of log keys (<cluster>:Kind/ns/name)
            raise click.BadParameter(f"{name!r}: a member name cannot contain ':' or '/'", param_hint="--member")
        if name in out:
            raise click.BadParameter(f"member {name!r} given twice", param_hint="--member")
        try:  # (its content is loaded when the member joins, after the start: the file is checked now)
            read_kubeconfigs(path, flag=f"--member {name}=")
        except KubeconfigError as exc:
            raise click.BadParameter(str(exc), param_hint="--member") from exc
        out[name] = path
    return out


@click.command("run", short_help=COMMANDS["run"].summary)
@click.option("--log", "log_url", default="sqlite:///tether.db", show_default=True, envvar="TETHER_LOG",
              show_envvar=True, callback=check_log_url_option,
              help="Event log URL: sqlite:///path or kafka://host:port/prefix.")
@click.option("--kubeconfig", default=None, envvar="KUBECONFIG", show_envvar=True,
              help="kubeconfig of the Karmada control plane (default: ~/.kube/config; a ':'-separated list is "
                   "merged).")
@click.option("--context", default=None, help="kubeconfig context.")
@click.option("--in-cluster", is_flag=True, help="Use the pod's service account.")
@click.option("--plugin-configmap", default="volcano-global/volcano-global-datasource-plugins", show_default=True,
              callback=configmap_option,
              help="NAMESPACE/NAME of the data-source plugin ConfigMap (Volcano Global's format).")
@click.option("--watch-namespace", default="", help="Only watch claims and bindings in this namespace.")
@click.option("--http-address", default="0.0.0.0", show_default=True, metavar="ADDRESS",
              help="Address --http-port listens on: 0.0.0.0 every IPv4 address, :: every address, 127.0.0.1 this "
                   "host only.")
@click.option("--http-port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port of /healthz, /readyz, /metrics, /status and the push endpoint (HTTPS with --http-tls-cert).")
@click.option("--http-tls-cert", type=click.Path(exists=True, dir_okay=False), default=None,
              help="Serve --http-port over HTTPS with this certificate (PEM; re-read when it changes). With "
                   "--http-tls-key; the webhook's tls.crt/tls.key may be reused.")
@click.option("--http-tls-key", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The private key of --http-tls-cert (PEM).")
@click.option("--push-token-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="File holding the bearer token of POST /v1/notifications/table-moved (or set "
                   "TETHER_PUSH_TOKEN; the endpoint is disabled without either).")
@click.option("--leader-elect/--no-leader-elect", default=True, show_default=True,
              help="Coordinate replicas with a Lease (its namespace is created if missing); standbys wait. "
                   "Two tethers without it on one control plane both write.")
@click.option("--lease-namespace", default="tether-system", show_default=True)
@click.option("--lease-duration", type=click.FloatRange(min=1.0), default=15.0, show_default=True,
              help="Seconds a leader's Lease lasts without renewal: how long a standby waits after the leader died "
                   "(renewal deadline 2/3 of it, retries every 2/15 of it, as client-go's 15/10/2 s).")
@click.option("--refresh-interval", type=float, default=None,
              help="Seconds between re-resolutions of DataSources (overrides each plugin's refreshInterval).")
@click.option("--member", "members", multiple=True, metavar="NAME=KUBECONFIG",
              help="A member cluster for pod placement and the kubeconfig to reach it (repeatable; wins over "
                   "--members-from-karmada for its name).")
@click.option("--members-from-karmada", is_flag=True,
              help="Also connect every Karmada Cluster with spec.apiEndpoint and spec.secretRef (push mode).")
@click.option("--pod-webhook/--no-pod-webhook", default=False, show_default=True,
              help="Serve the member clusters' pod webhook at /mutate/pods/<cluster> on the webhook server.")
@click.option("--admission/--no-admission", default=False, show_default=True,
              help="Queue admission: watch Queues, PriorityClasses, Deployments and the admission ConfigMap.")
@click.option("--admission-configmap", default="tether-system/tether-admission", show_default=True,
              callback=configmap_option,
              help="NAMESPACE/NAME of the admission ConfigMap (volcano-scheduler.conf tiers, queue-managed kinds).")
@click.option("--admission-volcano-jobs", is_flag=True, help="Also watch batch.volcano.sh Jobs (their queue).")
@click.option("--max-hold", "max_hold", default="10m", show_default=True, metavar="DURATION",
              callback=lambda _ctx, _param, value: _duration(value, "--max-hold"),
              help="The longest a new ResourceBinding is held (suspended) for its data — a claim still resolving, "
                   "or a catalog failing transiently — before it is released without the data constraint "
                   "('10m', '90s', '0' turns the hold off; docs/admission.md).")
@click.option("--bookkeeping-delay", "bookkeeping_delay", default="1s", show_default=True, metavar="DURATION",
              callback=lambda _ctx, _param, value: _duration(value, "--bookkeeping-delay"),
              help="How long a claim's status, an Event or a Queue's status waits for the next write of its object "
                   "(a DataSource's claimRefs three times that), so that one write carries them all; placements never "
                   "wait ('0' writes each at once; docs/operations.md).")
@click.option("--binding-webhook/--no-binding-webhook", default=False, show_default=True,
              help="Serve the ResourceBinding admission webhook at /mutate/resourcebindings on the webhook server.")
@click.option("--webhook-address", default="0.0.0.0", show_default=True, metavar="ADDRESS",
              help="Address --webhook-port listens on (as --http-address).")
@click.option("--webhook-port", type=click.IntRange(0, 65535), default=9443, show_default=True,
              help="Port of the webhook server (HTTPS), which serves every webhook turned on.")
@click.option("--webhook-cert-dir", default="/var/run/tether/webhook", show_default=True,
              help="Directory with the webhook server's tls.crt and tls.key (re-read when they rotate).")
@click.option("--webhook-self-signed", is_flag=True,
              help="Make a CA and serving certificate in --webhook-cert-dir and inject the caBundle.")
@click.option("--webhook-inject-ca", is_flag=True,
              help="Copy ca.crt from --webhook-cert-dir into the caBundle of --webhook-configuration once leading "
                   "(cert-manager in another cluster than the API server, whose CA injector cannot reach it).")
@click.option("--webhook-service", default="tether-webhook", show_default=True,
              help="The webhook's Service (the self-signed certificate's name is SERVICE.NAMESPACE.svc).")
@click.option("--webhook-configuration", default="tether-resourcebindings", show_default=True,
              help="The MutatingWebhookConfiguration whose caBundle --webhook-self-signed fills.")
@click.option("--leader-service", "leader_services", multiple=True, metavar="NAME",
              help="A Service without selector that must reach the leader only (push, webhooks): the leader writes "
                   "its EndpointSlice in the pod's namespace (POD_IP, POD_NAMESPACE from the downward API; "
                   "repeatable).")
@log_level_option("info")
@click.option("--json-logs/--console-logs", default=True, show_default=True)
def run_cmd(log_url: str, kubeconfig: str | None, context: str | None, in_cluster: bool, plugin_configmap: str,
            watch_namespace: str, http_address: str, http_port: int, http_tls_cert: str | None,
            http_tls_key: str | None, push_token_file: str | None, leader_elect: bool,
            lease_namespace: str, lease_duration: float,
            refresh_interval: float | None, members: tuple[str, ...], members_from_karmada: bool, pod_webhook: bool,
            admission: bool, admission_configmap: str, admission_volcano_jobs: bool, max_hold: float,
            bookkeeping_delay: float, binding_webhook: bool,
            webhook_address: str, webhook_port: int,
            webhook_cert_dir: str, webhook_self_signed: bool, webhook_inject_ca: bool, webhook_service: str,
            webhook_configuration: str, leader_services: tuple[str, ...], log_level: str, json_logs: bool) -> None:
    """Run the daemon: watch, decide, apply — until SIGTERM/SIGINT.

    Environment: KUBECONFIG (--kubeconfig), TETHER_LOG (--log), TETHER_PUSH_TOKEN (the push token, or
    --push-token-file), POD_NAME (this replica's identity in leader election),
    POD_IP and POD_NAMESPACE (--leader-service)."""
    configure_logging(log_level, json_logs=json_logs)
    kubeconfigs = parse_members(members)
    token = push_token(push_token_file)
    if (http_tls_cert is None) != (http_tls_key is None):
        raise click.BadParameter("give both --http-tls-cert and --http-tls-key, or neither",
                                 param_hint="--http-tls-cert/--http-tls-key")
    pod_ip, pod_namespace = os.environ.get("POD_IP", ""), os.environ.get("POD_NAMESPACE", "")
    if leader_services and not (pod_ip and pod_namespace):
        raise click.UsageError("--leader-service needs the pod's address and namespace in POD_IP and POD_NAMESPACE "
                               "(the downward API: status.podIP, metadata.namespace)")
    cfg = DaemonConfig(log_url=log_url, kubeconfig=kubeconfig, context=context, in_cluster=in_cluster,
                       plugin_configmap=plugin_configmap, watch_namespace=watch_namespace, http_host=http_address,
                       http_port=http_port,
                       http_tls_cert=http_tls_cert or "", http_tls_key=http_tls_key or "",
                       push_token=token, leader_elect=leader_elect, lease_namespace=lease_namespace,
                       lease_duration=lease_duration, renew_deadline=lease_duration * 2 / 3,
                       retry_period=lease_duration * 2 / 15,
                       refresh_interval=refresh_interval, members=kubeconfigs,
                       members_from_karmada=members_from_karmada, pod_webhook=pod_webhook,
                       admission=admission, admission_configmap=admission_configmap,
                       admission_volcano_jobs=admission_volcano_jobs, max_hold=max_hold,
                       bookkeeping_delay=bookkeeping_delay, binding_webhook=binding_webhook,
                       webhook_host=webhook_address, webhook_port=webhook_port, webhook_cert_dir=webhook_cert_dir,
                       webhook_self_signed=webhook_self_signed, webhook_inject_ca=webhook_inject_ca,
                       webhook_service=webhook_service,
                       webhook_namespace=lease_namespace, webhook_configuration=webhook_configuration,
                       leader_services=list(leader_services), pod_ip=pod_ip, pod_namespace=pod_namespace,
                       identity=os.environ.get("POD_NAME") or DaemonConfig().identity)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await Daemon(cfg).run(stop=stop)

    try:
        code = asyncio.run(main())
    except StartupError as exc:
        raise UserError(str(exc)) from exc
    sys.exit(code)


def _duration(value: str, flag: str) -> float:
    """A duration flag in seconds (``10m``, ``90s``, ``500ms``, a bare number of seconds); a clear error if not."""
    try:
        seconds = parse_duration(value, field=flag)
    except ValueError as exc:
        raise click.BadParameter(str(exc)) from None
    if seconds < 0:
        raise click.BadParameter(f"{flag}: must not be negative, got {value!r}")
    return seconds
