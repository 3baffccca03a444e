"""The Kafka broker killed with SIGKILL and restarted mid-run, under a real tether pipeline: nothing is lost, and
nothing is decided twice with different results.

The broker is tansu on S3 storage (adapters/testing/kafka_durable.py): killed, it loses what it had not
acknowledged and keeps what it had; started again on the same port and storage, it serves the same topics, records
and committed offsets. The pipeline is the crash-restart world of adapters/testing/chaos.py — ``tether run`` (two
replicas, leader election) on the Kafka log, admission, the binding webhook, placement, a workload of claims,
bindings and a pod group — and at a point drawn from the seed the broker (not the daemon) is killed and restarted.

What must hold (adapters/testing/chaos_run.py and kafka_audit.py):

* nothing lost: every record the broker had acknowledged just before the kill is, after the run, at the same
  offset with the same bytes; every partition's offsets strictly increase, and records were appended after the
  restart (the offsets went on). An append in flight at the kill may leave a hole of offsets (tansu reserves them
  before it stores the batch; kafka_audit.py): reported, and allowed, since nothing there was acknowledged;
* nothing decided twice with different results: a command stored more than once for one causing event (the
  daemon re-processes what it had not committed) has the same bytes every time, and ``tether replay --diff``
  re-derives every recorded command and webhook decision from the log as it is;
* the world converges: every claim Bound, every binding placed on clusters holding its data, every pod bound.
"""

from __future__ import annotations

import json
import os
import random

import pytest

from tether.adapters.testing.chaos_run import crash_restart, passed
from tether.adapters.testing.kafka_audit import LogContents, audit
from tether.adapters.testing.kafka_durable import DurableBroker
from tether.core.commands import StartTimer, command_id, command_target
from tether.core.envelope import CommandRecord, encode


@pytest.mark.slow
async def test_broker_killed_and_restarted_mid_run(durable_kafka_broker: DurableBroker) -> None:
    seed = int(os.environ.get("TETHER_CHAOS_SEED") or random.randrange(1 << 30))
    print(f"kafka broker restart seed {seed}")
    report = await crash_restart(claims=40, kills=0, tables=4, groups=1, seed=seed, replicas=2,
                                 kafka_bootstrap=durable_kafka_broker.bootstrap, broker=durable_kafka_broker,
                                 broker_restarts=1, settle_within=180)
    print(json.dumps(report))
    assert report["broker_restarts"] == 1 and durable_kafka_broker.restarts == 1
    assert report["lost_records"] == [] and report["records_checked"] > 0
    assert report["offset_disorder"] == [] and report["appended_after_restarts"] > 0
    assert report["command_conflicts"] == []
    assert report["replay_differences"] == []
    assert report["converged"], report["state"]
    assert report["duplicate_data_sources"] == {} and report["unconstrained"] == []
    assert report["history_gaps"] == [] and report["split_groups"] == {}
    assert passed(report)


def _command_bytes(i: int, *, reason: str = "") -> bytes:
    cmd = StartTimer(timer_id=f"t{i}", fire_at_ms=i, purpose="test", subject=f"Obj/ns/o{i}")
    return encode(CommandRecord(id=command_id(cmd), at_ms=1_700_000_000_000 + i, key=command_target(cmd),
                                command=cmd, causation=f"0:{i}", reason=reason))


def test_the_audit_finds_lost_changed_disordered_and_conflicting_records() -> None:
    """The checks of the broker-restart test can fail: the audit on hand-made log contents."""
    a, b, c = _command_bytes(1), _command_bytes(2), _command_bytes(3)
    cut: LogContents = {("events", 0): [(0, b"k", b"e0"), (1, b"k", b"e1")], ("commands", 0): [(0, b"c", a)]}
    intact: LogContents = {("events", 0): [(0, b"k", b"e0"), (1, b"k", b"e1"), (2, b"k", b"e2")],
                           ("commands", 0): [(0, b"c", a), (1, b"c", b), (2, b"c", a)]}
    ok = audit([cut], intact)
    assert (ok.lost, ok.disorder, ok.holes, ok.conflicts) == ([], [], [], [])
    assert (ok.checked, ok.redecided, ok.appended_after) == (3, 1, 3)

    lost = audit([cut], {("events", 0): [(0, b"k", b"e0")], ("commands", 0): [(0, b"c", b)]})
    assert lost.lost == ["events[0]@1: gone", "commands[0]@0: changed"]

    holed = audit([], {("events", 0): [(0, b"k", b"e0"), (3, b"k", b"e3")], ("commands", 0): [(1, b"c", c)]})
    assert holed.holes == ["commands[0]: 0..0", "events[0]: 1..2"] and holed.disorder == []
    disordered = audit([], {("events", 0): [(0, b"k", b"e0"), (2, b"k", b"e2"), (2, b"k", b"e2"), (1, b"k", b"")]})
    assert disordered.disorder == ["events[0]: offset 2 after 2", "events[0]: offset 1 after 2"]

    redecided_otherwise = audit([], {("commands", 0): [(0, b"c", a), (1, b"c", _command_bytes(1, reason="x"))]})
    assert len(redecided_otherwise.conflicts) == 1 and "2 different contents" in redecided_otherwise.conflicts[0]
