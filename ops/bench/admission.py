"""Admission benchmark: one admission cycle over 10k suspended ResourceBindings in 100 queues.

The world (built once per run from a fixed seed, so every run measures the same input):

* 100 queues: 10 parent queues (a capability each) of 9 children (weights 1-4, priorities 0-2, some with a
  capability, a few with a guarantee);
* 10k suspended bindings spread unevenly over the children (Zipf-like), 1-4 replicas of cpu + memory requests,
  priorities from five PriorityClass values, 10% data-dependent (half of them with the placement injected);
* 2k bindings already admitted (they load the queues' allocated), placed by Karmada, admitted one after the other;
* 8 ready Karmada clusters with room for roughly half the suspended requests, so both admissions and holds of
  every kind are exercised.

Measured in the same run, alternating so all see the machine's drift alike (median of ``--repeat`` rounds each):

* ``value``    — :func:`tether.core.admission.session.admission_cycle` **with preemption on**: the default tiers
  (priority, gang, datadependency | drf, capacity, proportion), Volcano's ``preempt`` and ``reclaim`` actions and
  every queue's policy ``{withinQueue: LowerPriority, reclaim: Any}`` (``core.admission.preemption``): session open,
  validity checks, deserved shares, round robin with the fit predicates, backfill, then the evictions for what is
  still held — everything a cycle does;
* ``plain_ms`` — the same cycle with the default configuration (no policy: the preemption pass does not run);
* ``baseline`` — merely sorting the same suspended bindings by priority (then creation time, UID and key): the
  least any admission in priority order does.

The cyclic GC is paused during a pass (the inputs are long-lived, a collection in the middle of a pass would time
the GC). Usage: ``python ops/bench/admission.py [--repeat 7] [--bindings 10000] [--queues 100] [--profile]``.
The last line of output is one JSON object: ``{"bench": "admission", "value": <ms per cycle, preemption on>,
"unit": "ms", "baseline": <ms per sort>, "ratio": ..., "plain_ms": ..., "plain_ratio": ..., "target_ms": 100,
"target_met": ..., "target_ratio": 4, "ratio_met": ...}`` (``target_met``: the preemption-on cycle within
``target_ms``; ``ratio_met``: within ``target_ratio`` times the sort).
"""

from __future__ import annotations

import argparse
import cProfile
import gc
import io
import json
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable

import msgspec

from tether.core.admission.model import Binding, ClusterCapacity
from tether.core.admission.session import admission_cycle
from tether.core.world.admission_state import DEFAULT_ADMISSION_CONFIG, AdmissionConfig, Queue, QueuePolicy

TARGET_MS = 100
TARGET_RATIO = 4  # the issue's: a cycle with preemption on within four plain sorts
GIB = 2**30 * 1000  # milli-units


def world(*, bindings: int, queues: int, seed: int = 2026) -> tuple[list[Queue], list[Binding], list[ClusterCapacity]]:
    rng = random.Random(seed)
    parents = max(1, queues // 10)
    children = queues - parents
    qs: list[Queue] = []
    for p in range(parents):
        qs.append(Queue(name=f"org-{p:02d}", capability={"cpu": 1_600_000, "memory": 8000 * GIB},
                        creation_ms=p, uid=f"uid-org-{p:02d}"))
    for c in range(children):
        capability = {"cpu": rng.choice((40_000, 80_000, 160_000))} if c % 3 == 0 else {}
        guarantee = {"cpu": 8_000} if c % 11 == 0 else {}
        qs.append(Queue(name=f"team-{c:03d}", parent=f"org-{c % parents:02d}", priority=rng.choice((0, 0, 1, 2)),
                        weight=rng.randint(1, 4), capability=capability, guarantee=guarantee,
                        creation_ms=1000 + c, uid=f"uid-team-{c:03d}"))
    weights = [1 / (i + 1) ** 0.6 for i in range(children)]  # uneven queue sizes
    team_names = [f"team-{c:03d}" for c in range(children)]
    bs: list[Binding] = []
    total = bindings + bindings // 5
    for i in range(total):
        admitted = i >= bindings
        data = rng.random() < 0.1
        bs.append(Binding(
            key=f"ns-{i % 50:02d}/rb-{i:05d}", queue=rng.choices(team_names, weights)[0],
            priority=rng.choice((0, 0, 100, 1000, 10_000)), creation_ms=1_700_000_000_000 + rng.randrange(10**7),
            uid=f"uid-{i:05d}",
            request={"cpu": rng.choice((250, 500, 1000, 2000)), "memory": rng.choice((1, 2, 4)) * GIB},
            replicas=rng.randint(1, 4), suspended=not admitted, data_dependent=data,
            placement_injected=data and rng.random() < 0.5, admitted_ms=1_700_010_000_000 + i if admitted else 0,
            scheduled=admitted,
        ))
    clusters = [ClusterCapacity(name=f"member{n}", allocatable={"cpu": 1_600_000, "memory": 8000 * GIB, "pods": 10**6},
                                allocated={"cpu": 300_000, "memory": 1000 * GIB}) for n in range(8)]
    return qs, bs, clusters


def preempting(queues: list[Queue]) -> AdmissionConfig:
    """The default tiers with Volcano's preempt and reclaim actions and every queue's policy at its most."""
    return msgspec.structs.replace(
        DEFAULT_ADMISSION_CONFIG, actions=("enqueue", "allocate", "preempt", "reclaim", "backfill"),
        policies={q.name: QueuePolicy(within_queue="LowerPriority", reclaim="Any") for q in queues})


def timed(run: Callable[[], object]) -> float:
    gc.disable()
    try:
        began = time.perf_counter()
        run()
        return (time.perf_counter() - began) * 1000
    finally:
        gc.enable()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--bindings", type=int, default=10_000)
    parser.add_argument("--queues", type=int, default=100)
    parser.add_argument("--repeat", type=int, default=7)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top entries of one cycle")
    args = parser.parse_args()

    queues, bindings, clusters = world(bindings=args.bindings, queues=args.queues)
    suspended = [b for b in bindings if b.suspended]
    config = preempting(queues)

    def cycle() -> object:
        return admission_cycle(queues=queues, bindings=bindings, clusters=clusters, config=config)

    def plain() -> object:
        return admission_cycle(queues=queues, bindings=bindings, clusters=clusters)

    def sort_by_priority() -> object:
        return sorted(suspended, key=lambda b: (-b.priority, b.creation_ms, b.uid, b.key))

    outcome = admission_cycle(queues=queues, bindings=bindings, clusters=clusters, config=config)  # warm up, and
    plain()  # describe it
    sort_by_priority()
    cycles: list[float] = []
    plains: list[float] = []
    sorts: list[float] = []
    for _ in range(args.repeat):
        cycles.append(timed(cycle))
        plains.append(timed(plain))
        sorts.append(timed(sort_by_priority))
    value, plain_ms, baseline = statistics.median(cycles), statistics.median(plains), statistics.median(sorts)

    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        cycle()
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue(), file=sys.stderr)

    by_plugin: dict[str, int] = {}
    for hold in outcome.held:
        by_plugin[hold.plugin] = by_plugin.get(hold.plugin, 0) + 1
    print(f"cycle with preemption: {value:.1f} ms (min {min(cycles):.1f}), without: {plain_ms:.1f} ms, sort: "
          f"{baseline:.2f} ms; resumed {len(outcome.resume)} of {len(suspended)}, evicted {len(outcome.evicted)}, "
          f"held by {dict(sorted(by_plugin.items()))}", file=sys.stderr)
    print(json.dumps({
        "bench": "admission",
        "value": round(value, 2),
        "unit": "ms",
        "baseline": round(baseline, 3),
        "ratio": round(value / baseline, 1),
        "plain_ms": round(plain_ms, 2),
        "plain_ratio": round(plain_ms / baseline, 1),
        "preemption_cost": round(value / plain_ms, 2),
        "target_ms": TARGET_MS,
        "target_met": value <= TARGET_MS,
        "target_ratio": TARGET_RATIO,
        "ratio_met": value <= TARGET_RATIO * baseline,
        "evicted": len(outcome.evicted),
        "suspended": len(suspended),
        "admitted_before": len(bindings) - len(suspended),
        "queues": len(queues),
        "resumed": len(outcome.resume),
        "held": len(outcome.held),
        "held_by_plugin": dict(sorted(by_plugin.items())),
        "min_ms": round(min(cycles), 2),
        "repeat": args.repeat,
        "gc": "paused during passes",
    }))


if __name__ == "__main__":
    main()
