"""What an ``--explain`` argument means (``adapters/cli/replay/targets.py``), and the chain's mapping prefix agreeing
with the decider's own choice of clusters."""

from __future__ import annotations

import pytest

from tether.adapters.cli.record_lines import summary
from tether.adapters.cli.replay.targets import canonical_kind, resolve, suggest
from tether.adapters.cli.replay.why import matching_prefix
from tether.core.envelope import EventRecord
from tether.core.events import BindingAdmissionDecided
from tether.core.kube import KubeObject, ObjectMeta, raw_object
from tether.core.plugin_config import map_location

LOG_KINDS = {"DataSourceClaim", "DataSource", "ResourceBinding", "Cluster", "Data", "ConfigMap", "Queue", "DataLoad"}


@pytest.mark.parametrize(("typed", "kind"), [
    ("Deployment", "Deployment"), ("deployment", "Deployment"), ("deployments", "Deployment"), ("deploy", "Deployment"),
    ("DEPLOY", "Deployment"), ("rb", "ResourceBinding"), ("resourcebindings", "ResourceBinding"),
    ("dsc", "DataSourceClaim"), ("datasourceclaims", "DataSourceClaim"), ("datasource", "DataSource"),
    ("datasources", "DataSource"), ("sts", "StatefulSet"), ("statefulsets", "StatefulSet"), ("ds", "DaemonSet"),
    ("priorityclasses", "PriorityClass"), ("q", "Queue"), ("queues", "Queue"), ("pg", "PodGroup"),
    ("vcjob", "Job"), ("jobs", "Job"), ("dataloads", "DataLoad"), ("cm", "ConfigMap"),
    ("propagationpolicies", "PropagationPolicy"),
])
def test_kinds_are_found_case_insensitively_by_short_name_and_plural(typed: str, kind: str) -> None:
    assert canonical_kind(typed, LOG_KINDS) == kind


def test_a_kind_spelled_in_the_log_wins_and_an_unknown_kind_is_none() -> None:
    assert canonical_kind("widgets", {"Widget"}) == "Widget"
    assert canonical_kind("gizmo", LOG_KINDS) is None


def test_resolve_keeps_namespace_group_and_member_cluster() -> None:
    t = resolve("deployments.apps/ml/clicks-train", kinds=LOG_KINDS)
    assert (t.key, t.kind, t.namespace, t.name, t.group) == ("Deployment/ml/clicks-train", "Deployment", "ml",
                                                             "clicks-train", "apps")
    assert t.matches_workload("apps/Deployment/ml/clicks-train")
    assert not t.matches_workload("other.io/Deployment/ml/clicks-train")  # another group
    assert resolve("deploy/ml/clicks-train", kinds=()).matches_workload("other.io/Deployment/ml/clicks-train")
    assert resolve("datasource/amoro-table-x", kinds=LOG_KINDS).key == "DataSource//amoro-table-x"
    member = resolve("m1:po/ml/trainer-0", kinds=LOG_KINDS)
    assert (member.key, member.cluster) == ("m1:Pod/ml/trainer-0", "m1")
    assert resolve("Data/amoro/table/db.orders", kinds=LOG_KINDS).key == "Data/amoro/table/db.orders"
    assert resolve("gizmo/ns/x", kinds=LOG_KINDS).key == "gizmo/ns/x"  # kept as typed: nothing will match


def test_suggestions_are_the_nearest_keys_without_list_pseudo_keys() -> None:
    keys = ["Deployment/ml/clicks-train", "Deployment/ml/customer-churn", "DataSourceClaim//*", "*/lists",
            "ResourceBinding/ml/clicks-train-deployment"]
    assert suggest("Deployment/ml/clicks-trian", keys)[0] == "Deployment/ml/clicks-train"
    assert suggest("deployment/ML/CLICKS-TRAIN", keys)[0] == "Deployment/ml/clicks-train"  # case-insensitive
    assert "*/lists" not in suggest("*/list", keys) and "DataSourceClaim//*" not in suggest("DataSourceClaim//", keys)
    assert suggest("Gizmo/elsewhere/clicks-train", keys) == ["Deployment/ml/clicks-train"]  # same name, other kind


@pytest.mark.parametrize("location", ["s3://east/db/orders", "s3://east/dbx", "s3://west/a", "s3://eastern/x",
                                      "gs://nowhere", "s3://east/db/orders/part-0"])
def test_the_chains_prefix_maps_to_the_clusters_the_decider_maps_to(location: str) -> None:
    mapping = (("s3://east/", ("c1", "c2")), ("s3://east/db/", ("c2",)), ("s3://west/", ("c3",)),
               ("s3://east/db/orders/", ("c1",)))
    prefix, clusters = matching_prefix(mapping, location)
    expected = map_location(mapping, location)
    assert (clusters if prefix else None) == expected
    assert not prefix or location.startswith(prefix)


def test_a_webhook_decision_renders_without_a_traceback() -> None:
    """issue 21.4: a BindingAdmissionDecided carries the object's raw spec (msgspec.Raw)."""
    obj = KubeObject(api_version="work.karmada.io/v1alpha2", kind="ResourceBinding",
                     metadata=ObjectMeta(name="rb", namespace="ml"), spec=raw_object({"replicas": 1}))
    event = BindingAdmissionDecided(key="ResourceBinding/ml/rb", operation="CREATE", obj=obj, suspended=True,
                                    patch=({"op": "add", "path": "/spec/suspension", "value": {"scheduling": True}},),
                                    reason="claim Resolving", decided_at=41)
    text = summary(EventRecord(at_ms=0, source="webhook", key=event.key, event=event, offset=42))
    assert text == "CREATE suspended: add /spec/suspension (world at E41): claim Resolving"
