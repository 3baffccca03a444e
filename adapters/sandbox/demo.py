"""The demo's world (``tether demo`` runs it): the whole story in a sandbox, in seconds, with nothing to install.

Everything runs in this process, on loopback:

* the Kubernetes API emulator with the CRDs from ``ops/crds`` and the Karmada scheduler stand-in (it schedules
  ResourceBindings the way karmada-scheduler does: ``spec.clusters`` from the placement and Ready Clusters);
* three Karmada Clusters (Ready, with a resourceSummary): ``member1``/``member2`` in region east,
  ``member3`` in region west;
* a sandbox Iceberg REST catalog (Amoro's paths) holding tables in ``s3://warehouse-east/`` and
  ``s3://warehouse-west/``, and the plugin ConfigMap (Volcano Global's format) mapping those prefixes to clusters;
* the tether daemon on an embedded SQLite log (``./tether-demo.db`` by default, overwritten on each run).

It then applies sample DataSourceClaims (two of them share a table; one names a table the catalog does not
have), their Deployments and the ResourceBindings Karmada's resource detector would create for them (there is
no detector in the sandbox, so the demo creates them itself), waits until every binding is placed where its data
is, moves one table east → west in the catalog, tells tether through the push endpoint, and waits until both
bindings that depend on it are rescheduled to the west. A live table (a plain snapshot per step when the output
is not a terminal, or with ``--no-live``) shows claims → phase → DataSource → data clusters → the binding's
excluded clusters → where the binding is scheduled. It ends with how to replay the log.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import shlex
import signal
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
from rich.console import Console
from rich.live import Live
from rich.table import Table
from rich.text import Text

from tether.adapters.daemon.daemon import Daemon, DaemonConfig
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import BINDINGS, CLAIMS, CLUSTERS, CONFIGMAPS, DATASOURCES, KubeClient, Resource
from tether.adapters.sandbox.catalog import SandboxCatalog
from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.crds import crd_dir

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)
DEPLOYMENTS = Resource("apps", "v1", "deployments", "Deployment", True)

REGIONS: dict[str, list[str]] = {"east": ["member1", "member2"], "west": ["member3"]}
ALL_CLUSTERS = [c for cs in REGIONS.values() for c in cs]

#: Catalog tables: name → region of their data.
TABLES: dict[str, str] = {
    "prod.sales.orders": "east",
    "prod.sales.customers": "west",
    "prod.events.clicks": "east",
}
MOVED_TABLE = "prod.events.clicks"
UNKNOWN_TABLE = "prod.sales.refunds"


@dataclass(frozen=True)
class SampleClaim:
    namespace: str
    name: str
    table: str

    @property
    def binding(self) -> str:
        return f"{self.name}-deployment"  # Karmada's detector names bindings <workload>-<kind>


#: Two namespaces; two claims share prod.events.clicks; one names a table the catalog does not have.
CLAIM_SAMPLES: tuple[SampleClaim, ...] = (
    SampleClaim("analytics", "orders-report", "prod.sales.orders"),
    SampleClaim("analytics", "clicks-dashboard", MOVED_TABLE),
    SampleClaim("ml", "clicks-train", MOVED_TABLE),
    SampleClaim("ml", "customer-churn", "prod.sales.customers"),
    SampleClaim("ml", "refunds-model", UNKNOWN_TABLE),
)
EXPLAIN_CLAIM = "DataSourceClaim/ml/clicks-train"
EXPLAIN_BINDING = "ResourceBinding/ml/clicks-train-deployment"


def location(table: str, region: str) -> str:
    return f"s3://warehouse-{region}/{table.replace('.', '/')}"


@dataclass
class Row:
    claim: SampleClaim
    phase: str = ""
    reason: str = ""
    message: str = ""
    data_source: str = ""
    data_clusters: list[str] = field(default_factory=list)
    excluded: list[str] = field(default_factory=list)
    scheduled: list[str] = field(default_factory=list)


@dataclass
class DemoResult:
    rows_before: list[Row]
    rows_after: list[Row]
    log_path: Path
    seconds: float
    catalog_lookups: dict[str, int]


class DemoFailed(Exception):
    pass


def _placement(rb: dict[str, Any] | None) -> dict[str, Any]:
    return ((rb or {}).get("spec") or {}).get("placement") or {}


async def snapshot(kube: KubeClient) -> list[Row]:
    """What ``kubectl get`` would show, joined per claim."""
    claims = {(c["metadata"]["namespace"], c["metadata"]["name"]): c for c in (await kube.list(CLAIMS))[0]}
    sources = {s["metadata"]["name"]: s for s in (await kube.list(DATASOURCES))[0]}
    bindings = {(b["metadata"]["namespace"], b["metadata"]["name"]): b for b in (await kube.list(BINDINGS))[0]}
    rows = []
    for sample in CLAIM_SAMPLES:
        row = Row(sample)
        obj = claims.get((sample.namespace, sample.name))
        if obj is not None:
            status = obj.get("status") or {}
            row.phase = status.get("phase") or ""
            bound = next((c for c in status.get("conditions") or [] if c.get("type") == "Bound"), None)
            if bound is not None and bound.get("status") != "True":
                row.reason = bound.get("reason") or ""
                row.message = bound.get("message") or ""
            row.data_source = status.get("boundDataSource") or ""
            source = sources.get(row.data_source)
            if source is not None:
                row.data_clusters = list(((source.get("spec") or {}).get("locality") or {}).get("clusterNames") or [])
        rb = bindings.get((sample.namespace, sample.binding))
        if rb is not None:
            row.excluded = list((_placement(rb).get("clusterAffinity") or {}).get("exclude") or [])
            row.scheduled = sorted(t["name"] for t in (rb.get("spec") or {}).get("clusters") or [])
        rows.append(row)
    return rows


def render(rows: list[Row], title: str) -> Table:
    table = Table(title=title, title_justify="left", expand=False)
    for col in ("claim", "phase", "DataSource (table)", "data in", "binding excludes", "scheduled to"):
        table.add_column(col, overflow="fold")
    for r in rows:
        phase = Text(r.phase or "…", style="green" if r.phase == "Bound" else "yellow")
        if r.reason:
            phase.append(f" {r.reason}", style="dim")
        source = Text(r.data_source) if r.data_source else Text(f"- ({r.claim.table})", style="dim")
        table.add_row(f"{r.claim.namespace}/{r.claim.name}", phase, source,
                      ", ".join(r.data_clusters) or "-", ", ".join(r.excluded) or "-",
                      Text(", ".join(r.scheduled) or "-", style="bold"))
    return table


def expected_clusters(table: str, moved: bool) -> list[str] | None:
    if table == UNKNOWN_TABLE:
        return None
    region = "west" if moved and table == MOVED_TABLE else TABLES[table]
    return sorted(REGIONS[region])


def settled(rows: list[Row], *, moved: bool) -> bool:
    for r in rows:
        want = expected_clusters(r.claim.table, moved)
        if want is None:  # the unknown table: Pending with a condition that says why
            if r.phase != "Pending" or not r.reason:
                return False
            continue
        excluded = sorted(c for c in ALL_CLUSTERS if c not in want)
        if r.phase != "Bound" or sorted(r.data_clusters) != want or sorted(r.excluded) != excluded \
                or r.scheduled != want:
            return False
    return True


def _reset_log(path: Path) -> None:
    """The demo's log is overwritten on each run (with SQLite's WAL side files)."""
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    path.parent.mkdir(parents=True, exist_ok=True)


class Demo:
    def __init__(self, *, log_path: Path, console: Console, live: bool, speed: float,
                 keep_running: bool, command: str = "tether", command_note: str = "") -> None:
        if speed <= 0:
            raise ValueError(f"speed must be positive, not {speed}")
        self.log_path = log_path
        self.console = console
        self.live_enabled = live
        self.speed = speed
        self.keep_running = keep_running
        self.command = command  # how the user's shell runs tether (the hints at the end must run as printed)
        self.command_note = command_note
        self.kube: KubeClient | None = None
        self._live: Live | None = None
        self._title = ""

    # -- output -------------------------------------------------------------------------------------------
    def say(self, message: str) -> None:
        (self._live.console if self._live is not None else self.console).print(message, soft_wrap=True, highlight=False)

    async def pause(self, seconds: float) -> None:
        await asyncio.sleep(seconds / self.speed)

    async def show(self, title: str, *, final: bool = False) -> list[Row]:
        """Print a snapshot and retitle the live display (whose last frame is the final snapshot)."""
        assert self.kube is not None
        self._title = title
        rows = await snapshot(self.kube)
        if self._live is None:
            self.console.print(render(rows, title))
        elif not final:
            self._live.console.print(render(rows, title))
        return rows

    async def _refresh(self) -> None:
        assert self.kube is not None and self._live is not None
        while True:
            with contextlib.suppress(Exception):
                self._live.update(render(await snapshot(self.kube), self._title))
            await asyncio.sleep(0.15)

    async def wait_until(self, probe: Callable[[], Awaitable[bool]], what: str, *, within: float = 20.0) -> None:
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            if await probe():
                return
            await asyncio.sleep(0.05)
        raise DemoFailed(f"timed out after {within:.0f}s waiting for {what}")

    # -- the story ----------------------------------------------------------------------------------------
    async def run(self) -> DemoResult:
        started = time.monotonic()
        _reset_log(self.log_path)
        self.say("[bold]tether demo[/]: compute follows data, in a sandbox (nothing leaves this process)\n")
        async with KubeEmulator(crds=[crd_dir()], karmada_scheduler=True) as emu, \
                SandboxCatalog(seed=False) as catalog:
            await emu.add_system_namespaces()  # (as a real Karmada API server has them: kubectl's default)
            api = emu.configuration()
            from kubernetes_asyncio.client import ApiClient

            async with ApiClient(api) as api_client:
                self.kube = kube = KubeClient(api_client)
                self.say(f"• Kubernetes API emulator on {emu.url} (CRDs from ops/crds, Karmada scheduler stand-in)")
                await self._clusters(kube)
                for table, region in TABLES.items():
                    catalog.add_table(table, location(table, region))
                self.say(f"• sandbox Iceberg REST catalog (Amoro paths) on {catalog.url}: "
                         + ", ".join(f"{t} ({r})" for t, r in TABLES.items()))
                await self._plugin_configmap(kube, catalog.url)
                token = secrets.token_urlsafe(16)
                cfg = DaemonConfig(log_url=f"sqlite:///{self.log_path.resolve()}", http_host="127.0.0.1", http_port=0,
                                   push_token=token)
                daemon = Daemon(cfg, api_client=api_client)
                stop = asyncio.Event()
                daemon_task = asyncio.create_task(daemon.run(stop=stop), name="tether")
                try:
                    await self._wait_daemon(daemon, daemon_task)
                    assert daemon.endpoints is not None
                    self.say(f"• tether daemon: log {self.log_path}, endpoints http://127.0.0.1:"
                             f"{daemon.endpoints.port}/{{healthz,readyz,metrics}}")
                    return await self._story(kube, catalog, daemon, daemon_task, token, emu, started)
                finally:
                    stop.set()
                    with contextlib.suppress(Exception):
                        await asyncio.wait_for(daemon_task, 10)

    async def _story(self, kube: KubeClient, catalog: SandboxCatalog, daemon: Daemon, daemon_task: asyncio.Task[int],
                     token: str, emu: KubeEmulator, started: float) -> DemoResult:
        self._title = "tether demo: claims → DataSources → bindings (live)"
        live = Live(render([], self._title), console=self.console, refresh_per_second=8, transient=False) \
            if self.live_enabled else None
        refresher: asyncio.Task[None] | None = None
        if live is not None:
            live.start()
            self._live = live
            refresher = asyncio.create_task(self._refresh())
        try:
            await self.pause(1.0)
            self.say("\n[bold]1.[/] DataSourceClaims (two share prod.events.clicks; ml/refunds-model names a table "
                     "the catalog does not have)")
            for s in CLAIM_SAMPLES:
                await kube.create(CLAIMS, manifests.claim(s.name, namespace=s.namespace, table=s.table),
                                  namespace=s.namespace)
            await self.pause(2.0)
            self.say("[bold]2.[/] Deployments, and the ResourceBindings Karmada's resource detector would create for "
                     "them (there is no detector in the sandbox: the demo creates them)")
            for s in CLAIM_SAMPLES:
                await kube.create(DEPLOYMENTS, manifests.deployment(s.name, namespace=s.namespace),
                                  namespace=s.namespace)
                await kube.create(BINDINGS, manifests.resource_binding(s.name, namespace=s.namespace),
                                  namespace=s.namespace)
            await self.wait_until(self._settled(kube, moved=False), "every binding placed where its data is")
            await self.pause(2.5)
            before = await self.show("bindings placed where their data is")
            lookups = catalog.requests_for(MOVED_TABLE)
            self.say(f"   two claims on {MOVED_TABLE} → one DataSource, {lookups} catalog lookup")

            self.say(f"\n[bold]3.[/] moving {MOVED_TABLE} east → west in the catalog, then POST "
                     "/v1/notifications/table-moved (Amoro cannot notify: without a push, the poller finds it "
                     "within refreshInterval)")
            catalog.move_table(MOVED_TABLE, location(MOVED_TABLE, "west"))
            assert daemon.endpoints is not None
            async with aiohttp.ClientSession() as http, http.post(
                    f"http://127.0.0.1:{daemon.endpoints.port}/v1/notifications/table-moved",
                    json={"system": "amoro", "dataSourceName": MOVED_TABLE},
                    headers={"Authorization": f"Bearer {token}"}) as resp:
                answer = await resp.json()
                if resp.status != 202:
                    raise DemoFailed(f"push endpoint answered {resp.status}: {answer}")
            self.say(f"   tether re-resolved it: {answer.get('location', answer)}")
            await self.wait_until(self._settled(kube, moved=True), "the bindings on the moved table rescheduled")
            await self.pause(2.5)
            after = await self.show(f"after the move: {MOVED_TABLE} now in the west", final=True)
        finally:
            if refresher is not None:
                refresher.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await refresher
            if live is not None:
                live.update(render(await snapshot(kube), self._title))
                live.stop()
                self._live = None
        seconds = time.monotonic() - started
        self._summary(before, after, seconds)
        if self.keep_running:
            assert daemon.endpoints is not None
            await self._keep_running(emu, catalog, daemon_task, push=(daemon.endpoints.port, token))
        return DemoResult(rows_before=before, rows_after=after, log_path=self.log_path, seconds=seconds,
                          catalog_lookups={t: catalog.requests_for(t) for t in [*TABLES, UNKNOWN_TABLE]})

    def _settled(self, kube: KubeClient, *, moved: bool) -> Callable[[], Awaitable[bool]]:
        async def probe() -> bool:
            return settled(await snapshot(kube), moved=moved)
        return probe

    async def _clusters(self, kube: KubeClient) -> None:
        for region, names in REGIONS.items():
            for name in names:
                raw = manifests.cluster(name, region=region)
                status = raw.pop("status")
                await kube.create(CLUSTERS, raw)
                await kube.patch(CLUSTERS, name, {"status": status}, subresource="status")
        self.say("• Karmada Clusters (Ready, with resourceSummary): "
                 + "; ".join(f"{r}: {', '.join(n)}" for r, n in REGIONS.items()))

    async def _plugin_configmap(self, kube: KubeClient, url: str) -> None:
        for ns in {manifests.PLUGIN_NAMESPACE, *(s.namespace for s in CLAIM_SAMPLES)}:
            await kube.create(NAMESPACES, {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}})
        mapping = {f"s3://warehouse-{region}/": names for region, names in REGIONS.items()}
        entry = manifests.plugin_entry(
            url=url, port=None, mapping=mapping, refreshInterval="5m",
            retryConfig={"maxRetries": 1, "initialBackoff": "50ms", "maxBackoff": "200ms", "timeout": "2s"})
        await kube.create(CONFIGMAPS, manifests.plugin_configmap({"amoro": entry}),
                          namespace=manifests.PLUGIN_NAMESPACE)
        self.say(f"• plugin ConfigMap {manifests.PLUGIN_NAMESPACE}/{manifests.PLUGIN_CONFIGMAP} (Volcano Global "
                 "format): " + ", ".join(f"{p} → {', '.join(c)}" for p, c in mapping.items()))

    async def _wait_daemon(self, daemon: Daemon, task: asyncio.Task[int]) -> None:
        async def ready() -> bool:
            if task.done():
                raise DemoFailed(f"the daemon stopped early (exit code {task.result()})")
            return daemon.started.is_set() and daemon.ready()[0]
        await self.wait_until(ready, "the daemon to be ready", within=15)

    def _summary(self, before: list[Row], after: list[Row], seconds: float) -> None:
        moved = [r for r in after if r.claim.table == MOVED_TABLE]
        old = {(r.claim.namespace, r.claim.name): r.scheduled for r in before}
        self.say("\n[bold]Summary[/]")
        bound = sum(r.phase == "Bound" for r in after)
        self.say(f"  {bound}/{len(after)} claims Bound; {UNKNOWN_TABLE} is not in the catalog: its claim stays "
                 "Pending with a condition saying so (tether leaves that workload's binding alone):")
        for r in after:
            if r.reason:
                self.say(f"    {r.claim.namespace}/{r.claim.name}: Bound=False {r.reason}: {r.message}")
        for r in moved:
            self.say(f"  {r.claim.namespace}/{r.claim.binding}: scheduled to "
                     f"{', '.join(old[(r.claim.namespace, r.claim.name)])} → {', '.join(r.scheduled)} "
                     "(rescheduled after the move)")
        self.say(f"  finished in {seconds:.1f}s; the event log is {self.log_path}\n")
        log, tether = shlex.quote(str(self.log_path)), self.command
        self.say("Every decision is in the log. Replay a binding's trail (the SetBindingPlacement commands, before "
                 "and after the move, each with its reason) or a claim's:")
        if self.command_note:
            self.say(f"  {self.command_note}")
        self.say(f"  {tether} replay {log} --explain {EXPLAIN_BINDING}")
        self.say(f"  {tether} replay {log} --explain {EXPLAIN_CLAIM}")
        self.say("and read the raw records:")
        self.say(f"  {tether} log tail {log}")

    async def _keep_running(self, emu: KubeEmulator, catalog: SandboxCatalog, daemon_task: asyncio.Task[int], *,
                            push: tuple[int, str]) -> None:
        kubeconfig = emu.kubeconfig_path(self.log_path.parent)
        target = self.log_path.with_suffix(".kubeconfig")
        kubeconfig.replace(target)
        self.say("\n[bold]--keep-running[/]: the sandbox stays up until Ctrl-C")
        self.say(f"  Kubernetes API:  {emu.url}")
        self.say(f"  kubeconfig:      {target}")
        self.say(f"  e.g.  kubectl --kubeconfig {target} get datasourceclaims -A")
        self.say(f"        kubectl --kubeconfig {target} get events -A   (what tether reported about each object)")
        self.say(f"        kubectl --kubeconfig {target} get resourcebindings -A -o yaml")
        self.say(f"        kubectl --kubeconfig {target} apply -f your-claim.yaml   (validated: the sandbox serves "
                 "OpenAPI v3)")
        self.say(f"  catalog admin:   {catalog.url}/_sandbox/tables; move a table, then tell tether:")
        self.say(f"    curl -sXPOST {catalog.url}/_sandbox/move -d '{{\"name\": \"prod.sales.orders\", "
                 f"\"location\": \"{location('prod.sales.orders', 'west')}\"}}'")
        self.say(f"    curl -sXPOST http://127.0.0.1:{push[0]}/v1/notifications/table-moved -H 'Authorization: Bearer "
                 f"{push[1]}' -d '{{\"system\": \"amoro\", \"dataSourceName\": \"prod.sales.orders\"}}'")
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)
        stopper = asyncio.create_task(stop.wait())
        await asyncio.wait([stopper, daemon_task], return_when=asyncio.FIRST_COMPLETED)
        stopper.cancel()
        target.unlink(missing_ok=True)


async def run_demo(*, log_path: str | Path = "tether-demo.db", console: Console | None = None, live: bool = True,
                   speed: float = 1.0, keep_running: bool = False, command: str = "tether",
                   command_note: str = "") -> DemoResult:
    """``command`` is how the user's shell runs tether, for the commands printed at the end (``command_note`` says
    why it is not plain ``tether``)."""
    console = console or Console()
    if not console.is_terminal:
        console.width = max(console.width, 160)  # pipes and CI logs: rich's 80 columns would fold the table
    demo = Demo(log_path=Path(log_path), console=console, live=live and console.is_terminal, speed=speed,
                keep_running=keep_running, command=command, command_note=command_note)
    return await demo.run()


__all__ = ["DemoFailed", "DemoResult", "run_demo"]
