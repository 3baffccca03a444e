"""Crash and restart, sized for CI: the daemon (``tether run``, its own process) is killed with SIGKILL at random
points of a workload with queue admission, the binding webhook and pod placement on, and started again at once.

The world and the checks are :mod:`tether.adapters.testing.chaos_run` (also ``ops/chaos/crash_restart.py``, the
full-size run: 5k claims, 20 kills, and the Kafka log with two replicas). Here: 100 claims over 6 tables, 4 kills,
3 pod groups. The run must converge with no duplicate DataSource, no binding version scheduled without its data
constraint while its claim was Bound (every version, from a watcher of its own), no pod group split across racks,
at most tables x (1 + restarts) catalog lookups, and a log that ``tether replay --diff`` re-derives exactly.
The seed is printed (``-s``) so a failure can be repeated: ``python ops/chaos/crash_restart.py --seed N``.
"""

from __future__ import annotations

import json
import os
import random

import pytest

from tether.adapters.testing.chaos_run import crash_restart, passed

pytestmark = pytest.mark.slow


async def test_sigkill_at_random_points_converges_with_every_guarantee() -> None:
    """A world of its own processes (emulator API servers for the control plane and the member, tether run, the
    catalog): it runs alike whether or not TETHER_TEST_KUBECONFIG names a real cluster, which it does not use."""
    seed = int(os.environ.get("TETHER_CHAOS_SEED") or random.randrange(1 << 30))
    print(f"crash-restart seed {seed}")
    report = await crash_restart(claims=100, kills=4, tables=6, groups=3, seed=seed, settle_within=180)
    print(json.dumps(report))
    assert report["kills"] == 4 and report["restarts"] == 4
    assert report["converged"], report["state"]
    assert report["duplicate_data_sources"] == {}
    assert report["history_gaps"] == [] and report["binding_versions"] >= 100
    assert report["unconstrained"] == []
    assert report["split_groups"] == {} and report["groups"] == 3
    assert report["lookups"] <= report["lookup_bound"]
    assert report["replay_differences"] == []
    assert passed(report)
