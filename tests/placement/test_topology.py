"""The job-level topology planner (``core.placement.topology_planner``): Godel's grouping, sort rules, cut-off,
pinning, the nodeSelector prefilter, waiting for minMember, spill-over between circles, and determinism."""

from __future__ import annotations

import random
from collections.abc import Sequence

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.core.placement.group_affinity import NodeSelectorRequirement, NodeSelectorTerm
from tether.core.placement.topology_planner import (
    PREFERRED_WEIGHTS,
    Candidate,
    Domain,
    GroupPod,
    Node,
    Plan,
    candidate_order,
    plan_group,
)
from tether.core.quantity import resource_list
from tether.core.world.pod_group import GroupAffinity, GroupSpec, SortRule

CPU = 1000  # one CPU in milli-units


def names(candidates: Sequence[Candidate]) -> list[str]:
    return [candidate.domain.name for candidate in candidates]


def circles(candidates: Sequence[Candidate]) -> dict[str, list[str]]:
    return {candidate.domain.name: [circle.name for circle in candidate.circles] for candidate in candidates}


def spec(*, required: tuple[str, ...] = (), preferred: tuple[str, ...] = (), rules: tuple[SortRule, ...] = (),
         selector: tuple[NodeSelectorTerm, ...] | None = None, min_member: int = 1) -> GroupSpec:
    return GroupSpec(min_member=min_member, affinity=GroupAffinity(required=required, preferred=preferred,
                                                                   sort_rules=rules, node_selector=selector))


def pods(count: int, *, cpu: int = CPU, prefix: str = "p") -> list[GroupPod]:
    return [GroupPod(name=f"{prefix}{i:03d}", request={"cpu": cpu}) for i in range(count)]


# --- Godel's grouping test ----------------------------------------------------------------------------------------

#: (bigPod, miniPod, tor, CPUs) per node, node-1 … node-18.
GODEL_LAYOUT = [
    ("bigPodA", "miniPodA1", "tor1", 4), ("bigPodA", "miniPodA1", "tor1", 4),
    ("bigPodA", "miniPodA1", "tor2", 3), ("bigPodA", "miniPodA1", "tor2", 3),
    ("bigPodA", "miniPodA1", "tor3", 2), ("bigPodA", "miniPodA1", "tor3", 2),
    ("bigPodA", "miniPodA2", "tor4", 4), ("bigPodA", "miniPodA2", "tor4", 4),
    ("bigPodA", "miniPodA2", "tor5", 3), ("bigPodA", "miniPodA2", "tor5", 3),
    ("bigPodB", "miniPodB1", "tor6", 4), ("bigPodB", "miniPodB1", "tor6", 4),
    ("bigPodB", "miniPodB1", "tor7", 3), ("bigPodB", "miniPodB1", "tor7", 3),
    ("bigPodB", "miniPodB2", "tor8", 3), ("bigPodB", "miniPodB2", "tor8", 3),
    ("bigPodB", "miniPodB2", "tor9", 2), ("bigPodB", "miniPodB2", "tor9", 2),
]
GODEL_SPEC = spec(required=("bigPod",), preferred=("miniPod", "tor"),
                  rules=(SortRule(resource="CPU", dimension="Capacity", order="Descending"),))


def godel_nodes() -> list[Node]:
    return [Node(name=f"node-{i}", labels={"bigPod": big, "miniPod": mini, "tor": tor},
                 allocatable={"cpu": cpus * CPU})
            for i, (big, mini, tor, cpus) in enumerate(GODEL_LAYOUT, start=1)]


def test_godel_grouping_order() -> None:
    """Godel's key test: required bigPod, preferred [miniPod, tor], CPU/Capacity/Descending, one 7-CPU pod.

    The seed describes the outcome but not the nodes; the layout above is the one of Godel's own grouping test
    (kubewharf/godel-scheduler, job-level affinity plugin): two nodes per tor with 4, 3 or 2 CPUs, so tors hold
    8, 6 or 4 CPUs, miniPods 18 / 14 / 14 / 10 and bigPods 32 / 24. Only the 8-CPU tors (tor1, tor4, tor6) reach
    the 7-CPU minimum request; the others are cut off as groups but remain circles of the larger domains."""
    order = candidate_order(nodes=godel_nodes(), spec=GODEL_SPEC, pods=[GroupPod(name="p", request={"cpu": 7 * CPU})])
    assert names(order) == ["tor1", "tor4", "tor6", "miniPodA1", "miniPodA2", "miniPodB1", "miniPodB2",
                            "bigPodA", "bigPodB"]
    assert circles(order) == {
        "tor1": ["tor1"], "tor4": ["tor4"], "tor6": ["tor6"],
        "miniPodA1": ["tor1", "tor2", "tor3"], "miniPodA2": ["tor4", "tor5"],
        "miniPodB1": ["tor6", "tor7"], "miniPodB2": ["tor8", "tor9"],
        "bigPodA": ["tor1", "tor2", "tor3", "tor4", "tor5"], "bigPodB": ["tor6", "tor7", "tor8", "tor9"],
    }
    assert order[0].domain == Domain((("bigPod", "bigPodA"), ("miniPod", "miniPodA1"), ("tor", "tor1")))


def test_godel_topology_packs_by_node_not_by_sum() -> None:
    """The cut-off is Godel's aggregate check (tor1's 8 CPUs pass for a 7-CPU pod), but the decision packs pods
    onto nodes, and no node has 7 CPUs: every candidate is tried and the group stays unschedulable."""
    plan = plan_group(nodes=godel_nodes(), spec=GODEL_SPEC, pods=[GroupPod(name="p", request={"cpu": 7 * CPU})])
    assert plan.status == "unschedulable"
    assert plan.tried == 9
    assert "6 too small" in plan.reason


def test_godel_topology_places_a_gang_in_the_first_domain_holding_it() -> None:
    # 5 pods of 2 CPUs: tor1 (2 x 4 CPUs) holds 4, so the first domain holding all five is miniPodA1.
    plan = plan_group(nodes=godel_nodes(), spec=GODEL_SPEC, pods=pods(5, cpu=2 * CPU))
    assert plan.status == "placed"
    assert plan.domain is not None and plan.domain.name == "miniPodA1"
    assert [p.circle.rsplit("=", 1)[1] for p in plan.placements] == ["tor1"] * 4 + ["tor2"]


def test_godel_pinned_to_the_running_pods_domain() -> None:
    """Godel's "running pods in same preferred domain": a member runs on node-1 (tor1) → tor1, then miniPodA1 and
    bigPodA, each a single circle (the pinned domains are not split further, nor sorted or cut off)."""
    members = [GroupPod(name="running", request={"cpu": CPU}, node_name="node-1"), *pods(1, cpu=7 * CPU)]
    order = candidate_order(nodes=godel_nodes(), spec=GODEL_SPEC, pods=members)
    assert circles(order) == {"tor1": ["tor1"], "miniPodA1": ["miniPodA1"], "bigPodA": ["bigPodA"]}
    assert names(order) == ["tor1", "miniPodA1", "bigPodA"]


# --- sort rules ---------------------------------------------------------------------------------------------------


def sort_nodes() -> list[Node]:
    """Three racks (Godel's sort-rule fixture): capacity / available CPU, memory, GPU
    nc1 1000m/500m, 1024/512, 0/0 — nc2 (two nodes) 2000m/1000m, 2048/1024, 8/6 — nc3 3000m/2000m, 2048/1024, 12/8."""
    def node(name: str, rack: str, allocatable: dict[str, str], requested: dict[str, str]) -> Node:
        return Node(name=name, labels={"rack": rack}, allocatable=resource_list(allocatable),
                    requested=resource_list(requested))
    small = {"cpu": "1", "memory": "1024"}
    with_gpu = {"cpu": "1", "memory": "1024", "nvidia.com/gpu": "4"}
    return [
        node("a", "nc2", with_gpu, {"cpu": "500m", "memory": "512", "nvidia.com/gpu": "1"}),
        node("b", "nc2", with_gpu, {"cpu": "500m", "memory": "512", "nvidia.com/gpu": "1"}),
        node("c", "nc1", small, {"cpu": "500m", "memory": "512"}),
        node("d", "nc3", {"cpu": "3", "memory": "2048", "nvidia.com/gpu": "12"},
             {"cpu": "1", "memory": "1024", "nvidia.com/gpu": "4"}),
    ]


def rule(resource: str, order: str, dimension: str = "Capacity") -> SortRule:
    return msgspec.convert({"resource": resource, "dimension": dimension, "order": order}, SortRule)


@pytest.mark.parametrize(("rules", "expected"), [
    ((), ["nc1", "nc2", "nc3"]),  # default: CPU / Capacity / Ascending
    ((rule("CPU", "Descending"),), ["nc3", "nc2", "nc1"]),
    ((rule("CPU", "Ascending", "Available"),), ["nc1", "nc2", "nc3"]),
    ((rule("GPU", "Descending"),), ["nc3", "nc2", "nc1"]),
    ((rule("Memory", "Ascending"), rule("GPU", "Ascending")), ["nc1", "nc2", "nc3"]),
    ((rule("Memory", "Descending"), rule("GPU", "Ascending")), ["nc2", "nc3", "nc1"]),  # tie → next rule
    ((rule("Memory", "Descending"), rule("GPU", "Descending")), ["nc3", "nc2", "nc1"]),
    ((rule("GPU", "Descending", "Available"),), ["nc3", "nc2", "nc1"]),
    ((rule("Memory", "Ascending", "Available"), rule("GPU", "Ascending", "Available")), ["nc1", "nc2", "nc3"]),
    ((rule("Memory", "Descending", "Available"), rule("GPU", "Ascending", "Available")), ["nc2", "nc3", "nc1"]),
    # nc2 and nc3 tie on available memory and there is no next rule: the label value decides
    ((rule("Memory", "Descending", "Available"),), ["nc2", "nc3", "nc1"]),
])
def test_sort_rules(rules: tuple[SortRule, ...], expected: list[str]) -> None:
    order = candidate_order(nodes=sort_nodes(), spec=spec(required=("rack",), rules=rules), pods=pods(1, cpu=0))
    assert names(order) == expected


def test_full_ties_are_broken_by_label_value_whatever_the_node_order() -> None:
    nodes = [Node(name=f"n{i}", labels={"rack": rack}, allocatable={"cpu": 4 * CPU})
             for i, rack in enumerate(["r3", "r1", "r2"])]
    for shuffled in (nodes, nodes[::-1]):
        assert names(candidate_order(nodes=shuffled, spec=spec(required=("rack",)), pods=pods(1))) == ["r1", "r2", "r3"]


def test_available_is_floored_per_node() -> None:
    """An overcommitted node offers no room, and takes none from its neighbours."""
    nodes = [Node(name="over", labels={"rack": "a"}, allocatable={"cpu": 4 * CPU}, requested={"cpu": 9 * CPU}),
             Node(name="fine", labels={"rack": "a"}, allocatable={"cpu": 4 * CPU}, requested={"cpu": CPU}),
             Node(name="other", labels={"rack": "b"}, allocatable={"cpu": 4 * CPU}, requested={"cpu": 2 * CPU})]
    order = candidate_order(nodes=nodes, spec=spec(required=("rack",), rules=(rule("CPU", "Descending", "Available"),)),
                            pods=pods(1))
    assert names(order) == ["a", "b"]  # a: 0 + 3 CPUs spare, b: 2


# --- cut-off ------------------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("request_", "expected"), [
    ({"cpu": "1"}, ["nc3", "nc2", "nc1"]),
    ({"cpu": "1500m"}, ["nc3", "nc2"]),
    ({"cpu": "2001m"}, ["nc3"]),
    ({"cpu": "5"}, []),
    ({"memory": "1024"}, ["nc3", "nc2", "nc1"]),
    ({"memory": "1025"}, ["nc3", "nc2"]),
    ({"memory": "2049"}, []),
    ({"nvidia.com/gpu": "2"}, ["nc3", "nc2"]),
    ({"nvidia.com/gpu": "10"}, ["nc3"]),
    ({"nvidia.com/gpu": "13"}, []),
])
def test_cut_off_by_capacity(request_: dict[str, str], expected: list[str]) -> None:
    group = spec(required=("rack",), rules=(rule("GPU", "Descending"),))
    order = candidate_order(nodes=sort_nodes(), spec=group, pods=[GroupPod(name="p", request=resource_list(request_))])
    assert names(order) == expected


def test_minimum_request_is_the_sum_when_every_pod_is_needed_else_min_member_times_the_smallest() -> None:
    nodes = [Node(name=f"n{i}", labels={"rack": rack}, allocatable={"cpu": cpus * CPU})
             for i, (rack, cpus) in enumerate([("small", 3), ("big", 6)])]
    mixed = [GroupPod(name="a", request={"cpu": CPU}), GroupPod(name="b", request={"cpu": 3 * CPU})]
    # two pods, minMember 2: every pod is needed, the minimum is 1 + 3 = 4 CPUs → "small" is cut off
    assert names(candidate_order(nodes=nodes, spec=spec(required=("rack",), min_member=2), pods=mixed)) == ["big"]
    # minMember 1 of two pods: 1 x the smallest request (1 CPU) → both racks are candidates
    assert names(candidate_order(nodes=nodes, spec=spec(required=("rack",)), pods=mixed)) == ["small", "big"]


def test_children_of_a_cut_off_domain_are_cut_off() -> None:
    nodes = [Node(name=f"n{i}", labels={"zone": zone, "rack": f"{zone}-{rack}"}, allocatable={"cpu": CPU})
             for i, (zone, rack) in enumerate([("z1", "a"), ("z1", "b"), ("z2", "a")])]
    # z2 (1 CPU) and its rack are too small for 2 pods of 1 CPU; z1's racks are too, but not z1 itself
    order = candidate_order(nodes=nodes, spec=spec(required=("zone",), preferred=("rack",), min_member=2), pods=pods(2))
    assert circles(order) == {"z1": ["z1-a", "z1-b"]}


# --- pinning ------------------------------------------------------------------------------------------------------


def racked(layout: Sequence[tuple[str, str, int]]) -> list[Node]:
    return [Node(name=f"{zone}-{rack}-{i}", labels={"zone": zone, "rack": rack}, allocatable={"cpu": cpus * CPU})
            for i, (zone, rack, cpus) in enumerate(layout)]


def test_running_members_pin_the_group_to_their_domain() -> None:
    nodes = racked([("z1", "r1", 2), ("z2", "r2", 64), ("z2", "r3", 64)])
    nodes[0] = msgspec.structs.replace(nodes[0], requested={"cpu": CPU})  # the running member's request
    members = [GroupPod(name="a", request={"cpu": CPU}, node_name="z1-r1-0"), *pods(3)]
    plan = plan_group(nodes=nodes, spec=spec(required=("zone",), min_member=2), pods=members)
    assert plan.status == "placed"
    assert plan.domain == Domain((("zone", "z1"),))  # z2 is far bigger, but the group has started in z1
    assert [p.circle for p in plan.placements] == ["zone=z1", "", ""]  # one more fits; the rest wait in z1


def test_members_in_different_required_domains_are_a_conflict() -> None:
    nodes = racked([("z1", "r1", 8), ("z2", "r2", 8)])
    members = [GroupPod(name="a", node_name="z1-r1-0"), GroupPod(name="b", node_name="z2-r2-1"), *pods(1)]
    plan = plan_group(nodes=nodes, spec=spec(required=("zone",)), pods=members)
    assert plan.status == "conflict"
    assert "different required domains" in plan.reason and "zone=z1; zone=z2" in plan.reason
    assert candidate_order(nodes=nodes, spec=spec(required=("zone",)), pods=members) == ()


@pytest.mark.parametrize(("node_name", "message"), [
    ("gone", "not known"),
    ("bare", "has no label zone"),
])
def test_members_on_unknown_or_unlabelled_nodes_are_a_conflict(node_name: str, message: str) -> None:
    nodes = [*racked([("z1", "r1", 8)]), Node(name="bare", allocatable={"cpu": 8 * CPU})]
    plan = plan_group(nodes=nodes, spec=spec(required=("zone",)), pods=[GroupPod(name="a", node_name=node_name),
                                                                        *pods(1)])
    assert plan.status == "conflict" and message in plan.reason


def test_members_spread_over_preferred_domains_stop_the_split() -> None:
    nodes = racked([("z1", "r1", 8), ("z1", "r2", 8), ("z1", "r3", 8)])
    members = [GroupPod(name="a", node_name="z1-r1-0"), GroupPod(name="b", node_name="z1-r2-1"), *pods(2)]
    order = candidate_order(nodes=nodes, spec=spec(required=("zone",), preferred=("rack",)), pods=members)
    assert circles(order) == {"z1": ["z1"]}


# --- nodeSelector -------------------------------------------------------------------------------------------------


def expression(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=values)


def test_node_selector_filters_nodes_first_and_is_kept_in_the_required_terms() -> None:
    nodes = [Node(name=f"n{i}", labels={"rack": rack, "level": level}, allocatable={"cpu": 4 * CPU})
             for i, (rack, level) in enumerate([("r1", "gpu"), ("r1", "cpu"), ("r2", "cpu"), ("r2", "cpu")])]
    selector = (NodeSelectorTerm(match_expressions=(expression("level", "In", "cpu"),)),)
    group = spec(required=("rack",), selector=selector)
    # without the selector r1 (2 nodes) and r2 tie; with it r1 keeps one node, and CPU/Capacity/Ascending puts it first
    assert [c.domain.name for c in candidate_order(nodes=nodes, spec=group, pods=pods(1))] == ["r1", "r2"]
    plan = plan_group(nodes=nodes, spec=group, pods=pods(2, cpu=3 * CPU))  # r1 holds only one: r2
    assert plan.domain == Domain((("rack", "r2"),))
    assert plan.placements[0].to_node_affinity() == {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": [{"key": "level", "operator": "In", "values": ["cpu"]},
                                                    {"key": "rack", "operator": "In", "values": ["r2"]}]}]}}


@pytest.mark.parametrize(("term", "expected"), [
    (NodeSelectorTerm(match_expressions=(expression("tier", "NotIn", "gold"),)), ["plain", "silver"]),
    (NodeSelectorTerm(match_expressions=(expression("tier", "Exists"),)), ["gold", "silver"]),
    (NodeSelectorTerm(match_expressions=(expression("tier", "DoesNotExist"),)), ["plain"]),
    (NodeSelectorTerm(match_expressions=(expression("cores", "Gt", "8"),)), ["gold"]),
    (NodeSelectorTerm(match_expressions=(expression("cores", "Lt", "16"),)), ["silver"]),  # "many" is no integer
    (NodeSelectorTerm(match_fields=(expression("metadata.name", "In", "plain"),)), ["plain"]),
    (NodeSelectorTerm(), []),  # an empty term matches no node
])
def test_node_selector_operators(term: NodeSelectorTerm, expected: list[str]) -> None:
    nodes = [Node(name="gold", labels={"tier": "gold", "cores": "32", "host": "gold"}),
             Node(name="silver", labels={"tier": "silver", "cores": "8", "host": "silver"}),
             Node(name="plain", labels={"cores": "many", "host": "plain"})]
    order = candidate_order(nodes=nodes, spec=spec(required=("host",), selector=(term,)), pods=pods(1, cpu=0))
    assert sorted(names(order)) == expected


def test_node_selector_terms_are_ored_and_each_gets_the_domain() -> None:
    nodes = [Node(name="a", labels={"rack": "r1", "x": "1"}, allocatable={"cpu": 4 * CPU}),
             Node(name="b", labels={"rack": "r1", "y": "1"}, allocatable={"cpu": 4 * CPU})]
    selector = (NodeSelectorTerm(match_expressions=(expression("x", "Exists"),)),
                NodeSelectorTerm(match_expressions=(expression("y", "Exists"),)))
    plan = plan_group(nodes=nodes, spec=spec(required=("rack",), selector=selector), pods=pods(2, cpu=4 * CPU))
    assert plan.status == "placed"
    rack = expression("rack", "In", "r1")
    assert plan.placements[0].required == (NodeSelectorTerm(match_expressions=(expression("x", "Exists"), rack)),
                                           NodeSelectorTerm(match_expressions=(expression("y", "Exists"), rack)))


# --- waiting, spill-over, output ----------------------------------------------------------------------------------


def test_waits_for_min_member_pods() -> None:
    nodes = racked([("z1", "r1", 64)])
    plan = plan_group(nodes=nodes, spec=spec(required=("zone",), min_member=16), pods=pods(3))
    assert plan == Plan(status="waiting", reason="waiting: 3/16 pods")
    bound = [GroupPod(name=f"b{i}", node_name="z1-r1-0") for i in range(13)]
    assert plan_group(nodes=nodes, spec=spec(required=("zone",), min_member=16), pods=[*bound, *pods(3)]).status \
        == "placed"


def test_nothing_pending_is_nothing_to_place() -> None:
    plan = plan_group(nodes=racked([("z1", "r1", 8)]), spec=spec(required=("zone",)),
                      pods=[GroupPod(name="a", node_name="z1-r1-0")])
    assert plan.status == "placed" and plan.placements == () and "all 1 pods are bound" in plan.reason


def test_pods_fill_a_circle_before_spilling_to_the_next() -> None:
    # zone z1: rack r1 (2 nodes of 4 CPUs), rack r2 (1 node of 8), rack r3 (1 node of 8); ascending capacity
    nodes = racked([("z1", "r1", 4), ("z1", "r1", 4), ("z1", "r2", 8), ("z1", "r3", 8)])
    group = spec(required=("zone",), preferred=("rack",), min_member=12)
    plan = plan_group(nodes=nodes, spec=group, pods=pods(12, cpu=2 * CPU))
    assert plan.status == "placed" and plan.domain == Domain((("zone", "z1"),))
    by_circle = [p.circle.rsplit("=", 1)[1] for p in plan.placements]
    assert by_circle == ["r1"] * 4 + ["r2"] * 4 + ["r3"] * 4
    first, last = plan.placements[0], plan.placements[-1]
    assert [(t.weight, t.preference.match_expressions[0].values) for t in first.preferred] == [
        (100, ("r1",)), (90, ("r2",)), (80, ("r3",))]
    assert [(t.weight, t.preference.match_expressions[0].values) for t in last.preferred] == [
        (100, ("r3",)), (90, ("r1",)), (80, ("r2",))]
    assert first.to_node_affinity()["preferredDuringSchedulingIgnoredDuringExecution"][0] == {
        "weight": 100, "preference": {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}}


def test_a_candidate_that_holds_only_the_quorum_loses_to_one_that_holds_everyone() -> None:
    # z1 (8 CPUs, tried first: ascending capacity) holds the quorum of two 4-CPU pods, z2 (16) holds all four
    nodes = racked([("z1", "r1", 8), ("z2", "r2", 16)])
    plan = plan_group(nodes=nodes, spec=spec(required=("zone",), min_member=2), pods=pods(4, cpu=4 * CPU))
    assert plan.domain == Domain((("zone", "z2"),)) and plan.tried == 2
    # no domain holds all: the first holding the quorum, the rest of the pods wait there
    nodes = racked([("z1", "r1", 8), ("z2", "r2", 12)])
    plan = plan_group(nodes=nodes, spec=spec(required=("zone",), min_member=2), pods=pods(4, cpu=4 * CPU))
    assert plan.domain == Domain((("zone", "z1"),))
    assert [p.circle for p in plan.placements] == ["zone=z1", "zone=z1", "", ""]


def test_preferred_terms_are_capped_at_ten_circles() -> None:
    nodes = [Node(name=f"n{i:02d}", labels={"zone": "z", "rack": f"r{i:02d}"}, allocatable={"cpu": CPU})
             for i in range(14)]
    plan = plan_group(nodes=nodes, spec=spec(required=("zone",), preferred=("rack",), min_member=14), pods=pods(14))
    assert all(len(p.preferred) == len(PREFERRED_WEIGHTS) for p in plan.placements)
    assert [t.weight for t in plan.placements[-1].preferred] == list(PREFERRED_WEIGHTS)


def test_no_required_keys_is_one_group_of_every_node() -> None:
    nodes = racked([("z1", "r1", 4), ("z2", "r2", 4)])
    plan = plan_group(nodes=nodes, spec=spec(preferred=("zone",), min_member=2), pods=pods(2, cpu=4 * CPU))
    assert plan.status == "placed" and plan.domain == Domain(())
    assert plan.placements[0].required == ()
    assert "the cluster" in plan.reason


def test_plan_is_deterministic_whatever_the_input_order() -> None:
    nodes = godel_nodes()
    members = pods(9, cpu=2 * CPU)
    reference = msgspec.json.encode(plan_group(nodes=nodes, spec=GODEL_SPEC, pods=members))
    rng = random.Random(7)
    for _ in range(5):
        shuffled_nodes, shuffled_pods = nodes.copy(), members.copy()
        rng.shuffle(shuffled_nodes)
        rng.shuffle(shuffled_pods)
        assert msgspec.json.encode(plan_group(nodes=shuffled_nodes, spec=GODEL_SPEC, pods=shuffled_pods)) == reference


# --- properties ---------------------------------------------------------------------------------------------------


@st.composite
def worlds(draw: st.DrawFn) -> tuple[list[Node], GroupSpec, list[GroupPod]]:
    zones = draw(st.integers(1, 3))
    nodes = []
    for zone in range(zones):
        for rack in range(draw(st.integers(1, 3))):
            for slot in range(draw(st.integers(1, 3))):
                cpus = draw(st.integers(0, 8))
                used = draw(st.integers(0, 8))
                labels = {"zone": f"z{zone}", "rack": f"z{zone}r{rack}"}
                if draw(st.booleans()):
                    labels["tor"] = f"z{zone}r{rack}t{slot % 2}"
                nodes.append(Node(name=f"n{zone}{rack}{slot}", labels=labels, allocatable={"cpu": cpus * CPU},
                                  requested={"cpu": used * CPU}))
    requests = draw(st.lists(st.integers(0, 4), min_size=1, max_size=12))
    members = [GroupPod(name=f"p{i:02d}", request={"cpu": cpu * CPU}) for i, cpu in enumerate(requests)]
    rules = draw(st.lists(st.sampled_from([rule("CPU", "Ascending"), rule("CPU", "Descending"),
                                           rule("CPU", "Descending", "Available")]), max_size=2))
    group = spec(required=("zone",), preferred=("rack", "tor"), rules=tuple(rules),
                 min_member=draw(st.integers(1, len(members))))
    return nodes, group, members


@settings(max_examples=150, deadline=None)
@given(worlds())
def test_a_placed_group_lands_in_one_domain_within_capacity(world: tuple[list[Node], GroupSpec, list[GroupPod]]
                                                            ) -> None:
    nodes, group, members = world
    plan = plan_group(nodes=nodes, spec=group, pods=members)
    assert plan.status in ("placed", "unschedulable")
    if plan.status != "placed":
        return
    assert plan.domain is not None
    assert sorted(p.pod for p in plan.placements) == sorted(m.name for m in members)  # each pod exactly once
    assert len({p.required for p in plan.placements}) == 1  # one required domain for the whole group
    requests = {m.name: m.request.get("cpu", 0) for m in members}
    used: dict[str, int] = {}
    for placement in plan.placements:
        if placement.circle:
            assert placement.circle.startswith(plan.domain.key)
            used[placement.circle] = used.get(placement.circle, 0) + requests[placement.pod]
    assert sum(1 for p in plan.placements if p.circle) >= group.min_member
    spare: dict[str, int] = {}
    for node in nodes:  # never over capacity: what a circle got fits in its nodes' spare room
        for circle in used:
            if all(node.labels.get(k) == v for k, v in (pair.split("=") for pair in circle.split(","))):
                spare[circle] = spare.get(circle, 0) + max(node.allocatable["cpu"] - node.requested["cpu"], 0)
    assert all(used[circle] <= spare[circle] for circle in used)


@settings(max_examples=60, deadline=None)
@given(worlds(), st.randoms(use_true_random=False))
def test_plans_do_not_depend_on_input_order(world: tuple[list[Node], GroupSpec, list[GroupPod]],
                                            rng: random.Random) -> None:
    nodes, group, members = world
    shuffled_nodes, shuffled_pods = nodes.copy(), members.copy()
    rng.shuffle(shuffled_nodes)
    rng.shuffle(shuffled_pods)
    assert plan_group(nodes=nodes, spec=group, pods=members) == plan_group(nodes=shuffled_nodes, spec=group,
                                                                           pods=shuffled_pods)
    order = candidate_order(nodes=nodes, spec=group, pods=members)
    assert order == candidate_order(nodes=shuffled_nodes, spec=group, pods=shuffled_pods)
    for candidate in order:  # every circle lies inside its candidate
        assert all(c.labels[:len(candidate.domain.labels)] == candidate.domain.labels for c in candidate.circles)
