"""What keeps the world small (ops/bench/memory.py): compact index entries, a binding's placement alone, tether's
annotations alone, and strings shared between views instead of one copy per decoded record.

Each test pins one of these down by what it promises: an index entry holds exactly its members whatever its form,
and its form follows from them; a view reads as before; and the sharing is there (``is``), since a regression to a
copy per record would pass every behavioural test and only show as memory."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given, settings
from hypothesis import strategies as st

from tether.adapters.kubernetes import manifests
from tether.core.envelope import EventRecord, decode_event, encode
from tether.core.events import ObjectObserved
from tether.core.keys import EXCLUDED_CLUSTERS_ANNOTATION, PLACEMENT_INJECTED_ANNOTATION
from tether.core.kube import trim
from tether.core.world import SMALL_INDEX, initial_world, views
from tether.projections.fold import _index_add, _index_remove, evolve
from tether.projections.snapshot import decode_world, encode_world

MEMBERS = [f"m{i:02d}" for i in range(SMALL_INDEX + 4)]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.booleans(), st.sampled_from(["k1", "k2"]), st.sampled_from(MEMBERS)), max_size=80))
def test_an_index_entry_holds_its_members_in_the_form_they_call_for(ops: list[tuple[bool, str, str]]) -> None:
    index: dict[str, Any] = {}
    expected: dict[str, set[str]] = {}
    for add, key, member in ops:
        if add:
            _index_add(index, key, member)
            expected.setdefault(key, set()).add(member)
        else:
            _index_remove(index, key, member)
            expected.get(key, set()).discard(member)
            if not expected.get(key, True):
                del expected[key]
        assert {k: set(v) for k, v in index.items()} == expected
        for members in index.values():  # a sorted tuple up to SMALL_INDEX members, a set beyond
            if len(members) <= SMALL_INDEX:
                assert type(members) is tuple and list(members) == sorted(members)
            else:
                assert type(members) is set


def _observed(raw: dict[str, Any], offset: int = 1) -> EventRecord:
    """An observation as the daemon folds it: decoded from its encoded record (its own copy of every string)."""
    record = EventRecord(offset=offset, at_ms=offset, key="", source="watch", event=ObjectObserved(obj=trim(raw)))
    return decode_event(encode(record))


def _claim(name: str, uid: str, rv: str) -> dict[str, Any]:
    raw = manifests.claim(name, namespace="ns1", table="prod.sales.orders", workload=name)
    raw["metadata"].update(uid=uid, resourceVersion=rv, generation=1,
                           finalizers=["datadependency.volcano.sh/finalizer"])
    return raw


def test_a_snapshot_restores_each_index_entry_in_its_form() -> None:
    world = initial_world()
    for i in range(SMALL_INDEX + 3):  # one identity claimed by more than SMALL_INDEX claims: a set
        evolve(world, _observed(_claim(f"c{i}", f"u{i}", str(10 + i)), offset=i + 1))
    (identity_claims,) = world.claims_by_identity.values()
    assert type(identity_claims) is set and len(identity_claims) == SMALL_INDEX + 3
    restored = decode_world(encode_world(world))
    assert restored is not None and restored == world  # (msgpack decodes every entry as a list)


def test_views_of_separately_decoded_records_share_their_vocabulary() -> None:
    world = initial_world()
    evolve(world, _observed(_claim("a", "ua", "10"), offset=1))
    evolve(world, _observed(_claim("b", "ub", "11"), offset=2))
    a, b = world.claims["DataSourceClaim/ns1/a"], world.claims["DataSourceClaim/ns1/b"]
    assert a.ref.api_version is b.ref.api_version and a.ref.kind is b.ref.kind
    assert a.ref.namespace is b.ref.namespace
    assert a.finalizers is b.finalizers and a.finalizers == ("datadependency.volcano.sh/finalizer",)


def test_a_data_sources_claim_refs_are_the_claims_own_references() -> None:
    world = initial_world()
    evolve(world, _observed(_claim("a", "ua", "10"), offset=1))
    ref = {"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": "DataSourceClaim", "name": "a",
           "namespace": "ns1", "uid": "ua"}
    stranger = {**ref, "name": "gone", "uid": "ug"}  # a claim the world does not hold: its own reference
    source = {"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": "DataSource",
              "metadata": {"name": "ds1", "uid": "us", "resourceVersion": "12", "generation": 1},
              "spec": {"system": "amoro", "type": "table", "name": "prod.sales.orders"},
              "status": {"claimRefs": [ref, stranger], "boundClaims": 2}}
    evolve(world, _observed(source, offset=2))
    held = world.sources["ds1"]
    assert held.claim_refs[0] is world.claims["DataSourceClaim/ns1/a"].ref
    assert [(r.name, r.uid) for r in held.claim_refs] == [("a", "ua"), ("gone", "ug")]


def _binding(annotations: dict[str, str], rv: str, **spec: Any) -> dict[str, Any]:
    raw = manifests.resource_binding("w1", namespace="ns1", exclude=["west1"])
    raw["metadata"].update(uid="u3", resourceVersion=rv, annotations=annotations)
    raw["spec"].update({"clusters": [{"name": "east1", "replicas": 1}], **spec})
    return raw


def test_a_binding_keeps_its_placement_and_tethers_annotations_only() -> None:
    ours = {PLACEMENT_INJECTED_ANNOTATION: "true", EXCLUDED_CLUSTERS_ANNOTATION: "west1"}
    raw = _binding({**ours, "policy.karmada.io/applied-placement": "{...}", "team": "ml"}, "3")
    binding = views.parse_binding(trim(raw))
    assert msgspec.json.decode(binding.placement_json) == raw["spec"]["placement"]  # not the rest of the spec
    assert binding.placement == raw["spec"]["placement"]
    assert binding.annotations == ours and binding.injected and binding.added == ("west1",)
    assert (binding.workload, binding.scheduled_clusters) == ("apps/Deployment/ns1/w1", ("east1",))
    other = views.parse_binding(trim(_binding(dict(ours), "4")))
    assert other.annotations is binding.annotations  # one dictionary for every binding with the same ones
    assert views.parse_binding(trim(_binding({"team": "ml"}, "5"))).annotations == {}


def test_a_binding_with_a_malformed_spec_field_reads_its_placement_as_before() -> None:
    raw = _binding({}, "3", clusters="east1")  # the typed decode fails: the tolerant path
    binding = views.parse_binding(trim(raw))
    assert binding.placement == raw["spec"]["placement"] and binding.scheduled_clusters == ()
    assert binding.workload == "apps/Deployment/ns1/w1"
