"""A running tether (daemon + sandbox catalog) on a Kubernetes API, for integration tests and the demo.

``tether_stack(env)`` registers the CRDs tether needs, starts the sandbox Iceberg REST catalog, writes the plugin
ConfigMap (in the test namespace, so a real cluster is left clean), creates Karmada Clusters with unique names,
and runs a :class:`Daemon` on an embedded SQLite log in a temporary directory. Everything it created is removed
on exit. Works on the emulator and, with ``TETHER_TEST_KUBECONFIG``, on a real cluster.
"""

from __future__ import annotations

import asyncio
import contextlib
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
from tether.adapters.kubernetes.client import BINDINGS, CLAIMS, CLUSTERS, CONFIGMAPS, DATASOURCES, KubeClient
from tether.adapters.sqlite_log import SqliteLog

CRDS = ("datadependency.volcano.sh_datasourceclaims", "datadependency.volcano.sh_datasources",
        "work.karmada.io_resourcebindings", "cluster.karmada.io_clusters.standin")


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
    _created: list[tuple[Any, str, str]] = field(default_factory=list)

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
        """Poll ``probe`` until it returns something truthy (tests only: the daemon itself never polls)."""
        deadline = time.monotonic() + within
        last: Any = None
        while time.monotonic() < deadline:
            last = await probe()
            if last:
                return last
            await asyncio.sleep(0.05)
        raise AssertionError(f"timed out waiting for {what}; last value: {last!r}")


async def _create_cluster(kube: KubeClient, raw: dict[str, Any]) -> None:
    status = raw.pop("status")
    await kube.create(CLUSTERS, raw)
    body = {"status": status}
    await kube.patch(CLUSTERS, raw["metadata"]["name"], body, subresource="status")


@contextlib.asynccontextmanager
async def tether_stack(env: KubeEnv, *, refresh_interval: float | None = None, push_token: str = "push-secret",
                       catalog_options: dict[str, Any] | None = None,
                       resolver_options: dict[str, Any] | None = None) -> AsyncIterator[Stack]:
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
            retryConfig={"maxRetries": 1, "initialBackoff": "10ms", "maxBackoff": "50ms", "timeout": "2s"},
            circuitBreaker={"failureThreshold": 1000, "resetTimeout": "1s"},
        )
        configmap = manifests.plugin_configmap({"amoro": plugin}, namespace=env.namespace, name="tether-plugins")
        await kube.create(CONFIGMAPS, configmap, namespace=env.namespace)
        with tempfile.TemporaryDirectory(prefix="tether-it-") as tmp:
            log = await SqliteLog.open(str(Path(tmp) / "tether.db"))
            cfg = DaemonConfig(log_url=f"sqlite:///{tmp}/tether.db", plugin_configmap=f"{env.namespace}/tether-plugins",
                               watch_namespace=env.namespace, http_host="127.0.0.1", http_port=0,
                               push_token=push_token, refresh_interval=refresh_interval)
            daemon = Daemon(cfg, api_client=env.api_client, log_=log, resolver_options=resolver_options)
            stop = asyncio.Event()
            task = asyncio.create_task(daemon.run(stop=stop))
            await asyncio.wait_for(daemon.started.wait(), 10)
            stack = Stack(env=env, kube=kube, catalog=catalog, daemon=daemon, log=log, namespace=env.namespace,
                          clusters=clusters, suffix=suffix, plugin_configmap=cfg.plugin_configmap)
            try:
                await stack.eventually(lambda: asyncio.sleep(0, daemon.ready()[0]), what="daemon ready")
                yield stack
            finally:
                stop.set()
                await asyncio.wait_for(task, 10)
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
