"""One crash-restart run over :mod:`.chaos`'s world, and its report: the shared body of the CI test and the script.

The workload (seeded): ``claims`` claims over ``tables`` tables, one ResourceBinding per claim's workload (every
other one created before its claim), and ``groups`` pod groups of four gated pods in the member, spread over the
run; the member has racks enough for every group with room to spare (:func:`~.chaos.racks_for`). At ``kills``
points drawn from the claim indices, the daemon (the leader, with replicas) is killed with SIGKILL and a new
process started at once. Then the run waits until the world has converged and checks, from
recorded state (:mod:`.chaos_checks`):

* ``converged``: every claim Bound; every binding scheduled only on clusters holding its data, with tether's
  exclusions; every pod bound;
* ``duplicate_data_sources``: none (one DataSource per table);
* ``unconstrained``: no binding version was scheduled without its data constraint while its claim was Bound
  (every version, from the watcher's history; ``history_gaps`` says whether it saw them all);
* ``split_groups``: no pod group across two racks;
* ``lookups`` ≤ ``lookup_bound`` = tables x (1 + restarts): a restart may ask again for what it was asking when
  it died, nothing more;
* ``replay_differences``: ``tether replay --diff`` of the log re-derives every recorded command and webhook
  decision — nothing was decided twice with different results;
* ``crashes``: none — a daemon that exited without being killed, for another reason than giving up its Lease
  (which a starved leader does by design) or than finding no broker when it started (``tether run`` exits 2 with
  "cannot reach the log": a replica restarted during a broker cut, which its supervisor starts again;
  ``adapters/log/kafka_start.py``). The run's supervisor restarted it and the webhook proxy followed the
  new leader (:class:`~.chaos.Daemons`), so a crash does not stall the workload: it is reported here, with the
  reason its log gives (``unplanned_exits`` lists every exit the run did not cause).

With ``broker_restarts`` (a :class:`~tether.adapters.testing.kafka_durable.DurableBroker`), the broker itself is
killed with SIGKILL and started again on its storage at points drawn like the kills, and the log is audited on the
broker's bytes (:mod:`.kafka_audit`): ``lost_records`` (acknowledged before a restart, gone or changed after),
``offset_disorder`` and ``command_conflicts`` (a command decided twice with different bytes) must be empty.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from tether.adapters.cli.replay.diff import diff
from tether.adapters.kubernetes.client import BINDINGS, CLAIMS
from tether.adapters.log.url import UNREACHABLE, open_log
from tether.adapters.testing.chaos import LOST_LEADERSHIP, REGIONS, World, chaos_world, racks_for
from tether.adapters.testing.chaos_checks import History, duplicate_data_sources, unconstrained_versions
from tether.adapters.testing.kafka_audit import LogContents, audit, read_log
from tether.adapters.testing.kafka_broker import ProxiedBroker
from tether.adapters.testing.kafka_durable import DurableBroker

#: How ``tether run`` says it found no broker at start-up (``adapters.log.url.LogUnreachable``): it exits 2.
NO_LOG_AT_START = f"tether run: {UNREACHABLE} "


def _by_design(exit_: dict[str, Any]) -> bool:
    """An exit the daemon makes by design: it gave up its Lease, or it started while the broker was cut."""
    reason = str(exit_["reason"])
    return reason == LOST_LEADERSHIP or (exit_["code"] == 2 and reason.startswith(NO_LOG_AT_START))


GROUP_SIZE = 4


async def crash_restart(*, claims: int, kills: int, tables: int, groups: int, seed: int,
                        kafka_bootstrap: str | None = None, replicas: int = 1, settle_within: float = 300.0,
                        concurrency: int = 8, broker: ProxiedBroker | DurableBroker | None = None,
                        broker_cuts: int = 0, broker_restarts: int = 0, cut_seconds: float = 3.0,
                        progress: Any = None) -> dict[str, Any]:
    """Run the workload with ``kills`` SIGKILLs of the daemon; the report (module doc). ``concurrency``: workloads
    created at once (as many clients of the API server). ``progress``: a callable given a short line now and then
    (the script prints them to stderr). ``broker`` (a :class:`ProxiedBroker` whose proxy ``kafka_bootstrap`` is) and
    ``broker_cuts``: that many times, at points drawn like the kills, every connection to the broker is cut for
    ``cut_seconds`` and then let through again — the daemon's producer and consumer lose the broker and come back
    (module doc of adapters/testing/kafka_broker.py: tansu keeps its data in memory, so a restarted broker would have
    lost the log; a cut is the restart as the clients see it, with the data kept). ``broker_restarts`` (with a
    :class:`DurableBroker`): that many times, the broker is killed, left down ``cut_seconds`` and started again,
    the log read just before each kill and audited at the end (module doc)."""
    say = progress or (lambda _line: None)
    started = time.monotonic()
    async with chaos_world(tables=tables, seed=seed, kafka_bootstrap=kafka_bootstrap, replicas=replicas,
                           racks=racks_for(groups=groups, group_size=GROUP_SIZE)) as world:
        history = History(world.kube, world.namespace)
        await history.start()
        rng = world.rng
        kill_at = set(rng.sample(range(1, claims), min(kills, claims - 1)))
        cut_at = sorted(rng.sample(range(1, claims), min(broker_cuts, claims - 1))) if broker is not None else []
        restart_at = sorted(rng.sample(range(1, claims), min(broker_restarts, claims - 1))) \
            if isinstance(broker, DurableBroker) else []
        cuts_before_restarts: list[LogContents] = []
        table_of = {f"w{i}": world.tables[rng.randrange(len(world.tables))] for i in range(claims)}
        group_every = max(1, claims // groups) if groups else 0  # (at most `groups` of them)
        killed: list[str] = []
        created = 0
        progressed = asyncio.Condition()
        slots = asyncio.Semaphore(concurrency)

        async def one(i: int) -> None:  # a workload's binding and claim, in either order
            nonlocal created
            workload = f"w{i}"
            async with slots:
                if i % 2:
                    await world.create_binding(workload)
                    await world.create_claim(f"c{i}", table_of[workload], workload)
                else:
                    await world.create_claim(f"c{i}", table_of[workload], workload)
                    await world.create_binding(workload)
                if group_every and i % group_every == 0 and i // group_every < groups:
                    await world.create_group(f"g{i // group_every}", GROUP_SIZE)
            async with progressed:
                created += 1
                progressed.notify_all()

        cuts = 0

        async def killer() -> None:  # SIGKILL the daemon (or cut the broker) as the workload passes each point
            nonlocal cuts
            points = [(p, "kill") for p in kill_at] + [(p, "cut") for p in cut_at] \
                + [(p, "restart") for p in restart_at]
            for point, what in sorted(points):
                async with progressed:
                    await progressed.wait_for(lambda p=point: created >= p)
                if what == "restart":
                    assert isinstance(broker, DurableBroker)
                    cuts_before_restarts.append(await read_log(world.log_url))
                    await asyncio.to_thread(broker.restart, down_seconds=cut_seconds)
                    say(f"{created}/{claims} created: broker killed and restarted ({broker.restarts}/"
                        f"{len(restart_at)}) after {sum(map(len, cuts_before_restarts[-1].values()))} records")
                    continue
                if what == "cut":
                    assert isinstance(broker, ProxiedBroker)
                    await asyncio.to_thread(broker.proxy.cut)
                    await asyncio.sleep(cut_seconds)
                    await asyncio.to_thread(broker.proxy.restore)
                    cuts += 1
                    say(f"{created}/{claims} created: broker cut for {cut_seconds:g} s ({cuts}/{len(cut_at)})")
                    continue
                killed.append(await world.daemons.kill_leader())
                say(f"{created}/{claims} created: killed {killed[-1]} ({len(killed)}/{len(kill_at)})")

        killing = asyncio.create_task(killer())
        await asyncio.gather(*(one(i) for i in range(claims)))
        await killing
        workload_seconds = time.monotonic() - started
        expected = {w: world.excluded_for(t) for w, t in table_of.items()}
        await world.daemons.leader()
        converged, state = await _converge(world, expected, within=settle_within)
        say(f"converged={converged} {state}")
        if not converged:
            await world.note_replicas()  # (while they run: the logs are kept, see the end)
        _, rv = await world.kube.list(BINDINGS, namespace=world.namespace)
        await history.caught_up(int(rv))
        await history.stop()
        unconstrained = unconstrained_versions(history.versions, expected)
        duplicates = await duplicate_data_sources(world.kube, world.tables)
        split = await world.split_groups()
        lookups = world.lookups()
        await world.daemons.stop()
        differences = await _replay_differences(world.log_url)
        log_audit = audit(cuts_before_restarts, await read_log(world.log_url)).report() if restart_at else {}
        restarts = world.daemons.starts - len(world.daemons.replicas)
        unplanned = list(world.daemons.unplanned_exits)
        report = {
            "seed": seed, "claims": claims, "tables": tables, "groups": len(world.groups), "racks": world.racks,
            "kills": len(killed), "broker_cuts": cuts, "broker_restarts": len(cuts_before_restarts),
            "restarts": restarts, "replicas": replicas, "log": "kafka" if kafka_bootstrap else "sqlite",
            "converged": converged, "state": state, "duplicate_data_sources": duplicates,
            "unconstrained": unconstrained[:20], "unconstrained_count": len(unconstrained),
            "binding_versions": sum(1 for v in history.versions if v.kind == "binding"),
            "history_gaps": history.gaps, "split_groups": split, "lookups": lookups,
            "lookup_bound": tables * (1 + restarts), "replay_differences": differences[:20],
            "replay_difference_count": len(differences), "workload_seconds": round(workload_seconds, 1),
            "seconds": round(time.monotonic() - started, 1), "unplanned_exits": unplanned,
            "crashes": [e for e in unplanned if not _by_design(e)], **log_audit,
        }
        world.failed = not passed(report)  # its daemons' logs are kept, as for a run that raised
        return report


def passed(report: dict[str, Any]) -> bool:
    """Whether a report shows every guarantee held."""
    return bool(report["converged"] and not report["duplicate_data_sources"] and not report["unconstrained_count"]
                and not report["history_gaps"] and not report["split_groups"]
                and report["lookups"] <= report["lookup_bound"] and not report["replay_difference_count"]
                and not report.get("lost_count") and not report.get("offset_disorder")
                and not report.get("command_conflicts") and not report.get("crashes"))


async def _converge(world: World, expected: dict[str, frozenset[str]], *, within: float) -> tuple[bool, dict[str, Any]]:
    """Poll the world (every 0.5 s) until it has converged (module doc); (whether it did, the last counts)."""
    clusters = set(world.clusters.values())
    deadline = time.monotonic() + within
    state: dict[str, Any] = {}
    while True:
        claims, _ = await world.kube.list(CLAIMS, namespace=world.namespace)
        bindings, _ = await world.kube.list(BINDINGS, namespace=world.namespace)
        unbound = sum(1 for c in claims if (c.get("status") or {}).get("phase") != "Bound")
        misplaced = []
        for rb in bindings:
            spec = rb.get("spec") or {}
            workload = str((spec.get("resource") or {}).get("name"))
            want = expected.get(workload, frozenset())
            placed = {c["name"] for c in spec.get("clusters") or []}
            exclude = set(((spec.get("placement") or {}).get("clusterAffinity") or {}).get("exclude") or [])
            if not placed or placed & want or not want <= exclude or not placed <= clusters:
                misplaced.append(rb["metadata"]["name"])
        pods = await world.unbound_pods()
        state = {"claims": len(claims), "unbound_claims": unbound, "bindings": len(bindings),
                 "misplaced_bindings": len(misplaced), "unbound_pods": pods, "example": misplaced[:3]}
        if len(claims) == len(expected) and len(bindings) == len(expected) and not unbound and not misplaced \
                and not pods:
            return True, state
        if time.monotonic() > deadline:
            return False, state
        await asyncio.sleep(0.5)


async def _replay_differences(log_url: str) -> list[str]:
    """``tether replay --diff`` of the run's log: each difference, described."""
    log = await open_log(log_url)
    try:
        _, differences = await diff(log)
    finally:
        await log.close()
    return [f"{d.kind}: {d.detail}"[:300] for d in differences]


__all__ = ["GROUP_SIZE", "REGIONS", "crash_restart", "passed"]
