"""The daemon as a process: HTTP endpoints, push authentication, leader election on one Lease, and a restart on
the same SQLite log that resumes without re-applying effects.

The leader-election tests keep client-go's lease timings (15 s / 10 s / 2 s) and move the electors' time with a
:class:`ManualClock`: "the standby keeps waiting" is asserted after it has tried again, and a takeover happens
when the test has moved time past the Lease's expiry — never after a sleep that was hopefully long enough."""

from __future__ import annotations

import asyncio
import gc
import tempfile
from pathlib import Path

import aiohttp

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import CLAIMS, DATASOURCES, LEASES
from tether.adapters.kubernetes.leader import LeaderElector, _micro_time, _parse
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.clock import ManualClock, next_attempt
from tether.adapters.testing.tether_stack import Stack, spawn_daemon, tether_stack
from tether.core.commands import CreateDataSource, LookupDataLocation

from .test_migration import push

LEASE = {"leader_elect": True, "lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}


async def leading(stack: Stack) -> LeaderElector:
    """The stack's daemon once it leads (a replica still campaigning is ready too: ``tether_stack`` returns then)."""
    daemon = stack.daemon
    assert daemon is not None
    await stack.eventually(lambda: asyncio.sleep(0, daemon.leader is not None and daemon.leader.is_leader.is_set()),
                           what="the first replica leading")
    assert daemon.leader is not None
    return daemon.leader


async def turn(clock: ManualClock, *electors: LeaderElector | None, parked: int | None = None) -> None:
    """One retry period of the manual clock: each elector has made its next attempt (module doc)."""
    assert all(e is not None for e in electors)
    await next_attempt(clock, electors, seconds=LEASE["retry_period"], parked=parked)  # type: ignore[arg-type]


async def http_get(stack: Stack, path: str) -> tuple[int, str]:
    assert stack.daemon.endpoints is not None
    async with aiohttp.ClientSession() as http, http.get(
            f"http://127.0.0.1:{stack.daemon.endpoints.port}{path}") as resp:
        return resp.status, await resp.text()


async def test_health_ready_metrics_and_push_auth(kube: KubeEnv) -> None:
    async with tether_stack(kube) as stack:
        assert stack.cfg is not None and not stack.cfg.freeze_heap  # a daemon in the test process leaves its GC be
        assert await http_get(stack, "/healthz") == (200, "ok\n")
        assert await http_get(stack, "/readyz") == (200, "ready\n")
        table = stack.add_table("metered", "east")
        await stack.apply(manifests.claim("m", namespace=stack.namespace, table=table))
        await stack.wait_claim("m", phase="Bound")
        status, text = await http_get(stack, "/metrics")
        assert status == 200
        for name in ("tether_commands_total", "tether_events_total", "tether_command_outcomes_total",
                     "tether_catalog_lookups_total"):
            assert name in text
        assert 'tether_commands_total{command="create_data_source"} 1.0' in text
        assert 'tether_catalog_lookups_total{outcome="resolved",system="amoro"} 1.0' in text

        async def reported() -> str | None:  # (the state gauges are set once a second)
            _, text = await http_get(stack, "/metrics")
            return text if 'tether_claims{phase="Bound"} 1.0' in text else None

        text = await stack.eventually(reported, what="the claims gauge")
        assert "tether_lists_pending 0.0" in text
        assert 'tether_watch_errors_total{resource="datasourceclaims@' in text
        assert 'tether_consumer_lag_records{consumer="decider"}' in text
        body = {"system": "amoro", "dataSourceName": table}
        assert (await push(stack, body, token=None))[0] == 401
        assert (await push(stack, body, token="wrong"))[0] == 401
        assert (await push(stack, {"system": "amoro"}))[0] == 400
        assert (await push(stack, ["not", "an", "object"]))[0] == 400
        assert (await push(stack, {"system": "amoro", "dataSourceName": table, "attributes": "x"}))[0] == 400
        assert stack.catalog.requests_for(table) == 1  # refused notifications never reach the catalog
        status, answer = await push(stack, body)
        assert status == 202 and answer["outcome"] == "DataLocationResolved"
        unknown = {"system": "amoro", "dataSourceName": stack.table("missing")}
        status, answer = await push(stack, unknown)
        assert status == 202 and answer["outcome"] == "DataSourceNotInCatalog"


async def test_the_daemon_freezes_its_startup_heap_once_recovered(kube: KubeEnv) -> None:
    """``freeze_heap`` (on for ``tether run``; tether_stack turns it off in the test process unless asked): once the
    world is recovered the daemon moves everything alive out of the cyclic GC's reach, and says so in /metrics."""
    gc.unfreeze()
    try:
        async with tether_stack(kube, daemon_options={"freeze_heap": True}) as stack:
            async def frozen() -> int:
                return gc.get_freeze_count()
            count = await stack.eventually(frozen, what="the heap frozen")
            assert count > 10_000  # the modules alone (kubernetes-asyncio's models) are tens of thousands
            status, text = await http_get(stack, "/metrics")
            gauge = next(line for line in text.splitlines() if line.startswith("tether_gc_frozen_objects "))
            # the count at the freeze; frozen objects freed since (by reference counting) leave the generation
            assert status == 200 and float(gauge.split()[1]) >= gc.get_freeze_count() > 10_000
    finally:
        gc.unfreeze()  # give the test process its collector back


async def test_leader_election_one_acts_then_the_other_takes_over(kube: KubeEnv) -> None:
    clock = ManualClock()
    async with tether_stack(kube, daemon_options=LEASE | {"identity": "first"}, lease_clock=clock) as stack:
        await leading(stack)
        with tempfile.TemporaryDirectory(prefix="tether-standby-") as tmp:
            standby_log = await SqliteLog.open(str(Path(tmp) / "tether.db"))
            cfg = stack.cfg.__class__(**{**stack.cfg.__dict__, "identity": "second",
                                         "log_url": f"sqlite:///{tmp}/tether.db"})
            standby, stop, task = await spawn_daemon(cfg, stack.env, standby_log, lease_clock=clock)
            try:
                await clock.settle(2)  # both electors parked: the standby has tried once
                for _ in range(3):  # three more retry periods: the leader renews, the standby keeps waiting
                    await turn(clock, stack.daemon.leader, standby.leader)
                    assert standby.leader is not None and not standby.leader.is_leader.is_set()
                assert standby.ready() == (True, "standby (not the leader)")
                table = stack.add_table("led", "east")
                await stack.apply(manifests.claim("led", namespace=stack.namespace, table=table))
                await stack.wait_claim("led", phase="Bound")
                assert (await standby_log.end("commands")).get(0, 0) == 0  # the standby decided nothing
                lease = await stack.kube.get(LEASES, stack.cfg.lease_name, namespace=stack.namespace)
                assert lease["spec"]["holderIdentity"] == "first"

                assert await stack.stop_daemon() == 0  # the leader goes away (rollout) and releases the Lease
                await turn(clock, standby.leader)  # the standby's next attempt takes it, long before it would expire
                await asyncio.wait_for(standby.started.wait(), 10)
                lease = await stack.kube.get(LEASES, stack.cfg.lease_name, namespace=stack.namespace)
                assert lease["spec"]["holderIdentity"] == "second"
                assert lease["spec"]["leaseTransitions"] >= 1
                await stack.apply(manifests.claim("after", namespace=stack.namespace, table=table))
                await stack.wait_claim("after", phase="Bound")
                assert stack.catalog.requests_for(table) == 1  # the new leader found the DataSource: a cache hit
                ds_name = (await stack.get("DataSourceClaim", "after"))["status"]["boundDataSource"]

                async def refs() -> list[str] | None:  # the claim and the DataSource are written separately
                    ds = await stack.get("DataSource", ds_name)
                    names = sorted(r["name"] for r in ((ds or {}).get("status") or {}).get("claimRefs") or [])
                    return names if names == ["after", "led"] else None

                await stack.eventually(refs, what="claimRefs of the shared DataSource")
            finally:
                stop.set()
                await asyncio.wait_for(task, 10)
                await standby_log.close()


async def test_a_daemon_that_loses_its_lease_stops_and_exits_1(kube: KubeEnv) -> None:
    """Another holder takes the Lease (a split brain in the making): the daemon fails to renew until its renew
    deadline, then stops its loops, exits 1 for its supervisor to restart it, and leaves the Lease alone."""
    clock = ManualClock()
    async with tether_stack(kube, daemon_options=LEASE | {"identity": "ousted"}, lease_clock=clock) as stack:
        daemon, running = stack.daemon, stack._task
        await leading(stack)
        assert daemon is not None and daemon.leader is not None and running is not None
        table = stack.add_table("before", "east")
        await stack.apply(manifests.claim("before", namespace=stack.namespace, table=table))
        await stack.wait_claim("before", phase="Bound")
        lease = await stack.kube.get(LEASES, stack.cfg.lease_name, namespace=stack.namespace)
        now = _micro_time(clock.time())
        lease["spec"].update(holderIdentity="usurper", renewTime=now, acquireTime=now)
        await stack.kube.replace(LEASES, stack.cfg.lease_name, lease, namespace=stack.namespace)
        for _ in range(5):  # 10 s of renewals refused: within the deadline, still leading
            await turn(clock, daemon.leader)
            assert daemon.leader.is_leader.is_set() and not running.done()
        await turn(clock, daemon.leader, parked=0)  # 12 s: past the renew deadline
        assert await asyncio.wait_for(asyncio.shield(running), 10) == 1
        assert daemon.leader.lost.is_set() and not daemon.leader.is_leader.is_set()
        assert daemon.ready() == (True, "standby (not the leader)")
        lease = await stack.kube.get(LEASES, stack.cfg.lease_name, namespace=stack.namespace)
        assert lease["spec"]["holderIdentity"] == "usurper"  # not released over the new holder's head


async def test_restart_resumes_without_reapplying(kube: KubeEnv) -> None:
    async with tether_stack(kube, daemon_options={"snapshot_every": 20}) as stack:
        tables = [stack.add_table(f"r{i}", "east") for i in range(3)]
        for i, table in enumerate(tables):
            await stack.apply(manifests.resource_binding(f"r{i}-app", namespace=stack.namespace))
            await stack.apply(manifests.claim(f"r{i}", namespace=stack.namespace, table=table, workload=f"r{i}-app"))
        for i in range(3):
            await stack.wait_claim(f"r{i}", phase="Bound")
            await stack.wait_excluded(f"r{i}-app-deployment", [stack.clusters["west1"]])
        await stack.daemon.loops.wait_idle()  # type: ignore[union-attr]
        # a crash: no snapshot on the way out, so recovery folds the tail after the last periodic snapshot
        stack.daemon.loops.save_snapshot = _no_snapshot  # type: ignore[union-attr,method-assign]
        # make sure a tail follows the last periodic snapshot, wherever that one happened to land
        await stack.kube.patch(CLAIMS, "r0", {"metadata": {"labels": {"touched": "yes"}}}, namespace=stack.namespace)
        await stack.daemon.loops.wait_idle()  # type: ignore[union-attr]
        await stack.stop_daemon()
        position = (await stack.log.position("events", consumer="decider")).get(0, 0)
        commands = (await stack.log.end("commands")).get(0, 0)
        snapshot = await stack.log.load_snapshot("world")
        assert snapshot is not None and snapshot.position.get(0, 0) < position  # there is a tail to fold
        versions = {i: (await stack.get("ResourceBinding", f"r{i}-app-deployment"))["metadata"]["resourceVersion"]
                    for i in range(3)}

        # while tether is down: one more claim on a cached table, and one claim deleted
        await stack.apply(manifests.claim("late", namespace=stack.namespace, table=tables[0], workload="r0-app"))
        await stack.kube.delete(CLAIMS, "r2", namespace=stack.namespace)
        await stack.start_daemon()
        await stack.wait_claim("late", phase="Bound")

        async def r2_gone() -> bool:
            return await stack.get("DataSourceClaim", "r2") is None

        await stack.eventually(r2_gone, what="r2 finalizer released after the restart")
        await stack.wait_excluded("r2-app-deployment", [])
        await stack.daemon.loops.wait_idle()  # type: ignore[union-attr]

        assert (await stack.log.position("events", consumer="decider")).get(0, 0) > position  # continued
        new_commands = []
        async for records in stack.log.read("commands", after={0: commands}):
            new_commands.extend(r.command for r in records)
        assert not [c for c in new_commands if isinstance(c, CreateDataSource | LookupDataLocation)]
        assert all(stack.catalog.requests_for(t) == 1 for t in tables)
        for i in (0, 1):  # untouched by the restart: no write at all
            rb = await stack.get("ResourceBinding", f"r{i}-app-deployment")
            assert rb["metadata"]["resourceVersion"] == versions[i]
        sources, _ = await stack.kube.list(DATASOURCES)
        ours = sorted((s["spec"]["name"], [r["name"] for r in s["status"].get("claimRefs") or []])
                      for s in sources if s["spec"]["name"] in tables)
        assert ours == [(tables[0], ["late", "r0"]), (tables[1], ["r1"]), (tables[2], [])]


async def _no_snapshot(position: dict[int, int]) -> None:
    return None


async def test_leader_crash_standby_takes_over_after_expiry(kube: KubeEnv) -> None:
    clock = ManualClock()
    async with tether_stack(kube, daemon_options=LEASE | {"identity": "crashing"}, lease_clock=clock) as stack:
        await leading(stack)
        with tempfile.TemporaryDirectory(prefix="tether-standby-") as tmp:
            standby_log = await SqliteLog.open(str(Path(tmp) / "tether.db"))
            cfg = stack.cfg.__class__(**{**stack.cfg.__dict__, "identity": "survivor",
                                         "log_url": f"sqlite:///{tmp}/tether.db"})
            standby, stop, task = await spawn_daemon(cfg, stack.env, standby_log, lease_clock=clock)
            try:
                await clock.settle(2)
                stack.daemon.leader.release = _no_release  # type: ignore[method-assign]  # a crash releases nothing
                await stack.stop_daemon()
                lease = await stack.kube.get(LEASES, stack.cfg.lease_name, namespace=stack.namespace)
                assert lease["spec"]["holderIdentity"] == "crashing"
                expires = _parse(lease["spec"]["renewTime"]) + lease["spec"]["leaseDurationSeconds"]
                while not standby.leader.is_leader.is_set():
                    await turn(clock, standby.leader)
                    assert standby.leader.is_leader.is_set() == (clock.time() > expires)
                await asyncio.wait_for(standby.started.wait(), 10)
                table = stack.add_table("survived", "west")
                await stack.apply(manifests.claim("s", namespace=stack.namespace, table=table))
                await stack.wait_claim("s", phase="Bound")
            finally:
                stop.set()
                await asyncio.wait_for(task, 10)
                await standby_log.close()


async def _no_release() -> bool:
    return False


async def test_daemon_as_its_own_process_binds_claims_and_places_bindings(kube: KubeEnv) -> None:
    """``tether_stack(daemon_process=True)``: the daemon runs as ``tether run`` would, in a child process with its
    own kubeconfig client and log connection (the e2e bench's default layout); it stops on SIGTERM with code 0."""
    async with tether_stack(kube, daemon_process=True) as stack:
        assert stack.daemon is None and stack.process is not None
        table = stack.add_table("apart", "east")
        await stack.apply(manifests.resource_binding("w", namespace=stack.namespace))
        await stack.apply(manifests.claim("c", namespace=stack.namespace, table=table, workload="w"))
        await stack.wait_claim("c", phase="Bound")
        await stack.wait_excluded("w-deployment", [stack.clusters["west1"]])
        await stack.wait_idle()
        assert stack.catalog.requests_for(table) == 1
        assert await stack.stop_daemon() == 0
