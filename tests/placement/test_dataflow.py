"""Fluid DataFlow affinity inheritance (``core.placement.dataflow``): Fluid's own inheritance table, the cases Fluid
gets wrong, recording, parsing, the gated-pod merge and the release policy.

The universe: a DataLoad ``default/load`` ran on node ``node01`` (zone ``zone-a``, region ``east``, rack
``rack01``); the operations after it are DataProcess / DataMigrate / DataBackup objects built by :func:`op`.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.adapters.testing.reference import REFERENCE
from tether.core.keys import FLUID_LABELS_ANNOTATION
from tether.core.kube import NodeAffinity, NodeSelectorTerm
from tether.core.placement.dataflow import (
    DEFAULT_WAIT_TIMEOUT_MS,
    DataFlowSpecError,
    Hold,
    InheritanceResult,
    Inject,
    MatchExpression,
    PreferredTerm,
    Reject,
    Release,
    Unchanged,
    Wait,
    decide_inheritance,
    gate_decision,
    inheritance_source,
    invalid_spec,
    label_keys,
    merge_node_affinity,
    parse_node_affinity,
    parse_operation,
    placement_from_status,
    record_placement,
    succeeded_pod,
)
from tether.core.world.data_operation import OPERATION_KINDS, DataOperation, OperationRef, RecordedPlacement

HOST = "kubernetes.io/hostname"
ZONE = "topology.kubernetes.io/zone"
REGION = "topology.kubernetes.io/region"
NODE01 = {HOST: "node01", ZONE: "zone-a", REGION: "east", "rack": "rack01", "gpu": "a100"}
REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


def op(kind: str, name: str, namespace: str = "default", *, run_after: dict[str, Any] | None = None,
       affinity: dict[str, Any] | None = None, phase: str = "", **spec: Any) -> dict[str, Any]:
    """A Fluid operation object as the API returns it; ``affinity`` is a nodeAffinity put where the kind keeps it."""
    body: dict[str, Any] = dict(spec)
    if run_after is not None:
        body["runAfter"] = run_after
    if affinity is not None:
        if kind == "DataProcess":
            body["processor"] = {"job": {"podSpec": {"affinity": {"nodeAffinity": affinity}}}}
        else:
            body["affinity"] = {"nodeAffinity": affinity}
    return {"apiVersion": "data.fluid.io/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": namespace}, "spec": body, "status": {"phase": phase}}


def after(name: str = "load", *, kind: str = "DataLoad", policy: str = "", **strategy: Any) -> dict[str, Any]:
    ref: dict[str, Any] = {"kind": kind, "name": name}
    if "namespace" in strategy:
        ref["namespace"] = strategy.pop("namespace")
    return ref | {"affinityStrategy": {"policy": policy, **strategy}}


def completed(kind: str = "DataLoad", name: str = "load", namespace: str = "default", *,
              node: dict[str, str] = NODE01, labels: str | None = None, phase: str = "Complete",
              **spec: Any) -> tuple[DataOperation, RecordedPlacement]:
    """A predecessor in ``phase`` and what tether recorded when its pod succeeded on ``node``."""
    pred = parse_operation(op(kind, name, namespace, phase=phase, **spec))
    annotations = {} if labels is None else {FLUID_LABELS_ANNOTATION: labels}
    return pred, record_placement(operation=pred, pod_annotations=annotations, node_labels=node)


def hostname_term(value: str = "node01") -> dict[str, Any]:
    return {"matchExpressions": [{"key": HOST, "operator": "In", "values": [value]}]}


# --- Fluid's inheritance table ----------------------------------------------------------------------------


def test_default_policy_inherits_nothing() -> None:
    current = parse_operation(op("DataProcess", "process", run_after=after(policy="")))
    pred, placement = completed()
    assert inheritance_source(current) is None
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Unchanged)
    assert inheritance_source(parse_operation(op("DataProcess", "alone"))) is None


@pytest.mark.parametrize("policy", ["Require", "Prefer"])
def test_no_recorded_affinity_inherits_nothing(policy: str) -> None:
    current = parse_operation(op("DataProcess", "process", run_after=after(policy=policy)))
    pred = parse_operation(op("DataLoad", "load", phase="Complete"))  # neither tether nor Fluid recorded a node
    assert isinstance(decide_inheritance(operation=current, predecessor=pred), Unchanged)


def test_no_preceding_operation_is_an_error() -> None:
    current = parse_operation(op("DataProcess", "process", run_after=after(policy="Require")))
    result = decide_inheritance(operation=current, predecessor=None)
    assert isinstance(result, Reject)
    assert result.reason == "PrecedingOperationNotFound"
    assert "DataLoad/default/load" in result.message


def test_require_on_node() -> None:
    current = parse_operation(op("DataProcess", "process", run_after=after(policy="Require")))
    pred, placement = completed()
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Inject)
    assert result.required == (MatchExpression(key=HOST, operator="In", values=("node01",)),)
    assert result.preferred == ()
    assert result.node_affinity == {REQUIRED: {"nodeSelectorTerms": [hostname_term()]}}


def test_require_on_custom_label() -> None:
    current = parse_operation(op("DataProcess", "process", run_after=after(policy="Require",
                                                                           requires=[{"name": "rack"}])))
    pred, placement = completed(labels="rack")
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Inject)
    assert result.node_affinity == {
        REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "rack", "operator": "In",
                                                                "values": ["rack01"]}]}]}}


@pytest.mark.parametrize(("rack", "admitted"), [("7", True), ("+7", True), ("3", False), ("1_000", False),
                                                ("\u0667", False), ("²", False)])
def test_an_own_gt_term_admits_the_inherited_label_as_kube_scheduler_compares_it(rack: str, admitted: bool) -> None:
    """Gt/Lt compare integers as Kubernetes reads them (strconv.ParseInt): ``1_000`` and an Arabic-Indic seven are
    label values Python's ``int()`` would read and kube-scheduler would not match; ``²`` made ``int()`` raise."""
    gt_5 = {"key": "rack", "operator": "Gt", "values": ["5"]}
    own = {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [gt_5]}]}}
    current = parse_operation(op("DataProcess", "process", affinity=own,
                                 run_after=after(policy="Require", requires=[{"name": "rack"}])))
    pred, placement = completed(labels="rack", node={**NODE01, "rack": rack})
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Inject if admitted else Reject), result


def test_prefer_on_zone_with_weight_across_namespaces() -> None:
    current = parse_operation(op("DataProcess", "process", "team", run_after=after(
        policy="Prefer", namespace="data", prefers=[{"name": ZONE, "weight": 10}])))
    pred, placement = completed(namespace="data")
    assert inheritance_source(current) == OperationRef(kind="DataLoad", name="load", namespace="data")
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Inject)
    assert result.required == ()
    assert result.node_affinity == {PREFERRED: [
        {"weight": 10, "preference": {"matchExpressions": [{"key": ZONE, "operator": "In", "values": ["zone-a"]}]}}]}


def test_prefer_defaults_to_the_node_with_weight_100() -> None:
    current = parse_operation(op("DataProcess", "process", run_after=after(policy="Prefer")))
    pred, placement = completed()
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Inject)
    assert result.node_affinity == {PREFERRED: [{"weight": 100, "preference": hostname_term()}]}


def test_depend_on_names_the_source_instead_of_run_after() -> None:
    strategy = after("migrate", kind="DataMigrate", policy="Require",
                     dependOn={"kind": "DataLoad", "name": "load", "namespace": "data"})
    current = parse_operation(op("DataProcess", "process", run_after=strategy))
    assert inheritance_source(current) == OperationRef(kind="DataLoad", name="load", namespace="data")
    pred, placement = completed(namespace="data", node={HOST: "node07"})
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Inject)
    assert result.node_affinity == {REQUIRED: {"nodeSelectorTerms": [hostname_term("node07")]}}
    # without a namespace, dependOn is in the operation's own namespace (not runAfter's)
    strategy["affinityStrategy"]["dependOn"] = {"kind": "DataLoad", "name": "load"}
    strategy["namespace"] = "elsewhere"
    current = parse_operation(op("DataProcess", "process", "team", run_after=strategy))
    assert inheritance_source(current) == OperationRef(kind="DataLoad", name="load", namespace="team")


@pytest.mark.parametrize("phase", ["", "Pending", "Executing"])
def test_predecessor_not_complete_waits(phase: str) -> None:
    current = parse_operation(op("DataProcess", "process", run_after=after(policy="Require")))
    pred, placement = completed(phase=phase)
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Wait)
    assert result.reason == "WaitingForPrecedingOperation"


# --- what Fluid gets wrong --------------------------------------------------------------------------------


@pytest.mark.parametrize("kind", OPERATION_KINDS)
def test_every_kind_records_its_placement(kind: str) -> None:
    """Fluid records DataLoad and DataMigrate only; a DataProcess or DataBackup successor had nothing to follow."""
    pred, placement = completed(kind=kind)
    assert placement == RecordedPlacement(labels={HOST: "node01", ZONE: "zone-a", REGION: "east"})
    current = parse_operation(op("DataLoad", "next", run_after=after(kind=kind, policy="Require")))
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Inject)
    assert result.node_affinity == {REQUIRED: {"nodeSelectorTerms": [hostname_term()]}}


def test_require_keeps_the_operations_own_required_terms() -> None:
    own = {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100", "h100"]}]},
        {"matchExpressions": [{"key": "pool", "operator": "Exists"}], "matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": ["node09"]}]},
    ]}, PREFERRED: [{"weight": 5, "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}}]}
    current = parse_operation(op("DataMigrate", "migrate", run_after=after(policy="Require"), affinity=own))
    pred, placement = completed()
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Inject)
    host = {"key": HOST, "operator": "In", "values": ["node01"]}
    assert result.node_affinity == {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "gpu", "operator": "In", "values": ["a100", "h100"]}, host]},
        {"matchExpressions": [{"key": "pool", "operator": "Exists"}, host], "matchFields": [
            {"key": "metadata.name", "operator": "NotIn", "values": ["node09"]}]},
    ]}, PREFERRED: own[PREFERRED]}


def test_prefer_appends_to_the_operations_own_preferred_terms() -> None:
    own = {PREFERRED: [{"weight": 5, "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}}]}
    current = parse_operation(op("DataProcess", "process", run_after=after(policy="Prefer"), affinity=own))
    pred, placement = completed()
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Inject)
    assert result.node_affinity[PREFERRED] == [*own[PREFERRED], {"weight": 100, "preference": hostname_term()}]


@pytest.mark.parametrize("predecessor", [
    {"kind": "DataMigrate", "parallelism": 3},
    {"kind": "DataLoad", "policy": "Cron", "schedule": "*/5 * * * *"},
    {"kind": "DataProcess", "schedule": "0 * * * *"},
], ids=["parallel", "cron-load", "scheduled-process"])
def test_distributed_or_cron_predecessor_gives_no_node_term(predecessor: dict[str, Any]) -> None:
    kind = predecessor.pop("kind")
    current = parse_operation(op("DataProcess", "process", run_after=after(kind=kind, policy="Require")))
    for phase in ("Complete", "Executing"):  # whatever its phase: there is no node to wait for
        pred, placement = completed(kind=kind, phase=phase, **predecessor)
        assert placement == RecordedPlacement(distributed=True)
        assert isinstance(decide_inheritance(operation=current, predecessor=pred, placement=placement), Unchanged)
    # a recorded "distributed" placement gives no node term either, whatever the predecessor object says
    pred = parse_operation(op("DataLoad", "load", phase="Complete"))
    assert isinstance(decide_inheritance(operation=current, predecessor=pred,
                                         placement=RecordedPlacement(distributed=True)), Unchanged)


# --- more outcomes ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("policy", ["require", "Sometimes", "PREFER"])
def test_unknown_policy_is_rejected_before_the_predecessor_is_looked_at(policy: str) -> None:
    current = parse_operation(op("DataProcess", "process", run_after=after(policy=policy)))
    for pred in (None, completed(phase="Executing")[0]):
        result = decide_inheritance(operation=current, predecessor=pred)
        assert isinstance(result, Reject)
        assert result.reason == "UnknownAffinityPolicy"
        assert repr(policy) in result.message


def test_failed_predecessor_is_rejected_rather_than_waited_for() -> None:
    current = parse_operation(op("DataProcess", "process", run_after=after(policy="Prefer")))
    pred, placement = completed(phase="Failed")
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Reject)
    assert result.reason == "PrecedingOperationFailed"


def test_keys_the_node_lacks_are_skipped_and_reported() -> None:
    strategy = after(policy="Require", requires=[{"name": "rack"}, {"name": HOST}])
    current = parse_operation(op("DataProcess", "process", run_after=strategy))
    pred, placement = completed(node={HOST: "node01", "rack": "rack01"})  # no annotation: rack not recorded
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Inject)
    assert result.missing_keys == ("rack",)
    assert result.node_affinity == {REQUIRED: {"nodeSelectorTerms": [hostname_term()]}}
    assert "rack" in result.message
    release = gate_decision(result=result, gated_since_ms=0, now_ms=1)
    assert isinstance(release, Release) and release.warning  # a requirement came out weaker than asked
    # none of the keys on the node: nothing to inherit
    strategy = after(policy="Prefer", prefers=[{"name": "rack", "weight": 50}])
    current = parse_operation(op("DataProcess", "process", run_after=strategy))
    result2 = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result2, Unchanged)
    assert "rack" in result2.message


def test_require_that_excludes_every_own_term_is_rejected() -> None:
    own = {REQUIRED: {"nodeSelectorTerms": [hostname_term("node02"), {"matchExpressions": [
        {"key": HOST, "operator": "NotIn", "values": ["node01"]}]}]}}
    current = parse_operation(op("DataLoad", "next", run_after=after(policy="Require"), affinity=own))
    pred, placement = completed()
    result = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result, Reject)
    assert result.reason == "AffinityConflict"
    # one compatible term is enough: the expression is added to both (the incompatible one just never matches)
    own[REQUIRED]["nodeSelectorTerms"].append({"matchExpressions": [{"key": HOST, "operator": "Exists"}]})
    current = parse_operation(op("DataLoad", "next", run_after=after(policy="Require"), affinity=own))
    result2 = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(result2, Inject)
    assert len(result2.node_affinity[REQUIRED]["nodeSelectorTerms"]) == 3


def test_fluids_status_record_is_used_when_tether_has_none() -> None:
    status = {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [
        {"key": HOST, "operator": "In", "values": ["node05"]}, {"key": ZONE, "operator": "In", "values": ["z"]}]}]}}
    raw = op("DataLoad", "load", phase="Complete")
    raw["status"]["nodeAffinity"] = status
    pred = parse_operation(raw)
    assert pred.recorded == RecordedPlacement(labels={HOST: "node05", ZONE: "z"})
    current = parse_operation(op("DataProcess", "process", run_after=after(policy="Require")))
    result = decide_inheritance(operation=current, predecessor=pred)
    assert isinstance(result, Inject) and result.required[0].values == ("node05",)
    # tether's own record wins over Fluid's
    result = decide_inheritance(operation=current, predecessor=pred, placement=RecordedPlacement(labels={HOST: "n9"}))
    assert isinstance(result, Inject) and result.required[0].values == ("n9",)


# --- recording --------------------------------------------------------------------------------------------


def test_recording_copies_the_annotated_labels() -> None:
    assert label_keys(" rack , ,gpu,rack,, ") == ("rack", "gpu")
    assert label_keys(None) == label_keys("") == ()
    pred = parse_operation(op("DataProcess", "p", phase="Complete"))
    placement = record_placement(operation=pred, pod_annotations={FLUID_LABELS_ANNOTATION: "rack, gpu ,missing"},
                                 node_labels=NODE01 | {"unrelated": "x"})
    assert placement == RecordedPlacement(labels={HOST: "node01", ZONE: "zone-a", REGION: "east", "rack": "rack01",
                                                  "gpu": "a100"})
    # a node without zone or region labels records what it has
    assert record_placement(operation=pred, pod_annotations={}, node_labels={HOST: "n"}).labels == {HOST: "n"}


def test_recorded_placement_round_trips_through_fluids_status_form() -> None:
    placement = RecordedPlacement(labels={ZONE: "z", HOST: "h", "rack": "r"})
    status = placement.as_node_affinity().as_dict()
    assert [e["key"] for e in status[REQUIRED]["nodeSelectorTerms"][0]["matchExpressions"]] == sorted(
        [ZONE, HOST, "rack"])
    assert placement_from_status(status) == placement
    assert placement_from_status({}) is None
    assert RecordedPlacement(distributed=True).as_node_affinity() == NodeAffinity()


def test_succeeded_pod_is_chosen_independently_of_listing_order() -> None:
    def pod(name: str, phase: str, created: str) -> dict[str, Any]:
        return {"metadata": {"name": name, "creationTimestamp": created}, "status": {"phase": phase}}

    pods = [pod("p-3", "Succeeded", "2024-01-01T00:00:09Z"), pod("p-1", "Failed", "2024-01-01T00:00:01Z"),
            pod("p-2", "Succeeded", "2024-01-01T00:00:05Z"), pod("p-0", "Succeeded", "2024-01-01T00:00:05Z")]
    for ordering in (pods, pods[::-1], pods[1:] + pods[:1]):
        chosen = succeeded_pod(ordering)
        assert chosen is not None and chosen["metadata"]["name"] == "p-0"
    assert succeeded_pod([pod("p", "Running", "")]) is None


# --- parsing ----------------------------------------------------------------------------------------------


def test_parse_reads_keys_defaults_and_own_affinity() -> None:
    affinity = {REQUIRED: {"nodeSelectorTerms": [hostname_term("n3")]}}
    strategy = after(policy="Prefer", prefers=[{"name": ZONE, "weight": 10}], requires=[{"name": "rack"}])
    parsed = parse_operation(op("DataProcess", "process", "team", run_after=strategy, affinity=affinity,
                                phase="Executing"))
    assert parsed.key == "DataProcess/team/process"
    assert parsed.run_after is not None
    assert parsed.run_after.ref == OperationRef(kind="DataLoad", name="load", namespace="team")
    assert parsed.run_after.strategy.requires == ("rack",)
    assert parsed.run_after.strategy.prefers[0].weight == 10
    assert parsed.run_after.strategy.depend_on is None
    assert parsed.node_affinity.as_dict() == affinity
    assert (parsed.phase, parsed.distributed, parsed.cron, parsed.recorded) == ("Executing", False, False, None)
    assert parse_operation(op("DataLoad", "l", affinity=affinity)).node_affinity.as_dict() == affinity
    assert parse_operation(op("DataMigrate", "m", parallelism=2)).distributed
    # DataBackup has no affinity of its own; a DataProcess script processor neither
    assert parse_operation(op("DataBackup", "b", affinity=affinity)).node_affinity == NodeAffinity()
    script = op("DataProcess", "s", processor={"script": {"image": "python"}})
    assert parse_operation(script).node_affinity == NodeAffinity()


def _set(obj: dict[str, Any], dotted: str, value: Any) -> dict[str, Any]:
    *parents, last = dotted.split(".")
    node = obj
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return obj


@pytest.mark.parametrize(("field", "value", "path"), [
    ("apiVersion", "batch/v1", "apiVersion"),
    ("kind", "DataSet", "kind"),
    ("metadata.namespace", "", "metadata.namespace"),
    ("metadata.name", None, "metadata.name"),
    ("spec.runAfter", "load", "spec.runAfter"),
    ("spec.runAfter.kind", "Job", "spec.runAfter.kind"),
    ("spec.runAfter.name", "", "spec.runAfter.name"),
    ("spec.runAfter.affinityStrategy.policy", 1, "spec.runAfter.affinityStrategy.policy"),
    ("spec.runAfter.affinityStrategy.requires", [{"name": ""}], "spec.runAfter.affinityStrategy.requires[0].name"),
    ("spec.runAfter.affinityStrategy.prefers", [{"name": ZONE, "weight": "10"}],
     "spec.runAfter.affinityStrategy.prefers[0].weight"),
    ("spec.runAfter.affinityStrategy.prefers", [{"name": ZONE, "weight": 0}],
     "spec.runAfter.affinityStrategy.prefers[0].weight"),
    ("spec.runAfter.affinityStrategy.prefers", [{"name": ZONE}], "spec.runAfter.affinityStrategy.prefers[0].weight"),
    ("spec.runAfter.affinityStrategy.prefers", [{"name": ZONE, "weight": True}],
     "spec.runAfter.affinityStrategy.prefers[0].weight"),
    ("spec.runAfter.affinityStrategy.dependOn", {"kind": "DataLoad"}, "spec.runAfter.affinityStrategy.dependOn.name"),
    ("spec.parallelism", 0, "spec.parallelism"),
    ("spec.affinity.nodeAffinity", {REQUIRED: {"nodeSelectorTerms": {"matchExpressions": []}}},
     f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms"),
    ("spec.affinity.nodeAffinity", {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [{"key": "k"}]}]}},
     f"spec.affinity.nodeAffinity.{REQUIRED}.nodeSelectorTerms[0].matchExpressions[0].operator"),
    ("status.nodeAffinity", [], "status.nodeAffinity"),
])
def test_malformed_operation_names_the_field(field: str, value: Any, path: str) -> None:
    raw = _set(op("DataMigrate", "migrate", run_after=after(policy="Require")), field, value)
    with pytest.raises(DataFlowSpecError) as caught:
        parse_operation(raw)
    assert caught.value.path == path
    rejected = invalid_spec(caught.value)
    assert rejected.reason == "InvalidSpec" and path in rejected.message


# --- the merge and the gated-pod tightening rules ---------------------------------------------------------


def is_tightening(before: NodeAffinity, after: NodeAffinity) -> bool:
    """Kubernetes' rule for a gated pod, stated independently of the merge: required terms may be added only when
    there were none; otherwise the same number of terms, each keeping its expressions and fields as they were
    (in order) and possibly gaining expressions. Preferred terms are free."""
    if not before.required:
        return True
    if len(before.required) != len(after.required):
        return False
    return all(new.match_fields == old.match_fields
               and new.match_expressions[:len(old.match_expressions)] == old.match_expressions
               for old, new in zip(before.required, after.required, strict=True))


def test_merge_creates_a_term_only_where_none_existed() -> None:
    host = MatchExpression(key=HOST, operator="In", values=("n1",))
    assert merge_node_affinity(existing=None, required=[host]) == {REQUIRED: {"nodeSelectorTerms": [
        hostname_term("n1")]}}
    assert merge_node_affinity(existing={}, required=[]) == {}
    existing = {REQUIRED: {"nodeSelectorTerms": [{"matchFields": [
        {"key": "metadata.name", "operator": "In", "values": ["n1", "n2"]}]}]}}
    merged = merge_node_affinity(existing=existing, required=[host])
    assert merged == {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [host.as_dict()],
                                                         "matchFields": existing[REQUIRED]["nodeSelectorTerms"][0][
                                                             "matchFields"]}]}}
    assert is_tightening(parse_node_affinity(existing), parse_node_affinity(merged))


def test_merge_is_idempotent_and_keeps_existing_expressions_verbatim() -> None:
    dup = {"key": "gpu", "operator": "Exists"}
    existing = {REQUIRED: {"nodeSelectorTerms": [{"matchExpressions": [dup, dup]}]},
                PREFERRED: [{"weight": 1, "preference": {"matchExpressions": [dup]}}] * 2}
    host = MatchExpression(key=HOST, operator="In", values=("n1",))
    near = PreferredTerm(weight=100, preference=NodeSelectorTerm(match_expressions=(host,)))
    once = merge_node_affinity(existing=existing, required=[host, host], preferred=[near, near])
    assert once[REQUIRED]["nodeSelectorTerms"] == [{"matchExpressions": [dup, dup, host.as_dict()]}]
    assert once[PREFERRED] == [*existing[PREFERRED], near.as_dict()]
    assert merge_node_affinity(existing=once, required=[host], preferred=[near]) == once
    assert merge_node_affinity(existing=parse_node_affinity(once), required=[host]) == once


_keys = st.sampled_from(["a", "b", HOST, ZONE])
_expressions = st.builds(MatchExpression, key=_keys, operator=st.sampled_from(["In", "NotIn", "Exists"]),
                         values=st.lists(st.sampled_from(["x", "y"]), max_size=2).map(tuple))
_terms = st.builds(NodeSelectorTerm, match_expressions=st.lists(_expressions, max_size=3).map(tuple),
                   match_fields=st.lists(_expressions, max_size=1).map(tuple))
_preferred = st.builds(PreferredTerm, weight=st.integers(1, 100), preference=_terms)
_affinities = st.builds(NodeAffinity, required=st.lists(_terms, max_size=3).map(tuple),
                        preferred=st.lists(_preferred, max_size=2).map(tuple))


@settings(max_examples=200, deadline=None)
@given(existing=_affinities, required=st.lists(_expressions, max_size=3), preferred=st.lists(_preferred, max_size=2))
def test_merge_obeys_the_tightening_rules(existing: NodeAffinity, required: list[MatchExpression],
                                          preferred: list[PreferredTerm]) -> None:
    merged = merge_node_affinity(existing=existing.as_dict(), required=required, preferred=preferred)
    after_merge = parse_node_affinity(merged)
    assert is_tightening(existing, after_merge)
    for term in after_merge.required:  # every injected expression constrains every term
        assert set(required) <= set(term.match_expressions)
    assert set(preferred) <= set(after_merge.preferred)
    assert after_merge.preferred[:len(existing.preferred)] == existing.preferred
    assert merge_node_affinity(existing=merged, required=required, preferred=preferred) == merged
    assert merge_node_affinity(existing=existing, required=required, preferred=preferred) == merged


# --- release policy ---------------------------------------------------------------------------------------


def test_waiting_holds_until_the_deadline_then_releases_with_a_warning() -> None:
    wait = Wait(reason="WaitingForPrecedingOperation", message="preceding operation is Executing")
    held = gate_decision(result=wait, gated_since_ms=1_000, now_ms=1_000 + DEFAULT_WAIT_TIMEOUT_MS - 1)
    assert held == Hold(until_ms=1_000 + DEFAULT_WAIT_TIMEOUT_MS, reason=wait.reason, message=wait.message)
    assert DEFAULT_WAIT_TIMEOUT_MS == 600_000
    released = gate_decision(result=wait, gated_since_ms=1_000, now_ms=1_000 + DEFAULT_WAIT_TIMEOUT_MS)
    assert isinstance(released, Release)
    assert (released.node_affinity, released.reason, released.warning) == (None, "PrecedingOperationTimeout", True)
    assert "Executing" in released.message
    assert gate_decision(result=wait, gated_since_ms=0, now_ms=5, timeout_ms=10) == Hold(
        until_ms=10, reason=wait.reason, message=wait.message)
    assert isinstance(gate_decision(result=wait, gated_since_ms=0, now_ms=0, timeout_ms=0), Release)
    with pytest.raises(ValueError, match="timeout_ms"):
        gate_decision(result=wait, gated_since_ms=0, now_ms=0, timeout_ms=-1)


def test_every_other_outcome_releases_at_once() -> None:
    current = parse_operation(op("DataProcess", "process", run_after=after(policy="Require")))
    pred, placement = completed()
    inject = decide_inheritance(operation=current, predecessor=pred, placement=placement)
    assert isinstance(inject, Inject)
    cases: list[tuple[InheritanceResult, dict[str, Any] | None, bool]] = [
        (inject, inject.node_affinity, False),
        (Unchanged(reason="NoAffinityInherited", message="m"), None, False),
        (decide_inheritance(operation=current, predecessor=None), None, True),  # missing predecessor: not stuck
        (Reject(reason="UnknownAffinityPolicy", message="m"), None, True),
    ]
    for result, affinity, warning in cases:
        released = gate_decision(result=result, gated_since_ms=0, now_ms=0)
        assert isinstance(released, Release)
        assert (released.node_affinity, released.reason, released.warning) == (affinity, result.reason, warning)


# --- determinism and the reference CRDs -------------------------------------------------------------------


def test_decisions_are_deterministic() -> None:
    strategy = after(policy="Prefer", prefers=[{"name": ZONE, "weight": 10}, {"name": "rack", "weight": 20},
                                               {"name": HOST, "weight": 100}])
    raw = op("DataProcess", "process", run_after=strategy, affinity={PREFERRED: [
        {"weight": 1, "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}}]})
    outputs = set()
    for node in (NODE01, dict(reversed(NODE01.items()))):  # label order of the node does not matter
        pred, placement = completed(node=node, labels="gpu,rack")
        result = decide_inheritance(operation=parse_operation(raw), predecessor=pred, placement=placement)
        outputs.add(msgspec.json.encode(result))
        outputs.add(msgspec.json.encode(placement.as_node_affinity()))
    assert len(outputs) == 2
    decoded = msgspec.json.decode(sorted(outputs)[-1], type=Unchanged | Wait | Inject | Reject)
    assert isinstance(decoded, Inject)
    assert [t.weight for t in decoded.preferred] == [10, 20, 100]  # the strategy's order


FLUID_CRDS = REFERENCE / "fluid"  # (../shared/reference, beside the main checkout for a worktree)


@pytest.mark.skipif(not FLUID_CRDS.is_dir(), reason=f"Fluid reference CRDs not present at {FLUID_CRDS}")
@pytest.mark.parametrize("kind", OPERATION_KINDS)
def test_the_fields_read_exist_in_fluids_crds(kind: str) -> None:
    yaml = pytest.importorskip("yaml")
    plural = kind.lower() + ("es" if kind.endswith("s") else "s")
    crd = yaml.safe_load((FLUID_CRDS / f"data.fluid.io_{plural}.yaml").read_text())
    schema = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]

    spec = schema["spec"]["properties"]
    strategy = spec["runAfter"]["properties"]["affinityStrategy"]["properties"]
    assert {"policy", "requires", "prefers", "dependOn"} <= set(strategy)
    assert set(strategy["prefers"]["items"]["required"]) == {"name", "weight"}
    assert set(spec["runAfter"]["required"]) == {"kind", "name"}
    assert set(spec["runAfter"]["properties"]["kind"]["enum"]) == set(OPERATION_KINDS)
    assert {"phase", "nodeAffinity"} <= set(schema["status"]["properties"])
    affinity_path = {"DataLoad": ["affinity"], "DataMigrate": ["affinity"],
                     "DataProcess": ["processor", "job", "podSpec", "affinity"], "DataBackup": None}[kind]
    if affinity_path is None:
        assert "affinity" not in spec
    else:
        node = schema["spec"]
        for step in affinity_path:
            node = node["properties"][step]
        assert "nodeAffinity" in node["properties"]
    assert ("parallelism" in spec) == (kind == "DataMigrate")
