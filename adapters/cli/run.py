"""``tether run``: the long-running daemon (see ``adapters/daemon/daemon.py`` for what it runs)."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import sys

import click
import structlog

from tether.adapters.daemon.daemon import Daemon, DaemonConfig


def configure_logging(level: str, *, json_logs: bool) -> None:
    """structlog → JSON lines (for log pipelines) or a readable console renderer (for people)."""
    renderer: structlog.types.Processor = (
        structlog.processors.JSONRenderer() if json_logs else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty()))
    structlog.configure(
        processors=[structlog.contextvars.merge_contextvars, structlog.processors.add_log_level,
                    structlog.processors.TimeStamper(fmt="iso", utc=True), renderer],
        wrapper_class=structlog.make_filtering_bound_logger(getattr(logging, level.upper(), logging.INFO)),
        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr),
    )


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
        out[name] = path
    return out


@click.command("run")
@click.option("--log", "log_url", default="sqlite:///tether.db", show_default=True, envvar="TETHER_LOG",
              help="Event log URL: sqlite:///path or kafka://host:port/prefix.")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None, envvar="KUBECONFIG",
              help="kubeconfig of the Karmada control plane (default: ~/.kube/config).")
@click.option("--context", default=None, help="kubeconfig context.")
@click.option("--in-cluster", is_flag=True, help="Use the pod's service account.")
@click.option("--plugin-configmap", default="volcano-global/volcano-global-datasource-plugins", show_default=True,
              help="NAMESPACE/NAME of the data-source plugin ConfigMap (Volcano Global's format).")
@click.option("--watch-namespace", default="", help="Only watch claims and bindings in this namespace.")
@click.option("--http-port", default=8080, show_default=True, type=int,
              help="Port of /healthz, /readyz, /metrics and the push endpoint.")
@click.option("--push-token", default="", envvar="TETHER_PUSH_TOKEN",
              help="Bearer token for POST /v1/notifications/table-moved (disabled when empty).")
@click.option("--leader-elect/--no-leader-elect", default=False, show_default=True,
              help="Coordinate replicas with a Lease; standbys wait.")
@click.option("--lease-namespace", default="tether-system", show_default=True)
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
              help="NAMESPACE/NAME of the admission ConfigMap (volcano-scheduler.conf tiers, queue-managed kinds).")
@click.option("--admission-volcano-jobs", is_flag=True, help="Also watch batch.volcano.sh Jobs (their queue).")
@click.option("--binding-webhook/--no-binding-webhook", default=False, show_default=True,
              help="Serve the ResourceBinding admission webhook at /mutate/resourcebindings on the webhook server.")
@click.option("--webhook-port", type=int, default=9443, show_default=True,
              help="Port of the webhook server (HTTPS), which serves every webhook turned on.")
@click.option("--webhook-cert-dir", default="/var/run/tether/webhook", show_default=True,
              help="Directory with the webhook server's tls.crt and tls.key (re-read when they rotate).")
@click.option("--webhook-self-signed", is_flag=True,
              help="Make a CA and serving certificate in --webhook-cert-dir and inject the caBundle.")
@click.option("--webhook-service", default="tether-webhook", show_default=True,
              help="The webhook's Service (the self-signed certificate's name is SERVICE.NAMESPACE.svc).")
@click.option("--webhook-configuration", default="tether-resourcebindings", show_default=True,
              help="The MutatingWebhookConfiguration whose caBundle --webhook-self-signed fills.")
@click.option("--log-level", default="info", show_default=True)
@click.option("--json-logs/--console-logs", default=True, show_default=True)
def run_cmd(log_url: str, kubeconfig: str | None, context: str | None, in_cluster: bool, plugin_configmap: str,
            watch_namespace: str, http_port: int, push_token: str, leader_elect: bool, lease_namespace: str,
            refresh_interval: float | None, members: tuple[str, ...], members_from_karmada: bool, pod_webhook: bool,
            admission: bool, admission_configmap: str, admission_volcano_jobs: bool, binding_webhook: bool,
            webhook_port: int,
            webhook_cert_dir: str, webhook_self_signed: bool, webhook_service: str, webhook_configuration: str,
            log_level: str, json_logs: bool) -> None:
    """Run the daemon: watch, decide, apply — until SIGTERM/SIGINT."""
    configure_logging(log_level, json_logs=json_logs)
    kubeconfigs = parse_members(members)
    cfg = DaemonConfig(log_url=log_url, kubeconfig=kubeconfig, context=context, in_cluster=in_cluster,
                       plugin_configmap=plugin_configmap, watch_namespace=watch_namespace, http_port=http_port,
                       push_token=push_token, leader_elect=leader_elect, lease_namespace=lease_namespace,
                       refresh_interval=refresh_interval, members=kubeconfigs,
                       members_from_karmada=members_from_karmada, pod_webhook=pod_webhook,
                       admission=admission, admission_configmap=admission_configmap,
                       admission_volcano_jobs=admission_volcano_jobs, binding_webhook=binding_webhook,
                       webhook_port=webhook_port, webhook_cert_dir=webhook_cert_dir,
                       webhook_self_signed=webhook_self_signed, webhook_service=webhook_service,
                       webhook_namespace=lease_namespace, webhook_configuration=webhook_configuration,
                       identity=os.environ.get("POD_NAME") or DaemonConfig().identity)

    async def main() -> int:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, stop.set)
        return await Daemon(cfg).run(stop=stop)

    sys.exit(asyncio.run(main()))


def register(main: click.Group) -> None:
    main.add_command(run_cmd)
