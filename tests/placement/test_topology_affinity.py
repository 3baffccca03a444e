"""Reading a Godel PodGroup (``core.placement.pod_group_spec``) and merging the planner's terms into a gated pod's
affinity (``core.placement.group_affinity``) by the tightening rules Kubernetes enforces on gated pods."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tether.core.placement.group_affinity import (
    InvalidAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PodPlacement,
    PreferredSchedulingTerm,
    merge_node_affinity,
)
from tether.core.placement.pod_group_spec import API_VERSION, InvalidPodGroup, parse_pod_group
from tether.core.world.pod_group import GroupAffinity, GroupSpec, SortRule

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def pod_group(**affinity: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": {"name": "nginx", "namespace": "ml"},
            "spec": {"minMember": 10, "scheduleTimeoutSeconds": 3000, "affinity": {"podGroupAffinity": affinity}}}


# --- parsing ------------------------------------------------------------------------------------------------------


def test_parse_a_full_pod_group() -> None:
    spec = parse_pod_group(pod_group(
        required=[{"topologyKey": "mainnet"}], preferred=[{"topologyKey": "micronet"}, {"topologyKey": "tor"}],
        sortRules=[{"resource": "GPU", "order": "Descending"},
                   {"resource": "CPU", "dimension": "Available", "order": "Ascending"}],
        nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "tor", "operator": "In",
                                                                   "values": ["tor-0-1-7"]}]}]},
    ))
    assert spec == GroupSpec(name="nginx", namespace="ml", min_member=10, affinity=GroupAffinity(
        required=("mainnet",), preferred=("micronet", "tor"),
        sort_rules=(SortRule(resource="GPU", dimension="Capacity", order="Descending"),
                    SortRule(resource="CPU", dimension="Available", order="Ascending")),
        node_selector=(NodeSelectorTerm(match_expressions=(
            NodeSelectorRequirement(key="tor", operator="In", values=("tor-0-1-7",)),)),),
    ))


def test_parse_defaults() -> None:
    spec = parse_pod_group({"apiVersion": API_VERSION, "kind": "PodGroup", "metadata": {"name": "g"}})
    assert spec == GroupSpec(name="g", min_member=1)
    zero = pod_group()
    zero["spec"]["minMember"] = 0
    assert parse_pod_group(zero).min_member == 1


def test_a_node_selector_may_pick_a_node_by_name() -> None:
    spec = parse_pod_group(pod_group(required=[{"topologyKey": "zone"}], nodeSelector={"nodeSelectorTerms": [
        {"matchFields": [{"key": "metadata.name", "operator": "NotIn", "values": ["n1"]}]}]}))
    assert spec.affinity.node_selector == (NodeSelectorTerm(match_fields=(
        NodeSelectorRequirement(key="metadata.name", operator="NotIn", values=("n1",)),)),)


def _with(path: list[str | int], value: Any) -> dict[str, Any]:
    obj = pod_group(required=[{"topologyKey": "zone"}], preferred=[{"topologyKey": "rack"}],
                    sortRules=[{"resource": "CPU", "order": "Ascending"}],
                    nodeSelector={"nodeSelectorTerms": [{"matchExpressions": [{"key": "a", "operator": "Exists"}]}]})
    target: Any = obj
    for step in path[:-1]:
        target = target[step]
    target[path[-1]] = value
    return obj


AFFINITY: list[str | int] = ["spec", "affinity", "podGroupAffinity"]
EXPRESSION: list[str | int] = [*AFFINITY, "nodeSelector", "nodeSelectorTerms", 0, "matchExpressions", 0]


@pytest.mark.parametrize(("obj", "message"), [
    ({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "PodGroup"}, "not a scheduling.godel.kubewharf.io"),
    ({"apiVersion": API_VERSION, "kind": "Pod"}, "not a scheduling.godel.kubewharf.io"),
    (_with(["spec"], []), "spec: must be an object"),
    (_with(["spec", "minMember"], -1), "spec.minMember"),
    (_with(["spec", "minMember"], "3"), "spec.minMember"),
    (_with(["spec", "minMember"], True), "spec.minMember"),
    (_with([*AFFINITY, "required"], {"topologyKey": "zone"}), "required: must be a list"),
    (_with([*AFFINITY, "required", 0, "topologyKey"], ""), "required[0].topologyKey: must be a non-empty string"),
    (_with([*AFFINITY, "preferred", 0], {}), "preferred[0].topologyKey"),
    (_with([*AFFINITY, "preferred", 0, "topologyKey"], "zone"), "listed more than once: zone"),
    (_with([*AFFINITY, "preferred"], [{"topologyKey": "rack"}, {"topologyKey": "zone"}]), "more than once: zone$"),
    (_with([*AFFINITY, "sortRules", 0, "resource"], "Disk"), "sortRules[0].resource: 'Disk' is not one of"),
    (_with([*AFFINITY, "sortRules", 0, "order"], "Up"), "sortRules[0].order"),
    (_with([*AFFINITY, "sortRules", 0, "dimension"], "Free"), "sortRules[0].dimension"),
    (_with([*AFFINITY, "nodeSelector"], {"nodeSelectorTerms": []}), "must have at least one term"),
    (_with([*EXPRESSION, "operator"], "Near"), "operator: 'Near' is not one of"),
    (_with(EXPRESSION, {"key": "a", "operator": "In"}), "must be non-empty for In"),
    (_with(EXPRESSION, {"key": "a", "operator": "Exists", "values": ["x"]}), "must be empty for Exists"),
    (_with(EXPRESSION, {"key": "a", "operator": "Gt", "values": ["x"]}), "must be one integer for Gt"),
    (_with(EXPRESSION, {"key": "a", "operator": "Lt", "values": ["²"]}), "must be one integer for Lt"),  # no crash
    (_with(EXPRESSION, {"key": "a", "operator": "Gt", "values": ["1_000"]}), "must be one integer for Gt"),
    (_with(EXPRESSION, {"key": "a", "operator": "Gt", "values": ["--5"]}), "must be one integer for Gt"),
    (_with(EXPRESSION, {"key": "", "operator": "Exists"}), "key: must be a non-empty string"),
    (_with([*AFFINITY, "nodeSelector", "nodeSelectorTerms", 0, "matchFields"],
           [{"key": "metadata.labels", "operator": "In", "values": ["a"]}]), "only metadata.name"),
    (_with([*AFFINITY, "nodeSelector", "nodeSelectorTerms", 0, "matchFields"],
           [{"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]), "must have exactly one element"),
    (_with(["spec", "affinity", "podGroupAntiAffinity"], {"required": [{"topologyKey": "tor"}]}), "not supported"),
])
def test_malformed_pod_groups_are_refused_with_the_field(obj: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidPodGroup, match=message.replace("[", r"\[").replace("]", r"\]")):
        parse_pod_group(obj)


# --- merging ------------------------------------------------------------------------------------------------------


def requirement(key: str, *values: str, operator: str = "In") -> NodeSelectorRequirement:
    return NodeSelectorRequirement(key=key, operator=operator, values=values)


DOMAIN = NodeSelectorTerm(match_expressions=(requirement("zone", "z1"),))
PLACEMENT = PodPlacement(
    pod="p", circle="zone=z1,rack=r1", required=(DOMAIN,),
    preferred=(PreferredSchedulingTerm(weight=100, preference=NodeSelectorTerm(
        match_expressions=(requirement("rack", "r1"),))),),
)


def test_no_required_terms_yet_takes_the_planners_terms_whole() -> None:
    merged = merge_node_affinity(None, PLACEMENT)
    assert merged.exact
    assert merged.affinity == {"nodeAffinity": PLACEMENT.to_node_affinity()}
    assert merge_node_affinity({"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": []}}}, PLACEMENT).affinity == \
        merged.affinity


def test_existing_required_terms_only_get_expressions_appended() -> None:
    own = {"podAntiAffinity": {"x": 1}, "nodeAffinity": {
        REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
        ]},
        PREFERRED: [{"weight": 5, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}}],
    }}
    before = copy.deepcopy(own)
    merged = merge_node_affinity(own, PLACEMENT)
    assert own == before  # the input is not modified
    zone = {"key": "zone", "operator": "In", "values": ["z1"]}
    assert merged.exact
    assert merged.affinity == {"podAntiAffinity": {"x": 1}, "nodeAffinity": {
        REQUIRED: {"nodeSelectorTerms": [
            {"matchExpressions": [{"key": "disk", "operator": "In", "values": ["ssd"]}, zone]},
            {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}], "matchExpressions": [zone]},
        ]},
        PREFERRED: [{"weight": 5, "preference": {"matchExpressions": [{"key": "disk", "operator": "Exists"}]}},
                    {"weight": 100, "preference": {"matchExpressions": [
                        {"key": "rack", "operator": "In", "values": ["r1"]}]}}],
    }}
    assert merge_node_affinity(merged.affinity, PLACEMENT).affinity == merged.affinity  # idempotent


def test_several_selector_terms_cannot_be_appended_exactly() -> None:
    placement = PodPlacement(pod="p", circle="", preferred=(), required=(
        NodeSelectorTerm(match_expressions=(requirement("gpu", operator="Exists"), requirement("zone", "z1"))),
        NodeSelectorTerm(match_expressions=(requirement("fpga", operator="Exists"), requirement("zone", "z1"))),
    ))
    own = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": "disk", "operator": "Exists"}]}]}}}
    merged = merge_node_affinity(own, placement)
    assert not merged.exact  # only the domain, which every term shares, could be appended
    assert merged.affinity["nodeAffinity"][REQUIRED]["nodeSelectorTerms"] == [{"matchExpressions": [
        {"key": "disk", "operator": "Exists"}, {"key": "zone", "operator": "In", "values": ["z1"]}]}]
    assert merge_node_affinity(None, placement).exact  # nothing to tighten: the terms are set whole


@pytest.mark.parametrize("affinity", [
    ["not", "an", "object"],
    {"nodeAffinity": []},
    {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": "x"}}},
    {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": ["x"]}}},
    {"nodeAffinity": {PREFERRED: ["x"]}},
])
def test_malformed_affinity_is_refused(affinity: Any) -> None:
    with pytest.raises(InvalidAffinity):
        merge_node_affinity(affinity, PLACEMENT)
