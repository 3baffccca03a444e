"""A running tether (daemon + sandbox catalog) on a Kubernetes API, for integration tests and the demo.

``tether_stack(env)`` registers the CRDs tether needs, starts the sandbox Iceberg REST catalog, writes the plugin
ConfigMap (in the test namespace, so a real cluster is left clean), creates Karmada Clusters with unique names,
and runs a :class:`Daemon` on an embedded SQLite log in a temporary directory. Everything it created is removed
on exit. Works on the emulator and, with ``TETHER_TEST_KUBECONFIG``, on a real cluster.

With ``daemon_process=True`` the daemon is its own process instead of a task on the caller's event loop, as
``tether run`` is in production: ``python -m tether.adapters.testing.tether_stack`` (its configuration in
``$TETHER_TEST_DAEMON_CONFIG``) runs ``Daemon(cfg).run()``
exactly as ``tether run`` does (its own kubeconfig client, its own log connection), plus a control channel on
its stdin/stdout that only answers "ready" and "idle" (for the caller's setup; nothing else runs on it).
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import os
import secrets
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tether.adapters.daemon.daemon import Daemon, DaemonConfig
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import (
    BINDINGS,
    CLAIMS,
    CLUSTERS,
    CONFIGMAPS,
    DATASOURCES,
    EVENTS,
    KubeClient,
    KubeError,
)
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.catalog import SandboxCatalog
from tether.adapters.sandbox.kube_emulator.testing import KUBECONFIG_ENV, TETHER_FINALIZERS, KubeEnv
from tether.adapters.testing.clock import ManualClock
from tether.core.envelope import CommandRecord
from tether.core.events import Event
from tether.core.keys import PLACEMENT_INJECTED_ANNOTATION

CRDS = ("datadependency.volcano.sh_datasourceclaims", "datadependency.volcano.sh_datasources",
        "work.karmada.io_resourcebindings", "cluster.karmada.io_clusters")


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


_ROOT = Path(__file__).resolve().parents[1]  # the checkout (tether/ is a symlink farm onto it)


#: How :class:`DaemonProcess` hands its child the configuration.
CONFIG_ENV = "TETHER_TEST_DAEMON_CONFIG"


class DaemonProcess:
    """A daemon in a child process (``python -m tether.adapters.testing.tether_stack``): see the module doc."""

    def __init__(self, proc: asyncio.subprocess.Process) -> None:
        self.proc = proc
        self._lock = asyncio.Lock()

    @classmethod
    async def start(cls, cfg: DaemonConfig, *, within: float = 30.0) -> DaemonProcess:
        env = dict(os.environ)
        if (_ROOT / "tether").is_dir():  # a checkout: the child imports this one, not whatever tether is installed
            env["PYTHONPATH"] = os.pathsep.join(p for p in (str(_ROOT), env.get("PYTHONPATH", "")) if p)
        env[CONFIG_ENV] = json.dumps(dataclasses.asdict(cfg))  # not argv: the push token is in it, and every user
        proc = await asyncio.create_subprocess_exec(  # of the host reads a process's command line
            sys.executable, "-m", "tether.adapters.testing.tether_stack",
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=env)
        self = cls(proc)
        try:
            await self._expect("ready", within)
        except BaseException:
            await self.stop()
            raise
        return self

    async def _expect(self, word: str, within: float) -> None:
        assert self.proc.stdout is not None
        line = (await asyncio.wait_for(self.proc.stdout.readline(), within)).decode().strip()
        if line != word:
            raise RuntimeError(f"the daemon process said {line!r} (exit code {self.proc.returncode}), not {word!r}")

    async def wait_idle(self, *, within: float = 10.0) -> None:
        """Until the daemon's decider and executor have consumed everything in its log (``Loops.wait_idle``)."""
        assert self.proc.stdin is not None
        async with self._lock:
            self.proc.stdin.write(f"idle {within}\n".encode())
            await self.proc.stdin.drain()
            await self._expect("idle", 10 * within + 5)  # (Runtime.wait_idle: within bounds a time without progress)

    async def stop(self, *, within: float = 10.0) -> int:
        """SIGTERM (as a supervisor stops ``tether run``); returns the exit code."""
        if self.proc.returncode is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.proc.wait(), within)
            except TimeoutError:
                self.proc.kill()
                await self.proc.wait()
        return self.proc.returncode if self.proc.returncode is not None else -1


async def _serve_daemon(cfg: DaemonConfig) -> int:
    """The child's side of :class:`DaemonProcess`."""
    import structlog  # the child logs warnings only, to stderr (the parent's stderr)

    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30),
                        logger_factory=structlog.PrintLoggerFactory(file=sys.stderr))
    loop = asyncio.get_running_loop()
    stop = asyncio.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    daemon = Daemon(cfg)
    task = asyncio.create_task(daemon.run(stop=stop))
    reader = asyncio.StreamReader()
    await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader), sys.stdin)

    def say(word: str) -> None:
        sys.stdout.write(word + "\n")
        sys.stdout.flush()

    async def control() -> None:
        while not (daemon.started.is_set() and daemon.ready()[0]):
            if task.done():
                return
            await asyncio.sleep(0.01)
        say("ready")
        while line := (await reader.readline()).decode().split():
            if line[0] == "idle" and daemon.loops is not None:
                try:
                    await daemon.loops.wait_idle(within=float(line[1]) if len(line) > 1 else 10.0)
                    say("idle")
                except TimeoutError:
                    say("busy")
        stop.set()  # stdin closed: the parent is gone

    controller = asyncio.create_task(control())
    code = await task
    controller.cancel()
    return code


@dataclass
class Stack:
    env: KubeEnv
    kube: KubeClient
    catalog: SandboxCatalog
    daemon: Daemon | None  # None when the daemon runs in its own process (``process``)
    log: SqliteLog | None  # (the process opens its own)
    namespace: str
    clusters: dict[str, str]  # role (east1, east2, west1) → unique cluster name
    suffix: str
    plugin_configmap: str
    cfg: DaemonConfig | None = None
    tmp: str = ""
    resolver_options: dict[str, Any] | None = None
    process: DaemonProcess | None = None
    lease_clock: ManualClock | None = None
    _stop: asyncio.Event | None = None
    _task: asyncio.Task[int] | None = None
    _created: list[tuple[Any, str, str]] = field(default_factory=list)

    async def wait_idle(self, *, within: float = 10.0) -> None:
        """Until the daemon (task or process) has consumed everything in its log."""
        if self.process is not None:
            await self.process.wait_idle(within=within)
        else:
            assert self.daemon is not None and self.daemon.loops is not None
            await self.daemon.loops.wait_idle(within=within)

    async def logged(self, key: str, where: Callable[[Event], bool] = lambda event: True, *,
                     within: float = 15.0) -> int:
        """The offset of the last event about ``key`` in the daemon's log that satisfies ``where``, once there is
        one (the daemon in this process only)."""
        assert self.log is not None, "the daemon's log is in its own process"
        log_ = self.log

        async def probe() -> int:
            found = 0
            async for batch in log_.read("events"):
                for record in batch:
                    if record.key == key and where(record.event):  # type: ignore[union-attr]
                        found = record.offset
            return found

        offset: int = await self.eventually(probe, within=within, what=f"an event about {key} in the log")
        return offset

    async def decided_through(self, offset: int | None = None, *, within: float = 15.0) -> int:
        """Until the daemon's decider has committed its position through ``offset`` of the events stream (default:
        the stream's end now): every event up to there is decided and the commands it produced are in the log.
        This is how a test asserts that something was *not* done — wait for this, then look for the command —
        instead of sleeping and hoping the daemon had its turn. Unlike :meth:`wait_idle`, it does not wait for the
        commands in flight (a slow catalog lookup) to finish."""
        assert self.log is not None, "the daemon's log is in its own process"
        log_ = self.log
        target = offset if offset is not None else (await log_.end("events")).get(0, 0)

        async def decided() -> bool:
            return (await log_.position("events", consumer="decider")).get(0, 0) >= target

        await self.eventually(decided, within=within, what=f"the decider past events offset {target}")
        return target

    async def commands_for(self, key: str) -> list[CommandRecord]:
        """Every command in the daemon's log targeting ``key``, in log order."""
        assert self.log is not None, "the daemon's log is in its own process"
        return [record async for batch in self.log.read("commands") for record in batch  # type: ignore[misc]
                if record.key == key]

    async def stop_daemon(self) -> int:
        """Stop the daemon (as SIGTERM would); returns its exit code. The log stays open."""
        if self.process is not None:
            return await self.process.stop()
        assert self._stop is not None and self._task is not None
        self._stop.set()
        code = await asyncio.wait_for(self._task, 10)
        self._task = None
        return code

    async def start_daemon(self, **overrides: Any) -> Daemon:
        """Start a new daemon on the same log (a restart), with ``DaemonConfig`` fields overridden."""
        assert self.cfg is not None and self._task is None and self.process is None and self.log is not None
        self.cfg = dataclasses.replace(self.cfg, **overrides)
        self.daemon, self._stop, self._task = await spawn_daemon(self.cfg, self.env, self.log,
                                                                 resolver_options=self.resolver_options,
                                                                 lease_clock=self.lease_clock)
        daemon = self.daemon
        await self.eventually(lambda: asyncio.sleep(0, daemon.ready()[0]), what="daemon ready")
        return daemon

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

    def known(self, rb: dict[str, Any] | None, clusters: list[str] | set[str] = ()) -> set[str]:
        """The exclusions of ``rb`` that this test can speak for: its own clusters and the names it mentions."""
        return set(excluded(rb)) & (set(self.clusters.values()) | set(clusters))

    async def wait_excluded(self, binding: str, clusters: list[str] | set[str], *,
                            within: float = 15.0) -> dict[str, Any]:
        """The binding once its exclusions, among the clusters this test owns (and any other names in
        ``clusters``, such as a user's own exclusion), are exactly ``clusters``, and the gate annotation agrees:
        set when ``clusters`` is not empty, gone when it is (tether holds no exclusion at all then).

        Only what the test owns is compared: a shared cluster has Karmada Clusters the test did not create, and
        tether rightly excludes every one of them that lacks the data, so the full list is not the test's to
        predict (``kube_environment(foreign_objects=True)`` gives the emulator runs such Clusters too)."""

        async def probe() -> dict[str, Any] | None:
            rb = await self.get("ResourceBinding", binding)
            if rb is None or self.known(rb, clusters) != set(clusters):
                return None
            injected = (rb["metadata"].get("annotations") or {}).get(PLACEMENT_INJECTED_ANNOTATION)
            return rb if injected == ("true" if clusters else None) else None

        result: dict[str, Any] = await self.eventually(probe, within=within,
                                                       what=f"{binding} excluding {sorted(clusters)}")
        return result

    def own_clusters(self) -> list[str]:
        """The names of this stack's Clusters, sorted (for ``clusterAffinity.clusterNames``)."""
        return sorted(self.clusters.values())

    def binding(self, workload: str, **options: Any) -> dict[str, Any]:
        """``manifests.resource_binding`` in this stack's namespace, selecting only this stack's Clusters: a real
        karmada-scheduler considers every Cluster, the foreign ones of a shared cluster too."""
        return manifests.resource_binding(workload, namespace=self.namespace,
                                          cluster_names=options.pop("cluster_names", None) or self.own_clusters(),
                                          **options)

    @property
    def scheduling_within(self) -> float:
        """How long Karmada may take to schedule a binding of the test: 15 s for the emulator's stand-in; 60 s for
        a real karmada-scheduler, whose queue on a shared control plane holds every other run's bindings and the
        lived-in plane's thousands (measured: a 15 s wait timed out while another session's bench filled it)."""
        return 15.0 if self.env.is_emulated else 60.0

    async def wait_scheduled(self, binding: str, clusters: list[str] | set[str] | None, *,
                             within: float | None = None) -> dict[str, Any]:
        """The binding once Karmada (the emulator's stand-in or a real karmada-scheduler) placed it on exactly
        ``clusters`` (None: on any) and is done with it: ``Scheduled=True`` and ``status.schedulerObservedGeneration``
        equal to its generation. A real scheduler writes ``spec.clusters`` first and its status after (then observes
        the generation its own write made), so a binding read between those writes is not settled yet — and a write
        guarded by the resourceVersion read then would fail. ``within``: at least :attr:`scheduling_within`."""
        within = max(within or 0.0, self.scheduling_within)

        async def probe() -> dict[str, Any] | None:
            rb = await self.get("ResourceBinding", binding)
            names = {c["name"] for c in ((rb or {}).get("spec") or {}).get("clusters") or []}
            if rb is None or not names or (clusters is not None and names != set(clusters)):
                return None
            status = rb.get("status") or {}
            done = any(c.get("type") == "Scheduled" and c.get("status") == "True"
                       for c in status.get("conditions") or [])
            return rb if done and status.get("schedulerObservedGeneration") == rb["metadata"].get("generation") \
                else None

        result: dict[str, Any] = await self.eventually(probe, within=within,
                                                       what=f"{binding} scheduled on {sorted(clusters or ['any'])}")
        return result

    async def events_for(self, name: str) -> list[dict[str, Any]]:
        """Kubernetes Events recorded on the claim ``name`` (oldest first by name is not guaranteed)."""
        items, _ = await self.kube.list(EVENTS, namespace=self.namespace,
                                        field_selector=f"involvedObject.name={name}")
        return [e for e in items if (e.get("involvedObject") or {}).get("name") == name]




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
                       resolver_options: dict[str, Any] | None = None, lease_clock: ManualClock | None = None,
                       ) -> tuple[Daemon, asyncio.Event, asyncio.Task[int]]:
    """Run a :class:`Daemon` in a task; returns it with its stop event and task (started, not yet ready).
    ``lease_clock``: the leader election's time (``adapters/testing/clock.py``), moved by the test."""
    timing: dict[str, Any] = {"lease_clock": lease_clock.time, "lease_sleep": lease_clock.sleep} if lease_clock else {}
    # (the cluster tether runs in, for leader_services, is the test's API server too)
    daemon = Daemon(cfg, api_client=env.api_client, log_=log, resolver_options=resolver_options,
                    host_api_client=env.api_client, **timing)
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
                       daemon_options: dict[str, Any] | None = None,
                       daemon_process: bool = False, kubeconfig: str | None = None,
                       lease_clock: ManualClock | None = None) -> AsyncIterator[Stack]:
    """``plugin_options`` are extra plugin-entry fields (``reclaimPolicy``...); ``daemon_options`` extra
    :class:`DaemonConfig` fields (``snapshot_every``, ``leader_elect``, lease timings...). ``daemon_process``: run
    the daemon in its own process (module doc), connecting with ``kubeconfig`` (default: the emulator's, or
    ``TETHER_TEST_KUBECONFIG``); ``resolver_options`` and ``lease_clock`` do not apply to it. ``lease_clock``: the
    leader election's time, moved by the test (:class:`ManualClock`); restarts keep it."""
    await env.register_crds(*CRDS)
    kube = KubeClient(env.api_client)
    suffix = secrets.token_hex(3)
    clusters = {"east1": f"east1-{suffix}", "east2": f"east2-{suffix}", "west1": f"west1-{suffix}"}
    try:  # from the first cluster-scoped object on: whatever fails or is cancelled, the clean-up runs
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
                cfg = DaemonConfig(log_url=f"sqlite:///{tmp}/tether.db",
                                   plugin_configmap=f"{env.namespace}/tether-plugins",
                                   watch_namespace=env.namespace, http_host="127.0.0.1",
                                   push_token=push_token, refresh_interval=refresh_interval,
                                   lease_namespace=env.namespace,
                                   # the test process is not the daemon's: freezing its heap would keep the garbage
                                   # cycles of every later test (the child process freezes its own, as tether run)
                                   **{"freeze_heap": daemon_process, "http_port": 0, **(daemon_options or {})})
                stack = Stack(env=env, kube=kube, catalog=catalog, daemon=None, log=None, namespace=env.namespace,
                              clusters=clusters, suffix=suffix, plugin_configmap=cfg.plugin_configmap, cfg=cfg,
                              tmp=tmp, resolver_options=resolver_options, lease_clock=lease_clock)
                try:
                    if daemon_process:
                        if kubeconfig is None:
                            kubeconfig = (str(env.emulator.kubeconfig_path(tmp)) if env.emulator is not None
                                          else os.environ.get(KUBECONFIG_ENV))
                        stack.cfg = cfg = dataclasses.replace(cfg, kubeconfig=kubeconfig)
                        stack.process = await DaemonProcess.start(cfg)
                    else:
                        stack.log = log = await SqliteLog.open(str(Path(tmp) / "tether.db"))
                        stack.daemon, stack._stop, stack._task = await spawn_daemon(
                            cfg, env, log, resolver_options=resolver_options, lease_clock=lease_clock)
                        daemon = stack.daemon
                        await stack.eventually(lambda: asyncio.sleep(0, daemon.ready()[0]), what="daemon ready")
                    yield stack
                finally:
                    if stack._task is not None or stack.process is not None:
                        await stack.stop_daemon()
                    if stack.log is not None:
                        await stack.log.close()
    finally:
        await _cleanup(kube, env.namespace, clusters, suffix)


async def _cleanup(kube: KubeClient, namespace: str, clusters: dict[str, str], suffix: str) -> None:
    """Remove what a stack created outside its namespace (DataSources and Clusters are cluster-scoped, and the Events
    tether wrote about them are in ``default``), after
    releasing tether's finalizers on its claims (the daemon that would have is gone; the namespace's deletion
    would wait on them for ever). Only the stack's own objects: its claims, the DataSources of its tables (their
    names carry the stack's unique suffix) and its Clusters — a shared cluster holds other DataSources, even
    unreferenced ones, that are not ours to delete. Other finalizers are left to their owners.

    Each step is tried on its own, and each deletion is retried while the API answers a retryable error: a step
    that fails (a list refused, a conflict) must not leave the Clusters behind on a shared cluster."""
    with contextlib.suppress(Exception):
        claims, _ = await kube.list(CLAIMS, namespace=namespace)
        for claim in claims:
            with contextlib.suppress(Exception):
                await _release(kube, CLAIMS, claim, namespace=namespace)
    with contextlib.suppress(Exception):
        sources, _ = await kube.list(DATASOURCES)
        for source in sources:
            if f".{suffix}." not in str((source.get("spec") or {}).get("name") or ""):
                continue
            with contextlib.suppress(Exception):
                await release_and_delete(kube, DATASOURCES, source["metadata"]["name"])
    for name in clusters.values():
        with contextlib.suppress(Exception):
            await delete_cluster_scoped(kube, CLUSTERS, name)
    with contextlib.suppress(Exception):  # the Events tether wrote about them: a cluster-scoped object's are in default
        events, _ = await kube.list(EVENTS, namespace="default")
        for event in events:
            involved = event.get("involvedObject") or {}
            if (involved.get("kind") == "DataSource" and f".{suffix}." in str(involved.get("name") or "")) or (
                    involved.get("kind") == "Cluster" and involved.get("name") in clusters.values()):
                with contextlib.suppress(Exception):
                    await kube.delete(EVENTS, event["metadata"]["name"], namespace="default")


async def delete_cluster_scoped(kube: KubeClient, res: Any, name: str, *, attempts: int = 5) -> None:
    """Delete a cluster-scoped object a test created, retrying a retryable refusal (a shared cluster keeps what a
    test leaves behind, for everyone). Gone already is fine."""
    for attempt in range(attempts):
        try:
            await kube.delete(res, name)
            return
        except KubeError as exc:
            if not exc.retryable or attempt == attempts - 1:
                raise
            await asyncio.sleep(0.2 * 2 ** attempt)


async def release_and_delete(kube: KubeClient, res: Any, name: str, *, attempts: int = 5) -> None:
    """Release tether's finalizers on a cluster-scoped object of the stack and delete it, until it is gone. On a
    shared cluster another run's daemon watches every DataSource too and may write this one between the release
    and the deletion (its finalizer back, its status): the release then fails on the resourceVersion, or the
    deletion leaves the object Terminating on that finalizer, held for ever. Each attempt starts from the object
    as it is now."""
    for attempt in range(attempts):
        obj = await kube.get(res, name)
        if obj is None:
            return
        try:
            await _release(kube, res, obj)
            if not obj["metadata"].get("deletionTimestamp"):
                await delete_cluster_scoped(kube, res, name)
        except KubeError as exc:
            if exc.status not in (404, 409) and not exc.retryable:
                raise
        if await kube.get(res, name) is None:
            return
        await asyncio.sleep(0.1 * 2 ** attempt)


async def _release(kube: KubeClient, res: Any, obj: dict[str, Any], *, namespace: str = "") -> None:
    """Drop tether's finalizers from ``obj`` (guarded by its resourceVersion), keeping any other."""
    meta = obj["metadata"]
    held = meta.get("finalizers") or []
    keep = [f for f in held if f not in TETHER_FINALIZERS]
    if keep != held:
        await kube.patch(res, meta["name"], {"metadata": {"finalizers": keep or None,
                                                          "resourceVersion": meta["resourceVersion"]}},
                         namespace=namespace)


if __name__ == "__main__":  # the daemon process of DaemonProcess: ``python -m tether.adapters.testing.tether_stack``
    sys.exit(asyncio.run(_serve_daemon(DaemonConfig(**json.loads(os.environ.pop(CONFIG_ENV))))))
