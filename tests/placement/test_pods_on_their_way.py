"""Pods on their way (``core.placement.decider``): a group's plan counts the pods another group's placement
released — or is releasing — that kube-scheduler has not bound yet, where their required terms will put them.

Without that, two groups planned in turn both saw the first rack empty and were both pinned to it; the second
could never be bound there, and an ungated pod's affinity is final (the crash-restart run: 32 of 40 groups
stranded in one rack). Each test below failed before the fix (the second group went to rack r1 too)."""

from __future__ import annotations

from tether.core.commands import EmitMemberEvent, ReleasePod, StartTimer
from tether.core.envelope import CommandRecord
from tether.core.events import (
    CommandFailed,
    CommandSucceeded,
    ListsStarted,
    MemberDisconnected,
    ObjectDeleted,
    ObjectsListed,
)
from tether.core.keys import PLACEMENT_ANNOTATION
from tether.core.kube import REQUIRED, as_json, trim
from tether.projections.snapshot import decode_world, encode_world

from .test_podplacement import Feed, pod, pod_group, racks

# racks(): r1 = m1-n0, m1-n1 and r2 = m1-n2, m1-n3, 8 CPU each: a rack holds one group of 4 pods x 4 CPU.


def released_by(out: list[CommandRecord]) -> dict[str, CommandRecord]:
    return {c.command.pod.name: c for c in out if isinstance(c.command, ReleasePod)}


def rack_of(record: CommandRecord) -> str:
    assert isinstance(record.command, ReleasePod)
    (term,) = record.command.required
    (values,) = [r.values for r in term.match_expressions if r.key == "rack"]
    return values[0]


def racks_of(records: dict[str, CommandRecord]) -> set[str]:
    return {rack_of(r) for r in records.values()}


def group(feed: Feed, name: str, *, size: int = 4, cpu: str = "4") -> list[CommandRecord]:
    """A PodGroup needing one rack and its ``size`` gated pods; the commands the last pod led to."""
    feed.observe("m1", pod_group(name, min_member=size, required=["rack"]))
    out: list[CommandRecord] = []
    for i in range(size):
        out = feed.observe("m1", pod(f"{name}-{i}", group=name, cpu=cpu))
    return out


def released_pod(record: CommandRecord, *, group_name: str, cpu: str = "4", node_name: str = "") -> dict:
    """The pod as the release left it: ungated, tether's terms in its affinity, its note (bound if ``node_name``)."""
    command = record.command
    assert isinstance(command, ReleasePod)
    raw = pod(command.pod.name, group=group_name, cpu=cpu, gated=False, node_name=node_name)
    raw["metadata"]["annotations"][PLACEMENT_ANNOTATION] = command.note
    raw["spec"]["affinity"] = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": as_json(command.required)}}}
    return raw


def apply(feed: Feed, records: dict[str, CommandRecord], *, group_name: str, cpu: str = "4") -> list[CommandRecord]:
    """The releases applied (their answers in the log), the pods not bound yet."""
    out: list[CommandRecord] = []
    for record in records.values():
        out += feed.send(CommandSucceeded(command_id=record.id, command="release_pod", target=record.key,
                                          result=trim(released_pod(record, group_name=group_name, cpu=cpu))))
    return out


def test_a_group_is_not_pinned_to_a_rack_the_released_but_unbound_pods_of_another_fill() -> None:
    feed = Feed()
    racks(feed, "m1")
    first = released_by(group(feed, "a"))
    assert racks_of(first) == {"r1"}
    apply(feed, first, group_name="a")  # ungated, pinned to r1, not bound by kube-scheduler yet
    second = released_by(group(feed, "b"))
    assert sorted(second) == ["b-0", "b-1", "b-2", "b-3"] and racks_of(second) == {"r2"}
    assert "4 pods released and not bound yet counted" in second["b-0"].reason
    held = feed.world.members.clusters["m1"].releasing
    assert sorted(held) == [f"Pod/ml/b-{i}" for i in range(4)]  # a's answers arrived: its pods speak for themselves


def test_a_group_is_not_pinned_to_a_rack_another_groups_releases_in_flight_fill() -> None:
    feed = Feed()
    racks(feed, "m1")
    first = released_by(group(feed, "a"))  # decided; the executor has not applied them yet
    second = released_by(group(feed, "b"))
    assert racks_of(first) == {"r1"} and racks_of(second) == {"r2"}
    held = feed.world.members.clusters["m1"].releasing
    assert sorted(held) == [f"Pod/ml/{p}-{i}" for p in "ab" for i in range(4)]
    assert held["Pod/ml/a-0"][0] == first["a-0"].id
    restored = decode_world(encode_world(feed.world))  # a snapshot keeps them (a restart counts them too)
    assert restored is not None and restored.members.clusters["m1"].releasing == held


def test_groups_decided_in_one_step_take_room_from_each_other() -> None:
    feed = Feed()
    racks(feed, "m1")
    feed.send(ListsStarted(sources=("Pod/",), cluster="m1"))  # a relist: both groups are decided when it ends
    keys = []
    for name in ("a", "b"):
        group(feed, name)
        keys += [f"Pod/ml/{name}-{i}" for i in range(4)]
    out = released_by(feed.send(ObjectsListed(kind="Pod", keys=tuple(keys), cluster="m1")))
    assert {name: rack_of(r) for name, r in out.items()} == {
        **{f"a-{i}": "r1" for i in range(4)}, **{f"b-{i}": "r2" for i in range(4)}}


def test_released_pods_that_cannot_be_bound_block_no_other_group() -> None:
    feed = Feed()
    racks(feed, "m1")
    first = released_by(group(feed, "a"))
    apply(feed, first, group_name="a")  # pinned to r1 ...
    for i, node in enumerate(("m1-n0", "m1-n1")):  # ... which other pods fill before kube-scheduler binds a's
        feed.observe("m1", pod(f"x{i}", cpu="8", gated=False, node_name=node))
    # a's pods cannot be bound while r1 is full: they take no room (not in r2 either), and a waits for room there
    second = released_by(group(feed, "b"))
    assert racks_of(second) == {"r2"}
    apply(feed, second, group_name="b")
    # a third group fits nowhere now: b's released pods hold r2 even before they are bound
    out = group(feed, "c")
    assert released_by(out) == {}
    (warning,) = [c.command for c in out if isinstance(c.command, EmitMemberEvent)]
    assert warning.reason == "Unschedulable" and "4 pods released and not bound yet" in warning.message
    # b bound where it was pinned: still no room for c; r1 emptied: a's pods bind there first, still none for c
    for i, record in enumerate(second.values()):
        feed.observe("m1", released_pod(record, group_name="b", node_name=f"m1-n{2 + i // 2}"))
    for i in range(2):
        feed.send(ObjectDeleted(obj=trim(pod(f"x{i}", cpu="8", gated=False, node_name=f"m1-n{i}")), cluster="m1"))
    assert released_by(feed.observe("m1", pod_group("c", min_member=4, required=["rack"]))) == {}
    # a's pods finish: r1 is c's
    for record in first.values():
        feed.observe("m1", {**released_pod(record, group_name="a", node_name="m1-n0"), "status": {
            "phase": "Succeeded"}})
    third = released_by(feed.observe("m1", pod_group("c", min_member=4, required=["rack"])))
    assert sorted(third) == ["c-0", "c-1", "c-2", "c-3"] and racks_of(third) == {"r1"}


def test_a_group_waits_for_its_own_releases_in_flight_and_failed_ones_free_their_room() -> None:
    feed = Feed()
    racks(feed, "m1")
    first = released_by(group(feed, "a"))
    second = released_by(group(feed, "b"))
    assert racks_of(first) == {"r1"} and racks_of(second) == {"r2"}
    failed = []
    for record in first.values():  # the member did not answer: each release fails (retryable)
        failed.append(feed.send(CommandFailed(
            command_id=record.id, command="release_pod", target=record.key, reason="MemberUnavailable",
            message="not connected", retryable=True)))
    # while some of a's releases are in flight, a is not planned again: nothing but each failure's retry timer
    assert [[type(c.command) for c in out] for out in failed[:3]] == [[StartTimer]] * 3
    replanned = released_by(failed[3])
    assert sorted(replanned) == ["a-0", "a-1", "a-2", "a-3"] and racks_of(replanned) == {"r1"}  # b holds r2
    held = feed.world.members.clusters["m1"].releasing
    assert sorted(held) == [f"Pod/ml/{p}" for p in ("a-0", "a-1", "a-2", "a-3", "b-0", "b-1", "b-2", "b-3")]


def test_a_deleted_pod_is_no_longer_on_its_way() -> None:
    feed = Feed()
    racks(feed, "m1")
    first = released_by(group(feed, "a"))
    for record in first.values():  # deleted before its release was applied
        assert isinstance(record.command, ReleasePod)
        feed.send(ObjectDeleted(obj=trim(pod(record.command.pod.name, group="a", cpu="4")), cluster="m1"))
    assert feed.world.members.clusters["m1"].releasing == {}
    assert racks_of(released_by(group(feed, "b"))) == {"r1"}


def test_a_releases_answer_folded_after_the_watchs_bind_leaves_the_pod_bound() -> None:
    feed = Feed()
    racks(feed, "m1")
    record = released_by(group(feed, "a"))["a-0"]
    answer = trim(released_pod(record, group_name="a"))  # the release's answer: ungated, not bound yet ...
    bound = released_pod(record, group_name="a", node_name="m1-n0")  # ... then kube-scheduler bound it
    feed.observe("m1", bound)  # the watch was faster than the executor's append
    feed.send(CommandSucceeded(command_id=record.id, command="release_pod", target=record.key, result=answer))
    assert feed.world.members.clusters["m1"].pods["Pod/ml/a-0"].node_name == "m1-n0"


def test_a_releases_answer_never_brings_back_a_pod_the_watch_saw_deleted() -> None:
    feed = Feed()
    racks(feed, "m1")
    first = released_by(group(feed, "a"))
    for name, record in first.items():
        feed.send(ObjectDeleted(obj=trim(pod(name, group="a", cpu="4")), cluster="m1"))
        feed.send(CommandSucceeded(command_id=record.id, command="release_pod", target=record.key,
                                   result=trim(released_pod(record, group_name="a"))))
    assert not feed.world.members.clusters["m1"].pods  # else counted as on their way to r1 for ever
    assert racks_of(released_by(group(feed, "b"))) == {"r1"}
    feed.send(MemberDisconnected(cluster="m1"))  # nor does an answer bring back a member (its relist will)
    record = next(iter(first.values()))
    feed.send(CommandSucceeded(command_id=record.id, command="release_pod", target=record.key,
                               result=trim(released_pod(record, group_name="a"))))
    assert "m1" not in feed.world.members.clusters


def test_only_pods_tether_released_with_no_gate_left_are_counted_as_on_their_way() -> None:
    feed = Feed()
    racks(feed, "m1")
    pinned = {"nodeAffinity": {REQUIRED: {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}}}
    for i in range(4):  # pending pods pinned to r1 that tether did not release, or that another gate still holds
        other = pod(f"o{i}", cpu="4", gated=False)
        other["spec"]["affinity"] = pinned
        if i % 2:
            other["metadata"]["annotations"] = {PLACEMENT_ANNOTATION: "released by tether"}
            other["spec"]["schedulingGates"] = [{"name": "someone-else"}]
        feed.observe("m1", other)
    # kube-scheduler has not taken them (another gate) or tether does not know they will ever be bound: r1 is free
    assert racks_of(released_by(group(feed, "a"))) == {"r1"}


def test_a_late_member_waits_until_its_groups_released_pods_are_bound_then_joins_their_rack() -> None:
    feed = Feed()
    racks(feed, "m1")
    first = released_by(group(feed, "a", cpu="3"))
    apply(feed, first, group_name="a", cpu="3")
    assert racks_of(first) == {"r1"}
    assert released_by(feed.observe("m1", pod("a-4", group="a", cpu="1"))) == {}  # a's released pods: not bound
    out: list[CommandRecord] = []
    for i, record in enumerate(first.values()):
        out = feed.observe("m1", released_pod(record, group_name="a", cpu="3", node_name=f"m1-n{i // 2}"))
    late = released_by(out)
    assert sorted(late) == ["a-4"] and racks_of(late) == {"r1"}  # pinned by the members bound there
