"""Admission that holds its promises after admission, through the real pipeline on the fake cluster: evictions
(``EvictBinding`` applied and observed back, one Event each, never readmitted ahead of the binding they made room
for), growth held by Karmada's dispatching suspension until the queue admits it, a shrink released at once, and a
binding of several pod templates charged their sum."""

from __future__ import annotations

from typing import Any

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.core.commands import AdmitRequest, EvictBinding, SuspendDispatching
from tether.core.events import ObjectObserved
from tether.core.keys import (
    ADMISSION_ANNOTATION,
    ADMITTED_REQUEST_ANNOTATION,
    EVICTED_FOR_ANNOTATION,
    OVERRUN_ANNOTATION,
)

MANAGED = "kinds: [apps/Deployment]\n"
PREEMPTING = """\
actions: "enqueue, allocate, preempt, reclaim, backfill"
tiers:
- plugins: [{name: priority}, {name: gang}, {name: datadependency}]
- plugins: [{name: drf}, {name: capacity}, {name: proportion}]
configurations:
- name: preempt
  arguments:
    queues:
      q1: {withinQueue: LowerPriority}
"""


def universe(*, queues: dict[str, dict[str, Any]], conf: str = "") -> Harness:
    h = Harness()
    for name in ("c1", "c2"):
        h.apply(m.cluster(name))
    data = {"queue-managed": MANAGED, **({"volcano-scheduler.conf": conf} if conf else {})}
    h.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tether-admission",
                                                                  "namespace": "tether-system"}, "data": data})
    for name, spec in queues.items():
        h.apply({"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
                 "spec": spec})
    return h


def binding(h: Harness, name: str, queue: str, *, cpu: str = "", created: str, priority: int = 0, replicas: int = 1,
            components: list[dict[str, Any]] | None = None) -> None:
    deployment = m.deployment(name)
    deployment["spec"]["template"]["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": queue}
    h.apply(deployment)
    spec: dict[str, Any] = {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                         "namespace": "default"},
                            "replicas": replicas, "schedulePriority": {"priority": priority},
                            "placement": {"clusterAffinity": {"clusterNames": ["c1"]},
                                          "replicaScheduling": {"replicaSchedulingType": "Divided"}},
                            "suspension": {"scheduling": True}}
    if cpu:
        spec["replicaRequirements"] = {"resourceRequest": {"cpu": cpu}}
    if components is not None:
        spec["components"] = components
    h.apply({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
             "metadata": {"name": name, "namespace": "default", "creationTimestamp": created,
                          "annotations": {ADMISSION_ANNOTATION: "queue-managed: waiting for admission"}},
             "spec": spec})


def scheduled(h: Harness, name: str) -> None:
    """Karmada places a resumed binding (the fake has no scheduler)."""
    rb = h.obj("ResourceBinding", "default", name)
    assert rb is not None and not (rb["spec"].get("suspension") or {}).get("scheduling")
    rb["spec"]["clusters"] = [{"name": "c1", "replicas": rb["spec"].get("replicas", 1)}]
    h.feed(ObjectObserved(obj=h.cluster.put(rb)))
    h.settle()


def edit(h: Harness, name: str, change: Any) -> None:
    rb = h.obj("ResourceBinding", "default", name)
    assert rb is not None
    change(rb["spec"])
    h.feed(ObjectObserved(obj=h.cluster.put(rb)))
    h.settle()


def resumed(h: Harness) -> list[str]:
    return [key.rsplit("/", 1)[1] for key in h.cluster.resumed]


def events(h: Harness, name: str, reason: str) -> list[str]:
    return [e.message for e in h.cluster.kube_events if e.involved.name == name and e.reason == reason]


def test_a_high_priority_binding_evicts_one_low_binding_which_waits_until_room_frees() -> None:
    h = universe(queues={"q1": {"capability": {"cpu": "1"}}}, conf=PREEMPTING)
    binding(h, "low-1", "q1", cpu="400m", created="2026-01-01T00:00:00Z")
    binding(h, "low-2", "q1", cpu="400m", created="2026-01-01T00:00:01Z")
    h.advance(1_000)
    assert resumed(h) == ["low-1", "low-2"]
    scheduled(h, "low-1")
    scheduled(h, "low-2")
    binding(h, "high", "q1", cpu="600m", created="2026-01-01T00:00:02Z", priority=100)
    h.advance(1_000)
    assert h.cluster.evicted == ["ResourceBinding/default/low-2"] and resumed(h)[-1] == "high"
    low = h.obj("ResourceBinding", "default", "low-2")
    assert low is not None and low["spec"]["suspension"] == {"scheduling": True} and "clusters" not in low["spec"]
    reason = "queue q1: evicted for default/high (priority 100 > 0; withinQueue: LowerPriority); waiting until it " \
             "is admitted"
    annotations = low["metadata"]["annotations"]
    assert annotations[ADMISSION_ANNOTATION] == reason and annotations[EVICTED_FOR_ANNOTATION] == "default/high"
    assert ADMITTED_REQUEST_ANNOTATION not in annotations
    assert events(h, "low-2", "Evicted") == [reason]  # one Event, and no "Suspended" besides it (its creation's)
    assert events(h, "low-2", "Suspended") == ["scheduling suspended by tether: queue-managed: waiting for admission"]
    [resume] = [c.command for c in h.commands if c.command.__class__.__name__ == "ResumeBinding"
                and c.command.binding.name == "high"]
    assert resume.reason == "admitted by queue q1, evicting default/low-2"  # type: ignore[attr-defined]
    scheduled(h, "high")
    h.advance(5_000)  # cycles: the queue is full, low-2 waits (its hold now says why), nothing is evicted again
    assert h.cluster.evicted == ["ResourceBinding/default/low-2"] and resumed(h) == ["low-1", "low-2", "high"]
    low = h.obj("ResourceBinding", "default", "low-2")
    assert low is not None and low["metadata"]["annotations"][ADMISSION_ANNOTATION] == "queue q1: cpu 1400m/1"
    h.delete("ResourceBinding", "default", "high")  # room frees: low-2 is admitted again, no longer evicted
    h.advance(1_000)
    assert resumed(h) == ["low-1", "low-2", "high", "low-2"]
    low = h.obj("ResourceBinding", "default", "low-2")
    assert low is not None and EVICTED_FOR_ANNOTATION not in low["metadata"]["annotations"]
    queue = h.obj("Queue", "", "q1")
    assert queue is not None and queue["status"]["allocated"] == {"cpu": "800m"}


def test_an_evicted_binding_is_held_while_the_binding_it_made_room_for_waits() -> None:
    """A binding evicted for one that then waits again (it was deleted and re-created, say): held with that reason
    even when room is free, and admitted once that binding is gone."""
    h = universe(queues={"q1": {"capability": {"cpu": "1"}}}, conf=PREEMPTING)
    binding(h, "big", "q1", cpu="2", created="2026-01-01T00:00:00Z", priority=100)  # never fits: it waits
    binding(h, "low", "q1", cpu="400m", created="2026-01-01T00:00:01Z")
    edit(h, "low", lambda spec: None)  # (as observed)
    rb = h.obj("ResourceBinding", "default", "low")
    assert rb is not None
    rb["metadata"]["annotations"][EVICTED_FOR_ANNOTATION] = "default/big"
    h.feed(ObjectObserved(obj=h.cluster.put(rb)))
    h.settle()
    h.advance(3_000)
    assert resumed(h) == []
    rb = h.obj("ResourceBinding", "default", "low")
    assert rb is not None and rb["metadata"]["annotations"][ADMISSION_ANNOTATION] == \
        "queue q1: evicted for default/big: waiting until it is admitted"
    h.delete("ResourceBinding", "default", "big")
    h.advance(1_000)
    assert resumed(h) == ["low"]


def test_nothing_is_evicted_with_the_default_policy() -> None:
    h = universe(queues={"q1": {"capability": {"cpu": "1"}}})
    binding(h, "low-1", "q1", cpu="400m", created="2026-01-01T00:00:00Z")
    binding(h, "low-2", "q1", cpu="400m", created="2026-01-01T00:00:01Z")
    h.advance(1_000)
    binding(h, "high", "q1", cpu="600m", created="2026-01-01T00:00:02Z", priority=100)
    h.advance(5_000)
    assert h.cluster.evicted == [] and resumed(h) == ["low-1", "low-2"]
    assert not [c for c in h.commands if isinstance(c.command, EvictBinding)]


def test_a_growth_past_the_queue_suspends_dispatching_until_room_frees() -> None:
    h = universe(queues={"q1": {"capability": {"cpu": "4"}}})
    binding(h, "a", "q1", cpu="2", created="2026-01-01T00:00:00Z")
    binding(h, "b", "q1", cpu="1", created="2026-01-01T00:00:01Z")
    h.advance(1_000)
    assert resumed(h) == ["a", "b"]
    scheduled(h, "a")
    edit(h, "a", lambda spec: spec.update(replicas=2))  # 4 CPUs admitted 2, beside b's 1: over the queue's 4
    rb = h.obj("ResourceBinding", "default", "a")  # decided on the observation itself, not at the next cycle
    reason = "queue q1: cpu 5/4 after its request grew since admission"
    assert rb is not None and rb["spec"]["suspension"] == {"dispatching": True}
    assert rb["metadata"]["annotations"][OVERRUN_ANNOTATION] == reason
    assert events(h, "a", "AdmissionOverrun") == [reason]
    h.advance(3_000)  # cycles change nothing while b runs
    assert [c.command for c in h.commands if isinstance(c.command, SuspendDispatching)] == [
        SuspendDispatching(binding=c.command.binding, reason=reason) for c in h.commands
        if isinstance(c.command, SuspendDispatching)][:1]
    h.delete("ResourceBinding", "default", "b")  # room frees: the growth is admitted
    h.advance(1_000)
    rb = h.obj("ResourceBinding", "default", "a")
    assert rb is not None and rb["spec"]["suspension"] == {} and OVERRUN_ANNOTATION not in rb["metadata"]["annotations"]
    assert rb["metadata"]["annotations"][ADMITTED_REQUEST_ANNOTATION] == '{"cpu":"4"}'
    [admit] = [c.command for c in h.commands if isinstance(c.command, AdmitRequest)]
    assert admit.reason == "queue q1: its growth fits"


def test_a_growth_that_fits_is_admitted_at_once_and_a_shrink_frees_room_at_the_next_cycle() -> None:
    h = universe(queues={"q1": {"capability": {"cpu": "4"}}})
    binding(h, "a", "q1", cpu="1", created="2026-01-01T00:00:00Z")
    h.advance(1_000)
    edit(h, "a", lambda spec: spec.update(replicas=3))  # 3 of 4: fits, recorded at once, never suspended
    rb = h.obj("ResourceBinding", "default", "a")
    assert rb is not None and rb["metadata"]["annotations"][ADMITTED_REQUEST_ANNOTATION] == '{"cpu":"3"}'
    assert "dispatching" not in (rb["spec"].get("suspension") or {})
    binding(h, "b", "q1", cpu="2", created="2026-01-01T00:00:01Z")
    h.advance(2_000)
    assert resumed(h) == ["a"]  # b waits: 3 + 2 > 4
    edit(h, "a", lambda spec: spec.update(replicas=1))  # scaled down: 2 CPUs free at once
    h.advance(1_000)
    assert resumed(h) == ["a", "b"]
    rb = h.obj("ResourceBinding", "default", "a")
    assert rb is not None and rb["metadata"]["annotations"][ADMITTED_REQUEST_ANNOTATION] == '{"cpu":"1"}'


def test_a_binding_of_three_pod_templates_is_charged_their_sum() -> None:
    h = universe(queues={"q1": {"capability": {"cpu": "4"}}})
    components = [{"name": "driver", "replicas": 1, "replicaRequirements": {"resourceRequest": {"cpu": "1"}}},
                  {"name": "executor", "replicas": 4, "replicaRequirements": {"resourceRequest": {"cpu": "500m"}}},
                  {"name": "sidecar", "replicas": 2, "replicaRequirements": {"resourceRequest": {"cpu": "250m"}}}]
    binding(h, "spark", "q1", created="2026-01-01T00:00:00Z", components=components)
    binding(h, "other", "q1", cpu="1", created="2026-01-01T00:00:01Z")
    h.advance(1_000)
    assert resumed(h) == ["spark"]  # 3.5 CPUs: the 1-CPU binding after it does not fit
    queue = h.obj("Queue", "", "q1")
    assert queue is not None and queue["status"]["allocated"] == {"cpu": "3500m"}
    rb = h.obj("ResourceBinding", "default", "other")
    assert rb is not None and rb["metadata"]["annotations"][ADMISSION_ANNOTATION] == "queue q1: cpu 4500m/4"
    spark = h.obj("ResourceBinding", "default", "spark")
    assert spark is not None and spark["metadata"]["annotations"][ADMITTED_REQUEST_ANNOTATION] == '{"cpu":"3500m"}'
