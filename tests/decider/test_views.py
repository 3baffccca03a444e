"""The typed views: the fast path (raw JSON decoded straight into typed structs) and the tolerant path (plain
dictionaries, field by field) must agree on every well-typed object, and a malformed one must still parse."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.adapters.kubernetes import manifests
from tether.core.commands import CreateDataSource
from tether.core.envelope import EventRecord
from tether.core.events import CommandSucceeded, ObjectDeleted, ObjectObserved
from tether.core.identity import DataIdentity, identity_problem, make_identity
from tether.core.keys import LAST_APPLIED_ANNOTATION
from tether.core.kube import Condition, set_condition, trim
from tether.core.world import initial_world, views
from tether.projections.fold import _stale, evolve
from tether.projections.replay_fold import fold_batch
from tether.projections.snapshot import decode_world, encode_world


def _claim(**overrides: Any) -> dict[str, Any]:
    raw = manifests.claim("c1", namespace="ns1", table="prod.sales.orders", workload="w1")
    raw["metadata"].update(uid="u1", resourceVersion="5", generation=1)
    raw["spec"].update(overrides)
    return raw


WELL_TYPED_CLAIMS = {
    "plain": _claim(),
    "attributes": _claim(attributes={"region": "east", "format": "parquet"}),
    "attributes null": _claim(attributes=None),
    "workload namespace given": _claim(workload={"apiVersion": "apps/v1", "kind": "Deployment", "name": "w",
                                                 "namespace": "other"}),
    "workload namespace empty": _claim(workload={"apiVersion": "apps/v1", "kind": "Deployment", "name": "w",
                                                 "namespace": ""}),
    "workload without name": _claim(workload={"apiVersion": "apps/v1", "kind": "Deployment"}),
    "no workload": _claim(workload=None),
    "empty table name": _claim(dataSourceName=""),
    "whitespace in name": _claim(dataSourceName="db. orders "),
    "unknown fields": _claim(somethingNew={"nested": [1, 2, 3]}),
}


def test_trim_drops_kubectls_copy_of_the_object_and_keeps_the_other_annotations() -> None:
    """``kubectl apply``'s last-applied annotation is a second copy of the whole object: kept, it would double
    what every object costs in the world and in the log."""
    raw = {"apiVersion": "v1", "kind": "ConfigMap", "data": {"k": "v"},
           "metadata": {"name": "a", "namespace": "n", "managedFields": [{"manager": "kubectl"}],
                        "annotations": {LAST_APPLIED_ANNOTATION: '{"apiVersion": "v1", "kind": "ConfigMap"}',
                                        "team": "ml"}}}
    obj = trim(raw)
    assert obj.metadata.annotations == {"team": "ml"} and obj.data == {"k": "v"}
    raw["metadata"]["annotations"] = {LAST_APPLIED_ANNOTATION: "{}"}
    assert trim(raw).metadata.annotations == {}


def test_a_priority_class_keeps_its_value_under_spec() -> None:
    """A PriorityClass has no spec: its ``value`` and ``globalDefault`` are top-level fields, which admission reads."""
    obj = trim({"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass", "metadata": {"name": "high"},
                "value": 1000, "globalDefault": False, "description": "not read"})
    assert obj.spec_dict() == {"value": 1000, "globalDefault": False}


def test_a_condition_keeps_its_transition_time_while_its_status_stays() -> None:
    before = (Condition(type="Ready", status="True", reason="A", last_transition_time="2026-01-01T00:00:00Z"),
              Condition(type="Bound", status="False", reason="B", last_transition_time="2026-01-01T00:00:00Z"))
    same = set_condition(before, Condition(type="Bound", status="False", reason="C",
                                           last_transition_time="2026-02-02T00:00:00Z"))
    assert same[0] == before[0] and same[1].reason == "C"
    assert same[1].last_transition_time == "2026-01-01T00:00:00Z"  # still False: no transition
    flipped = set_condition(before, Condition(type="Bound", status="True", reason="D",
                                              last_transition_time="2026-02-02T00:00:00Z"))
    assert flipped[1].last_transition_time == "2026-02-02T00:00:00Z"
    added = set_condition(before, Condition(type="New", status="True", reason="E"))
    assert [c.type for c in added] == ["Ready", "Bound", "New"]


@pytest.mark.parametrize(("identity", "problem"), [
    (DataIdentity(system="amoro", type="table", name="", attributes=()), "spec.dataSourceName must not be empty"),
    (DataIdentity(system="amoro", type=" ", name="db.t", attributes=()), "spec.dataSourceType must not be empty"),
    (DataIdentity(system="", type="table", name="db.t", attributes=()), "spec.system must not be empty"),
    (DataIdentity(system="amoro", type="table", name="db.t ", attributes=()), "name 'db.t ' contains whitespace"),
    (DataIdentity(system="amoro", type="table", name="db.t", attributes=()), None),
])
def test_an_identity_that_cannot_be_served_says_which_field(identity: DataIdentity, problem: str | None) -> None:
    assert identity_problem(identity) == problem


@pytest.mark.parametrize("name", sorted(WELL_TYPED_CLAIMS))
def test_claim_spec_fast_path_agrees_with_tolerant_path(name: str) -> None:
    obj = trim(WELL_TYPED_CLAIMS[name])
    assert views._claim_spec_of(obj) == views._claim_spec_tolerant(obj.spec_dict(), obj.metadata.namespace)


MALFORMED_CLAIMS = {
    "system is a number": (_claim(system=7), "must be strings"),
    "attribute value is a number": (_claim(attributes={"region": 1}), "attributes must map strings to strings"),
    "workload is a string": (_claim(workload="apps/v1/Deployment/w1"), "spec.workload must give"),
    "workload name is a list": (_claim(workload={"apiVersion": "apps/v1", "kind": "Deployment", "name": ["w"]}),
                                "spec.workload must give"),
}


@pytest.mark.parametrize("name", sorted(MALFORMED_CLAIMS))
def test_malformed_claim_parses_with_a_problem(name: str) -> None:
    raw, problem = MALFORMED_CLAIMS[name]
    claim = views.parse_claim(trim(raw))
    assert claim.identity is None and problem in claim.problem


def test_claim_status_tolerates_bad_fields_and_keeps_good_conditions() -> None:
    raw = _claim()
    raw["status"] = {"phase": 3, "boundDataSource": None,
                     "conditions": [{"type": "Bound", "status": "True", "reason": "DataSourceBound"}, "junk"]}
    claim = views.parse_claim(trim(raw))
    assert (claim.phase, claim.bound_data_source) == ("Pending", "")
    assert [(c.type, c.reason) for c in claim.conditions] == [("Bound", "DataSourceBound")]


def test_claim_spec_is_reused_at_the_same_generation() -> None:
    first = views.parse_claim(trim(_claim()))
    raw = _claim(dataSourceName="a.different.table")  # same generation: the API says the spec did not change
    raw["metadata"]["resourceVersion"] = "6"
    raw["status"] = {"phase": "Bound", "boundDataSource": "ds1"}
    again = views.parse_claim(trim(raw), first)
    assert again.identity == first.identity and (again.phase, again.resource_version) == ("Bound", "6")
    raw["metadata"]["generation"] = 2
    assert views.parse_claim(trim(raw), first).identity != first.identity


def _source(status: dict[str, Any], **spec: Any) -> dict[str, Any]:
    identity = make_identity("amoro", "table", "prod.sales.orders", {})
    raw = manifests.data_source_manifest(CreateDataSource(name="ds1", identity=identity,
                                                          cluster_names=("east2", "east1", "east1"),
                                                          location="s3://east/orders", reclaim_policy="Delete"))
    raw["metadata"].update(uid="u2", resourceVersion="9")
    raw["spec"].update(spec)
    raw["status"] = status
    return raw


REF = {"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": "DataSourceClaim", "name": "c1",
       "namespace": "ns1", "uid": "u1"}


def test_source_fast_and_tolerant_paths_agree() -> None:
    fast = views.parse_source(trim(_source({"boundClaims": 1, "claimRefs": [REF]})))
    # the same DataSource, with one field of an unexpected type that forces the tolerant path for the spec
    slow = views.parse_source(trim(_source({"boundClaims": 1, "claimRefs": [REF], "extra": 1},
                                           locality={"clusterNames": ["east2", "east1", 5]})))
    assert fast.cluster_names == ("east1", "east2") and fast.reclaim_policy == "Delete"
    assert msgspec.structs.replace(slow, resource_version=fast.resource_version) == fast
    assert fast.claim_keys == ("DataSourceClaim/ns1/c1",)


def _refs(*names: str) -> list[dict[str, Any]]:
    return [REF | {"name": n, "uid": f"u-{n}"} for n in names]


@pytest.mark.parametrize(("before", "after"), [
    pytest.param("abc", "abcd", id="appended"),
    pytest.param("acd", "abcd", id="inserted"),
    pytest.param("abcd", "acd", id="one-left"),
    pytest.param("abcd", "ad", id="two-left"),
    pytest.param("abc", "cba", id="reordered"),
    pytest.param("abc", "", id="emptied"),
    pytest.param("", "ab", id="first-refs"),
])
def test_claim_refs_reused_from_the_previous_observation_parse_as_a_fresh_parse(before: str, after: str) -> None:
    previous = views.parse_source(trim(_source({"boundClaims": len(before), "claimRefs": _refs(*before)})))
    raw = _source({"boundClaims": len(after), "claimRefs": _refs(*after)})
    raw["metadata"]["resourceVersion"] = "10"
    reused, fresh = views.parse_source(trim(raw), previous), views.parse_source(trim(raw))
    assert reused == fresh
    assert reused.claim_keys == tuple(f"DataSourceClaim/ns1/{n}" for n in after)
    unchanged = set(before) & set(after)
    shared = {r.name for r in reused.claim_refs if any(r is p for p in previous.claim_refs)}
    assert shared <= unchanged  # a ref is reused only when its JSON is unchanged
    if after.startswith(before):  # refs appended (or none changed): the held ones are all reused
        assert shared == unchanged


@pytest.mark.parametrize(("before", "after"), [
    pytest.param("abc", "abcd", id="appended"),
    pytest.param("abc", "abcb", id="appended-a-duplicate"),
    pytest.param("abc", "abc", id="unchanged"),
    pytest.param("acd", "abcd", id="inserted"),
    pytest.param("abcd", "ad", id="two-left"),
    pytest.param("", "ab", id="first-refs"),
    pytest.param("ab", "", id="emptied"),
])
def test_the_claim_index_after_a_claim_refs_write_is_the_index_of_the_new_refs(before: str, after: str) -> None:
    world = initial_world()
    evolve(world, _observed(_source({"boundClaims": len(before), "claimRefs": _refs(*before)})))
    raw = _source({"boundClaims": len(after), "claimRefs": _refs(*after)})
    raw["metadata"]["resourceVersion"] = "10"
    touched = evolve(world, _observed(raw))
    # (an index entry is a tuple or a set, core.world.Index: its members are compared)
    assert {k: set(v) for k, v in world.sources_listing_claim.items()} == \
        {f"DataSourceClaim/ns1/{n}": {"ds1"} for n in after}
    assert touched.claims == {f"DataSourceClaim/ns1/{n}" for n in set(before) ^ set(after)}
    assert "extends" not in world.sources["ds1"].__dict__  # the marker is read once, not kept


def test_claim_refs_reused_across_whitespace_in_the_raw_array() -> None:
    previous = views.parse_source(trim(_source({"boundClaims": 2, "claimRefs": _refs("a", "b")})))
    obj = trim(_source({"boundClaims": 3, "claimRefs": _refs("a", "b", "c")}))
    body = bytes(obj.status)
    head, _, c = body.rpartition(b",{")  # the refs a and b, then c
    for spaced, reused in [(head + b" ,\n {" + c.replace(b"}]", b"} ]"), True),  # after the previous refs
                           (head.replace(b"},{", b"} , {") + b",{" + c, False)]:  # between them: parsed again
        obj.status = msgspec.Raw(spaced)
        assert msgspec.json.decode(spaced)["claimRefs"] == _refs("a", "b", "c")
        again = views.parse_source(obj, previous)
        assert again == views.parse_source(obj) and [r.name for r in again.claim_refs] == ["a", "b", "c"]
        assert (again.claim_refs[0] is previous.claim_refs[0]) is reused


def test_source_spec_is_reused_at_the_same_generation_and_parsed_again_when_it_changes() -> None:
    raw = _source({"boundClaims": 0, "claimRefs": []})
    raw["metadata"]["generation"] = 1
    first = views.parse_source(trim(raw))
    raw["spec"]["locality"] = {"clusterNames": ["west1"]}  # same generation: the API says the spec did not change
    raw["metadata"]["resourceVersion"] = "10"
    again = views.parse_source(trim(raw), first)
    assert again.cluster_names is first.cluster_names and again.identity is first.identity
    raw["metadata"]["generation"] = 2
    moved = views.parse_source(trim(raw), again)
    assert moved.cluster_names == ("west1",) and moved == views.parse_source(trim(raw))
    raw["metadata"].update(uid="recreated", generation=1)  # another object of the same name: nothing reused
    assert views.parse_source(trim(raw), moved).cluster_names == ("west1",)


def test_a_changed_ref_is_parsed_again_not_reused() -> None:
    previous = views.parse_source(trim(_source({"boundClaims": 2, "claimRefs": _refs("a", "b")})))
    refs = _refs("a", "b", "c")
    refs[1]["uid"] = "recreated"  # a claim deleted and created again under the same name
    source = views.parse_source(trim(_source({"boundClaims": 3, "claimRefs": refs})), previous)
    assert [r.uid for r in source.claim_refs] == ["u-a", "recreated", "u-c"]
    assert not any(r is p for r in source.claim_refs for p in previous.claim_refs)


def test_source_status_with_partial_refs_and_bad_count() -> None:
    source = views.parse_source(trim(_source({"boundClaims": "one", "claimRefs": [{"name": "c1", "namespace": "ns1"},
                                                                                   {"namespace": "no-name"}]})))
    assert source.bound_claims == 0
    assert source.claim_keys == ("DataSourceClaim/ns1/c1",)


def test_binding_fast_and_tolerant_paths_agree() -> None:
    raw = manifests.resource_binding("w1", namespace="ns1", exclude=["west1"])
    raw["metadata"].update(uid="u3", resourceVersion="3")
    raw["spec"]["clusters"] = [{"name": "east1", "replicas": 1}, {"name": "east2"}]
    fast = views.parse_binding(trim(raw))
    raw["spec"]["clusters"].append({"replicas": 2})  # no name: the tolerant path skips the entry
    slow = views.parse_binding(trim(raw))

    def parsed(b: views.Binding) -> tuple[Any, ...]:  # the views keep their raw spec, which differs here
        return b.ref, b.resource_version, b.workload, b.scheduled_clusters, b.placement, b.injected, b.added

    assert parsed(fast) == parsed(slow)
    assert fast.workload == "apps/Deployment/ns1/w1" and fast.scheduled_clusters == ("east1", "east2")
    assert fast.placement["clusterAffinity"] == {"exclude": ["west1"]}


def test_binding_workload_and_clusters_are_reused_while_unchanged_and_parsed_again_when_they_change() -> None:
    raw = manifests.resource_binding("w1", namespace="ns1")
    raw["metadata"].update(uid="u3", resourceVersion="3")
    raw["spec"]["clusters"] = [{"name": "east2"}, {"name": "east1"}]
    first = views.parse_binding(trim(raw))

    def step(**spec: Any) -> tuple[views.Binding, views.Binding]:
        raw["spec"].update(spec)
        raw["metadata"]["resourceVersion"] = str(int(raw["metadata"]["resourceVersion"]) + 1)
        return views.parse_binding(trim(raw), first), views.parse_binding(trim(raw))

    moved, fresh = step(placement={"clusterAffinity": {"exclude": ["west1"]}})  # a placement write
    assert moved == fresh and moved.workload is first.workload and moved.scheduled_clusters is first.scheduled_clusters
    rescheduled, fresh = step(clusters=[{"name": "west1"}])
    assert rescheduled == fresh and rescheduled.scheduled_clusters == ("west1",)
    assert rescheduled.workload is first.workload
    rebound, fresh = step(resource={"apiVersion": "batch/v1", "kind": "Job", "namespace": "", "name": "j"})
    assert rebound == fresh and rebound.workload == "batch/Job/ns1/j"
    malformed, fresh = step(clusters="east1")  # the tolerant path: nothing reused from the memo
    assert malformed == fresh and malformed.scheduled_clusters == () and malformed.workload == "batch/Job/ns1/j"
    restored = decode_world(encode_world(_world_with(first)))  # a view from a snapshot has no memo
    assert restored is not None
    again = views.parse_binding(trim(raw), restored.bindings[first.ref.key])
    assert again == views.parse_binding(trim(raw))


def _world_with(binding: views.Binding) -> Any:
    world = initial_world()
    world.bindings[binding.ref.key] = binding
    return world


def test_claims_naming_one_table_share_one_identity_object() -> None:
    first = views.parse_claim(trim(_claim(attributes={"region": "east", "format": "parquet"})))
    raw = _claim(attributes={"format": "parquet", "region": "east"})
    raw["metadata"].update(name="c2", uid="u2")
    second = views.parse_claim(trim(raw))
    assert second.identity is first.identity and first.identity is not None
    assert first.identity.attributes == (("format", "parquet"), ("region", "east"))
    other = views.parse_claim(trim(_claim(attributes={"region": "west"})))
    assert other.identity != first.identity
    bad = views.parse_claim(trim(_claim(dataSourceName="db. orders ")))
    assert bad.identity is None and "whitespace" in bad.problem


@given(st.text(alphabet="0123456789", min_size=1, max_size=6) | st.text(max_size=4),
       st.text(alphabet="0123456789", min_size=1, max_size=6) | st.text(max_size=4))
def test_an_observation_newer_by_the_quick_test_is_never_stale(new: str, held: str) -> None:
    # world._ignored skips _stale when both have as many characters and the new one sorts after: that must be
    # what _stale would say
    if len(new) == len(held) and new > held:
        assert not _stale(new, held)


def test_a_replay_does_not_decode_what_only_the_decider_reads() -> None:
    raw = _claim()
    raw["status"] = {"phase": "Bound", "boundDataSource": "ds1"}
    folded, evolved = initial_world(), initial_world()
    fold_batch(folded, [_observed(raw)])
    evolve(evolved, _observed(raw))
    (claim,) = folded.claims.values()
    assert "_status" not in claim.__dict__  # nobody read what the claim touched, so its status stayed raw
    assert "_status" in next(iter(evolved.claims.values())).__dict__  # evolve named the DataSource it touched
    assert folded == evolved and claim.bound_data_source == "ds1"


def _observed(raw: dict[str, Any]) -> EventRecord:
    obj = trim(raw)
    return EventRecord(at_ms=1, source="watch", key=obj.key, event=ObjectObserved(obj=obj))


def test_an_observation_at_the_same_resource_version_touches_nothing() -> None:
    world = initial_world()
    raw = _claim()
    assert evolve(world, _observed(raw)).claims == {"DataSourceClaim/ns1/c1"}
    echo = evolve(world, _observed(raw))  # the watch echo of a write already folded from its response
    assert not (echo.claims or echo.sources or echo.bindings)
    older = dict(raw, metadata=dict(raw["metadata"], resourceVersion="4"))
    assert not evolve(world, _observed(older)).claims and world.claims["DataSourceClaim/ns1/c1"].resource_version == "5"
    newer = dict(raw, metadata=dict(raw["metadata"], resourceVersion="6"))
    assert evolve(world, _observed(newer)).claims == {"DataSourceClaim/ns1/c1"}


def test_a_write_result_at_the_same_resource_version_still_ends_the_command_in_flight() -> None:
    world = initial_world()
    raw = _claim()
    evolve(world, _observed(raw))
    world.inflight["update_claim_status:DataSourceClaim/ns1/c1"] = "cmd-1"
    touched = evolve(world, EventRecord(at_ms=2, source="executor", key="DataSourceClaim/ns1/c1",
                                        event=CommandSucceeded(command_id="cmd-1", command="update_claim_status",
                                                               target="DataSourceClaim/ns1/c1", result=trim(raw))))
    assert not world.inflight and touched.claims == {"DataSourceClaim/ns1/c1"}


def test_a_late_write_result_does_not_resurrect_a_deleted_object() -> None:
    world = initial_world()
    raw = _claim()
    evolve(world, _observed(raw))
    gone = trim(dict(raw, metadata=dict(raw["metadata"], resourceVersion="8")))
    evolve(world, EventRecord(at_ms=2, source="watch", key=gone.key, event=ObjectDeleted(obj=gone)))
    late = trim(dict(raw, metadata=dict(raw["metadata"], resourceVersion="7")))  # written before the deletion
    touched = evolve(world, EventRecord(at_ms=3, source="executor", key=late.key,
                                        event=CommandSucceeded(command_id="cmd-2", command="add_finalizer",
                                                               target=late.key, result=late)))
    assert "DataSourceClaim/ns1/c1" not in world.claims and touched.claims == {"DataSourceClaim/ns1/c1"}
    # a claim created again under the same name has a newer resourceVersion: it is not buried
    again = dict(raw, metadata=dict(raw["metadata"], resourceVersion="12", uid="u9"))
    evolve(world, _observed(again))
    assert world.claims["DataSourceClaim/ns1/c1"].ref.uid == "u9" and not world.tombstones


def test_tombstones_are_bounded_oldest_first() -> None:
    from tether.projections import fold as world_module

    world = initial_world()
    for i in range(world_module.TOMBSTONES + 5):
        world_module._bury(world, f"DataSourceClaim/ns/c{i}", str(i + 1))
    assert len(world.tombstones) == world_module.TOMBSTONES
    assert "DataSourceClaim/ns/c0" not in world.tombstones and f"DataSourceClaim/ns/c{i}" in world.tombstones


def test_a_malformed_placement_reads_as_none_and_the_binding_is_still_indexed() -> None:
    raw = manifests.resource_binding("w1", namespace="ns1")
    raw["metadata"].update(uid="u3", resourceVersion="3")
    raw["spec"]["placement"] = "not-an-object"
    binding = views.parse_binding(trim(raw))
    assert binding.workload == "apps/Deployment/ns1/w1"  # decoded eagerly: the fold indexes it
    assert binding.placement == {}  # decoded on first use, tolerant


def test_views_decoded_lazily_survive_a_snapshot_round_trip() -> None:
    raw = _claim()
    raw["status"] = {"phase": "Bound", "boundDataSource": "ds1",
                     "conditions": [{"type": "Bound", "status": "True", "reason": "DataSourceBound"}]}
    binding = manifests.resource_binding("w1", namespace="ns1", exclude=["west1"])
    binding["metadata"].update(uid="u3", resourceVersion="3")
    world = initial_world()
    evolve(world, _observed(raw))
    evolve(world, _observed(binding))
    restored = decode_world(encode_world(world))  # before anything read the lazy fields
    assert restored is not None
    (claim,), (bound,) = restored.claims.values(), restored.bindings.values()
    assert (claim.phase, claim.bound_data_source, [c.reason for c in claim.conditions]) == \
        ("Bound", "ds1", ["DataSourceBound"])
    assert bound.placement["clusterAffinity"] == {"exclude": ["west1"]}
    assert restored == world


@pytest.mark.parametrize(("new", "held", "stale"), [
    ("10", "10", True),  # the same object: an echo
    ("9", "10", True),  # older, with fewer digits (a string comparison would say newer)
    ("10", "9", False),
    ("123", "124", True),
    ("124", "123", False),
    ("010", "9", False),  # leading zeros (never from etcd): still compared as numbers
    ("abc", "abd", False),  # opaque resourceVersions: only equality tells
])
def test_an_observation_is_stale_when_not_newer_than_the_one_held(new: str, held: str, stale: bool) -> None:
    assert _stale(new, held) is stale
