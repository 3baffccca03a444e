"""The shared node-affinity module: one merge for both placement capabilities."""

from __future__ import annotations

from typing import Any

import pytest

from tether.core.kube import (
    PREFERRED,
    REQUIRED,
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
)
from tether.core.placement import dataflow
from tether.core.placement import group_affinity as topology_affinity
from tether.core.placement.node_affinity import (
    InvalidAffinity,
    node_affinity_score,
    parse_node_affinity,
    requirement_matches,
    term_matches,
    tighten_node_affinity,
)

HOST = NodeSelectorRequirement(key="kubernetes.io/hostname", operator="In", values=("n1",))
NEAR = PreferredSchedulingTerm(weight=50, preference=NodeSelectorTerm(match_expressions=(HOST,)))
OWN: dict[str, Any] = {REQUIRED: {"nodeSelectorTerms": [
    {"matchExpressions": [{"key": "disk", "operator": "Exists", "x-unknown": 1}]},
    {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]}]}}


def test_both_capabilities_merge_the_same_way() -> None:
    via_dataflow = dataflow.merge_node_affinity(existing=OWN, required=[HOST], preferred=[NEAR])
    placement = topology_affinity.PodPlacement(pod="p", circle="", required=(NodeSelectorTerm(
        match_expressions=(HOST,)),), preferred=(NEAR,))
    via_topology = topology_affinity.merge_node_affinity({"nodeAffinity": OWN}, placement).affinity["nodeAffinity"]
    assert via_dataflow == via_topology
    # the owner's terms verbatim (an unknown field too), the requirement appended to each, preferred appended
    assert via_dataflow[REQUIRED]["nodeSelectorTerms"][0]["matchExpressions"] == [
        {"key": "disk", "operator": "Exists", "x-unknown": 1}, HOST.as_dict()]
    assert via_dataflow[REQUIRED]["nodeSelectorTerms"][1]["matchExpressions"] == [HOST.as_dict()]
    assert via_dataflow[PREFERRED] == [NEAR.as_dict()]


def test_an_affinity_given_as_data_keeps_its_preferred_terms() -> None:
    merged = dataflow.merge_node_affinity(existing=NodeAffinity(preferred=(NEAR,)), required=[HOST])
    assert merged[PREFERRED] == [{"weight": 50, "preference": {"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}}]
    assert merged[REQUIRED] == {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}]}]}


def test_repeated_additions_are_added_once() -> None:
    once = tighten_node_affinity(OWN, required=[NodeSelectorTerm(match_expressions=(HOST, HOST))],
                                 preferred=[NEAR, NEAR]).node_affinity
    assert once[PREFERRED] == [NEAR.as_dict()]
    assert once[REQUIRED]["nodeSelectorTerms"][1]["matchExpressions"] == [HOST.as_dict()]
    assert tighten_node_affinity(once, required=[NodeSelectorTerm(match_expressions=(HOST,))],
                                 preferred=[NEAR]).node_affinity == once


def test_malformed_affinity_names_the_field() -> None:
    with pytest.raises(InvalidAffinity) as caught:
        tighten_node_affinity({REQUIRED: {"nodeSelectorTerms": ["x"]}},
                              required=[NodeSelectorTerm(match_expressions=(HOST,))])
    assert caught.value.path == f"nodeAffinity.{REQUIRED}.nodeSelectorTerms[0]"
    assert str(caught.value).startswith(f"nodeAffinity.{REQUIRED}.nodeSelectorTerms[0]: ")  # the one-line reason


def _req(key: str, operator: str, *values: str) -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=values)


@pytest.mark.parametrize(("requirement", "value", "matches"), [
    (_req("gpus", "Gt", "4"), "5", True), (_req("gpus", "Gt", "4"), "4", False), (_req("gpus", "Gt", "4"), "3", False),
    (_req("gpus", "Lt", "4"), "3", True), (_req("gpus", "Lt", "4"), "4", False), (_req("gpus", "Lt", "4"), "5", False),
    (_req("gpus", "Gt", "4"), None, False), (_req("gpus", "Gt", "4"), "many", False),  # absent, not an integer
    (_req("gpus", "Gt", "4", "5"), "9", False), (_req("gpus", "Lt"), "1", False),  # Gt/Lt take one value exactly
    # integers as strconv.ParseInt reads them, not as Python's int(): a sign, ASCII digits, int64
    (_req("gpus", "Gt", "4"), "+5", True), (_req("gpus", "Lt", "-4"), "-5", True),
    (_req("gpus", "Gt", "4"), "1_000", False), (_req("gpus", "Gt", "4"), "\u0665", False),  # a label value; Arabic 5
    (_req("gpus", "Gt", "4"), "²", False), (_req("gpus", "Gt", "-1"), "9223372036854775808", False),  # past int64
    (_req("gpus", "Lt", "1_000"), "5", False),
    (_req("zone", "In", "a", "b"), "b", True), (_req("zone", "NotIn", "a"), None, True),
    (_req("zone", "Exists"), "", True), (_req("zone", "DoesNotExist"), "a", False),
])
def test_a_requirement_matches_as_kube_schedulers_does(requirement: NodeSelectorRequirement, value: str | None,
                                                       matches: bool) -> None:
    assert requirement_matches(requirement, value) is matches


def test_match_fields_look_at_the_nodes_name_only() -> None:
    on_n1 = NodeSelectorTerm(match_fields=(_req("metadata.name", "In", "n1"),))
    assert term_matches(on_n1, name="n1", labels={})
    assert not term_matches(on_n1, name="n2", labels={"metadata.name": "n1"})  # a label of that name is not a field
    not_n1 = NodeSelectorTerm(match_fields=(_req("metadata.name", "NotIn", "n1"),))
    assert term_matches(not_n1, name="n2", labels={}) and not term_matches(not_n1, name="n1", labels={})
    assert not term_matches(NodeSelectorTerm(), name="n1", labels={})  # an empty term matches no node


def test_score_is_kube_schedulers_filter_and_weight_sum() -> None:
    affinity = parse_node_affinity(tighten_node_affinity(None, required=[NodeSelectorTerm(match_expressions=(
        NodeSelectorRequirement(key="zone", operator="In", values=("a",)),))], preferred=[NEAR]).node_affinity)
    assert node_affinity_score(affinity, name="n1", labels={"zone": "a", "kubernetes.io/hostname": "n1"}) == (True, 50)
    assert node_affinity_score(affinity, name="n2", labels={"zone": "a", "kubernetes.io/hostname": "n2"}) == (True, 0)
    assert node_affinity_score(affinity, name="n3", labels={"zone": "b"})[0] is False
    assert node_affinity_score(NodeAffinity(), name="n3", labels={}) == (True, 0)
