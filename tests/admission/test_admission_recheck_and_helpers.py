"""Admitted bindings whose request grew; queue name, priority and Queue objects as Volcano Global reads them."""

from __future__ import annotations

from typing import Any

import pytest
import yaml

from tether.adapters.testing.reference import REFERENCE
from tether.core.admission.config import parse_admission_config
from tether.core.admission.model import Binding
from tether.core.admission.objects import binding_priority, queue_from_object, workload_queue_name
from tether.core.admission.session import recheck_admitted
from tether.core.quantity import resource_list
from tether.core.world.admission_state import Queue

CPU = 1000


def admitted(name: str, *, cpu: int, replicas: int, was: int | None, queue: str = "q", copies: int = 1,
             priority: int = 0) -> Binding:
    return Binding(key=f"ns/{name}", queue=queue, request={"cpu": cpu * CPU}, replicas=replicas, copies=copies,
                   suspended=False, priority=priority, admitted_request=None if was is None else {"cpu": was * CPU})


def test_scale_up_past_the_queue_is_reported() -> None:
    queue = Queue(name="q", capability={"cpu": 8 * CPU})
    bindings = [admitted("steady", cpu=1, replicas=4, was=4), admitted("grown", cpu=1, replicas=6, was=2)]
    holds = recheck_admitted(queues=[queue], bindings=bindings)
    assert [(h.binding, h.plugin, h.reason) for h in holds] == [
        ("ns/grown", "capacity", "queue q: cpu 10/8 after its request grew since admission")]


def test_each_growth_is_charged_to_its_own_queue() -> None:
    queues = [Queue(name="small", capability={"cpu": 4 * CPU}), Queue(name="big", capability={"cpu": 100 * CPU})]
    bindings = [admitted("in-small", cpu=1, replicas=5, was=2, queue="small"),  # 5 > 4: held
                admitted("in-big", cpu=1, replicas=6, was=2, queue="big")]  # 6 of 100: fine
    holds = recheck_admitted(queues=queues, bindings=bindings)
    assert [(h.binding, h.reason) for h in holds] == [
        ("ns/in-small", "queue small: cpu 5/4 after its request grew since admission")]


def test_divided_to_duplicated_and_growths_are_charged_in_priority_order() -> None:
    queues = [Queue(name="org", capability={"cpu": 10 * CPU}), Queue(name="q", parent="org")]
    bindings = [
        admitted("dup", cpu=1, replicas=2, copies=3, was=2, priority=0),  # +4, Divided -> Duplicated on 3 clusters
        admitted("vip", cpu=1, replicas=5, was=2, priority=10),  # +3, checked first
        admitted("small", cpu=1, replicas=3, was=2, priority=0),  # +1, still fits after dup was refused
    ]
    holds = recheck_admitted(queues=queues, bindings=bindings)
    # admitted: 2 + 2 + 2 = 6; vip +3 = 9; dup +4 = 13 > 10 refused; small +1 = 10
    assert [(h.binding, h.reason) for h in holds] == [
        ("ns/dup", "queue org (ancestor of q): cpu 13/10 after its request grew since admission")]


def test_what_was_admitted_stays_admitted() -> None:
    queue = Queue(name="q", capability={"cpu": 2 * CPU})
    # over the limit already (the capability shrank), nothing grew, or nothing was recorded: nothing to report
    bindings = [admitted("a", cpu=3, replicas=1, was=3), admitted("b", cpu=1, replicas=1, was=None),
                admitted("shrunk", cpu=1, replicas=1, was=5)]
    assert recheck_admitted(queues=[queue], bindings=bindings) == ()
    suspended = Binding(key="ns/s", queue="q", request={"cpu": 50 * CPU})
    assert recheck_admitted(queues=[queue], bindings=[suspended]) == ()


def test_without_capacity_nothing_is_rechecked() -> None:
    queue = Queue(name="q", capability={"cpu": 1 * CPU})
    config = parse_admission_config("tiers:\n- plugins:\n  - name: priority\n")
    assert recheck_admitted(queues=[queue], bindings=[admitted("g", cpu=1, replicas=3, was=1)], config=config) == ()
    assert recheck_admitted(queues=[queue], bindings=[admitted("g", cpu=1, replicas=3, was=1)]) != ()


def deployment(*, labels: dict[str, str] | None = None, template_annotations: dict[str, str] | None = None,
               annotations: dict[str, str] | None = None, priority_class: str | None = None) -> dict[str, Any]:
    pod_spec = {"priorityClassName": priority_class} if priority_class else {}
    return {"apiVersion": "apps/v1", "kind": "Deployment",
            "metadata": {"name": "web", "annotations": annotations or {}},
            "spec": {"template": {"metadata": {"labels": labels or {}, "annotations": template_annotations or {}},
                                  "spec": pod_spec}}}


def test_queue_name_as_volcano_global_resolves_it() -> None:
    vcjob = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "spec": {"queue": "training"}}
    assert workload_queue_name(vcjob) == "training"
    assert workload_queue_name({**vcjob, "spec": {}}) == "default"
    assert workload_queue_name({**vcjob, "spec": {"queue": ""}}) == "default"
    assert workload_queue_name({**vcjob, "spec": {"queue": 7}}) == "default"  # (hostile: not a name)
    batch_job = {"apiVersion": "batch/v1", "kind": "Job", "spec": {"queue": "ignored"}}
    assert workload_queue_name(batch_job) == "default"
    both = deployment(labels={"volcano.sh/queue-name": "by-label"},
                      template_annotations={"volcano.sh/queue-name": "by-annotation"})
    assert workload_queue_name(both) == "by-label"
    assert workload_queue_name(deployment(template_annotations={
        "volcano.sh/queue-name": "by-annotation", "scheduling.volcano.sh/queue-name": "scheduling"})) == "by-annotation"
    assert workload_queue_name(deployment(
        template_annotations={"scheduling.volcano.sh/queue-name": "scheduling"})) == "scheduling"
    assert workload_queue_name(deployment(annotations={"scheduling.volcano.sh/queue-name": "outer"})) == "outer"
    assert workload_queue_name(deployment()) == "default"
    assert workload_queue_name({"kind": "Deployment", "spec": {"template": "not a mapping"}}) == "default"


def test_priority_schedule_priority_then_priority_class_then_default() -> None:
    classes = {"high": 1000, "low": -5}
    workload = deployment(priority_class="high")
    assert binding_priority(binding_spec={"schedulePriority": {"priority": 7}}, workload=workload,
                            priority_classes=classes) == 7
    assert binding_priority(binding_spec={}, workload=workload, priority_classes=classes) == 1000
    vcjob = {"apiVersion": "batch.volcano.sh/v1alpha1", "kind": "Job", "spec": {"priorityClassName": "low"}}
    assert binding_priority(binding_spec=None, workload=vcjob, priority_classes=classes) == -5
    assert binding_priority(binding_spec=None, workload=deployment(priority_class="unknown"), priority_classes=classes,
                            default_priority=3) == 3
    assert binding_priority(binding_spec={"schedulePriority": {"priority": True}}, workload=deployment(),
                            priority_classes=classes) == 0


def test_queue_from_object() -> None:
    queue = queue_from_object({
        "metadata": {"name": "team-a", "uid": "u1", "creationTimestamp": "2025-01-02T03:04:05Z"},
        "spec": {"parent": "org", "priority": 2, "weight": 3, "capability": {"cpu": "8", "memory": "1Gi"},
                 "deserved": {"cpu": "4"}, "guarantee": {"resource": {"cpu": "500m"}}},
        "status": {"state": "Closed"},
    })
    assert queue == Queue(name="team-a", parent="org", priority=2, weight=3,
                          capability=resource_list({"cpu": "8", "memory": "1Gi"}), deserved={"cpu": 4000},
                          guarantee={"cpu": 500}, open=False, creation_ms=1735787045000, uid="u1")
    assert queue_from_object({"metadata": {"name": "d"}, "spec": {"weight": 0}}) == Queue(name="d")


QUEUE_CRD = REFERENCE / "volcano" / "scheduling.volcano.sh_queues.yaml"  # (../shared/reference)


def test_queue_fields_exist_in_volcanos_queue_crd() -> None:
    if not QUEUE_CRD.exists():
        pytest.skip(f"Volcano's Queue CRD is not at {QUEUE_CRD}")
    crd = yaml.safe_load(QUEUE_CRD.read_text())
    spec = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]
    assert {"parent", "priority", "weight", "capability", "deserved", "guarantee"} <= set(spec)
    assert "resource" in spec["guarantee"]["properties"]
