"""Hostile member objects: Godel PodGroups, Fluid data operations, their Jobs, pods and nodes, folded through
``projections/member_fold.py`` and decided by the placement decider (``projections.step.step``).

A PodGroup that does not parse keeps its pods gated and says why (``InvalidPodGroup``); a Fluid operation that
does not parse releases its pods unchanged with a warning — never an exception, whatever the object. Commands
the decider issues must survive the log.
"""

from __future__ import annotations

from typing import Any

import msgspec
from hypothesis import event, example, given
from hypothesis import strategies as st

from tether.adapters.testing.fake_cluster import Harness
from tether.adapters.testing.hostile import bent, fuzz_settings
from tether.core.commands import EmitMemberEvent, ReleasePod
from tether.core.envelope import CommandRecord, decode_command, encode
from tether.core.events import ObjectDeleted, ObjectObserved
from tether.core.kube import trim
from tether.core.world.member_state import _parse_pod_tolerant, parse_pod

from .worlds import DATA_LOAD, DATA_PROCESS, JOB, MEMBER, POD_GROUP, member_objects, pod, world


def observe(h: Harness, raw: dict[str, Any], *, deleted: bool = False) -> list[CommandRecord] | None:
    """Fold ``raw`` as the member's watch would; None when the watch would skip it (not shaped like an object)."""
    try:
        obj = trim(raw)
    except msgspec.ValidationError:
        return None
    commands = h.feed(ObjectDeleted(obj=obj, cluster=MEMBER) if deleted else ObjectObserved(obj=obj, cluster=MEMBER))
    for command in commands:  # what is issued can be logged and read back
        assert decode_command(encode(command)) == command
    return commands


KEEP = (("kind",), ("apiVersion",), ("metadata",))  # the API server guarantees these (the last test bends them)


@fuzz_settings()
@given(group=bent(POD_GROUP, max_changes=3, keep=KEEP))
def test_a_hostile_pod_group_keeps_its_pods_gated_and_says_why(group: dict[str, Any]) -> None:
    h = world()
    if observe(h, group) is None:
        return
    state = h.world.members.clusters[MEMBER]
    parsed = state.groups[trim(group).key]
    event("invalid" if parsed.error else "valid")
    out = observe(h, pod("g-1", group="g")) or []
    released = {c.command.pod.name for c in out if isinstance(c.command, ReleasePod)}
    if parsed.error:
        assert not released & {"g-0", "g-1"}
        assert "InvalidPodGroup" in {c.command.reason for c in out if isinstance(c.command, EmitMemberEvent)} | {
            c.command.reason for c in h.commands if isinstance(c.command, EmitMemberEvent)}
    assert observe(h, group, deleted=True) is not None


@fuzz_settings()
@given(operation=st.sampled_from([DATA_LOAD, DATA_PROCESS]).flatmap(lambda o: bent(o, max_changes=3, keep=KEEP)))
def test_a_hostile_fluid_operation_never_raises_and_a_bad_one_releases_with_a_warning(
        operation: dict[str, Any]) -> None:
    h = world()
    out = observe(h, operation)
    if out is None:
        return
    state = h.world.members.clusters[MEMBER]
    parsed = state.operations[trim(operation).key]
    event(f"{operation['kind']} {'invalid' if parsed.error else 'valid'}")
    out += observe(h, pod("proc-1", job="proc-job")) or []
    if parsed.error and operation["kind"] == "DataProcess":  # its pods go unchanged, with a warning (once)
        assert {"proc-0", "proc-1"} <= {c.command.pod.name for c in out if isinstance(c.command, ReleasePod)}
        assert any(isinstance(c.command, EmitMemberEvent) and c.command.event_type == "Warning" for c in out)
    assert observe(h, operation, deleted=True) is not None


@fuzz_settings()
@given(index=st.integers(0, len(member_objects()) - 1), data=st.data())
def test_any_hostile_member_object_is_folded_without_an_exception(index: int, data: st.DataObject) -> None:
    """Nodes, Jobs and pods too (their quantities, owner references, gates and annotations)."""
    original = member_objects()[index]
    raw = data.draw(bent(original, max_changes=4, keep=(("kind",), ("apiVersion",))))
    h = world()
    observe(h, raw)
    observe(h, JOB)
    observe(h, raw, deleted=True)


RICH_POD = {**pod("r-0", group="g", job="j"), "spec": {
    "containers": [{"name": "a", "image": "x", "resources": {"requests": {"cpu": "500m", "memory": "1Gi"}}},
                   {"name": "b", "resources": {"limits": {"cpu": 2}}}, {"name": "c"}],
    "initContainers": [{"name": "i", "resources": {"requests": {"cpu": 2, "nvidia.com/gpu": "1"}}}],
    "schedulingGates": [{"name": "tether.dev/placement"}, {"name": "other"}], "nodeName": "n1",
    "affinity": {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
        {"matchExpressions": [{"key": "rack", "operator": "In", "values": ["r1"]}]}]}}}},
    "status": {"phase": "Running", "conditions": []}}


@fuzz_settings()
@given(raw=st.one_of(bent(RICH_POD, max_changes=4, keep=KEEP), bent(pod("p-0"), max_changes=3, keep=KEEP)))
@example(raw={**pod("p-0"), "spec": {"containers": [[{"name": "c"}]], "schedulingGates": True}})  # (was a TypeError)
def test_a_pod_read_by_its_typed_fields_is_the_pod_read_as_dictionaries(raw: dict[str, Any]) -> None:
    """``parse_pod`` decodes only the fields it reads, and falls back to reading the whole spec and status as
    dictionaries when they have other types: either way the view is the same."""
    try:
        obj = trim(raw)
    except msgspec.ValidationError:
        return
    assert parse_pod(obj) == _parse_pod_tolerant(obj)
    assert parse_pod(obj) == parse_pod(obj)  # (a cached request, the second time)
