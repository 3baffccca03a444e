"""What admission reads of a workload — its queue and PriorityClass name — and of a binding's workload kind, from a
typed decode of the few fields they come from, against reading the whole spec as dictionaries: the same answer for
any Deployment, Volcano Job or binding, however bent (``projections.admission_fold``)."""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import given
from hypothesis import strategies as st

from tether.adapters.kubernetes import manifests
from tether.adapters.testing.hostile import bent, fuzz_settings
from tether.core.kube import trim
from tether.core.world.admission_state import AdmissionState, QueueManaged
from tether.projections.admission_fold import (
    _workload_queue_tolerant,
    binding_workload_kind,
    fold_admission_binding,
    parse_admission_binding,
    workload_queue,
)

DEPLOYMENT: dict[str, Any] = {
    "apiVersion": "apps/v1", "kind": "Deployment",
    "metadata": {"name": "web", "namespace": "ns", "annotations": {"scheduling.volcano.sh/queue-name": "q-meta"}},
    "spec": {"replicas": 2, "selector": {"matchLabels": {"app": "web"}}, "template": {
        "metadata": {"labels": {"app": "web", "volcano.sh/queue-name": "q-label"},
                     "annotations": {"scheduling.volcano.sh/queue-name": "q-annotation"}},
        "spec": {"priorityClassName": "high", "containers": [{"name": "c", "image": "x"}]}}},
}
VOLCANO_JOB: dict[str, Any] = {
    "apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job",
    "metadata": {"name": "etl", "namespace": "ns"},
    "spec": {"queue": "q-job", "priorityClassName": "low", "minAvailable": 1,
             "tasks": [{"name": "t", "replicas": 1, "template": {"spec": {"containers": [{"name": "c"}]}}}]},
}
KEEP = (("kind",), ("apiVersion",), ("metadata", "name"), ("metadata", "namespace"))


def test_the_usual_workloads_read_their_queue_and_priority_class() -> None:
    assert workload_queue(trim(DEPLOYMENT)).queue == "q-label"
    assert workload_queue(trim(DEPLOYMENT)).priority_class == "high"
    job = workload_queue(trim(VOLCANO_JOB))
    assert (job.queue, job.priority_class) == ("q-job", "low")


@fuzz_settings()
@given(raw=st.one_of(bent(DEPLOYMENT, max_changes=4, keep=KEEP), bent(VOLCANO_JOB, max_changes=4, keep=KEEP)))
def test_the_typed_reading_answers_as_the_whole_spec_does(raw: dict[str, Any]) -> None:
    try:
        obj = trim(raw)
    except msgspec.ValidationError:
        return
    assert workload_queue(obj) == _workload_queue_tolerant(obj)


BINDING = manifests.resource_binding("w", namespace="ns", kind="Job", api_version="batch.volcano.sh/v1alpha1")


@fuzz_settings()
@given(raw=bent(BINDING, max_changes=4, keep=KEEP))
def test_a_bindings_workload_kind_from_its_resource_is_the_parsed_bindings(raw: dict[str, Any]) -> None:
    try:
        obj = trim(raw)
    except msgspec.ValidationError:
        return
    assert binding_workload_kind(obj) == parse_admission_binding(obj).workload_kind


def test_a_bindings_workload_kind() -> None:
    assert binding_workload_kind(trim(BINDING)) == "batch.volcano.sh/Job"


def test_admission_keeps_the_bindings_it_manages_and_the_suspended_ones_only() -> None:
    """Queue-managed means a managed kind in a managed namespace: another binding that is neither suspended nor
    annotated by tether is not admission's (the decider passes over it), so it is not kept, nor parsed."""
    state = AdmissionState(managed=QueueManaged(kinds=("batch.volcano.sh/Job",), namespaces=("ml",)))
    for namespace, suspended in (("ml", False), ("web", False), ("web", True)):
        raw = manifests.resource_binding(f"w-{namespace}-{suspended}", namespace=namespace, kind="Job",
                                         api_version="batch.volcano.sh/v1alpha1", suspended=suspended)
        raw["metadata"]["resourceVersion"] = "1"
        obj = trim(raw)
        fold_admission_binding(state, obj.key, obj)
    assert sorted(state.bindings) == ["ResourceBinding/ml/w-ml-False-job", "ResourceBinding/web/w-web-True-job"]
