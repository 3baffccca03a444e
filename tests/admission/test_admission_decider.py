"""The admission decider (``core.admission.decider``) through the real pipeline on the fake cluster: cycles are
timer events, resumes are commands applied and observed back, and the world is what ``step`` folds.

Two queues as in Volcano Global's dispatcher test; a 5-CPU queue admits 2+2 and holds the next 2; a resume that
fails is retried without being counted twice; a scale-up past the queue is held by Karmada's dispatching suspension;
a binding held for its data goes once its placement is in.
"""

from __future__ import annotations

from typing import Any

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.core.commands import CreateQueue, ResumeBinding, UpdateQueueStatus
from tether.core.events import ListsStarted, ObjectObserved, ObjectsListed, list_source
from tether.core.keys import ADMISSION_ANNOTATION, OVERRUN_ANNOTATION

MANAGED = "kinds: [apps/Deployment]\n"


def universe(*, queues: dict[str, dict[str, Any]], cpu: str = "64") -> Harness:
    h = Harness()
    for name in ("c1", "c2"):
        h.apply(m.cluster(name, cpu=cpu))
    h.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tether-admission",
                                                                  "namespace": "tether-system"},
             "data": {"queue-managed": MANAGED}})
    for name, spec in queues.items():
        h.apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
                 "spec": spec})
    return h


def workload(h: Harness, name: str, queue: str) -> None:
    deployment = m.deployment(name)
    deployment["spec"]["template"]["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": queue}
    h.apply(deployment)


def suspended_binding(h: Harness, name: str, *, cpu: str, created: str, replicas: int = 1,
                      divided: bool = True) -> None:
    placement: dict[str, Any] = {"clusterAffinity": {"clusterNames": ["c1"]}}
    if divided:
        placement["replicaScheduling"] = {"replicaSchedulingType": "Divided"}
    h.apply({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
             "metadata": {"name": name, "namespace": "default", "creationTimestamp": created,
                          "annotations": {ADMISSION_ANNOTATION: "queue-managed: waiting for admission"}},
             "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                   "namespace": "default"},
                      "replicas": replicas, "replicaRequirements": {"resourceRequest": {"cpu": cpu}},
                      "placement": placement, "suspension": {"scheduling": True}}})


def resumed(h: Harness) -> list[str]:
    return [key.rsplit("/", 1)[1] for key in h.cluster.resumed]


def test_two_queues_are_admitted_round_robin_in_volcano_globals_order() -> None:
    h = universe(queues={"q1": {"weight": 1}, "q2": {"weight": 1}})
    for i, (name, queue) in enumerate([("rb1", "q1"), ("rb2", "q1"), ("rb3", "q1"), ("rb4", "q2"), ("rb5", "q2"),
                                       ("rb6", "q2")]):
        workload(h, name, queue)
        suspended_binding(h, name, cpu="1", created=f"2026-01-01T00:00:0{i}Z")
    assert resumed(h) == []  # nothing before the cycle
    h.advance(1_000)
    assert resumed(h) == ["rb1", "rb4", "rb2", "rb5", "rb3", "rb6"]
    queue = h.obj("Queue", "", "q1")
    assert queue is not None and queue["status"]["running"] == 3 and queue["status"]["allocated"] == {"cpu": "3"}
    # no binding is in the default queue, so it is not created; the released notes are annotations, not Events
    assert not [c for c in h.commands if isinstance(c.command, CreateQueue)]
    assert all(e.reason for e in h.cluster.kube_events)


def test_the_default_queue_is_created_once_when_a_binding_is_in_it() -> None:
    h = universe(queues={})
    h.apply(m.deployment("a"))  # no queue annotation: Volcano's default queue
    suspended_binding(h, "a", cpu="1", created="2026-01-01T00:00:00Z")
    h.advance(1_000)
    h.advance(1_000)
    created = [c.command for c in h.commands if isinstance(c.command, CreateQueue)]
    assert created == [CreateQueue(name="default")] and h.obj("Queue", "", "default") is not None
    assert resumed(h) == ["a"]


def test_a_five_cpu_queue_admits_two_and_two_and_holds_the_next_two_with_a_reason() -> None:
    h = universe(queues={"q1": {"capability": {"cpu": "5"}}})
    for i, name in enumerate(["a", "b", "c"]):
        workload(h, name, "q1")
        suspended_binding(h, name, cpu="2", created=f"2026-01-01T00:00:0{i}Z")
    h.advance(1_000)
    assert resumed(h) == ["a", "b"]
    held = h.obj("ResourceBinding", "default", "c")
    assert held is not None and held["metadata"]["annotations"][ADMISSION_ANNOTATION] == "queue q1: cpu 6/5"
    assert held["spec"]["suspension"] == {"scheduling": True}
    assert {e.event_type for e in h.cluster.kube_events if e.reason == "AdmissionHeld"} == {"Normal"}  # (not a fault)
    h.advance(5_000)  # later cycles change nothing: still 4 of 5 CPUs used
    assert resumed(h) == ["a", "b"]


def test_nothing_is_admitted_from_a_half_listed_world() -> None:
    """While the bindings are being listed, a cycle does not know every binding the queue is charged for: it
    admits nothing until the list has ended."""
    h = universe(queues={"q1": {"weight": 1}})
    workload(h, "a", "q1")
    suspended_binding(h, "a", cpu="1", created="2026-01-01T00:00:00Z")  # the next cycle is due in a second
    h.feed(ListsStarted(sources=(list_source("ResourceBinding"),)))  # a relist starts first
    h.advance(1_000)
    h.advance(1_000)
    assert resumed(h) == []
    h.feed(ObjectsListed(kind="ResourceBinding", keys=("ResourceBinding/default/a",)))
    h.settle()
    h.advance(1_000)
    assert resumed(h) == ["a"]


def test_a_failed_resume_is_retried_and_counted_once() -> None:
    h = universe(queues={"q1": {"capability": {"cpu": "3"}}})
    h.cluster.resume_failures = 1
    for i, name in enumerate(["a", "b"]):
        workload(h, name, "q1")
        suspended_binding(h, name, cpu="2", created=f"2026-01-01T00:00:0{i}Z")
    h.advance(1_000)
    assert resumed(h) == []  # a's resume failed; b does not fit beside the admitted a
    assert h.world.admission.admitted == {"ResourceBinding/default/a": h.world.admission.admitted[
        "ResourceBinding/default/a"]}
    for _ in range(10):  # the retry timer (5 s backoff), and cycles meanwhile
        h.advance(1_000)
    assert resumed(h) == ["a"]
    issued = [c for c in h.commands if isinstance(c.command, ResumeBinding)]
    assert {c.command.binding.name for c in issued} == {"a"}  # b never admitted: a was counted all along
    statuses = [c.command for c in h.commands if isinstance(c.command, UpdateQueueStatus)]
    assert statuses and all(s.running <= 1 for s in statuses)


def test_a_scale_up_past_the_queue_is_held_by_dispatching_not_reverted() -> None:
    """The binding keeps running as admitted: its scheduling is not suspended again, Karmada's dispatching is (the
    growth waits), the queue is charged the grown request, and the overrun annotation says why."""
    h = universe(queues={"q1": {"capability": {"cpu": "4"}}})
    workload(h, "a", "q1")
    suspended_binding(h, "a", cpu="2", created="2026-01-01T00:00:00Z")
    h.advance(1_000)
    assert resumed(h) == ["a"]
    rb = h.obj("ResourceBinding", "default", "a")
    assert rb is not None
    rb["spec"]["replicas"] = 3  # scaled up: 6 CPUs on a 4-CPU queue
    h.feed(ObjectObserved(obj=h.cluster.put(rb)))
    h.settle()
    workload(h, "b", "q1")
    suspended_binding(h, "b", cpu="1", created="2026-01-01T00:00:01Z")  # keeps cycles running
    h.advance(1_000)
    rb = h.obj("ResourceBinding", "default", "a")
    assert rb is not None and "cpu 6/4" in rb["metadata"]["annotations"][OVERRUN_ANNOTATION]
    assert rb["spec"]["suspension"] == {"dispatching": True}
    assert resumed(h) == ["a"]  # b waits: the queue is charged the grown request


def test_a_binding_held_for_its_data_goes_once_its_placement_is_in() -> None:
    h = Harness()
    for name in ("c1", "c2", "c3"):
        h.apply(m.cluster(name))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1", "c2"]})}))
    h.cluster.catalog["amoro/table/db.east1"] = "s3://east/db/east1"
    h.feed(ObjectObserved(obj=h.cluster.put(m.claim("c", table="db.east1", workload="w1"))))  # resolving
    h.feed(ObjectObserved(obj=h.cluster.put({
        "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
        "metadata": {"name": "w1", "namespace": "default", "annotations": {ADMISSION_ANNOTATION: "waiting"}},
        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w1"},
                 "suspension": {"scheduling": True}}})))
    h.settle()  # the lookup answers, the DataSource is created, the placement injected, then the resume
    rb = h.obj("ResourceBinding", "default", "w1")
    assert rb is not None and rb["spec"]["placement"]["clusterAffinity"]["exclude"] == ["c3"]
    assert resumed(h) == ["w1"] and rb["spec"]["suspension"] == {}
