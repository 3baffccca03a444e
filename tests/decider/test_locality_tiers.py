"""Locality tiers (issue 36): a Preferred claim's binding gets ordered cluster groups, data → near-data →
anywhere, intersected with the user's own affinity; Required (the default) stays byte for byte as before.

The universe: clusters e1, e2 (region east), w1, w2 (region west), x1 (no region label); the amoro plugin maps
``s3://east/`` → {e1}, ``s3://west/`` → {w1}. Driven through the in-memory pipeline (``Harness``), whose executor
applies the very plans the Kubernetes executor applies.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.core import api
from tether.core.commands import SetBindingPlacement, SetBindingTiers
from tether.core.datadependency.tiers import (
    data_place,
    plan_binding,
    plan_tiers,
    selected,
    tier_of,
    tier_standing,
    user_affinity,
)
from tether.core.events import DataLocationResolved
from tether.core.identity import make_identity
from tether.core.keys import (
    EXCLUDED_CLUSTERS_ANNOTATION,
    KARMADA_REGION_LABEL,
    LOCALITY_TIERS_ANNOTATION,
    PLACEMENT_INJECTED_ANNOTATION,
)
from tether.core.world.clusters import ClusterPlace

REGION = KARMADA_REGION_LABEL
CLUSTERS = {"e1": "east", "e2": "east", "w1": "west", "w2": "west", "x1": ""}
MAPPING = {"s3://east/": ["e1"], "s3://west/": ["w1"]}
TABLES = {"db.east": "s3://east/db/east", "db.west": "s3://west/db/west", "db.east2": "s3://east/db/east2"}
RB = "ResourceBinding"


def setup(**plugin: Any) -> Harness:
    h = Harness()
    for name, region in CLUSTERS.items():
        h.apply(m.cluster(name, labels={REGION: region} if region else {}))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping=MAPPING, **plugin)}))
    for table, location in TABLES.items():
        h.cluster.catalog[f"amoro/table/{table}"] = location
    return h


PREFERRED = api.LocalityPreference(policy="Preferred", topology_key=REGION)


def workload(h: Harness, name: str, table: str, *, locality: api.LocalityPreference | None = PREFERRED,
             placement: dict[str, Any] | None = None) -> dict[str, Any]:
    h.apply(m.claim(name, table=table, locality=locality))
    rb = m.resource_binding(name)
    if placement is not None:
        rb["spec"]["placement"] = placement
    h.apply(rb)
    return binding(h, name)


def binding(h: Harness, name: str) -> dict[str, Any]:
    obj = h.obj(RB, "default", f"{name}-deployment")
    assert obj is not None
    return obj


def groups(rb: dict[str, Any]) -> list[tuple[str, list[str]]]:
    """(tier, clusterNames) of each group, in order."""
    return [(tier_of(t["affinityName"]), t.get("clusterNames", []))
            for t in rb["spec"]["placement"].get("clusterAffinities", [])]


def test_a_preferred_claim_gets_data_then_near_data_groups() -> None:
    h = setup()
    rb = workload(h, "etl", "db.east")
    assert groups(rb) == [("data", ["e1"]), ("near-data", ["e2"])]
    assert "clusterAffinity" not in rb["spec"]["placement"]
    names = [t["affinityName"] for t in rb["spec"]["placement"]["clusterAffinities"]]
    assert names == [f"data-{data_place(['e1'])}", f"near-data-{data_place(['e1'])}"]
    annotations = rb["metadata"]["annotations"]
    assert annotations[PLACEMENT_INJECTED_ANNOTATION] == "true" and EXCLUDED_CLUSTERS_ANNOTATION not in annotations
    assert json.loads(annotations[LOCALITY_TIERS_ANNOTATION])["user"] == {}
    condition = next(c for c in h.obj("DataSourceClaim", "default", "etl")["status"]["conditions"]
                     if c["type"] == "PlacementInjected")
    assert condition["reason"] == "TiersInjected" and "data e1; near-data e2" in condition["message"]


def test_anywhere_is_a_last_group_only_when_configured() -> None:
    h = setup()
    rb = workload(h, "etl", "db.east", locality=api.LocalityPreference(policy="Preferred", topology_key=REGION,
                                                                        anywhere=True))
    assert groups(rb) == [("data", ["e1"]), ("near-data", ["e2"]), ("anywhere", [])]
    assert "clusterNames" not in rb["spec"]["placement"]["clusterAffinities"][2]


def test_a_claim_without_locality_is_required_byte_for_byte() -> None:
    h = setup()
    rb = workload(h, "etl", "db.east", locality=None)
    assert rb["spec"]["placement"]["clusterAffinity"]["exclude"] == ["e2", "w1", "w2", "x1"]
    assert LOCALITY_TIERS_ANNOTATION not in rb["metadata"]["annotations"]
    assert all(not isinstance(c.command, SetBindingTiers) for c in h.commands)


def test_the_plugin_configmap_says_it_per_system_and_per_table_prefix() -> None:
    h = setup(locality={"policy": "Preferred", "topologyKey": REGION,
                        "byTablePrefix": {"db.east2": {"policy": "Required"}}})
    assert groups(workload(h, "a", "db.east", locality=None)) == [("data", ["e1"]), ("near-data", ["e2"])]
    b = workload(h, "b", "db.east2", locality=None)
    assert "clusterAffinities" not in b["spec"]["placement"]
    assert b["spec"]["placement"]["clusterAffinity"]["exclude"] == ["e2", "w1", "w2", "x1"]
    # the claim's own setting wins over its table's prefix
    c = workload(h, "c", "db.east2", locality=api.LocalityPreference(policy="Preferred"))
    assert groups(c) == [("data", ["e1"]), ("near-data", ["e2"])]


def test_a_users_own_affinities_are_intersected_and_an_empty_group_is_left_out_and_said() -> None:
    h = setup()
    placement = {"clusterAffinities": [
        {"affinityName": "primary", "clusterNames": ["e2", "w1"]},
        {"affinityName": "backup", "labelSelector": {"matchLabels": {REGION: "east"}}, "exclude": ["e2"]}],
        "replicaScheduling": {"replicaSchedulingType": "Duplicated"}}
    rb = workload(h, "etl", "db.east", placement=placement)
    terms = rb["spec"]["placement"]["clusterAffinities"]
    # data ∩ primary = {} (left out); data ∩ backup = {e1}; near ∩ primary = {e2}; near ∩ backup: e2 excluded
    assert [(tier_of(t["affinityName"]), t["affinityName"].rsplit("-", 1)[1], t.get("clusterNames")) for t in terms] \
        == [("data", "2", ["e1"]), ("near-data", "1", ["e2"])]
    assert terms[0]["labelSelector"] == {"matchLabels": {REGION: "east"}} and terms[0]["exclude"] == ["e2"]
    record = json.loads(rb["metadata"]["annotations"][LOCALITY_TIERS_ANNOTATION])
    assert record["user"] == {"clusterAffinities": placement["clusterAffinities"]}
    assert "left out data within your affinity term primary" in record["note"]
    assert "left out near-data within your affinity term backup" in record["note"]
    assert rb["spec"]["placement"]["replicaScheduling"] == {"replicaSchedulingType": "Duplicated"}


def test_a_detector_revert_is_planned_again_from_the_users_placement() -> None:
    h = setup()
    rb = workload(h, "etl", "db.east", placement={"clusterAffinity": {"clusterNames": ["e1", "e2", "w1"]}})
    assert groups(rb) == [("data", ["e1"]), ("near-data", ["e2"])]
    # Karmada's detector puts the policy's placement back (the user changed it meanwhile): planned from that one
    reverted = json.loads(json.dumps(rb))
    reverted["spec"]["placement"] = {"clusterAffinity": {"clusterNames": ["e1", "w1"]}}
    h.apply(reverted)
    rb = binding(h, "etl")
    assert groups(rb) == [("data", ["e1"])]
    assert json.loads(rb["metadata"]["annotations"][LOCALITY_TIERS_ANNOTATION])["user"] == {
        "clusterAffinity": {"clusterNames": ["e1", "w1"]}}


def test_a_table_move_rewrites_the_groups_under_new_names() -> None:
    h = setup()
    before = [t["affinityName"] for t in workload(h, "etl", "db.east")["spec"]["placement"]["clusterAffinities"]]
    # the catalog reports the table in the west (a refresh poll or a push): the DataSource follows, the groups too
    h.feed(DataLocationResolved(identity=make_identity("amoro", "table", "db.east", None),
                                location="s3://west/db/east", trigger="push"), source="catalog")
    h.settle()
    rb = binding(h, "etl")
    assert groups(rb) == [("data", ["w1"]), ("near-data", ["w2"])]
    after = [t["affinityName"] for t in rb["spec"]["placement"]["clusterAffinities"]]
    assert set(after).isdisjoint(before)  # karmada-scheduler starts again from the first group


def test_a_topology_key_no_cluster_carries_is_refused_and_nothing_placed_changes() -> None:
    h = setup()
    placed = workload(h, "etl", "db.east")
    # the label is removed from every cluster: the placed binding keeps its groups …
    for name in CLUSTERS:
        h.apply(m.cluster(name))
    assert groups(binding(h, "etl")) == groups(placed)
    condition = next(c for c in h.obj("DataSourceClaim", "default", "etl")["status"]["conditions"]
                     if c["type"] == "PlacementInjected")
    assert condition["reason"] == "LocalityRefused" and "is carried by no Karmada Cluster" in condition["message"]
    # … and a new one gets the Required placement, saying why
    new = workload(h, "new", "db.east")
    assert new["spec"]["placement"]["clusterAffinity"]["exclude"] == ["e2", "w1", "w2", "x1"]
    reasons = [c.reason for c in h.commands if isinstance(c.command, SetBindingPlacement)
               and c.key.endswith("new-deployment")]
    assert any("is carried by no Karmada Cluster" in r for r in reasons)


def test_a_malformed_claim_locality_is_refused_not_guessed() -> None:
    h = setup()
    raw = m.claim("etl", table="db.east")
    raw["spec"]["locality"] = {"policy": "Sometimes"}
    h.apply(raw)
    h.apply(m.resource_binding("etl"))
    rb = binding(h, "etl")
    assert rb["spec"]["placement"]["clusterAffinity"]["exclude"] == ["e2", "w1", "w2", "x1"]
    condition = next(c for c in h.obj("DataSourceClaim", "default", "etl")["status"]["conditions"]
                     if c["type"] == "PlacementInjected")
    assert condition["reason"] == "LocalityRefused" and "Sometimes" in condition["message"]


def test_switching_back_to_required_restores_the_users_affinity_then_excludes() -> None:
    h = setup()
    workload(h, "etl", "db.east", placement={"clusterAffinity": {"clusterNames": ["e1", "e2", "w1"]}})
    h.apply(m.claim("etl", table="db.east"))  # locality removed
    rb = binding(h, "etl")
    assert rb["spec"]["placement"] == {"clusterAffinity": {"clusterNames": ["e1", "e2", "w1"],
                                                           "exclude": ["e2", "w1", "w2", "x1"]}}
    assert LOCALITY_TIERS_ANNOTATION not in rb["metadata"]["annotations"]


# --- the pure parts ----------------------------------------------------------------------------------------------


def test_plan_binding_without_tiers_is_plan_placement() -> None:
    from tether.core.datadependency.exclusions import plan_placement
    placement = {"clusterAffinity": {"exclude": ["a"]}}
    annotations = {EXCLUDED_CLUSTERS_ANNOTATION: "a"}
    for desired in (None, frozenset({"b"}), frozenset()):
        assert plan_binding(placement=placement, annotations=annotations, desired=desired) == plan_placement(
            placement=placement, annotations=annotations, desired=desired)


def test_the_user_affinity_is_recovered_from_the_record_only_when_the_groups_are_tethers() -> None:
    from tether.core.commands import TierTerm
    user = {"clusterAffinity": {"clusterNames": ["a", "b"]}}
    plan = plan_tiers(placement=user, annotations={},
                      terms=(TierTerm(name="data-x", tier="data", user_term=0, clusters=("a",)),), note="")
    annotations = {k: v for k, v in plan.annotations.items() if v is not None}
    assert plan.placement == {"clusterAffinities": [{"affinityName": "data-x", "clusterNames": ["a"]}]}
    assert user_affinity(plan.placement, annotations) == user
    edited = {"clusterAffinities": [{"affinityName": "mine", "clusterNames": ["b"]}]}
    assert user_affinity(edited, annotations) == edited


@pytest.mark.parametrize(("term", "expected"), [
    ({}, ["a", "b", "c"]),
    ({"clusterNames": ["a", "z"]}, ["a"]),
    ({"exclude": ["a"]}, ["b", "c"]),
    ({"labelSelector": {"matchLabels": {"r": "1"}}}, ["a"]),
    ({"labelSelector": {"matchExpressions": [{"key": "r", "operator": "NotIn", "values": ["1"]}]}}, ["b", "c"]),
    ({"labelSelector": {"matchExpressions": [{"key": "r", "operator": "Exists"}]}}, ["a", "b"]),
    ({"fieldSelector": {"matchExpressions": [{"key": "region", "operator": "In", "values": ["eu"]}]}}, ["b"]),
    ({"fieldSelector": {"matchExpressions": [{"key": "region", "operator": "NotIn", "values": ["eu"]}]}}, ["a", "c"]),
])
def test_a_term_selects_clusters_as_karmadas_affinity_filter_does(term: dict[str, Any], expected: list[str]) -> None:
    places = {"a": ClusterPlace(labels={"r": "1"}), "b": ClusterPlace(labels={"r": "2"}, region="eu"),
              "c": ClusterPlace()}
    assert selected(term, ["c", "b", "a"], places) == expected


def test_the_standing_says_the_tier_and_why_from_the_observed_group() -> None:
    h = setup()
    rb = workload(h, "etl", "db.east")
    placement, annotations = rb["spec"]["placement"], rb["metadata"]["annotations"]
    first, second = (t["affinityName"] for t in placement["clusterAffinities"])
    assert tier_standing(placement, annotations, "") == "in no tier yet: not placed by karmada-scheduler yet"
    assert tier_standing(placement, annotations, first) == f"tier data (e1) [{first}]: the first group, next to " \
        "the data"
    assert tier_standing(placement, annotations, second) == (
        f"tier near-data (e2) [{second}]: karmada-scheduler fell over to it — data (e1) could not hold it when it "
        "was placed")
    failed = {"type": "Scheduled", "status": "False", "reason": "Unschedulable", "message": "not enough"}
    assert tier_standing(placement, annotations, "", failed) == "in no tier yet: Unschedulable: not enough"
    assert tier_standing({"clusterAffinity": {}}, {}, "") == ""  # not placed by tiers
