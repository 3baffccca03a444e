"""The pod webhook's decision (``core.placement.webhook_decision``) and the decider's answers to what it gates:
PodGroups that never appear, Events on transitions only, pods gated in doubt."""

from __future__ import annotations

from typing import Any

from tether.core.commands import EmitMemberEvent, StartTimer
from tether.core.events import TimerFired
from tether.core.keys import ADMISSION_ANNOTATION, PLACEMENT_GATE
from tether.core.placement.decider import GROUP_WAIT_TIMEOUT_MS
from tether.core.placement.webhook_decision import decide_pod_gate
from tether.core.world.member_state import MemberState

from .test_podplacement import T0, Feed, job, node, operation, pod, pod_group, racks, releases


def new_pod(*, group: str = "", job: str = "", annotations: dict[str, str] | None = None,
            gates: list[dict[str, str]] | None = None, node_name: str = "") -> dict[str, Any]:
    """A pod as a CREATE's AdmissionReview carries it: generateName, no name, no uid yet."""
    meta: dict[str, Any] = {"generateName": "w-", "annotations": dict(annotations or {})}
    if group:
        meta["annotations"]["godel.bytedance.com/pod-group-name"] = group
    if not meta["annotations"]:
        del meta["annotations"]
    if job:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "j",
                                    "controller": True}]
    spec: dict[str, Any] = {"containers": [{"name": "c", "image": "x"}]}
    if gates is not None:
        spec["schedulingGates"] = gates
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec}


def gate(state: MemberState, obj: Any, *, operation_: str = "CREATE") -> Any:
    return decide_pod_gate(state=state, operation=operation_, namespace="ml", pod=obj, request_uid="req-1")


def fluid_member(*, policy: str = "Require", with_job: bool = True) -> Feed:
    feed = Feed()
    racks(feed, "m1")
    feed.observe("m1", operation("DataLoad", "load", phase="Complete"))
    run_after: dict[str, Any] = {"kind": "DataLoad", "name": "load"}
    if policy:
        run_after["affinityStrategy"] = {"policy": policy}
    feed.observe("m1", operation("DataProcess", "proc", phase="Executing", run_after=run_after))
    if with_job:
        feed.observe("m1", job("proc-job", "DataProcess", "proc"))
    return feed


# --- the webhook's decision ------------------------------------------------------------------------------------


def test_a_pod_of_a_pod_group_is_gated_with_the_admission_annotation_known_group_or_not() -> None:
    state = MemberState()
    answer = gate(state, new_pod(group="g"))
    assert answer.gated and "not known yet" in answer.reason
    assert answer.patch == (
        {"op": "add", "path": "/spec/schedulingGates", "value": [{"name": PLACEMENT_GATE}]},
        {"op": "add", "path": "/metadata/annotations/tether.dev~1admission", "value": "req-1"})
    # other gates already there: appended, never replaced
    answer = gate(state, new_pod(group="g", gates=[{"name": "other"}]))
    assert answer.patch[0] == {"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": PLACEMENT_GATE}}


def test_pods_tether_does_not_place_are_admitted_unchanged_with_a_reason() -> None:
    state = fluid_member().world.members.clusters["m1"]
    cases = {
        "only be added when a pod is created": gate(state, new_pod(group="g"), operation_="UPDATE"),
        "already carries": gate(state, new_pod(group="g", gates=[{"name": PLACEMENT_GATE}])),
        "cannot be gated": gate(state, new_pod(group="g", node_name="n1")),
        "owned by no Job": gate(state, new_pod()),
        "not shaped like a pod": gate(state, {"metadata": "nope"}),
    }
    for expected, answer in cases.items():
        assert not answer.gated and answer.patch == () and expected in answer.reason, (expected, answer)
    assert not gate(state, None).gated


def test_a_pod_of_an_inheriting_fluid_operation_is_gated_and_one_without_a_strategy_is_not() -> None:
    for policy, gated in (("Require", True), ("Prefer", True), ("", False)):
        state = fluid_member(policy=policy).world.members.clusters["m1"]
        answer = gate(state, new_pod(job="proc-job"))
        assert answer.gated is gated, (policy, answer.reason)
        assert "DataProcess/ml/proc" in answer.reason
        if gated:  # a pod without annotations gets the map, with tether's only
            assert answer.patch[1] == {"op": "add", "path": "/metadata/annotations",
                                       "value": {ADMISSION_ANNOTATION: "req-1"}}


def test_a_pod_whose_job_is_not_known_yet_is_gated_only_while_an_operation_waits_for_its_job() -> None:
    waiting = fluid_member(with_job=False).world.members.clusters["m1"]
    answer = gate(waiting, new_pod(job="proc-job"))
    assert answer.gated and answer.reason.startswith("in doubt")
    nobody_waits = fluid_member(with_job=True).world.members.clusters["m1"]
    assert not gate(nobody_waits, new_pod(job="unrelated-job")).gated  # the only inheriting operation has its Job
    feed = fluid_member(with_job=False)
    feed.observe("m1", {"apiVersion": "batch/v1", "kind": "Job",
                        "metadata": {"name": "plain", "namespace": "ml", "resourceVersion": "1"}})
    answer = gate(feed.world.members.clusters["m1"], new_pod(job="plain"))
    assert not answer.gated and "belongs to no Fluid operation" in answer.reason  # known and nobody's


# --- the decider's side ----------------------------------------------------------------------------------------


def test_a_pod_gated_in_doubt_is_released_unchanged_once_its_job_is_nobodys() -> None:
    feed = fluid_member(with_job=False)
    assert releases(feed.observe("m1", pod("stray", job="batch-job"))) == {}  # its Job is not known: it waits
    out = feed.observe("m1", {"apiVersion": "batch/v1", "kind": "Job",
                              "metadata": {"name": "batch-job", "namespace": "ml", "resourceVersion": "7"}})
    release = releases(out)["stray"]
    assert release.required == () and release.preferred == () and "no Fluid operation" in release.note
    # a pod of the inheriting operation is decided with its operation, never released as a stray
    feed.observe("m1", job("proc-job", "DataProcess", "proc"))
    out = releases(feed.observe("m1", pod("proc-pod", job="proc-job")))
    assert all("no Fluid operation" not in r.note for r in out.values())


def test_pods_naming_a_pod_group_that_never_appears_are_released_with_an_event_after_the_timeout() -> None:
    feed = Feed()
    racks(feed, "m1")
    held = feed.observe("m1", pod("p0", group="typo"))
    timers = [c.command for c in held if isinstance(c.command, StartTimer)]
    assert releases(held) == {} and len(timers) == 1
    created = 1_700_000_000_000  # the pods' creationTimestamp (2023-11-14T22:13:20Z): the wait counts from it
    assert timers[0].fire_at_ms == created + GROUP_WAIT_TIMEOUT_MS and created < T0 + 1
    assert releases(feed.observe("m1", pod("p1", group="typo"))) == {}  # the timer is armed once
    timer = timers[0]
    out = feed.send(TimerFired(timer_id=timer.timer_id, purpose=timer.purpose, subject=timer.subject),
                    at=timer.fire_at_ms)
    assert sorted(releases(out)) == ["p0", "p1"]
    assert all(r.required == () and r.preferred == () for r in releases(out).values())
    warnings = [c.command for c in out if isinstance(c.command, EmitMemberEvent)]
    assert [(w.involved.name, w.reason, w.event_type) for w in warnings] == [
        ("p0", "PodGroupNotFound", "Warning"), ("p1", "PodGroupNotFound", "Warning")]


def test_a_group_that_stays_unschedulable_is_reported_once_then_again_after_it_was_placed() -> None:
    feed = Feed()
    racks(feed, "m1")
    feed.observe("m1", pod_group("g", min_member=2, required=["rack"]))
    feed.observe("m1", pod("p0", group="g", cpu="10"))

    def events(out: list[Any]) -> list[str]:
        return [c.command.reason for c in out if isinstance(c.command, EmitMemberEvent)]

    assert events(feed.observe("m1", pod("p1", group="g", cpu="10"))) == ["Unschedulable"]
    for i in range(3):  # the member changes under the group; still unschedulable: no new Event
        assert events(feed.observe("m1", node(f"m1-x{i}", rack="r9", zone="z1"))) == []
    # a big enough rack appears: placed (a Normal Event), and a later failure is a transition again
    big = node("m1-big", rack="r7", zone="z1")
    big["status"]["allocatable"]["cpu"] = "32"
    out = feed.observe("m1", big)
    assert sorted(releases(out)) == ["p0", "p1"] and events(out) == ["Placed"]
    feed.observe("m1", pod("p0", group="g", cpu="10", gated=False, node_name="m1-big", phase="Running"))
    feed.observe("m1", pod("p1", group="g", cpu="10", gated=False, node_name="m1-big", phase="Running"))
    out = feed.observe("m1", pod("p2", group="g", cpu="20"))  # pinned to r7, which has 12 CPU left
    assert events(out) in (["Unschedulable"], ["PlacementConflict"])
