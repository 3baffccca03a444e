"""Placement benchmark: how long the topology planner takes to place a 1000-pod gang on a 5000-node cluster.

The cluster has a 4-level topology — ``zone`` (4) → ``rack-group`` (5 per zone) → ``tor`` (25 per rack group) →
node (10 per tor, ``kubernetes.io/hostname``) — with 64-CPU / 256 GiB nodes, an 8-GPU node in every tor, a
``node-pool`` label that the group's nodeSelector uses to drop a tenth of the nodes, and every node already
carrying some requests (drawn from a fixed seed, so every run sees the same cluster). The PodGroup requires
``zone``, prefers ``[rack-group, tor]`` and sorts by GPU capacity, then CPU available, descending; its 1000 pods ask
for 6 CPU and 20 GiB each, so no tor can hold the gang (they are cut off) and the planner packs it into a rack group.

Measured in the same run, the two kinds of pass taking turns (median of ``--rounds`` each, the cyclic GC paused
as the decider runs):

* ``baseline`` — one linear scan of the nodes, summing every node's allocatable: the least any planner that looks
  at every node must do;
* ``value``    — ``plan_group``: one placement decision, from the node list and the group's pods to every pod's
  node affinity;
* extras: ``candidate_order`` (the tree and its order alone, with the ``Candidate`` structs it builds) and
  ``pinned`` (a decision for the same group with half of its pods already bound in one tor).

Usage: ``python ops/bench/placement.py [--rounds 15] [--profile]``. The last line of output is one JSON object:
``{"bench": "placement", "value": <median ms>, "unit": "ms", "baseline": <median ms>, "ratio": ..., ...}``.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import pstats
import random
import statistics
import sys
import time
from collections.abc import Callable

from tether.adapters.cli.replay.rebuild import gc_paused  # (the collector paused as `tether replay` pauses it)
from tether.core.keys import HOSTNAME_LABEL
from tether.core.placement.group_affinity import NodeSelectorRequirement, NodeSelectorTerm
from tether.core.placement.topology_planner import GroupPod, Node, candidate_order, plan_group
from tether.core.world.pod_group import GroupAffinity, GroupSpec, SortRule

TARGET_MS = 50
ZONES, RACK_GROUPS, TORS, NODES_PER_TOR = 4, 5, 25, 10  # 4 x 5 x 25 x 10 = 5000 nodes
PODS = 1000
GI = 2**30 * 1000  # one GiB in milli-units


def cluster(seed: int = 2026) -> list[Node]:
    rng = random.Random(seed)
    nodes = []
    for zone in range(ZONES):
        for rack_group in range(RACK_GROUPS):
            for tor in range(TORS):
                for slot in range(NODES_PER_TOR):
                    name = f"node-{zone}-{rack_group}-{tor:02d}-{slot}"
                    gpu = {"nvidia.com/gpu": 8000} if slot == 0 else {}
                    nodes.append(Node(
                        name=name,
                        labels={"zone": f"zone-{zone}", "rack-group": f"rg-{zone}-{rack_group}",
                                "tor": f"tor-{zone}-{rack_group}-{tor:02d}", HOSTNAME_LABEL: name,
                                "node-pool": "batch" if rng.random() < 0.9 else "system"},
                        allocatable={"cpu": 64_000, "memory": 256 * GI, "pods": 110_000, **gpu},
                        requested={"cpu": rng.randrange(0, 40) * 1000, "memory": rng.randrange(0, 160) * GI},
                    ))
    rng.shuffle(nodes)  # the planner must not depend on the order nodes come in
    return nodes


def group() -> GroupSpec:
    return GroupSpec(min_member=PODS, affinity=GroupAffinity(
        required=("zone",), preferred=("rack-group", "tor"),
        sort_rules=(SortRule(resource="GPU", order="Descending"),
                    SortRule(resource="CPU", dimension="Available", order="Descending")),
        node_selector=(NodeSelectorTerm(match_expressions=(
            NodeSelectorRequirement(key="node-pool", operator="In", values=("batch",)),)),),
    ))


def pods(bound_to: list[str] | None = None) -> list[GroupPod]:
    request = {"cpu": 6000, "memory": 20 * GI}
    out = [GroupPod(name=f"trainer-{i:04d}", request=request) for i in range(PODS)]
    if bound_to:
        out = [GroupPod(name=p.name, request=request, node_name=bound_to[i % len(bound_to)]) if i % 2 else p
               for i, p in enumerate(out)]
    return out


def scan(nodes: list[Node]) -> dict[str, int]:
    total: dict[str, int] = {}
    for node in nodes:
        for name, amount in node.allocatable.items():
            total[name] = total.get(name, 0) + amount
    return total


def timed(run: Callable[[], object]) -> float:
    with gc_paused():
        began = time.perf_counter()
        run()
        return (time.perf_counter() - began) * 1000


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--profile", action="store_true", help="print cProfile's top entries of a decision")
    args = parser.parse_args()

    nodes, spec, members = cluster(), group(), pods()
    plan = plan_group(nodes=nodes, spec=spec, pods=members)
    assert plan.status == "placed" and plan.domain is not None, plan
    first_tor = sorted(n.name for n in nodes if n.labels["tor"] == "tor-0-0-00" and n.labels["node-pool"] == "batch")
    pinned_members = pods(bound_to=first_tor)
    pinned_plan = plan_group(nodes=nodes, spec=spec, pods=pinned_members)
    assert pinned_plan.status == "placed", pinned_plan
    print(f"{len(nodes)} nodes, {len(members)} pods: {plan.reason}", file=sys.stderr)
    print(f"pinned: {pinned_plan.reason}", file=sys.stderr)

    decisions, scans, orders, pinned = [], [], [], []
    for _ in range(args.rounds):
        scans.append(timed(lambda: scan(nodes)))
        decisions.append(timed(lambda: plan_group(nodes=nodes, spec=spec, pods=members)))
        orders.append(timed(lambda: candidate_order(nodes=nodes, spec=spec, pods=members)))
        pinned.append(timed(lambda: plan_group(nodes=nodes, spec=spec, pods=pinned_members)))

    if args.profile:
        profile = cProfile.Profile()
        profile.enable()
        plan_group(nodes=nodes, spec=spec, pods=members)
        profile.disable()
        out = io.StringIO()
        pstats.Stats(profile, stream=out).sort_stats("tottime").print_stats(15)
        print(out.getvalue(), file=sys.stderr)

    value, baseline = statistics.median(decisions), statistics.median(scans)
    result = {
        "bench": "placement",
        "value": round(value, 2),
        "unit": "ms",
        "baseline": round(baseline, 3),
        "ratio": round(value / baseline, 1),
        "target_ms": TARGET_MS,
        "target_met": value <= TARGET_MS,
        "nodes": len(nodes),
        "pods": len(members),
        "levels": 4,
        "chosen_domain": plan.domain.key,
        "candidates_tried": plan.tried,
        "candidate_order_ms": round(statistics.median(orders), 2),
        "pinned_decision_ms": round(statistics.median(pinned), 2),
        "rounds": args.rounds,
        "gc": "paused during passes",
    }
    print(json.dumps(result))


if __name__ == "__main__":
    main()
