"""Admission's charge follows the locality tier a binding is in (issue 36): a Duplicated binding placed by ordered
groups runs every replica on each cluster of one group, so it is charged for the group karmada-scheduler placed it
by (``status.schedulerObservingAffinityName``), or for the first group while it has not been placed."""

from __future__ import annotations

from typing import Any

from tether.core.kube import trim
from tether.projections.admission_fold import parse_admission_binding


def binding(status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": "w-deployment", "namespace": "ml", "resourceVersion": "1"},
            "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"}, "replicas": 2,
                     "replicaRequirements": {"resourceRequest": {"cpu": "1"}},
                     "suspension": {"scheduling": True},
                     "placement": {"clusterAffinities": [
                         {"affinityName": "data-ab12cd", "clusterNames": ["e1"]},
                         {"affinityName": "near-data-ab12cd", "clusterNames": ["e2", "e3"], "exclude": ["e3"]}]}},
            "status": status or {}}


def test_a_binding_not_placed_yet_is_charged_for_its_first_group() -> None:
    parsed = parse_admission_binding(trim(binding()))
    assert (parsed.affinity_names, parsed.affinity_exclude) == (("e1",), ())


def test_a_binding_that_fell_over_is_charged_for_the_group_it_is_in() -> None:
    parsed = parse_admission_binding(trim(binding({"schedulerObservingAffinityName": "near-data-ab12cd"})))
    assert (parsed.affinity_names, parsed.affinity_exclude) == (("e2", "e3"), ("e3",))


def test_a_single_cluster_affinity_is_read_as_before() -> None:
    raw = binding()
    raw["spec"]["placement"] = {"clusterAffinity": {"clusterNames": ["e1", "e2"], "exclude": ["e2"]}}
    parsed = parse_admission_binding(trim(raw))
    assert (parsed.affinity_names, parsed.affinity_exclude) == (("e1", "e2"), ("e2",))
