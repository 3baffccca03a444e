"""Memory benchmark: bytes the daemon's world holds per tracked object, at 10k and 100k objects, and under churn.

tether keeps its whole world in memory (``core/world/``, filled by ``projections/fold.py``): every claim, DataSource,
ResourceBinding and Karmada Cluster it tracks, as typed views whose spec and status stay raw JSON until read. This
script measures what that costs, the way the daemon pays it:

1. a realistic log is generated with :mod:`tether.adapters.testing.synthetic_log` (every event through ``step``),
   encoded to bytes, and the records dropped;
2. with ``tracemalloc`` on, every record is decoded from a **fresh copy** of its bytes (so a view that keeps a
   slice of its record alive is charged for it, as in the daemon, which decodes what it reads from the log) and
   folded into an empty world with ``evolve`` — the daemon's fold. What stays allocated afterwards is the world;
3. **baseline**, in the same run: the same objects (the last version of each) held as plain ``dict``\\ s decoded
   from their JSON — what an informer cache of a typical Python controller holds;
4. **churn**: every tracked object is observed again with a new resourceVersion, three rounds, and the world's size
   is taken after each — it must stay flat once warm (no history kept per update, tombstones bounded).

The world's size is ``tracemalloc``'s count of live bytes (Python allocations), taken after a full GC.

Usage: ``python ops/bench/memory.py [--sizes 10000,100000] [--rounds 3]``. The last line is one JSON object:
``{"bench": "memory", "value": <bytes per object at the largest size>, "unit": "B/object", "baseline": <dict
cache bytes per object>, "ratio": value/baseline, ...}`` with each size's figure, the churn rounds and whether the
targets hold (≤ 2 KB per object; within 10 % between sizes and across churn rounds).
"""

from __future__ import annotations

import argparse
import gc
import json
import sys
import time
import tracemalloc
from typing import Any

import msgspec

from tether.adapters.testing.synthetic_log import Simulation, scenario
from tether.core.envelope import EventRecord, decode_event, encode
from tether.core.events import ObjectObserved
from tether.core.kube import KubeObject
from tether.core.world import World, initial_world
from tether.projections.fold import evolve

TARGET_BYTES = 2048
FLAT = 0.10  # at most 10 % apart: per object between sizes, and between churn rounds


def tracked(world: World) -> int:
    return len(world.claims) + len(world.sources) + len(world.bindings) + len(world.clusters)


def generate(objects: int) -> list[bytes]:
    """Encoded events of a log whose world tracks about ``objects`` objects (about 2.7 objects per job)."""
    jobs = max(1, objects // 3)
    namespaces = max(1, jobs // 100)
    sim = scenario(Simulation(seed=11), namespaces=namespaces, jobs_per_namespace=max(1, jobs // namespaces),
                   tables=max(10, jobs // 50), migrations=max(1, jobs // 200))
    return [encode(record) for record in sim.events]


def live_bytes() -> int:
    gc.collect()
    current, _ = tracemalloc.get_traced_memory()
    return current


def fold(bodies: list[bytes]) -> tuple[World, int]:
    """The world folded from ``bodies``, and the bytes it holds (decoded from fresh copies, as the daemon does)."""
    before = live_bytes()
    world = initial_world()
    for body in bodies:
        evolve(world, decode_event(bytes(body)))
    return world, live_bytes() - before


def latest_objects(bodies: list[bytes]) -> dict[str, bytes]:
    """Each tracked object's last observed JSON (the baseline's input), by key."""
    out: dict[str, bytes] = {}
    for body in bodies:
        event = decode_event(body).event
        if isinstance(event, ObjectObserved):
            obj = event.obj
            out[f"{obj.kind}/{obj.metadata.namespace}/{obj.metadata.name}"] = msgspec.json.encode(obj)
    return out


def dict_cache(objects: dict[str, bytes]) -> int:
    """Bytes held by the same objects as plain dicts (an informer-style cache), keyed the same way."""
    before = live_bytes()
    cache: dict[str, Any] = {key: json.loads(bytes(body)) for key, body in objects.items()}
    held = live_bytes() - before
    del cache
    return held


def churn(world: World, objects: dict[str, bytes], rounds: int, at_ms: int) -> list[int]:
    """Observe every object again with a newer resourceVersion, ``rounds`` times; the world's size after each."""
    sizes = []
    offset = world.events + 1
    base = live_bytes()
    for round_ in range(1, rounds + 1):
        for body in objects.values():
            obj = msgspec.json.decode(body, type=KubeObject)
            obj.metadata.resource_version = str(10_000_000 * round_ + offset)
            record = EventRecord(offset=offset, at_ms=at_ms + round_, key="", source="bench",
                                 event=ObjectObserved(obj=obj))
            evolve(world, decode_event(encode(record)))
            offset += 1
        sizes.append(live_bytes() - base)
    return sizes


def measure(size: int, rounds: int) -> dict[str, Any]:
    t0 = time.perf_counter()
    bodies = generate(size)
    objects = latest_objects(bodies)
    tracemalloc.start()
    try:
        world, held = fold(bodies)
        count = tracked(world)
        baseline = dict_cache({k: v for k, v in objects.items()
                               if k.split("/")[0] in ("DataSourceClaim", "DataSource", "ResourceBinding", "Cluster")})
        growth = churn(world, objects, rounds, world.last_at_ms)
    finally:
        tracemalloc.stop()
    per_object = held / count
    return {"objects": count, "events": len(bodies), "bytes": held, "per_object": round(per_object),
            "baseline_per_object": round(baseline / count),
            "churn_growth_per_object": [round(g / count) for g in growth],
            "seconds": round(time.perf_counter() - t0, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", default="10000,100000", help="tracked-object counts to measure (comma-separated)")
    parser.add_argument("--rounds", type=int, default=3, help="churn rounds (every object re-observed each round)")
    args = parser.parse_args()
    results = []
    for size in (int(s) for s in args.sizes.split(",")):
        result = measure(size, args.rounds)
        results.append(result)
        print(json.dumps({"size": size, **result}), file=sys.stderr)
    largest = results[-1]
    per = [r["per_object"] for r in results]
    # flat: per-object cost does not grow with size, and churn adds (almost) nothing after the first round
    flat_sizes = max(per) <= min(per) * (1 + FLAT)
    growth = largest["churn_growth_per_object"]
    flat_churn = all(abs(g - growth[0]) <= FLAT * largest["per_object"] for g in growth)
    print(json.dumps({
        "bench": "memory", "value": largest["per_object"], "unit": "B/object",
        "baseline": largest["baseline_per_object"],
        "ratio": round(largest["per_object"] / largest["baseline_per_object"], 3),
        "sizes": {str(r["objects"]): r["per_object"] for r in results},
        "churn_growth_per_object": growth,
        "target_bytes": TARGET_BYTES, "target_met": largest["per_object"] <= TARGET_BYTES and flat_sizes and flat_churn,
        "flat_across_sizes": flat_sizes, "flat_under_churn": flat_churn,
    }))


if __name__ == "__main__":
    main()
