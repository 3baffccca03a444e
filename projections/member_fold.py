"""The member clusters as tether knows them: Nodes, Pods, Godel PodGroups, Fluid operations and their Jobs.

Pods, Nodes, PodGroups and Fluid's data operations live in the member clusters, not in Karmada's API server. Their
observations carry the member's name (``ObjectObserved.cluster``) and are folded here, into one
:class:`MemberState` per cluster, never into the control plane's maps: a pod ``default/p`` in two members is two
objects, and the keys the decider and the log use are ``<cluster>:Kind/ns/name`` (``core.events.member_key``).

Each member has its own **lists pending** (``ListsStarted`` / ``ObjectsListed`` tagged with the cluster): pod
placement in that member waits for its lists to end, and nothing else does — a member that is down, relisting or
slow to answer holds back only its own decisions, never the control plane's nor another member's.

What is kept is what the pod-placement decider (``core.placement.decider``) reads, parsed once per observation
(the views, their shapes and the state's fields: ``core.world.member_state``):

* nodes: labels and allocatable (milli-units);
* pods: request (sum of containers, max with each init container), node, phase, scheduling gates, the PodGroup
  annotation, the owning Job, the annotations tether reads, and the raw ``spec.affinity`` (for ``--explain``);
* PodGroups: the parsed :class:`~tether.core.world.pod_group.GroupSpec`, or why it does not parse;
* Fluid operations: the parsed :class:`~tether.core.world.data_operation.DataOperation`, or why it does not parse; the
  successors of each (who inherits from it), and the placement recorded when one of its pods succeeded — kept
  here because the Job and its pods may be garbage-collected long before a successor runs;
* Jobs: the Fluid operation owning each (Fluid renders an operation as a Job owned by it; its pods are the Job's),
  and every Job known at all — a pod whose Job is not known yet may still turn out to be an operation's;
* the ReleasePod commands tether issued whose outcome has not arrived yet (pod key → the command's id and required
  terms): while the pod is still gated here, the decider counts it where those terms will put it
  (``core.placement.decider``, "Pods on their way");
* what tether last reported on each PodGroup (the reason of its last Event, noted when the command is issued), so
  that a group that stays unschedulable is reported once, on the transition, not on every change to the member;
* the outcome tether last reported on each Fluid operation (the condition its last Event stands for, noted when
  the Event is issued: :func:`note_outcome`), and whether Fluid has written the operation's status — tether's
  condition is written only then, and from this memory once the status appears
  (``core.placement.operation_status``);
* the position of the last event folded about the member: the pod webhook records it with each answer.

A write's answer and the watch race: an observation of a pod older than the one held (a release's answer folded
after the watch's bind) is ignored (``projections.versions``), and an answer never brings back an object the
watch saw deleted (:func:`observe_member`).

A gated pod that belongs to no PodGroup and to no known operation is a subject of its own (``Pod/ns/name``): the
pod webhook gates a pod *in doubt* (its Job not known yet while an operation of its namespace waits for one), and
the decider releases it once its Job is known to be no operation's.

Like the rest of the world, this is folded in place and deterministically (no clock; sorted iteration).
"""

from __future__ import annotations

from typing import Any

import msgspec

from tether.core.events import member_key
from tether.core.kube import KubeObject, NodeSelectorTerm, ObjectMeta, object_dict, parse_conditions
from tether.core.placement.dataflow import DataFlowSpecError, inheritance_source, parse_operation, record_placement
from tether.core.placement.operation_status import CONDITION_TYPE, accepts_conditions, outcome_condition
from tether.core.placement.pod_group_spec import InvalidPodGroup, parse_pod_group
from tether.core.world.data_operation import OPERATION_KINDS
from tether.core.world.member_state import (
    JOB,
    MEMBER_KINDS,
    NODE,
    POD,
    POD_GROUP,
    MemberGroup,
    MemberOperation,
    MemberPod,
    Members,
    MemberState,
    parse_node,
    parse_pod,
)

from .versions import stale

# --- parsing what pod placement reads ---------------------------------------------------------------------


def _raw(obj: KubeObject) -> dict[str, Any]:
    return {"apiVersion": obj.api_version, "kind": obj.kind,
            "metadata": {"name": obj.metadata.name, "namespace": obj.metadata.namespace},
            "spec": object_dict(obj.spec), "status": object_dict(obj.status)}


def parse_group(obj: KubeObject) -> MemberGroup:
    meta = obj.metadata
    try:
        return MemberGroup(namespace=meta.namespace, name=meta.name, uid=meta.uid, spec=parse_pod_group(_raw(obj)))
    except InvalidPodGroup as exc:
        return MemberGroup(namespace=meta.namespace, name=meta.name, uid=meta.uid, error=str(exc))


def parse_member_operation(obj: KubeObject) -> MemberOperation:
    meta = obj.metadata
    status = obj.status_dict()
    conditions = parse_conditions(status.get("conditions"))
    base = MemberOperation(kind=obj.kind, namespace=meta.namespace, name=meta.name, uid=meta.uid,
                           api_version=obj.api_version,
                           condition=next((c for c in conditions if c.type == CONDITION_TYPE), None),
                           accepts_conditions=accepts_conditions(status))
    try:
        return msgspec.structs.replace(base, operation=parse_operation(_raw(obj)))
    except DataFlowSpecError as exc:
        return msgspec.structs.replace(base, error=str(exc))


# --- folding ---------------------------------------------------------------------------------------------------


def _index(index: dict[str, set[str]], key: str, value: str, *, add_: bool) -> None:
    if not key:
        return
    if add_:
        index.setdefault(key, set()).add(value)
        return
    held = index.get(key)
    if held is not None:
        held.discard(value)
        if not held:
            del index[key]


def _operation_of_pod(state: MemberState, pod: MemberPod) -> str:
    return state.job_owner.get(f"{JOB}/{pod.namespace}/{pod.job}", "") if pod.job else ""


def _touch_pod(state: MemberState, pod: MemberPod, touched: set[str]) -> None:
    if pod.group:
        touched.add(f"{POD_GROUP}/{pod.namespace}/{pod.group}")
    operation = _operation_of_pod(state, pod)
    if operation:
        touched.add(operation)
        touched.update(state.successors.get(operation, ()))
    elif pod.gates and not pod.group:  # gated, and nobody's (yet): a subject of its own (module doc)
        touched.add(pod.key)


def _record(state: MemberState, pod: MemberPod) -> None:
    """Remember where an operation ran, from its earliest-created succeeded pod (Fluid's choice, deterministic)."""
    op_key = _operation_of_pod(state, pod)
    held = state.operations.get(op_key)
    if held is None or held.operation is None or pod.phase != "Succeeded" or not pod.node_name:
        return
    node = state.nodes.get(pod.node_name)
    if node is None:
        return
    origin = (pod.creation, pod.name)
    if op_key in state.recorded_from and state.recorded_from[op_key] <= origin:
        return
    state.recorded_from[op_key] = origin
    state.recorded[op_key] = record_placement(operation=held.operation, pod_annotations=pod.annotations,
                                              node_labels=node.labels)


def _put(state: MemberState, obj: KubeObject, *, deleted: bool, touched: set[str]) -> None:
    kind, meta = obj.kind, obj.metadata
    key = f"{kind}/{meta.namespace}/{meta.name}"
    if kind == NODE:
        if deleted:
            state.nodes.pop(meta.name, None)
        else:
            old_node = state.nodes.get(meta.name)
            if old_node is not None and old_node.resource_version == meta.resource_version:
                return
            state.nodes[meta.name] = parse_node(obj)
        touched.update(state.groups)  # capacity and labels change every group's plan
        return
    if kind == POD:
        old = state.pods.pop(key, None)
        if old is not None:
            if not deleted and stale(meta.resource_version, old.resource_version):
                state.pods[key] = old  # the same version, or an older one (a release's answer after the bind)
                return
            _index(state.pods_by_group, f"{POD_GROUP}/{old.namespace}/{old.group}" if old.group else "", key,
                   add_=False)
            _index(state.pods_by_job, f"{JOB}/{old.namespace}/{old.job}" if old.job else "", key, add_=False)
            _touch_pod(state, old, touched)
        if deleted:
            state.releasing.pop(key, None)
            return
        pod = parse_pod(obj)
        state.pods[key] = pod
        _index(state.pods_by_group, f"{POD_GROUP}/{pod.namespace}/{pod.group}" if pod.group else "", key, add_=True)
        _index(state.pods_by_job, f"{JOB}/{pod.namespace}/{pod.job}" if pod.job else "", key, add_=True)
        _record(state, pod)
        _touch_pod(state, pod, touched)
        return
    if kind == POD_GROUP:
        if deleted:
            state.groups.pop(key, None)
            state.reported.pop(key, None)
        else:
            state.groups[key] = parse_group(obj)
        touched.add(key)
        return
    if kind == JOB:
        owner = next((o for o in meta.owner_references if o.get("kind") in OPERATION_KINDS), None)
        if deleted:
            state.jobs.discard(key)
        else:
            state.jobs.add(key)
        if deleted or owner is None:
            state.job_owner.pop(key, None)
            for pod_key in sorted(state.pods_by_job.get(key, ())):  # its gated pods are nobody's: decide them
                if state.pods[pod_key].gates and not state.pods[pod_key].group:
                    touched.add(pod_key)
        else:
            state.job_owner[key] = f"{owner.get('kind')}/{meta.namespace}/{owner.get('name')}"
            for pod_key in sorted(state.pods_by_job.get(key, ())):
                _record(state, state.pods[pod_key])
            touched.add(state.job_owner[key])
        return
    if kind in OPERATION_KINDS:
        old_op = state.operations.pop(key, None)
        if old_op is not None and old_op.operation is not None:
            source = inheritance_source(old_op.operation)
            if source is not None:
                _index(state.successors, source.key, key, add_=False)
        touched.add(key)
        touched.update(state.successors.get(key, ()))
        if deleted:
            state.recorded.pop(key, None)
            state.recorded_from.pop(key, None)
            state.outcomes.pop(key, None)
            return
        held = parse_member_operation(obj)
        state.operations[key] = held
        if held.operation is not None:
            source = inheritance_source(held.operation)
            if source is not None:
                _index(state.successors, source.key, key, add_=True)


class _Unreported:
    """A set that keeps nothing (``add`` and ``update`` are the builtin ``bool``: C calls, no hashing)."""

    add = bool
    update = bool


_UNREPORTED: set[str] = _Unreported()  # type: ignore[assignment]


def _held(state: MemberState, obj: KubeObject) -> bool:
    kind, meta = obj.kind, obj.metadata
    if kind == NODE:
        return meta.name in state.nodes
    key = f"{kind}/{meta.namespace}/{meta.name}"
    return key in (state.pods if kind == POD else state.groups if kind == POD_GROUP else state.jobs if kind == JOB
                   else state.operations)


def observe_member(members: Members, cluster: str, obj: KubeObject, *, deleted: bool, answer: bool = False,
                   report: bool = True) -> set[str]:
    """Fold an observation of ``obj`` in member ``cluster``; returns the member keys of the PodGroups and
    operations whose pods may now be decided differently (none without ``report``: a replay that only rebuilds
    state). ``answer``: ``obj`` is a write's answer (a command's result), which updates an object held but never
    brings back one the watch saw deleted meanwhile — the two race, and a pod brought back would be counted as on
    its way for ever."""
    if obj.kind not in MEMBER_KINDS:
        return set()
    state = members.clusters.get(cluster) if answer else members.state(cluster)
    if state is None or (answer and not _held(state, obj)):
        return set()  # (nor a member disconnected meanwhile: its relist brings its objects back)
    if not report:
        _put(state, obj, deleted=deleted, touched=_UNREPORTED)
        return set()
    touched: set[str] = set()
    _put(state, obj, deleted=deleted, touched=touched)
    return {member_key(cluster, key) for key in touched}


def _all_subjects(cluster: str, state: MemberState) -> set[str]:
    strays = [key for key, pod in state.pods.items() if pod.gates and not pod.group
              and not _operation_of_pod(state, pod)]
    return {member_key(cluster, key) for key in (*state.groups, *state.operations, *strays)}


def member_listed(members: Members, cluster: str, *, kind: str, namespace: str, keys: tuple[str, ...]) -> set[str]:
    """A list of ``kind`` in ``cluster`` ended: forget what it did not list; when the member's last pending list
    ended, every PodGroup and operation there is decided again (the picture is complete)."""
    state = members.state(cluster)
    present = set(keys)
    touched: set[str] = set()
    held: list[tuple[str, KubeObject]] = []
    if kind == NODE:
        gone_nodes = sorted(n for n in state.nodes if f"{NODE}//{n}" not in present and member_key(
            cluster, f"{NODE}//{n}") not in present)
        for name in gone_nodes:
            del state.nodes[name]
        if gone_nodes:
            touched.update(state.groups)
    else:
        table: Any = {POD: state.pods, POD_GROUP: state.groups, JOB: state.jobs}.get(
            kind, state.operations)
        for key in sorted(table):
            if not key.startswith(f"{kind}/"):
                continue
            if key in present or member_key(cluster, key) in present:
                continue
            if namespace and key.split("/", 2)[1] != namespace:
                continue
            kind_, ns, name = key.split("/", 2)
            held.append((key, KubeObject(api_version="", kind=kind_, metadata=ObjectMeta(name=name, namespace=ns))))
    for _, obj in held:
        _put(state, obj, deleted=True, touched=touched)
    out = {member_key(cluster, key) for key in touched}
    pending = state.lists_pending
    if pending:
        pending.discard(f"{kind}/{namespace}")
        if not pending:
            out |= _all_subjects(cluster, state)
    return out


def note_outcome(members: Members, cluster: str, *, operation_key: str, reason: str, message: str, at: str) -> None:
    """tether issued the Event reporting an inheritance outcome on an operation: remember the outcome (its
    condition, decided at ``at``) — what the Event said is what the condition must say, whenever it can be
    written."""
    held = members.clusters.get(cluster)
    if held is not None:
        held.outcomes[operation_key] = outcome_condition(reason=reason, message=message, at=at)


def note_releasing(members: Members, cluster: str, *, pod_key: str, command_id: str,
                   required: tuple[NodeSelectorTerm, ...]) -> None:
    """tether issued a ReleasePod: until its outcome arrives (:func:`release_done`), the pod is on its way where
    ``required`` puts it."""
    held = members.clusters.get(cluster)
    if held is not None:
        held.releasing[pod_key] = (command_id, required)


def release_done(members: Members, cluster: str, *, pod_key: str, command_id: str) -> None:
    """The outcome of the ReleasePod ``command_id`` arrived (applied, a no-op or failed): it is no longer in flight."""
    held = members.clusters.get(cluster)
    if held is not None and held.releasing.get(pod_key, ("",))[0] == command_id:
        del held.releasing[pod_key]


def member_lists_started(members: Members, cluster: str, sources: tuple[str, ...]) -> None:
    members.state(cluster).lists_pending.update(sources)


def member_disconnected(members: Members, cluster: str) -> None:
    members.clusters.pop(cluster, None)


__all__ = [
    "member_disconnected", "member_listed", "member_lists_started", "note_outcome", "note_releasing", "observe_member",
    "parse_group", "parse_member_operation", "release_done",
]
