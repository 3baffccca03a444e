"""The Kafka log under chaos, end to end: two ``tether run`` replicas on one Kafka log with leader election, the
leader killed with SIGKILL mid-run, and the broker cut off from every client mid-run.

tansu (the test broker) keeps its data in memory: a restarted tansu has lost the log, which no client can survive
and no real broker does. So the broker's restart is played as its clients see it — every connection to it cut
for a few seconds (the proxy of adapters/testing/kafka_broker.py), then let through again — with the data kept: the
producer's unacknowledged appends and the consumer's fetches fail and are retried. "Nothing is lost" is then:
every claim and binding converges (no observation or command outcome went missing), and "nothing is decided
twice with different results" is ``tether replay --diff`` of the resulting log without a difference (commands
re-derived by the replica that took over are the same commands, by content-addressed id).
The world and the checks: adapters/testing/chaos_run.py (and ``ops/chaos/crash_restart.py --kafka``, full size).
"""

from __future__ import annotations

import json
import os
import random

import pytest

from tether.adapters.testing.chaos_run import crash_restart, passed
from tether.adapters.testing.kafka_broker import ProxiedBroker

pytestmark = pytest.mark.slow


async def test_leader_killed_and_broker_cut_mid_run(kafka_broker: ProxiedBroker) -> None:
    seed = int(os.environ.get("TETHER_CHAOS_SEED") or random.randrange(1 << 30))
    print(f"kafka chaos seed {seed}")
    report = await crash_restart(claims=40, kills=1, tables=4, groups=1, seed=seed, replicas=2,
                                 kafka_bootstrap=kafka_broker.bootstrap, broker=kafka_broker, broker_cuts=1,
                                 settle_within=180)
    print(json.dumps(report))
    assert report["kills"] == 1 and report["broker_cuts"] == 1
    assert report["converged"], report["state"]
    assert report["duplicate_data_sources"] == {} and report["unconstrained"] == []
    assert report["history_gaps"] == [] and report["split_groups"] == {}
    assert report["lookups"] <= report["lookup_bound"]
    assert report["replay_differences"] == []
    assert report["crashes"] == []  # (a leader that gave its Lease up exited by design: unplanned_exits only)
    assert passed(report)
