"""Two daemons without leader election on one control plane converge, with a bounded number of writes, and say
that they compete (issue 21).

Each daemon has its own SQLite log and its own catalog answers — one of them alone is told that a table moved,
which is what set two daemons flip-flopping the DataSource, the bindings behind it and the claims' status at
~950 events/s. The test counts, with a watch of its own (the same count on the emulator and on a real cluster),
the writes of what tether writes: every version of the stack's claims and DataSources (nobody else writes them
once created), and every version of its bindings that changes tether's share — its annotations, the exclusions,
``rescheduleTriggeredAt`` — not Karmada's (a real karmada-scheduler writes a binding three or four times per
scheduling: ``spec.clusters`` with its applied-placement annotation, then its status). It waits for
**quiescence** — both daemons idle, and each one's world holding the version of every object the API server
holds, so each has decided on the last write and found nothing more to do — and checks that the count is below
a small bound per object and does not grow after a second quiescence.

Runs on the emulator (its Karmada scheduler stand-in) and on a real cluster with ``TETHER_TEST_KUBECONFIG`` (its
karmada-scheduler): the bindings name the stack's own Clusters.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tether.adapters.daemon.daemon import Daemon
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import BINDINGS, CLAIMS, DATASOURCES, EVENTS, KubeClient, Resource
from tether.adapters.kubernetes.competing import EVENT_REASON
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, spawn_daemon, tether_stack
from tether.core.keys import TETHER_KEY_PREFIXES
from tether.core.world import World

pytestmark = pytest.mark.cluster

#: At most this many writes of what tether writes per object, on average, from its creation to quiescence with
#: two writers (one writer: a claim is created, gets its finalizer, goes Pending then Bound, and Injected with its
#: binding's move; a binding is created, placed, placed again after the move, with a reschedule; a DataSource is
#: created, lists its claims, follows the move): a little room for the races two writers have, none for a loop.
BOUND_PER_OBJECT = 6
#: … and for any one object. A claim whose table moves has 5 versions with one writer; with two, each of its status
#: changes may be written twice (the second write carries its own condition times). Measured on a real control
#: plane, for such a claim: 5 to 7 versions in four runs counted, at most 8 in seven more, 9 in one; a loop writes
#: without end (and fails the check that the count stopped growing).
BOUND_ONE_OBJECT = 10


def tethers_share(obj: dict[str, Any]) -> str:
    """What tether writes of a binding: its annotations, the exclusions of every affinity term, the reschedule."""
    annotations = {k: v for k, v in (obj["metadata"].get("annotations") or {}).items()
                   if k.startswith(TETHER_KEY_PREFIXES)}
    placement = (obj.get("spec") or {}).get("placement") or {}
    terms = [placement.get("clusterAffinity") or {}, *(placement.get("clusterAffinities") or [])]
    excluded = [t.get("exclude") for t in terms if isinstance(t, dict)]
    return json.dumps([annotations, excluded, (obj.get("spec") or {}).get("rescheduleTriggeredAt")], sort_keys=True)


class Versions:
    """The writes of what tether writes (module doc) of the stack's claims, bindings and DataSources, counted
    from a watch of each: ``seen[key]`` is the versions counted, ``latest[key]`` the last resourceVersion seen."""

    def __init__(self, kube: KubeClient, namespace: str, suffix: str) -> None:
        self.kube = kube
        self.namespace = namespace
        self.suffix = suffix
        self.seen: dict[str, set[str]] = {}
        self.latest: dict[str, str] = {}
        self.share: dict[str, str] = {}  # binding key → tether's share in the last version seen
        self._tasks: list[asyncio.Task[None]] = []

    def mine(self, obj: dict[str, Any]) -> bool:
        if obj.get("kind") == "DataSource":
            return f".{self.suffix}." in str((obj.get("spec") or {}).get("name") or "")
        return True

    def count(self) -> Counter[str]:
        return Counter({kind: sum(len(v) for k, v in self.seen.items() if k.startswith(f"{kind}/"))
                        for kind in ("DataSourceClaim", "ResourceBinding", "DataSource")})

    async def _follow(self, res: Resource, namespace: str) -> None:
        items, rv = await self.kube.list(res, namespace=namespace)
        for obj in items:
            self._note(obj)
        while True:  # (a stream the server ends is resumed from the last version seen)
            async for event in self.kube.watch(res, namespace=namespace, resource_version=rv):
                obj = event["object"]
                rv = obj["metadata"]["resourceVersion"]
                if event["type"] in ("ADDED", "MODIFIED"):
                    self._note(obj)

    def _note(self, obj: dict[str, Any]) -> None:
        if not self.mine(obj):
            return
        meta = obj["metadata"]
        key = f"{obj['kind']}/{meta.get('namespace', '')}/{meta['name']}"
        self.latest[key] = meta["resourceVersion"]
        if obj["kind"] == "ResourceBinding":
            share = tethers_share(obj)
            if self.share.get(key) == share:
                return  # Karmada's write (or a relist's repeat): tether's share did not change
            self.share[key] = share
        self.seen.setdefault(key, set()).add(meta["resourceVersion"])

    def start(self) -> None:
        self._tasks = [asyncio.create_task(self._follow(res, ns)) for res, ns in
                       ((CLAIMS, self.namespace), (BINDINGS, self.namespace), (DATASOURCES, ""))]

    async def stop(self) -> None:
        for task in self._tasks:
            task.cancel()
        for task in self._tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task


def held_by(world: World, key: str) -> str:
    kind, _, name = key.split("/", 2)
    view: Any = (world.claims.get(key) if kind == "DataSourceClaim" else world.bindings.get(key)
                 if kind == "ResourceBinding" else world.sources.get(name))
    return view.resource_version if view is not None else ""


async def quiescent(stack: Stack, daemons: list[Daemon], versions: Versions, *, within: float = 30.0) -> Counter[str]:
    """Wait until both daemons are idle and hold the API server's last version of every object (module doc);
    returns the count of versions then."""

    async def probe() -> Counter[str] | None:
        for daemon in daemons:
            assert daemon.loops is not None
            await daemon.loops.wait_idle(within=within)
        current = {}
        for res, namespace in ((CLAIMS, stack.namespace), (BINDINGS, stack.namespace), (DATASOURCES, "")):
            items, _ = await stack.kube.list(res, namespace=namespace)
            for obj in items:
                if versions.mine(obj):
                    meta = obj["metadata"]
                    current[f"{obj['kind']}/{meta.get('namespace', '')}/{meta['name']}"] = meta["resourceVersion"]
        if any(held_by(d.world, key) != rv for d in daemons for key, rv in current.items()):
            return None  # a daemon has not folded the last write yet: it may still answer it
        if any(versions.latest.get(key) != rv for key, rv in current.items()):
            return None  # (nor has the counting watch)
        return versions.count()

    result: Counter[str] = await stack.eventually(probe, within=within, what="two daemons quiescent")
    return result


async def push(daemon: Daemon, table: str) -> int:
    assert daemon.endpoints is not None
    url = f"http://127.0.0.1:{daemon.endpoints.port}/v1/notifications/table-moved"
    async with aiohttp.ClientSession() as http, http.post(url, json={"system": "amoro", "dataSourceName": table},
                                                          headers={"Authorization": "Bearer push-secret"}) as resp:
        return resp.status


async def test_two_daemons_without_leader_election_converge_with_bounded_writes(karmada_kube: KubeEnv) -> None:
    async with tether_stack(karmada_kube, daemon_options={"identity": "first"}) as stack:
        assert stack.cfg is not None and stack.daemon is not None and not stack.cfg.leader_elect
        second_log = await SqliteLog.open(str(Path(stack.tmp) / "second.db"))
        cfg = dataclasses.replace(stack.cfg, identity="second", log_url=f"sqlite:///{stack.tmp}/second.db")
        second, stop, task = await spawn_daemon(cfg, stack.env, second_log)
        versions = Versions(stack.kube, stack.namespace, stack.suffix)
        versions.start()
        daemons = [stack.daemon, second]
        try:
            east, west = stack.clusters["east1"], stack.clusters["west1"]
            tables = {"orders": stack.add_table("orders", "east"), "clicks": stack.add_table("clicks", "east"),
                      "users": stack.add_table("users", "west")}
            claims = {"orders": "orders", "clicks-a": "clicks", "clicks-b": "clicks", "users": "users"}
            for name, table in claims.items():
                await stack.apply(manifests.claim(name, namespace=stack.namespace, table=tables[table],
                                                  workload=f"{name}-app"))
                binding = stack.binding(f"{name}-app")
                if name == "users":  # alternative affinity terms: the per-term annotation of tether's additions
                    affinity = binding["spec"]["placement"].pop("clusterAffinity")
                    binding["spec"]["placement"]["clusterAffinities"] = [
                        dict(affinity, affinityName="primary"), dict(affinity, affinityName="fallback")]
                await stack.apply(binding)
            for name in claims:
                await stack.wait_claim(name, phase="Bound", reason="DataSourceBound", within=30)
            await stack.wait_excluded("orders-app-deployment", [west], within=30)
            await stack.wait_scheduled("clicks-a-app-deployment", [east, stack.clusters["east2"]], within=30)

            # the table moves and only the first daemon is told: the second still holds the old answer
            stack.catalog.move_table(tables["clicks"], f"s3://warehouse-west/{stack.suffix}/clicks")
            assert await push(stack.daemon, tables["clicks"]) == 202
            for name in ("clicks-a", "clicks-b"):
                await stack.wait_excluded(f"{name}-app-deployment", [east, stack.clusters["east2"]], within=30)
                await stack.wait_scheduled(f"{name}-app-deployment", [west], within=30)

            settled = await quiescent(stack, daemons, versions)
            objects = len(versions.seen)
            assert objects == len(claims) * 2 + len(tables)  # claims, bindings, DataSources
            assert sum(settled.values()) <= BOUND_PER_OBJECT * objects, (settled, versions.seen)
            for key, seen in versions.seen.items():
                assert len(seen) <= BOUND_ONE_OBJECT, (key, len(seen))  # no single object in a loop either
            again = await quiescent(stack, daemons, versions)
            assert again == settled  # the count stopped growing

            # and they said so: each change the other made to what tether owns is counted, and reported
            assert sum(d.competing.foreign for d in daemons if d.competing is not None) > 0
            counted = [d.metrics.registry.get_sample_value("tether_competing_writes_total", {"kind": kind}) or 0
                       for d in daemons for kind in ("DataSourceClaim", "ResourceBinding", "DataSource")]
            assert sum(counted) == sum(d.competing.foreign for d in daemons if d.competing is not None)

            async def reported() -> bool:
                events, _ = await stack.kube.list(EVENTS, namespace=stack.namespace)
                return any(e.get("reason") == EVENT_REASON for e in events)

            await stack.eventually(reported, what="a CompetingWriter Event in the namespace")
        finally:
            await versions.stop()
            stop.set()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(task, 10)
            await second_log.close()
    # the DataSources' Events (a cluster-scoped object's are in default) went with them: a shared cluster keeps
    # nothing of the run's
    left, _ = await stack.kube.list(EVENTS, namespace="default")
    assert [e["metadata"]["name"] for e in left
            if f".{stack.suffix}." in str((e.get("involvedObject") or {}).get("name"))] == []


async def test_one_daemon_alone_reports_no_competing_writer(karmada_kube: KubeEnv) -> None:
    """The detector's other side: a daemon alone, through bindings, claims, a move and the scheduler's writes,
    takes none of them for a competitor's."""
    async with tether_stack(karmada_kube) as stack:
        assert stack.daemon is not None and stack.daemon.competing is not None
        table = stack.add_table("alone", "east")
        await stack.apply(manifests.claim("alone", namespace=stack.namespace, table=table, workload="alone-app"))
        rb = (await stack.apply(stack.binding("alone-app")))["metadata"]["name"]
        await stack.wait_claim("alone", phase="Bound", reason="DataSourceBound", within=30)
        await stack.wait_scheduled(rb, [stack.clusters["east1"], stack.clusters["east2"]], within=30)
        stack.catalog.move_table(table, f"s3://warehouse-west/{stack.suffix}/alone")
        assert await push(stack.daemon, table) == 202
        await stack.wait_scheduled(rb, [stack.clusters["west1"]], within=30)
        await stack.wait_idle()
        assert stack.daemon.competing.foreign == 0
