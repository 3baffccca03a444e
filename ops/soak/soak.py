"""Soak: the demo world under continuous churn for ``--minutes``, watching the daemon's memory, lag and latency.

What runs (all on loopback): the Kubernetes API emulator with its Karmada scheduler stand-in and an emulated member
cluster (racks of nodes, its pod binder, Godel's PodGroup CRD), both on this process's event loop; the sandbox Iceberg
REST catalog; and the tether daemon **as its own process** (``adapters/testing/tether_stack.py``: ``Daemon(cfg)`` as
``tether run`` runs it, on a SQLite log), with every capability on — data-dependency scheduling, queue admission (the
ResourceBinding webhook registered on the emulator's admission chain, Queues, the admission ConfigMap) and pod placement
in the member.

The churn, all at once, for the whole run:

* **claims and bindings**: ``--rate`` workloads a second, each a Deployment (its queue in its pod template), its
  ResourceBinding (as Karmada's detector makes it) and a DataSourceClaim on one of ``--tables`` tables; each lives
  ``--lifetime`` seconds and is deleted (claim, binding, Deployment), so the population is steady;
* **table moves**: every ``--move-every`` seconds a table moves to the other region in the catalog, and tether is
  told through its push endpoint;
* **queue changes**: every ``--queue-every`` seconds a Queue's capability flips between two values (holding some
  bindings, then admitting them);
* **pod groups**: every ``--group-every`` seconds a Godel PodGroup of gated pods is created in the member, and
  deleted ``--group-lifetime`` seconds later.

Every ``--sample-every`` seconds the soak samples: the daemon's RSS (``VmRSS``, ``RssAnon``, ``RssFile`` from
``/proc/PID/status``), its log lag (log end minus consumer position, from its ``GET /status``), what its world tracks,
and the decision latencies completed in the window, each measured from this process's watches:

* ``claim``: the claim's POST → its binding carries tether's placement (the ``placement-injected`` annotation);
* ``move``: the push after a move → each binding of the table excludes exactly the old region's clusters;
* ``reschedule``: the same push → the binding, when scheduled, is on the new region's clusters only;
* ``group``: a pod group's creation → every pod of it bound to a node.

Memory is judged on ``RssAnon`` (the heap): the SQLite log is read through ``mmap``, so pages of a log that grows
for the whole run count in ``RssFile``, and so in ``VmRSS``, without being held by anything — clean file pages the
kernel reclaims. **Flat** means the least-squares slope of ``RssAnon`` after the warm-up is below
``--flat-bound`` MB per minute.

Output, in ``--out``: ``soak.csv`` (one row per sample), ``soak.png`` (with matplotlib, the ``plot`` extra) or
``soak.svg`` (``ops/soak/plot.py``); the last line printed is one JSON object: ``{"bench": "soak", "value": RssAnon
growth after the warm-up (MB), "unit": "MB", "baseline": RssAnon at the end of the warm-up, "ratio": value /
baseline, "flat": ..., latency percentiles, ...}``. Usage: ``python ops/soak/soak.py --minutes 10``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import csv
import gc
import json
import os
import secrets
import socket
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import aiohttp
import structlog
from heap import heap_samples, heap_summary, slope
from plot import plot

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import BINDINGS, CLAIMS, CONFIGMAPS, DEPLOYMENTS, QUEUES, KubeClient, KubeError
from tether.adapters.kubernetes.members import POD_GROUPS, PODS
from tether.adapters.kubernetes.webhook_certs import MUTATING_WEBHOOKS
from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.testing import kube_environment
from tether.adapters.testing.tether_stack import Stack, tether_stack
from tether.core.keys import (
    EXCLUDED_CLUSTERS_ANNOTATION,
    HOSTNAME_LABEL,
    NAMESPACE_NAME_LABEL,
    PLACEMENT_GATE,
    PLACEMENT_INJECTED_ANNOTATION,
    POD_GROUP_ANNOTATION,
    SCHEDULING_QUEUE_NAME_KEY,
)

QUEUE_COUNT = 4
CAPABILITIES = ("2", "4")  # CPUs a Queue may run (its bindings request 100m each): some held, then all admitted
MEMBER_NS = "ml"
RACKS, NODES_PER_RACK = 4, 4
MEMBER_CRDS = ("scheduling.godel.kubewharf.io_podgroups", "data.fluid.io_dataloads", "data.fluid.io_dataprocesses",
               "data.fluid.io_datamigrates", "data.fluid.io_databackups")  # (the member serves Fluid's kinds too)
COLUMNS = ["t_s", "rss_mb", "rss_anon_mb", "rss_file_mb", "events_lag", "commands_lag", "events_end", "claims",
           "bindings", "data_sources", "live_workloads", "claim_n", "claim_p50_ms", "claim_p99_ms", "move_n",
           "move_p50_ms", "move_p99_ms", "reschedule_p50_ms", "group_n", "group_p50_ms", "group_p99_ms", "errors"]


@dataclass
class Options:
    minutes: float
    warmup: float  # seconds
    rate: float
    lifetime: float
    tables: int
    move_every: float
    queue_every: float
    group_every: float
    group_lifetime: float
    group_size: int
    sample_every: float
    flat_bound: float  # MB per minute
    out: Path
    heap_probe: bool = False


def pct(values: list[float], p: float) -> float | None:
    if not values:
        return None
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, max(0, round(p / 100 * len(ordered)) - 1))], 1)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def memory_of(pid: int) -> dict[str, float]:
    """VmRSS, RssAnon and RssFile of process ``pid``, in MB."""
    wanted = {"VmRSS": "rss_mb", "RssAnon": "rss_anon_mb", "RssFile": "rss_file_mb"}
    out: dict[str, float] = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        name, _, value = line.partition(":")
        if name in wanted:
            out[wanted[name]] = round(int(value.split()[0]) / 1024, 2)
    return out


@dataclass
class Workload:
    index: int
    table: int
    created: float  # monotonic time of the claim's POST
    injected: bool = False


@dataclass
class World:
    """What the soak knows of its own churn, and the latencies measured, as (monotonic time done, ms)."""

    workloads: dict[str, Workload] = field(default_factory=dict)  # binding name → workload
    regions: dict[int, str] = field(default_factory=dict)  # table → region
    moves: dict[str, tuple[float, frozenset[str], frozenset[str]]] = field(default_factory=dict)  # binding →
    #   (time of the push, clusters to exclude, clusters to run on): waiting for the binding to follow
    rescheduling: dict[str, tuple[float, frozenset[str]]] = field(default_factory=dict)
    groups: dict[str, tuple[float, int]] = field(default_factory=dict)  # group → (created, size), until bound
    latencies: dict[str, list[tuple[float, float]]] = field(default_factory=lambda: {
        "claim": [], "move": [], "reschedule": [], "group": []})
    errors: int = 0

    def done(self, kind: str, started: float) -> None:
        now = time.monotonic()
        self.latencies[kind].append((now, (now - started) * 1000))


async def watch(kube: KubeClient, resource: Any, namespace: str, on: Callable[[dict[str, Any]], None]) -> None:
    """Every object of ``resource`` in ``namespace`` as it changes, for ever (resumed where a watch ends; listed
    again when its version is gone)."""
    version = ""
    while True:
        try:
            if not version:
                items, version = await kube.list(resource, namespace=namespace)
                for item in items:
                    on(item)
            async for event in kube.watch(resource, resource_version=version, namespace=namespace):
                obj = event.get("object") or {}
                if event.get("type") == "ERROR":
                    version = ""
                    break
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if event.get("type") in ("ADDED", "MODIFIED"):
                    on(obj)
        except (TimeoutError, KubeError, OSError, aiohttp.ClientError):
            version = ""
            await asyncio.sleep(0.5)


class Soak:
    def __init__(self, opts: Options, stack: Stack, member: KubeClient, http_port: int) -> None:
        self.opts, self.stack, self.member, self.http_port = opts, stack, member, http_port
        self.kube = stack.kube
        self.ns = stack.namespace
        self.world = World(regions={t: "east" if t % 2 == 0 else "west" for t in range(opts.tables)})
        self.tasks: set[asyncio.Task[Any]] = set()
        self.region_clusters = {"east": frozenset({stack.clusters["east1"], stack.clusters["east2"]}),
                                "west": frozenset({stack.clusters["west1"]})}
        self.queues = [f"q{i}-{stack.suffix}" for i in range(QUEUE_COUNT)]
        self.bound: dict[str, set[str]] = {}  # pod group → its pods bound so far
        self.started = time.monotonic()
        self.started_at = time.time()  # (the heap probe's samples are stamped with the wall clock)

    # -- the watches ------------------------------------------------------------------------------------------
    def on_binding(self, obj: dict[str, Any]) -> None:
        name = obj["metadata"]["name"]
        workload = self.world.workloads.get(name)
        if workload is None:
            return
        annotations = obj["metadata"].get("annotations") or {}
        if not workload.injected and annotations.get(PLACEMENT_INJECTED_ANNOTATION):
            workload.injected = True
            self.world.done("claim", workload.created)
        move = self.world.moves.get(name)
        if move is not None:
            excluded = frozenset(c for c in annotations.get(EXCLUDED_CLUSTERS_ANNOTATION, "").split(",") if c)
            if excluded == move[1]:
                del self.world.moves[name]
                self.world.done("move", move[0])
        pending = self.world.rescheduling.get(name)
        scheduled = {c["name"] for c in (obj.get("spec") or {}).get("clusters") or []}
        if pending is not None and scheduled and scheduled <= pending[1]:
            del self.world.rescheduling[name]
            self.world.done("reschedule", pending[0])

    def on_pod(self, obj: dict[str, Any]) -> None:
        group = ((obj["metadata"].get("annotations") or {}).get(POD_GROUP_ANNOTATION) or "")
        if group in self.world.groups and (obj.get("spec") or {}).get("nodeName"):
            self.bound.setdefault(group, set()).add(obj["metadata"]["name"])
            created, size = self.world.groups[group]
            if len(self.bound[group]) >= size:
                del self.world.groups[group]
                self.world.done("group", created)

    # -- the churn --------------------------------------------------------------------------------------------
    def spawn(self, coroutine: Any) -> None:
        task = asyncio.create_task(coroutine)
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    async def every(self, seconds: float, action: Callable[[int], Any]) -> None:
        n = 0
        next_at = time.monotonic()
        while True:
            self.spawn(action(n))
            n += 1
            next_at += seconds
            await asyncio.sleep(max(0.0, next_at - time.monotonic()))

    async def _api(self, call: Any) -> Any:
        try:
            return await call
        except (TimeoutError, KubeError, OSError, aiohttp.ClientError):
            self.world.errors += 1
            return None

    async def workload(self, i: int) -> None:
        name, table = f"w{i}", i % self.opts.tables
        deployment = manifests.deployment(name, namespace=self.ns, replicas=0)
        deployment["spec"]["template"]["metadata"]["annotations"] = {
            SCHEDULING_QUEUE_NAME_KEY: self.queues[i % QUEUE_COUNT]}
        await self._api(self.kube.create(DEPLOYMENTS, deployment, namespace=self.ns))
        binding = f"{name}-deployment"
        if await self._api(self.stack.apply(self.stack.binding(name))) is None:
            return
        self.world.workloads[binding] = Workload(index=i, table=table, created=time.monotonic())
        claim = manifests.claim(f"c{i}", namespace=self.ns, table=self.stack.table(f"t{table}"), workload=name)
        await self._api(self.stack.apply(claim))
        await asyncio.sleep(self.opts.lifetime)
        self.world.workloads.pop(binding, None)
        self.world.moves.pop(binding, None)
        self.world.rescheduling.pop(binding, None)
        await self._api(self.kube.delete(CLAIMS, f"c{i}", namespace=self.ns))
        await self._api(self.kube.delete(BINDINGS, binding, namespace=self.ns))
        await self._api(self.kube.delete(DEPLOYMENTS, name, namespace=self.ns))

    async def move(self, n: int) -> None:
        table = n % self.opts.tables
        region = "west" if self.world.regions[table] == "east" else "east"
        self.world.regions[table] = region
        full = self.stack.table(f"t{table}")
        self.stack.catalog.move_table(full, f"s3://warehouse-{region}/{self.stack.suffix}/t{table}")
        pushed = time.monotonic()
        exclude = frozenset(c for r, cs in self.region_clusters.items() if r != region for c in cs)
        for binding, workload in list(self.world.workloads.items()):
            if workload.table == table and workload.injected:  # placed already: it must follow the move
                self.world.moves[binding] = (pushed, exclude, self.region_clusters[region])
                self.world.rescheduling[binding] = (pushed, self.region_clusters[region])
        try:
            async with aiohttp.ClientSession() as http, http.post(
                    f"http://127.0.0.1:{self.http_port}/v1/notifications/table-moved",
                    json={"system": "amoro", "dataSourceName": full},
                    headers={"Authorization": "Bearer push-secret"}) as resp:
                if resp.status != 202:
                    self.world.errors += 1
        except (OSError, aiohttp.ClientError):
            self.world.errors += 1

    async def queue(self, n: int) -> None:
        capability = CAPABILITIES[(n // QUEUE_COUNT + 1) % len(CAPABILITIES)]
        await self._api(self.kube.patch(QUEUES, self.queues[n % QUEUE_COUNT],
                                        {"spec": {"capability": {"cpu": capability}}}))

    async def group(self, n: int) -> None:
        name, size = f"g{n}", self.opts.group_size
        await self._api(self.member.create(POD_GROUPS, {
            "apiVersion": POD_GROUPS.api_version, "kind": "PodGroup",
            "metadata": {"name": name, "namespace": MEMBER_NS},
            "spec": {"minMember": size, "affinity": {"podGroupAffinity": {"required": [{"topologyKey": "rack"}]}}}},
            namespace=MEMBER_NS))
        self.world.groups[name] = (time.monotonic(), size)
        for i in range(size):
            await self._api(self.member.create(PODS, {"apiVersion": "v1", "kind": "Pod", "metadata": {
                "name": f"{name}-{i}", "namespace": MEMBER_NS,
                "annotations": {POD_GROUP_ANNOTATION: name}}, "spec": {
                "schedulingGates": [{"name": PLACEMENT_GATE}],
                "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                                "resources": {"requests": {"cpu": "1"}}}]}}, namespace=MEMBER_NS))
        await asyncio.sleep(self.opts.group_lifetime)
        self.world.groups.pop(name, None)
        self.bound.pop(name, None)
        for i in range(size):
            await self._api(self.member.delete(PODS, f"{name}-{i}", namespace=MEMBER_NS))
        await self._api(self.member.delete(POD_GROUPS, name, namespace=MEMBER_NS))

    # -- sampling ---------------------------------------------------------------------------------------------
    async def sample(self, http: aiohttp.ClientSession, since: float) -> dict[str, Any]:
        assert self.stack.process is not None
        row: dict[str, Any] = {"t_s": round(time.monotonic() - self.started, 1),
                               **memory_of(self.stack.process.proc.pid)}
        try:
            async with http.get(f"http://127.0.0.1:{self.http_port}/status") as resp:
                status = await resp.json()
            streams = status["log"]["streams"]
            world = status.get("world") or {}
            row.update(events_lag=streams["events"]["lag"], commands_lag=streams["commands"]["lag"],
                       events_end=sum(streams["events"]["end"].values()), claims=world.get("claims"),
                       bindings=world.get("bindings"), data_sources=world.get("data_sources"))
        except (OSError, aiohttp.ClientError, KeyError, ValueError):
            self.world.errors += 1
        row["live_workloads"] = len(self.world.workloads)
        for kind in ("claim", "move", "reschedule", "group"):
            window = [ms for t, ms in self.world.latencies[kind] if t > since]
            row[f"{kind}_n"] = len(window)
            row[f"{kind}_p50_ms"], row[f"{kind}_p99_ms"] = pct(window, 50), pct(window, 99)
        row["errors"] = self.world.errors
        return row

    async def run(self) -> list[dict[str, Any]]:
        opts = self.opts
        watches = [asyncio.create_task(watch(self.kube, BINDINGS, self.ns, self.on_binding)),
                   asyncio.create_task(watch(self.member, PODS, MEMBER_NS, self.on_pod))]
        churn = [asyncio.create_task(self.every(1 / opts.rate, self.workload)),
                 asyncio.create_task(self.every(opts.move_every, self.move)),
                 asyncio.create_task(self.every(opts.queue_every, self.queue)),
                 asyncio.create_task(self.every(opts.group_every, self.group))]
        rows: list[dict[str, Any]] = []
        writer_file = (opts.out / "soak.csv").open("w", newline="")
        writer = csv.DictWriter(writer_file, fieldnames=COLUMNS, extrasaction="ignore")
        writer.writeheader()
        try:
            async with aiohttp.ClientSession() as http:
                end = self.started + opts.minutes * 60
                since = time.monotonic()
                while time.monotonic() < end:
                    await asyncio.sleep(min(opts.sample_every, max(0.0, end - time.monotonic())))
                    assert self.stack.process is not None
                    if self.stack.process.proc.returncode is not None:
                        raise RuntimeError(f"the daemon exited ({self.stack.process.proc.returncode})")
                    row = await self.sample(http, since)
                    since = time.monotonic()
                    rows.append(row)
                    writer.writerow(row)
                    writer_file.flush()
                    print(json.dumps(row), file=sys.stderr, flush=True)
        finally:
            writer_file.close()
            for task in [*churn, *self.tasks, *watches]:
                task.cancel()
            await asyncio.gather(*churn, *self.tasks, *watches, return_exceptions=True)
        return rows


@contextlib.asynccontextmanager
async def member_cluster(tmp: Path) -> AsyncIterator[tuple[KubeClient, str]]:
    """An emulated member: racks of Ready nodes, the pod binder, Godel's PodGroup; yields its client and kubeconfig."""
    from kubernetes_asyncio import client

    async with KubeEmulator(binder=True, crds=MEMBER_CRDS, bookmark_interval=60.0) as emulator:
        for r in range(RACKS):
            for n in range(NODES_PER_RACK):
                node = f"m1-r{r}-n{n}"
                await emulator.apply({"apiVersion": "v1", "kind": "Node", "metadata": {
                    "name": node, "labels": {HOSTNAME_LABEL: node, "rack": f"rack{r}"}},
                    "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                               "conditions": [{"type": "Ready", "status": "True"}]}})
        await emulator.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": MEMBER_NS}})
        (tmp / "m1").mkdir()
        api = client.ApiClient(emulator.configuration())
        try:
            yield KubeClient(api), str(emulator.kubeconfig_path(tmp / "m1"))
        finally:
            await api.close()


async def soak(opts: Options) -> dict[str, Any]:
    http_port, webhook_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="tether-soak-") as tmp_name:
        tmp = Path(tmp_name)
        async with member_cluster(tmp) as (member, member_config), \
                kube_environment(emulator_options={"karmada_scheduler": True, "bookmark_interval": 60.0},
                                 namespace_prefix="tether-soak") as env:
            await env.register_crds("scheduling.volcano.sh_queues")
            kube = KubeClient(env.api_client)
            suffix_queues = secrets.token_hex(3)
            await kube.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
                "name": "tether-admission", "namespace": env.namespace}, "data": {
                "queue-managed": f"kinds: [apps/Deployment]\nnamespaces: [{env.namespace}]\n"}},
                namespace=env.namespace)
            webhook = f"tether-soak-rb-{suffix_queues}"
            await kube.create(MUTATING_WEBHOOKS, {
                "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
                "metadata": {"name": webhook}, "webhooks": [{
                    "name": "resourcebindings.tether.dev", "admissionReviewVersions": ["v1"],
                    "sideEffects": "NoneOnDryRun", "failurePolicy": "Fail", "timeoutSeconds": 10,
                    "reinvocationPolicy": "IfNeeded",
                    "clientConfig": {"url": f"https://127.0.0.1:{webhook_port}/mutate/resourcebindings"},
                    "rules": [{"operations": ["CREATE", "UPDATE"], "apiGroups": ["work.karmada.io"],
                               "apiVersions": ["v1alpha2"], "resources": ["resourcebindings"],
                               "scope": "Namespaced"}],
                    "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: env.namespace}}}]})
            options = {"http_port": http_port, "admission": True,
                       "admission_configmap": f"{env.namespace}/tether-admission",
                       "binding_webhook": True, "webhook_port": webhook_port, "webhook_host": "127.0.0.1",
                       "webhook_self_signed": True, "webhook_cert_dir": str(tmp / "certs"),
                       "webhook_extra_names": ["127.0.0.1", "localhost"], "webhook_configuration": webhook,
                       "members": {"m1": member_config}}
            async with tether_stack(env, daemon_process=True, daemon_options=options) as stack:
                for t in range(opts.tables):
                    stack.add_table(f"t{t}", "east" if t % 2 == 0 else "west")
                soak_ = Soak(opts, stack, member, http_port)
                for name in soak_.queues:
                    await kube.create(QUEUES, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                               "metadata": {"name": name},
                                               "spec": {"weight": 1, "capability": {"cpu": CAPABILITIES[0]}}})
                try:
                    rows = await soak_.run()
                finally:
                    for name in soak_.queues:
                        with contextlib.suppress(KubeError):
                            await kube.delete(QUEUES, name)
                    with contextlib.suppress(KubeError):
                        await kube.delete(MUTATING_WEBHOOKS, webhook)
                world = soak_.world
    result = summarise(rows, world, opts)
    if opts.heap_probe:
        result["heap_samples"] = heap_samples(opts.out / "heap.jsonl", soak_.started_at)
        result.update(heap_summary(result["heap_samples"], opts.warmup, opts.minutes * 60))
    return result


def summarise(rows: list[dict[str, Any]], world: World, opts: Options) -> dict[str, Any]:
    after = [r for r in rows if r["t_s"] >= opts.warmup and r.get("rss_anon_mb") is not None]
    at_warmup = after[0] if after else (rows[-1] if rows else {})
    last = rows[-1] if rows else {}
    anon_slope = slope([(r["t_s"] / 60, r["rss_anon_mb"]) for r in after])
    rss_slope = slope([(r["t_s"] / 60, r["rss_mb"]) for r in after])
    baseline = at_warmup.get("rss_anon_mb")
    growth = round(last["rss_anon_mb"] - baseline, 2) if baseline is not None and last else None
    out: dict[str, Any] = {
        "bench": "soak", "value": growth, "unit": "MB", "baseline": baseline,
        "ratio": round(growth / baseline, 4) if growth is not None and baseline else None,
        "flat": anon_slope is not None and anon_slope < opts.flat_bound,
        "rss_anon_slope_mb_per_min": round(anon_slope, 3) if anon_slope is not None else None,
        "flat_bound_mb_per_min": opts.flat_bound,
        "rss_mb_at_warmup": at_warmup.get("rss_mb"), "rss_mb_end": last.get("rss_mb"),
        "rss_slope_mb_per_min": round(rss_slope, 3) if rss_slope is not None else None,
        "rss_file_mb_end": last.get("rss_file_mb"), "rss_anon_mb_end": last.get("rss_anon_mb"),
        "events_lag_max": max((r.get("events_lag") or 0 for r in after), default=None),
        "events_lag_end": last.get("events_lag"), "commands_lag_max": max(
            (r.get("commands_lag") or 0 for r in after), default=None),
        "events": last.get("events_end"), "minutes": opts.minutes, "warmup_s": opts.warmup, "samples": len(rows),
        "errors": world.errors, "claims_not_placed_at_end": sum(1 for w in world.workloads.values() if not w.injected),
    }
    for kind in ("claim", "move", "reschedule", "group"):
        values = [ms for _, ms in world.latencies[kind]]
        out[f"{kind}_n"] = len(values)
        for p in (50, 90, 99):
            out[f"{kind}_p{p}_ms"] = pct(values, p)
        out[f"{kind}_max_ms"] = round(max(values), 1) if values else None
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--minutes", type=float, default=10.0)
    parser.add_argument("--warmup", type=float, help="seconds of warm-up (default: a quarter of the run)")
    parser.add_argument("--rate", type=float, default=1.0, help="workloads created per second")
    parser.add_argument("--lifetime", type=float, default=60.0, help="seconds a workload lives")
    parser.add_argument("--tables", type=int, default=6)
    parser.add_argument("--move-every", type=float, default=15.0)
    parser.add_argument("--queue-every", type=float, default=10.0)
    parser.add_argument("--group-every", type=float, default=5.0)
    parser.add_argument("--group-lifetime", type=float, default=30.0)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--sample-every", type=float, default=5.0)
    parser.add_argument("--flat-bound", type=float, default=0.5, help="MB/min of RssAnon after the warm-up")
    parser.add_argument("--out", type=Path, default=Path("soak-out"))
    parser.add_argument("--heap-probe", action="store_true",
                        help="sample the daemon's C heap, SQLite, Python blocks and bounded structures into "
                             "OUT/heap.jsonl (heap_probe/sitecustomize.py)")
    args = parser.parse_args()
    opts = Options(minutes=args.minutes, warmup=args.warmup if args.warmup is not None else args.minutes * 15,
                   rate=args.rate, lifetime=args.lifetime, tables=args.tables, move_every=args.move_every,
                   queue_every=args.queue_every, group_every=args.group_every, group_lifetime=args.group_lifetime,
                   group_size=args.group_size, sample_every=args.sample_every, flat_bound=args.flat_bound,
                   out=args.out, heap_probe=args.heap_probe)
    opts.out.mkdir(parents=True, exist_ok=True)
    if opts.heap_probe:  # the daemon's process inherits these (DaemonProcess copies the environment)
        (opts.out / "heap.jsonl").unlink(missing_ok=True)
        os.environ["TETHER_SOAK_HEAP_PROBE"] = str((opts.out / "heap.jsonl").resolve())
        os.environ["TETHER_SOAK_HEAP_PROBE_EVERY"] = str(opts.sample_every)
        os.environ["PYTHONPATH"] = os.pathsep.join(
            p for p in (str(Path(__file__).resolve().parent / "heap_probe"), os.environ.get("PYTHONPATH")) if p)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    gc.collect()
    gc.freeze()  # as the daemon does: this process's startup heap out of the collector's reach
    result = asyncio.run(soak(opts))
    heap = [{k: v for k, v in s.items() if isinstance(v, (int, float))} for s in result.pop("heap_samples", [])]
    result["plot"] = str(plot(opts.out / "soak.csv", warmup=opts.warmup, heap=heap))
    if heap:
        result["heap_probe"] = str(opts.out / "heap.jsonl")
    result["csv"] = str(opts.out / "soak.csv")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
