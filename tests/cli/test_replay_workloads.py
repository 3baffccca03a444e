"""`tether replay` of a synthetic log with queue admission and pod placement in it (``scenario(queue_managed=...,
pod_groups=...)``, what the replay benchmark's log holds): the replay folds to the live world, and ``--diff``
re-derives every command and every webhook decision recorded."""

from __future__ import annotations

import asyncio
from collections import Counter
from pathlib import Path

import msgspec
import pytest

from tether.adapters.cli.replay.diff import diff
from tether.adapters.cli.replay.rebuild import replay
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.synthetic_log import Simulation, scenario
from tether.core.commands import StartTimer
from tether.core.events import BindingAdmissionDecided, ObjectObserved, PodGateDecided, SettingsApplied, TimerFired


@pytest.fixture(scope="module")
def workloads(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Simulation]:
    path = tmp_path_factory.mktemp("replay-workloads") / "log.db"
    sim = scenario(Simulation(seed=5), namespaces=2, jobs_per_namespace=12, tables=4, migrations=2, deletions=0.1,
                   heartbeats=6, queue_managed=0.5, pod_groups=0.7, group_sizes=(4, 8))

    async def write() -> None:
        log = await SqliteLog.open(path)
        await sim.write(log)
        await log.close()

    asyncio.run(write())
    return path, sim


def test_the_log_exercises_admission_and_pod_placement(workloads: tuple[Path, Simulation]) -> None:
    _, sim = workloads
    commands = Counter(type(c.command).__name__ for c in sim.commands)
    assert commands["ResumeBinding"] > 0 and commands["UpdateQueueStatus"] > 0
    assert commands["ReleasePod"] > 0 and commands["EmitMemberEvent"] > 0
    events = [r.event for r in sim.events]
    assert isinstance(events[0], SettingsApplied)
    decided = [e for e in events if isinstance(e, BindingAdmissionDecided)]
    assert any(e.suspended for e in decided) and any(not e.suspended for e in decided)
    assert any(isinstance(e, TimerFired) and e.purpose == "admission-cycle" for e in events)
    assert any(isinstance(e, PodGateDecided) and e.gated for e in events)
    # every released pod was bound by the member's scheduler, in the domain its terms name
    bound = [e.obj for e in events if isinstance(e, ObjectObserved) and e.cluster and e.obj.kind == "Pod"
             and e.obj.spec_dict().get("nodeName")]
    assert len(bound) == commands["ReleasePod"]
    for pod in bound:
        spec = pod.spec_dict()
        assert "schedulingGates" not in spec and spec["affinity"]["nodeAffinity"]
    admission = sim.world.admission
    assert sorted(admission.queues) == ["adhoc", "default", "production", "research"]
    assert admission.priority_classes == {"batch-high": 1000, "batch-normal": 100}
    assert admission.managed.kinds == ("batch.volcano.sh/Job",) and admission.managed.namespaces == ("team-000",)
    # the live world: every job finished, every queue-managed binding was admitted
    assert not any(k.startswith("ResourceBinding/team-") and b.suspended
                   for k, b in sim.world.admission.bindings.items())
    assert all(not state.pods for state in sim.world.members.clusters.values())


async def test_replay_folds_to_the_live_world_and_diff_finds_nothing(workloads: tuple[Path, Simulation]) -> None:
    path, sim = workloads
    log = await SqliteLog.open(path)
    try:
        result = await replay(log)
        assert result.events == len(sim.events)
        assert msgspec.json.encode(result.world, order="deterministic") == \
            msgspec.json.encode(sim.world, order="deterministic")
        replayed, differences = await diff(log)
        assert differences == [] and replayed.events == len(sim.events)
    finally:
        await log.close()


def test_a_timer_fires_when_the_clock_first_reaches_it(workloads: tuple[Path, Simulation]) -> None:
    """As the daemon's timer service appends it: after every event of an earlier time, before any of a later one."""
    _, sim = workloads
    armed = {c.command.timer_id: c.command.fire_at_ms for c in sim.commands if isinstance(c.command, StartTimer)}
    fired = [(i, r) for i, r in enumerate(sim.events) if isinstance(r.event, TimerFired)]
    assert fired
    for i, record in fired:
        assert isinstance(record.event, TimerFired)
        due = armed[record.event.timer_id]
        assert record.at_ms >= due
        before = next(r for r in reversed(sim.events[:i]) if not isinstance(r.event, TimerFired))
        assert before.at_ms < due, (record, before)
