"""The pod-placement decider through ``projections.step.step``: events in, commands out, two member clusters."""

from __future__ import annotations

from typing import Any

import msgspec

from tether.core.commands import EmitMemberEvent, ReleasePod, SetMemberCondition, StartTimer
from tether.core.envelope import CommandRecord, EventRecord, rfc3339
from tether.core.events import (
    CommandSucceeded,
    Event,
    ListsStarted,
    MemberDisconnected,
    ObjectObserved,
    ObjectsListed,
    TimerFired,
    event_key,
)
from tether.core.keys import PLACEMENT_GATE
from tether.core.kube import trim
from tether.core.world import World, initial_world
from tether.projections.step import step

HOST = "kubernetes.io/hostname"
T0 = 1_700_000_000_000


class Feed:
    def __init__(self) -> None:
        self.world: World = initial_world()
        self.offset = 0
        self.at = T0

    def send(self, event: Event, *, at: int | None = None) -> list[CommandRecord]:
        self.offset += 1
        if at is not None:
            self.at = at
        return step(self.world, EventRecord(at_ms=self.at, source="test", key=event_key(event), event=event,
                                            offset=self.offset))

    def observe(self, cluster: str, raw: dict[str, Any]) -> list[CommandRecord]:
        return self.send(ObjectObserved(obj=trim(raw), cluster=cluster))


_rv = iter(range(1, 1_000_000))


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node",
            "metadata": {"name": name, "resourceVersion": str(next(_rv)), "labels": {HOST: name, **labels}},
            "status": {"allocatable": {"cpu": "8", "memory": "32Gi"}}}


def pod(name: str, *, group: str = "", job: str = "", cpu: str = "1", gated: bool = True, node_name: str = "",
        phase: str = "Pending", ns: str = "ml") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": ns, "uid": f"uid-{name}", "resourceVersion": str(next(_rv)),
                            "creationTimestamp": "2023-11-14T22:13:20Z"}
    if group:
        meta["annotations"] = {"godel.bytedance.com/pod-group-name": group}
    if job:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": job, "uid": "j"}]
    spec: dict[str, Any] = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu}}}]}
    if gated:
        spec["schedulingGates"] = [{"name": PLACEMENT_GATE}]
    if node_name:
        spec["nodeName"] = node_name
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": spec, "status": {"phase": phase}}


def pod_group(name: str, *, min_member: int, required: list[str], preferred: list[str] = ()) -> dict[str, Any]:
    return {"apiVersion": "scheduling.godel.kubewharf.io/v1alpha1", "kind": "PodGroup",
            "metadata": {"name": name, "namespace": "ml", "uid": "pg", "resourceVersion": str(next(_rv))},
            "spec": {"minMember": min_member, "affinity": {"podGroupAffinity": {
                "required": [{"topologyKey": k} for k in required],
                "preferred": [{"topologyKey": k} for k in preferred]}}}}


def operation(kind: str, name: str, *, phase: str = "", run_after: dict[str, Any] | None = None,
              fluid_status: list[dict[str, Any]] | None = None) -> dict[str, Any]:
    """A Fluid operation; ``fluid_status``: the conditions of a status Fluid's controller wrote (with its phase and
    duration), None: a status as bare as ``phase`` makes it (none at all without one)."""
    spec: dict[str, Any] = {"dataset": {"name": "d", "namespace": "ml"}}
    if run_after is not None:
        spec["runAfter"] = run_after
    status: dict[str, Any] = {"phase": phase} if phase else {}
    if fluid_status is not None:
        status = {"phase": phase or "Pending", "duration": "Unfinished", "conditions": fluid_status}
    return {"apiVersion": "data.fluid.io/v1alpha1", "kind": kind,
            "metadata": {"name": name, "namespace": "ml", "uid": f"uid-{name}", "resourceVersion": str(next(_rv))},
            "spec": spec, "status": status}


def job(name: str, owner_kind: str, owner: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job",
            "metadata": {"name": name, "namespace": "ml", "resourceVersion": str(next(_rv)),
                         "ownerReferences": [{"apiVersion": "data.fluid.io/v1alpha1", "kind": owner_kind,
                                              "name": owner, "uid": "o"}]}}


def releases(commands: list[CommandRecord]) -> dict[str, ReleasePod]:
    return {c.command.pod.name: c.command for c in commands if isinstance(c.command, ReleasePod)}


def racks(feed: Feed, cluster: str) -> None:
    for i in range(4):
        feed.observe(cluster, node(f"{cluster}-n{i}", rack="r1" if i < 2 else "r2", zone="z1"))


def test_a_group_is_placed_in_one_domain_once_min_member_pods_exist() -> None:
    feed = Feed()
    racks(feed, "m1")
    feed.observe("m1", pod_group("g", min_member=4, required=["rack"]))
    for i in range(3):
        assert releases(feed.observe("m1", pod(f"p{i}", group="g", cpu="3"))) == {}  # waiting: 3/4
    out = releases(feed.observe("m1", pod("p3", group="g", cpu="3")))
    assert sorted(out) == ["p0", "p1", "p2", "p3"]
    domains = {c.required[0].match_expressions[-1].values for c in out.values()}
    assert len(domains) == 1  # all four in one rack (4 x 3 CPU fit in one rack of 2 x 8 CPU)
    assert all(c.cluster == "m1" and c.gate == PLACEMENT_GATE for c in out.values())


def test_a_group_too_big_for_every_domain_stays_gated_with_a_warning() -> None:
    feed = Feed()
    racks(feed, "m1")
    feed.observe("m1", pod_group("g", min_member=2, required=["rack"]))
    feed.observe("m1", pod("p0", group="g", cpu="10"))
    out = feed.observe("m1", pod("p1", group="g", cpu="10"))
    assert releases(out) == {}
    assert [c.command.reason for c in out if isinstance(c.command, EmitMemberEvent)] == ["Unschedulable"]


def test_members_are_independent_and_keys_do_not_collide() -> None:
    feed = Feed()
    racks(feed, "m1")
    racks(feed, "m2")
    feed.send(ListsStarted(sources=("Pod/",), cluster="m2"))  # m2 is relisting: nothing decided there
    for cluster in ("m1", "m2"):
        feed.observe(cluster, pod_group("g", min_member=1, required=["rack"]))
    assert set(releases(feed.observe("m1", pod("p", group="g")))) == {"p"}
    assert releases(feed.observe("m2", pod("p", group="g"))) == {}
    out = feed.send(ObjectsListed(kind="Pod", keys=("m2:Pod/ml/p",), cluster="m2"))
    assert [(c.key, c.command.cluster) for c in out if isinstance(c.command, ReleasePod)] == [("m2:Pod/ml/p", "m2")]
    assert feed.world.lists_pending == set()  # the control plane never waited
    feed.send(MemberDisconnected(cluster="m2"))
    assert set(feed.world.members.clusters) == {"m1"}


def test_invalid_pod_group_keeps_its_pods_gated_with_an_event() -> None:
    feed = Feed()
    racks(feed, "m1")
    bad = pod_group("g", min_member=1, required=["rack"])
    bad["spec"]["affinity"]["podGroupAffinity"]["required"] = [{"topologyKey": ""}]
    feed.observe("m1", bad)
    out = feed.observe("m1", pod("p", group="g"))
    assert releases(out) == {}
    assert [c.command.reason for c in out if isinstance(c.command, EmitMemberEvent)] == ["InvalidPodGroup"]


def _dataflow(feed: Feed, policy: str, *, fluid_status: list[dict[str, Any]] | None = ()) -> list[CommandRecord]:
    racks(feed, "m1")
    feed.observe("m1", operation("DataLoad", "load", phase="Executing"))
    feed.observe("m1", job("load-job", "DataLoad", "load"))
    feed.observe("m1", pod("load-pod", job="load-job", gated=False, node_name="m1-n2", phase="Succeeded"))
    feed.observe("m1", operation("DataProcess", "proc", run_after={
        "kind": "DataLoad", "name": "load", "affinityStrategy": {"policy": policy}},
        fluid_status=list(fluid_status) if fluid_status is not None else None))
    feed.observe("m1", job("proc-job", "DataProcess", "proc"))
    held = feed.observe("m1", pod("proc-pod", job="proc-job"))
    assert releases(held) == {}  # the predecessor is not Complete yet: held, with a timer and a condition
    assert any(isinstance(c.command, StartTimer) for c in held)
    return feed.observe("m1", operation("DataLoad", "load", phase="Complete"))


def test_require_pins_the_successor_to_the_predecessors_node() -> None:
    out = _dataflow(Feed(), "Require")
    release = releases(out)["proc-pod"]
    assert release.required[0].match_expressions[0].values == ("m1-n2",) and not release.preferred
    conditions = [c.command.condition for c in out if isinstance(c.command, SetMemberCondition)]
    assert [(c.status, c.reason) for c in conditions] == [("True", "AffinityInherited")]


PROC = "DataProcess/ml/proc"
FLUIDS = {"type": "Fluid", "status": "True", "reason": "R", "message": "Fluid's own"}


def conditions_of(out: list[CommandRecord]) -> list[Any]:
    return [c.command.condition for c in out if isinstance(c.command, SetMemberCondition)]


def test_without_fluids_status_the_outcome_is_an_event_and_the_condition_follows_the_status() -> None:
    feed = Feed()
    out = _dataflow(feed, "Require", fluid_status=None)  # no Fluid controller has written proc's status
    assert set(releases(out)) == {"proc-pod"} and conditions_of(out) == []  # Fluid's schema would refuse it
    events = [c for c in out if isinstance(c.command, EmitMemberEvent)]
    assert [(e.command.reason, e.command.event_type) for e in events] == [("AffinityInherited", "Normal")]
    assert "has not written the operation's status yet" in events[0].reason
    decided_at = feed.at
    kept = feed.world.members.clusters["m1"].outcomes[PROC]
    assert (kept.status, kept.reason) == ("True", "AffinityInherited")  # on tether's side, until it can be written
    # a minute later Fluid's controller writes the status: the condition follows, as decided then, next to Fluid's
    feed.at += 60_000
    written = conditions_of(feed.observe("m1", operation("DataProcess", "proc", fluid_status=[FLUIDS], run_after={
        "kind": "DataLoad", "name": "load", "affinityStrategy": {"policy": "Require"}})))
    assert [(c.status, c.reason) for c in written] == [("True", "AffinityInherited")]
    assert written[0].last_transition_time == rfc3339(decided_at)
    assert not any(isinstance(c.command, EmitMemberEvent) for c in feed.observe("m1", pod("proc-pod", job="proc-job",
                                                                                        gated=False)))


def test_a_condition_replaced_by_fluids_controller_is_written_again_once() -> None:
    feed = Feed()
    run_after = {"kind": "DataLoad", "name": "load", "affinityStrategy": {"policy": "Require"}}
    out = _dataflow(feed, "Require", fluid_status=[FLUIDS])
    [condition] = conditions_of(out)
    [write] = [c for c in out if isinstance(c.command, SetMemberCondition)]
    ours = {"type": condition.type, "status": condition.status, "reason": condition.reason,
            "message": condition.message, "lastTransitionTime": condition.last_transition_time}
    written = trim(operation("DataProcess", "proc", fluid_status=[FLUIDS, ours], run_after=run_after))
    assert feed.send(CommandSucceeded(command_id=write.id, command="set_member_condition", target=write.key,
                                      result=written)) == []  # in place: nothing more to do
    complete = {"type": "Complete", "status": "True", "reason": "Done", "message": ""}
    again = feed.observe("m1", operation("DataProcess", "proc", phase="Complete", fluid_status=[complete],
                                         run_after=run_after))  # Fluid rebuilt its conditions without ours
    assert conditions_of(again) == [condition]
    assert not any(isinstance(c.command, EmitMemberEvent) for c in again)  # the outcome did not change: no Event
    assert conditions_of(feed.observe("m1", operation("DataProcess", "proc", phase="Complete",
                                                      fluid_status=[complete, ours], run_after=run_after))) == []


def test_a_held_operation_is_reported_once_while_it_waits() -> None:
    feed = Feed()
    racks(feed, "m1")
    feed.observe("m1", operation("DataLoad", "load", phase="Executing"))
    feed.observe("m1", operation("DataProcess", "proc", run_after={
        "kind": "DataLoad", "name": "load", "affinityStrategy": {"policy": "Require"}}))
    feed.observe("m1", job("proc-job", "DataProcess", "proc"))
    first = feed.observe("m1", pod("proc-0", job="proc-job"))
    second = feed.observe("m1", pod("proc-1", job="proc-job"))
    assert [c.command.reason for c in first if isinstance(c.command, EmitMemberEvent)] == [
        "WaitingForPrecedingOperation"]
    assert [c for c in second if isinstance(c.command, EmitMemberEvent)] == []


def test_prefer_prefers_the_predecessors_node() -> None:
    release = releases(_dataflow(Feed(), "Prefer"))["proc-pod"]
    assert not release.required
    assert (release.preferred[0].weight, release.preferred[0].preference.match_expressions[0].values) == (
        100, ("m1-n2",))


def test_a_wait_times_out_and_releases_the_pods_unchanged() -> None:
    feed = Feed()
    racks(feed, "m1")
    feed.observe("m1", operation("DataLoad", "load", phase="Executing"))
    feed.observe("m1", operation("DataProcess", "proc", run_after={
        "kind": "DataLoad", "name": "load", "affinityStrategy": {"policy": "Require"}}))
    feed.observe("m1", job("proc-job", "DataProcess", "proc"))
    held = feed.observe("m1", pod("proc-pod", job="proc-job"))
    timer = next(c.command for c in held if isinstance(c.command, StartTimer))
    out = feed.send(TimerFired(timer_id=timer.timer_id, purpose=timer.purpose, subject=timer.subject),
                    at=timer.fire_at_ms)
    release = releases(out)["proc-pod"]
    assert not release.required and not release.preferred
    assert [c.command.reason for c in out if isinstance(c.command, EmitMemberEvent)] == ["PrecedingOperationTimeout"]


def test_unknown_policy_and_missing_predecessor_release_with_a_warning() -> None:
    for run_after, reason in (({"kind": "DataLoad", "name": "load", "affinityStrategy": {"policy": "require"}},
                               "UnknownAffinityPolicy"),
                              ({"kind": "DataLoad", "name": "gone", "affinityStrategy": {"policy": "Require"}},
                               "PrecedingOperationNotFound")):
        feed = Feed()
        racks(feed, "m1")
        feed.observe("m1", operation("DataLoad", "load", phase="Complete"))
        feed.observe("m1", operation("DataProcess", "proc", run_after=run_after))
        feed.observe("m1", job("proc-job", "DataProcess", "proc"))
        out = feed.observe("m1", pod("proc-pod", job="proc-job"))
        assert set(releases(out)) == {"proc-pod"}
        events = [c.command for c in out if isinstance(c.command, EmitMemberEvent)]
        assert [(e.event_type, e.reason) for e in events] == [("Warning", reason)]


def test_decisions_are_deterministic_and_replay_byte_for_byte() -> None:
    def run() -> bytes:
        global _rv
        _rv = iter(range(1, 1_000_000))
        return msgspec.json.encode(_dataflow(Feed(), "Require"))

    assert run() == run()


def test_an_optional_kind_listed_as_empty_is_forgotten_and_nothing_else() -> None:
    """What a member's watch appends when the CRD of an optional kind is deleted (or is not there): an empty list of
    that kind. The member forgets every object of that kind, and only of that kind."""
    feed = Feed()
    racks(feed, "m1")
    feed.observe("m1", pod_group("g", min_member=2, required=["rack"]))
    feed.observe("m1", operation("DataLoad", "load"))
    feed.observe("m1", operation("DataProcess", "proc"))
    state = feed.world.members.clusters["m1"]
    nodes = set(state.nodes)
    assert set(state.groups) == {"PodGroup/ml/g"}
    assert set(state.operations) == {"DataLoad/ml/load", "DataProcess/ml/proc"}
    feed.send(ObjectsListed(kind="DataLoad", keys=(), cluster="m1"))
    assert set(state.operations) == {"DataProcess/ml/proc"} and set(state.groups) == {"PodGroup/ml/g"}
    feed.send(ObjectsListed(kind="PodGroup", keys=(), cluster="m1"))
    assert state.groups == {} and set(state.operations) == {"DataProcess/ml/proc"} and set(state.nodes) == nodes
