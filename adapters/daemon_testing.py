"""A running tether (daemon + sandbox catalog) on a Kubernetes API, for integration tests and the demo.

``tether_stack(env)`` registers the CRDs tether needs, starts the sandbox Iceberg REST catalog, writes the plugin
ConfigMap (in the test namespace, so a real cluster is left clean), creates Karmada Clusters with unique names,
and runs a :class:`Daemon` on an embedded SQLite log in a temporary directory. Everything it created is removed
on exit. Works on the emulator and, with ``TETHER_TEST_KUBECONFIG``, on a real cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import secrets
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.adapters import manifests
from tether.adapters.catalog_sandbox import SandboxCatalog
from tether.adapters.daemon import Daemon, DaemonConfig
from tether.adapters.kube_emulator.testing import KubeEnv
from tether.adapters.kubernetes.client import BINDINGS, CLAIMS, CLUSTERS, CONFIGMAPS, DATASOURCES, EVENTS, KubeClient
from tether.adapters.sqlite_log import SqliteLog

CRDS = ("datadependency.volcano.sh_datasourceclaims", "datadependency.volcano.sh_datasources",
        "work.karmada.io_resourcebindings", "cluster.karmada.io_clusters.standin")


async def eventually(probe: Callable[[], Awaitable[Any]], what: str = "condition", *, within: float = 15.0) -> Any:
    """Poll ``probe`` until it returns something truthy (tests only: the daemon itself never polls)."""
    deadline = time.monotonic() + within
    last: Any = None
    while time.monotonic() < deadline:
        last = await probe()
        if last:
            return last
        await asyncio.sleep(0.01)
    raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


@dataclass
class Stack:
    env: KubeEnv
    kube: KubeClient
    catalog: SandboxCatalog
    daemon: Daemon
    log: SqliteLog
    namespace: str
    clusters: dict[str, str]  # role (east1, east2, west1) → unique cluster name
    suffix: str
    plugin_configmap: str
    cfg: DaemonConfig | None = None
    tmp: str = ""
    resolver_options: dict[str, Any] | None = None
    _stop: asyncio.Event | None = None
    _task: asyncio.Task[int] | None = None
    _created: list[tuple[Any, str, str]] = field(default_factory=list)

    async def stop_daemon(self) -> int:
        """Stop the daemon (as SIGTERM would); returns its exit code. The log stays open."""
        assert self._stop is not None and self._task is not None
        self._stop.set()
        code = await asyncio.wait_for(self._task, 10)
        self._task = None
        return code

    async def start_daemon(self, **overrides: Any) -> Daemon:
        """Start a new daemon on the same log (a restart), with ``DaemonConfig`` fields overridden."""
        assert self.cfg is not None and self._task is None
        self.cfg = dataclasses.replace(self.cfg, **overrides)
        self.daemon, self._stop, self._task = await spawn_daemon(self.cfg, self.env, self.log,
                                                                 resolver_options=self.resolver_options)
        await self.eventually(lambda: asyncio.sleep(0, self.daemon.ready()[0]), what="daemon ready")
        return self.daemon

    def table(self, name: str) -> str:
        """A catalog table name unique to this stack (DataSources are cluster-scoped)."""
        return f"prod.{self.suffix}.{name}"

    def add_table(self, name: str, region: str) -> str:
        full = self.table(name)
        self.catalog.add_table(full, f"s3://warehouse-{region}/{self.suffix}/{name}")
        return full

    async def apply(self, raw: dict[str, Any]) -> dict[str, Any]:
        res = {"DataSourceClaim": CLAIMS, "ResourceBinding": BINDINGS, "ConfigMap": CONFIGMAPS}[raw["kind"]]
        raw.setdefault("metadata", {}).setdefault("namespace", self.namespace)
        return await self.kube.create(res, raw, namespace=self.namespace)

    async def get(self, kind: str, name: str) -> dict[str, Any] | None:
        res = {"DataSourceClaim": CLAIMS, "ResourceBinding": BINDINGS, "DataSource": DATASOURCES}[kind]
        return await self.kube.get(res, name, namespace="" if kind == "DataSource" else self.namespace)

    async def eventually(self, probe: Callable[[], Awaitable[Any]], *, within: float = 15.0,
                         what: str = "condition") -> Any:
        """Poll ``probe`` until it returns something truthy (see the module-level :func:`eventually`)."""
        return await eventually(probe, what, within=within)

    async def wait_claim(self, name: str, *, phase: str | None = None, reason: str | None = None,
                         within: float = 15.0) -> dict[str, Any]:
        """The claim once its phase (and Bound condition reason) are as asked."""

        async def probe() -> dict[str, Any] | None:
            claim = await self.get("DataSourceClaim", name)
            if claim is None:
                return None
            if phase is not None and claim_phase(claim) != phase:
                return None
            if reason is not None and claim_reason(claim) != reason:
                return None
            return claim

        result: dict[str, Any] = await self.eventually(probe, within=within,
                                                       what=f"claim {name} phase={phase} reason={reason}")
        return result

    async def wait_excluded(self, binding: str, clusters: list[str] | set[str], *,
                            within: float = 15.0) -> dict[str, Any]:
        """The binding once tether's exclusions are exactly ``clusters`` and the gate annotation says so (set
        when there are exclusions, gone when there are none)."""

        async def probe() -> dict[str, Any] | None:
            rb = await self.get("ResourceBinding", binding)
            if rb is None or sorted(excluded(rb)) != sorted(clusters):
                return None
            injected = (rb["metadata"].get("annotations") or {}).get(INJECTED_ANNOTATION)
            return rb if injected == ("true" if clusters else None) else None

        result: dict[str, Any] = await self.eventually(probe, within=within,
                                                       what=f"{binding} excluding {sorted(clusters)}")
        return result

    async def events_for(self, name: str) -> list[dict[str, Any]]:
        """Kubernetes Events recorded on the claim ``name`` (oldest first by name is not guaranteed)."""
        items, _ = await self.kube.list(EVENTS, namespace=self.namespace,
                                        field_selector=f"involvedObject.name={name}")
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]


INJECTED_ANNOTATION = "datadependency.volcano.sh/placement-injected"
EXCLUDED_ANNOTATION = "datadependency.volcano.sh/excluded-clusters"


def excluded(rb: dict[str, Any] | None) -> list[str]:
    """``spec.placement.clusterAffinity.exclude`` of a binding (empty when absent)."""
    placement = (((rb or {}).get("spec") or {}).get("placement") or {})
    return list((placement.get("clusterAffinity") or {}).get("exclude") or [])


def claim_phase(claim: dict[str, Any] | None) -> str:
    return str(((claim or {}).get("status") or {}).get("phase") or "")


def claim_condition(claim: dict[str, Any] | None, type_: str = "Bound") -> dict[str, Any]:
    for cond in ((claim or {}).get("status") or {}).get("conditions") or []:
        if cond.get("type") == type_:
            return dict(cond)
    return {}


def claim_reason(claim: dict[str, Any] | None, type_: str = "Bound") -> str:
    return str(claim_condition(claim, type_).get("reason") or "")


async def _create_cluster(kube: KubeClient, raw: dict[str, Any]) -> None:
    status = raw.pop("status")
    await kube.create(CLUSTERS, raw)
    body = {"status": status}
    await kube.patch(CLUSTERS, raw["metadata"]["name"], body, subresource="status")


async def spawn_daemon(cfg: DaemonConfig, env: KubeEnv, log: SqliteLog, *,
                       resolver_options: dict[str, Any] | None = None
                       ) -> tuple[Daemon, asyncio.Event, asyncio.Task[int]]:
    """Run a :class:`Daemon` in a task; returns it with its stop event and task (started, not yet ready)."""
    daemon = Daemon(cfg, api_client=env.api_client, log_=log, resolver_options=resolver_options)
    stop = asyncio.Event()
    task = asyncio.create_task(daemon.run(stop=stop))
    deadline = time.monotonic() + 10
    while not daemon.started.is_set() and not task.done() and time.monotonic() < deadline:
        if cfg.leader_elect and daemon.leader is not None and daemon.endpoints is not None:
            return daemon, stop, task  # campaigning: a standby starts its loops when it wins the Lease
        await asyncio.sleep(0.01)
    if not daemon.started.is_set():
        raise RuntimeError(f"the daemon did not start: {task.exception() if task.done() else 'timeout'}")
    return daemon, stop, task


@contextlib.asynccontextmanager
async def tether_stack(env: KubeEnv, *, refresh_interval: float | None = None, push_token: str = "push-secret",
                       catalog_options: dict[str, Any] | None = None,
                       resolver_options: dict[str, Any] | None = None,
                       plugin_options: dict[str, Any] | None = None,
                       daemon_options: dict[str, Any] | None = None) -> AsyncIterator[Stack]:
    """``plugin_options`` are extra plugin-entry fields (``reclaimPolicy``...); ``daemon_options`` extra
    :class:`DaemonConfig` fields (``snapshot_every``, ``leader_elect``, lease timings...)."""
    await env.register_crds(*CRDS)
    kube = KubeClient(env.api_client)
    suffix = secrets.token_hex(3)
    clusters = {"east1": f"east1-{suffix}", "east2": f"east2-{suffix}", "west1": f"west1-{suffix}"}
    for role, name in clusters.items():
        await _create_cluster(kube, manifests.cluster(name, region=role[:-1]))
    async with SandboxCatalog(seed=False, **(catalog_options or {})) as catalog:
        plugin = manifests.plugin_entry(
            url=catalog.url, port=None, mapping={
                f"s3://warehouse-east/{suffix}/": [clusters["east1"], clusters["east2"]],
                f"s3://warehouse-west/{suffix}/": [clusters["west1"]],
            },
            **{"retryConfig": {"maxRetries": 1, "initialBackoff": "10ms", "maxBackoff": "50ms", "timeout": "2s"},
               "circuitBreaker": {"failureThreshold": 1000, "resetTimeout": "1s"}, **(plugin_options or {})},
        )
        configmap = manifests.plugin_configmap({"amoro": plugin}, namespace=env.namespace, name="tether-plugins")
        await kube.create(CONFIGMAPS, configmap, namespace=env.namespace)
        with tempfile.TemporaryDirectory(prefix="tether-it-") as tmp:
            log = await SqliteLog.open(str(Path(tmp) / "tether.db"))
            cfg = DaemonConfig(log_url=f"sqlite:///{tmp}/tether.db", plugin_configmap=f"{env.namespace}/tether-plugins",
                               watch_namespace=env.namespace, http_host="127.0.0.1", http_port=0,
                               push_token=push_token, refresh_interval=refresh_interval,
                               lease_namespace=env.namespace, **(daemon_options or {}))
            daemon, stop, task = await spawn_daemon(cfg, env, log, resolver_options=resolver_options)
            stack = Stack(env=env, kube=kube, catalog=catalog, daemon=daemon, log=log, namespace=env.namespace,
                          clusters=clusters, suffix=suffix, plugin_configmap=cfg.plugin_configmap, cfg=cfg, tmp=tmp,
                          resolver_options=resolver_options, _stop=stop, _task=task)
            try:
                await stack.eventually(lambda: asyncio.sleep(0, stack.daemon.ready()[0]), what="daemon ready")
                yield stack
            finally:
                if stack._task is not None:
                    await stack.stop_daemon()
                await log.close()
                await _cleanup(kube, env.namespace, clusters)


async def _cleanup(kube: KubeClient, namespace: str, clusters: dict[str, str]) -> None:
    """Remove what a stack created outside its namespace (DataSources and Clusters are cluster-scoped)."""
    claims, _ = await kube.list(CLAIMS, namespace=namespace)
    for claim in claims:  # the daemon is gone: release our finalizers ourselves
        with contextlib.suppress(Exception):
            await kube.patch(CLAIMS, claim["metadata"]["name"], {"metadata": {"finalizers": None}}, namespace=namespace)
    sources, _ = await kube.list(DATASOURCES)
    for source in sources:
        refs = (source.get("status") or {}).get("claimRefs") or []
        if any(r.get("namespace") == namespace for r in refs) or not refs:
            name = source["metadata"]["name"]
            with contextlib.suppress(Exception):
                await kube.patch(DATASOURCES, name, {"metadata": {"finalizers": None}})
                await kube.delete(DATASOURCES, name)
    for name in clusters.values():
        with contextlib.suppress(Exception):
            await kube.delete(CLUSTERS, name)
