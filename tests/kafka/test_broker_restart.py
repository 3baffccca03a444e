"""The Kafka broker killed with SIGKILL and restarted mid-run, under a real tether pipeline: nothing is lost, and
nothing is decided twice with different results.

The broker is tansu on S3 storage (adapters/testing/kafka_durable.py): killed, it loses what it had not
acknowledged and keeps what it had; started again on the same port and storage, it serves the same topics, records
and committed offsets. The pipeline is the crash-restart world of adapters/testing/chaos.py — ``tether run`` (two
replicas, leader election) on the Kafka log, admission, the binding webhook, placement, a workload of claims,
bindings and a pod group — and at a point drawn from the seed the broker (not the daemon) is killed and restarted.

What must hold (adapters/testing/chaos_run.py and kafka_audit.py):

* nothing lost: every record the broker had acknowledged just before the kill is, after the run, at the same
  offset with the same bytes; every partition's offsets run 0, 1, 2, … without a gap, and records were appended
  after the restart (the offsets went on);
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
from tether.adapters.testing.kafka_durable import DurableBroker

pytestmark = pytest.mark.slow


async def test_broker_killed_and_restarted_mid_run(durable_kafka_broker: DurableBroker) -> None:
    seed = int(os.environ.get("TETHER_CHAOS_SEED") or random.randrange(1 << 30))
    print(f"kafka broker restart seed {seed}")
    report = await crash_restart(claims=40, kills=0, tables=4, groups=1, seed=seed, replicas=2,
                                 kafka_bootstrap=durable_kafka_broker.bootstrap, broker=durable_kafka_broker,
                                 broker_restarts=1, settle_within=180)
    print(json.dumps(report))
    assert report["broker_restarts"] == 1 and durable_kafka_broker.restarts == 1
    assert report["lost_records"] == [] and report["records_checked"] > 0
    assert report["offset_gaps"] == [] and report["appended_after_restarts"] > 0
    assert report["command_conflicts"] == []
    assert report["replay_differences"] == []
    assert report["converged"], report["state"]
    assert report["duplicate_data_sources"] == {} and report["unconstrained"] == []
    assert report["history_gaps"] == [] and report["split_groups"] == {}
    assert passed(report)
