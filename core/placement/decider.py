"""Pod placement in the member clusters: the decider behind tether's scheduling gate.

Pods that need a placement decision are created with the scheduling gate ``core.keys.PLACEMENT_GATE`` (the pod
webhook adds it, ``adapters/kubernetes/pod_webhook.py``). This decider reads the member clusters from the world
(``core/world/member_state.py``) and, for each PodGroup or Fluid operation an event touched, decides what happens to
its gated pods:

* **Godel PodGroups** (``core.placement.topology_planner``): nothing until ``minMember`` pods exist; then
  :func:`plan_group` over the member's nodes (each node's ``requested``: the requests of the non-terminal pods bound
  to it, and of the pods on their way to it — below) → per pod, required terms pinning it to the chosen domain and
  preferred terms for the circle order. A group some of whose pods are released, or being released, and not bound
  yet waits for them (a second plan could otherwise choose another domain for the rest). An unplaceable group stays
  gated (a Warning Event on the PodGroup says why) and is planned again whenever its member changes; a PodGroup
  that does not parse keeps its pods gated with a Warning Event naming the field — placing a gang against its
  owner's intent would be worse than waiting. A gated pod naming a PodGroup that does not exist waits for it — for
  :data:`GROUP_WAIT_TIMEOUT_MS` from the earliest creation of the gated pods (a ``StartTimer`` whose firing decides
  again), then its pods are released unchanged with a Warning Event on each (``PodGroupNotFound``): a typo in an
  annotation must not strand pods for ever.
* **Events on transitions only.** The Events on a PodGroup (``Unschedulable``, ``PlacementConflict``,
  ``InvalidPodGroup``, and ``Placed`` when its pods are released) are issued when the reason differs from the last
  one tether issued there (``MemberState.reported``, noted when the command is issued): a group that stays
  unschedulable while its member changes under it is reported once, not on every node or pod update.
* **Pods gated in doubt** (the webhook gated a pod whose Job it did not know yet, ``core.placement.webhook_decision``):
  once the Job is known and is no Fluid operation's, the pod is released unchanged. While its Job is unknown it waits.
* **Fluid operations** (``core.placement.dataflow``): :func:`decide_inheritance` from the predecessor and the placement
  recorded when its pod succeeded, then :func:`gate_decision`: Inject (tighten, release), Unchanged (release),
  Reject (release with a Warning), Wait (hold until ``gated_since + timeout``: a ``StartTimer`` whose firing
  decides again; after the deadline the pods are released unchanged with a Warning). ``gated_since`` is the
  earliest ``creationTimestamp`` of the gated pods — a time from the objects, never from a clock. Each outcome is
  an Event on the operation when it changes (the outcome is then kept in ``MemberState.outcomes``) and the
  condition :data:`~tether.core.placement.operation_status.CONDITION_TYPE` — written only once Fluid's controller
  has written the operation's status, since Fluid's schema refuses a status without its ``phase`` and
  ``duration``; until then the outcome waits in the world and is written when the status appears
  (``core.placement.operation_status``).

**Pods on their way.** Between tether's decision and kube-scheduler's bind, a placed pod is *on its way*: its
ReleasePod in flight (the pod still gated in the world; ``MemberState.releasing`` holds the command's terms until its
outcome), then released and not bound yet. Its room is taken all the same, as kube-scheduler's *assumed* and
*nominated* pods take room in its cache: a plan that did not count it would pin the next group to the same domain,
overcommit it, and strand the pods that do not fit there — an ungated pod's affinity is final (the crash-restart run
pinned 40 groups to one rack that holds 8, while the executor lagged behind the decisions). So each plan first counts
every live pod on its way (tether released it — its placement annotation, no gate left — or its release is in
flight), by pod key, on the first node by name that its required terms allow and that has room for it after the
bound pods and the pods counted before it; a pod with no such node takes no room (it cannot bind until room frees,
and then competes like any pending pod), so released pods that can never bind block no other group. Groups placed
earlier in the same step are counted the same way, so one relist deciding many groups at once spreads them too. The
node is tether's guess — kube-scheduler picks the node inside the domain — but the domain and the amount are
exact, and that is what the next plan's choice of domain turns on; once bound, the pod counts where it is. Pods
released without required terms (unchanged) are not counted: kube-scheduler may put them anywhere. All of it is a
function of the world, so a replay counts the same pods on the same nodes. A pod that has room but never binds for
a reason tether does not see (a taint, a cordoned node) holds its room in tether's picture until it is bound,
deleted or finished.

**One command per pod** (:class:`~tether.core.commands.ReleasePod`): the executor tightens the affinity and
removes the gate in one write. Tightening first and releasing in a second write would leave a window where a
failure between the two strands a pod gated with its affinity half-done; one write guarded by the resourceVersion
has no such window, and the API server validates it against the pod as it was — gated, so the tightening is
allowed. The executor merges tether's terms into the pod's *current* affinity (``core.placement.node_affinity``), so a
retry, a replay or a re-delivery is idempotent.

Deterministic: subjects are decided in sorted order, pods by name, timers and times come from events and objects.
A member whose lists have not all ended is not decided at all (its picture is incomplete); nothing else waits for
it. Nothing here depends on the control plane's ``lists_pending``: pod placement in a member does not wait for
Karmada's relists.
"""

from __future__ import annotations

from ..commands import Command, EmitMemberEvent, ReleasePod, SetMemberCondition, StartTimer
from ..decision import Decision
from ..envelope import EventRecord, parse_rfc3339_ms, rfc3339
from ..events import split_member_key
from ..keys import PLACEMENT_ANNOTATION, PLACEMENT_GATE
from ..kube import Condition, NodeSelectorTerm, ObjectRef, PreferredSchedulingTerm
from ..quantity import ResourceList
from ..world import Touched, World
from ..world.data_operation import OPERATION_KINDS
from ..world.member_state import POD, POD_GROUP, MemberOperation, MemberPod, MemberState
from .dataflow import (
    DataFlowSpecError,
    Hold,
    InheritanceResult,
    Inject,
    Reject,
    Release,
    decide_inheritance,
    gate_decision,
    inheritance_source,
    invalid_spec,
)
from .node_affinity import InvalidAffinity, parse_node_affinity, selector_matches
from .operation_status import outcome_condition, same_outcome
from .pod_group_spec import API_VERSION as POD_GROUP_API_VERSION
from .topology_planner import GroupPod, Node, plan_group

DECIDER = "podplacement"
WAIT_PURPOSE = "dataflow-wait"
GROUP_WAIT_PURPOSE = "podgroup-wait"
#: How long gated pods wait for the PodGroup they name to exist before they are released without a placement.
GROUP_WAIT_TIMEOUT_MS = 10 * 60 * 1000


def _ref(pod: MemberPod) -> ObjectRef:
    return ObjectRef(api_version="v1", kind="Pod", name=pod.name, namespace=pod.namespace, uid=pod.uid)


def _decision(command: Command, reason: str) -> Decision:
    return Decision(command=command, reason=reason, decider=DECIDER)


def _live(pod: MemberPod) -> bool:
    return not pod.deleting and not pod.terminal


def _on_its_way(state: MemberState, pod: MemberPod) -> tuple[NodeSelectorTerm, ...]:
    """The required terms of a live, unbound pod kube-scheduler is about to place — released by tether (its affinity
    as written on it), or its ReleasePod in flight (the command's terms) — or ``()`` when it is none of these
    (module doc, "Pods on their way")."""
    if PLACEMENT_GATE in pod.gates:
        held = state.releasing.get(pod.key)
        return held[1] if held is not None and len(pod.gates) == 1 else ()  # (another gate: not schedulable yet)
    if pod.gates or PLACEMENT_ANNOTATION not in pod.annotations:
        return ()
    try:
        return parse_node_affinity(pod.affinity.get("nodeAffinity")).required
    except InvalidAffinity:
        return ()  # kube-scheduler cannot place it either


class _Room:
    """What each node of a member has taken: the requests of the live pods bound to it, then those of the pods on
    their way, each counted on the first node (by name) its required terms allow with room for it (module doc,
    "Pods on their way"). Built once per member per step, on the first group planned there, and added to as that
    step places groups, so a group decided later in the step sees the room the earlier ones took."""

    __slots__ = ("nodes", "on_the_way", "requested")

    def __init__(self, state: MemberState) -> None:
        self.nodes = [state.nodes[name] for name in sorted(state.nodes)]
        self.requested: dict[str, dict[str, int]] = {}
        self.on_the_way = 0
        coming: list[tuple[MemberPod, tuple[NodeSelectorTerm, ...]]] = []
        for key in sorted(state.pods):
            pod = state.pods[key]
            if not _live(pod):
                continue
            if pod.node_name:
                self._take(pod.node_name, pod.request)
            elif required := _on_its_way(state, pod):
                coming.append((pod, required))
        for pod, required in coming:  # after every bound pod: those hold their nodes already
            self.assume(pod.request, required)

    def _take(self, node: str, request: ResourceList) -> None:
        held = self.requested.setdefault(node, {})
        for name, amount in request.items():
            held[name] = held.get(name, 0) + amount

    def assume(self, request: ResourceList, required: tuple[NodeSelectorTerm, ...]) -> None:
        """Count a pod on its way on the first node its terms allow that has room for it; nowhere if none has (it
        cannot be bound until room frees up, so it takes none from anyone)."""
        for node in self.nodes:
            held = self.requested.get(node.name, {})
            if all(held.get(name, 0) + amount <= node.allocatable.get(name, 0)
                   for name, amount in request.items() if amount > 0) \
                    and selector_matches(required, name=node.name, labels=node.labels):
                self._take(node.name, request)
                self.on_the_way += 1
                return

    def planner_nodes(self) -> list[Node]:
        return [Node(name=node.name, labels=node.labels, allocatable=node.allocatable,
                     requested=dict(self.requested.get(node.name, {}))) for node in self.nodes]


def _gated_since(pods: list[MemberPod], record: EventRecord) -> int:
    """The earliest creation of ``pods`` (a time from the objects, never from a clock; the event's when unset)."""
    created = [ms for ms in (parse_rfc3339_ms(p.creation) for p in pods) if ms is not None]
    return min(created) if created else record.at_ms


def _group_missing(cluster: str, key: str, gated: list[MemberPod], record: EventRecord) -> list[Decision]:
    """Gated pods naming a PodGroup that does not exist: wait for it, until the deadline (module doc)."""
    subject = f"{cluster}:{key}"
    deadline = _gated_since(gated, record) + GROUP_WAIT_TIMEOUT_MS
    if record.at_ms < deadline:
        timer = StartTimer(timer_id=f"{GROUP_WAIT_PURPOSE}|{subject}|{deadline}", fire_at_ms=deadline,
                           purpose=GROUP_WAIT_PURPOSE, subject=subject)
        return [_decision(timer, f"{subject} does not exist; its {len(gated)} gated pods wait for it until "
                                 f"{rfc3339(deadline)}")]
    message = (f"PodGroup {key.split('/', 1)[1]} did not appear within {GROUP_WAIT_TIMEOUT_MS // 1000}s; "
               "released without a topology placement")
    out: list[Decision] = []
    for pod in gated:
        out.append(_decision(ReleasePod(cluster=cluster, pod=_ref(pod), gate=PLACEMENT_GATE, note=f"{key}: not found"),
                             f"{subject}: {message}"))
        out.append(_decision(EmitMemberEvent(cluster=cluster, involved=_ref(pod), event_type="Warning",
                                             reason="PodGroupNotFound", message=message), f"{subject}: {message}"))
    return out


def _group_event(state: MemberState, cluster: str, ref: ObjectRef, *, event_type: str, reason: str,
                 message: str, why: str) -> list[Decision]:
    """An Event on a PodGroup, only when its reason differs from the last one tether issued there (module doc)."""
    if state.reported.get(ref.key) == reason:
        return []
    return [_decision(EmitMemberEvent(cluster=cluster, involved=ref, event_type=event_type, reason=reason,
                                      message=message), why)]


def _decide_group(state: MemberState, cluster: str, key: str, record: EventRecord,
                  rooms: dict[str, _Room]) -> list[Decision]:
    pods = [state.pods[k] for k in sorted(state.pods_by_group.get(key, ()))]
    pods = [p for p in pods if _live(p)]
    gated = {p.name: p for p in pods if PLACEMENT_GATE in p.gates}
    if not gated:
        return []
    group = state.groups.get(key)
    if group is None:  # not created (or listed) yet: its pods wait for it, for a while
        return _group_missing(cluster, key, list(gated.values()), record)
    group_ref = ObjectRef(api_version=POD_GROUP_API_VERSION, kind=POD_GROUP, name=group.name,
                          namespace=group.namespace, uid=group.uid)
    if group.spec is None:
        return _group_event(state, cluster, group_ref, event_type="Warning", reason="InvalidPodGroup",
                            message=group.error,
                            why=f"{cluster}: PodGroup {group.namespace}/{group.name} does not parse ({group.error}); "
                                f"its {len(gated)} gated pods stay gated")
    if any(PLACEMENT_ANNOTATION in p.annotations and not p.gates and not p.node_name for p in pods) \
            or any(p.key in state.releasing for p in gated.values()):
        return []  # released (or being released) pods not bound yet: plan the rest once they are (module doc)
    members = [GroupPod(name=p.name, request=p.request, node_name=p.node_name) for p in pods
               if not p.gates or p.name in gated]
    room = rooms.get(cluster)
    if room is None:
        room = rooms[cluster] = _Room(state)
    plan = plan_group(nodes=room.planner_nodes(), spec=group.spec, pods=members)
    counted = (f"; {room.on_the_way} pods released and not bound yet counted where they go" if room.on_the_way
               else "")
    if plan.status in ("unschedulable", "conflict"):
        return _group_event(state, cluster, group_ref, event_type="Warning",
                            reason="Unschedulable" if plan.status == "unschedulable" else "PlacementConflict",
                            message=plan.reason + counted, why=f"{cluster}: PodGroup {group.namespace}/{group.name}: "
                                                               f"{plan.reason}{counted}")
    if plan.status != "placed" or plan.domain is None:
        return []
    out: list[Decision] = []
    domain = plan.domain.key or "the cluster"
    for placement in plan.placements:
        pod = gated.get(placement.pod)
        if pod is None:
            continue
        circle = f", circle {placement.circle}" if placement.circle else ", waiting for room in the domain"
        room.assume(pod.request, placement.required)  # on its way from now: the next group's plan counts it
        out.append(_decision(
            ReleasePod(cluster=cluster, pod=_ref(pod), gate=PLACEMENT_GATE, required=placement.required,
                       preferred=placement.preferred, note=f"PodGroup {group.name}: {domain}"),
            f"{cluster}: PodGroup {group.namespace}/{group.name}: {plan.reason}{counted}; pod {pod.name} → "
            f"{domain}{circle}"))
    if out:
        out += _group_event(state, cluster, group_ref, event_type="Normal", reason="Placed",
                            message=f"{len(out)} pods released into {domain}",
                            why=f"{cluster}: PodGroup {group.namespace}/{group.name} placed in {domain}")
    return out


def _decide_stray(state: MemberState, cluster: str, key: str) -> list[Decision]:
    """A gated pod of no PodGroup and no operation (gated in doubt by the webhook): released unchanged once its
    Job is known to be no operation's; while the Job is not known, it waits for it (module doc)."""
    pod = state.pods.get(key)
    if pod is None or not _live(pod) or PLACEMENT_GATE not in pod.gates or pod.group:
        return []
    job_key = f"Job/{pod.namespace}/{pod.job}" if pod.job else ""
    if job_key and (job_key in state.job_owner or job_key not in state.jobs):
        return []  # an operation's pod (decided with it), or its Job is not known yet
    why = (f"Job {pod.job} belongs to no Fluid operation" if pod.job else "names no PodGroup and has no Job")
    return [_decision(ReleasePod(cluster=cluster, pod=_ref(pod), gate=PLACEMENT_GATE,
                                 note=f"not placed by tether: {why}"),
                      f"{cluster}:{key}: gated by tether, but {why}: released unchanged")]


def _operation_pods(state: MemberState, key: str) -> list[MemberPod]:
    jobs = sorted(job for job, owner in state.job_owner.items() if owner == key)
    return [state.pods[p] for job in jobs for p in sorted(state.pods_by_job.get(job, ())) if _live(state.pods[p])]


def _inheritance(state: MemberState, held: MemberOperation | None) -> InheritanceResult:
    if held is None:
        return Reject(reason="OperationNotFound", message="the operation owning these pods no longer exists")
    if held.operation is None:
        return invalid_spec(DataFlowSpecError("spec", held.error))
    source = inheritance_source(held.operation)
    predecessor = state.operations.get(source.key) if source is not None else None
    return decide_inheritance(operation=held.operation,
                              predecessor=predecessor.operation if predecessor is not None else None,
                              placement=state.recorded.get(source.key) if source is not None else None)


def _report(cluster: str, state: MemberState, key: str, held: MemberOperation | None, *, reason: str, message: str,
            warning: bool, at_ms: int) -> list[Decision]:
    """An inheritance outcome on the operation: an Event when it differs from the last one reported there
    (``MemberState.outcomes``), and the condition — only where Fluid's schema lets tether write it
    (``core.placement.operation_status``); otherwise it waits in the world for Fluid's status to appear."""
    if held is None:
        return []
    ref = _operation_ref(held)
    outcome = outcome_condition(reason=reason, message=message, at=rfc3339(at_ms))
    last = state.outcomes.get(key)
    why = f"{cluster}: {held.kind} {held.namespace}/{held.name}: {reason}: {message}"
    out = []
    if same_outcome(last, outcome):
        assert last is not None
        outcome = last  # reported already: its condition keeps the time it was decided at
    else:
        deferred = "" if held.accepts_conditions else (" (Fluid has not written the operation's status yet: the "
                                                       "condition follows once it has)")
        out.append(_decision(EmitMemberEvent(cluster=cluster, involved=ref,
                                             event_type="Warning" if warning else "Normal", reason=reason,
                                             message=message), why + deferred))
    out.extend(_condition(cluster, held, outcome, why))
    return out


def _operation_ref(held: MemberOperation) -> ObjectRef:
    return ObjectRef(api_version=held.api_version, kind=held.kind, name=held.name, namespace=held.namespace,
                     uid=held.uid)


def _condition(cluster: str, held: MemberOperation, outcome: Condition, why: str) -> list[Decision]:
    """tether's condition on the operation, when it differs from ``outcome`` and Fluid's status takes it."""
    if not held.accepts_conditions or same_outcome(held.condition, outcome):
        return []
    return [_decision(SetMemberCondition(cluster=cluster, target=_operation_ref(held), condition=outcome), why)]


def _settle_condition(state: MemberState, cluster: str, key: str) -> list[Decision]:
    """No pod of the operation is gated any more: its reported outcome is written as soon as Fluid's status takes
    it, and again if Fluid's controller replaced the conditions (``core.placement.operation_status``)."""
    held = state.operations.get(key)
    outcome = state.outcomes.get(key)
    if held is None or outcome is None:
        return []
    return _condition(cluster, held, outcome, f"{cluster}: {held.kind} {held.namespace}/{held.name}: "
                                              f"{outcome.reason}: {outcome.message} (the outcome reported earlier)")


def _decide_operation(state: MemberState, cluster: str, key: str, record: EventRecord) -> list[Decision]:
    gated = [p for p in _operation_pods(state, key) if PLACEMENT_GATE in p.gates]
    if not gated:
        return _settle_condition(state, cluster, key)
    held = state.operations.get(key)
    result = _inheritance(state, held)
    since = _gated_since(gated, record)
    outcome = gate_decision(result=result, gated_since_ms=since, now_ms=record.at_ms)
    subject = f"{cluster}:{key}"
    if isinstance(outcome, Hold):
        timer = StartTimer(timer_id=f"{WAIT_PURPOSE}|{subject}|{outcome.until_ms}", fire_at_ms=outcome.until_ms,
                           purpose=WAIT_PURPOSE, subject=subject)
        latest = rfc3339(outcome.until_ms)
        return [_decision(timer, f"{subject}: {outcome.message}; released at the latest at {latest}"),
                *_report(cluster, state, key, held, reason=outcome.reason, message=outcome.message, warning=False,
                         at_ms=record.at_ms)]
    assert isinstance(outcome, Release)
    required: tuple[NodeSelectorTerm, ...] = ()
    preferred: tuple[PreferredSchedulingTerm, ...] = ()
    if isinstance(result, Inject) and outcome.node_affinity is not None:
        required = (NodeSelectorTerm(match_expressions=result.required),) if result.required else ()
        preferred = result.preferred
    out = [_decision(ReleasePod(cluster=cluster, pod=_ref(pod), gate=PLACEMENT_GATE, required=required,
                                preferred=preferred, note=f"{key}: {outcome.reason}"), f"{subject}: {outcome.message}")
           for pod in gated]
    out += _report(cluster, state, key, held, reason=outcome.reason, message=outcome.message, warning=outcome.warning,
                   at_ms=record.at_ms)
    return out


def decide_pods(world: World, record: EventRecord, touched: Touched) -> list[Decision]:
    """Decisions about the gated pods of the PodGroups and Fluid operations ``touched`` names."""
    if not touched.members:
        return []
    out: list[Decision] = []
    rooms: dict[str, _Room] = {}  # per member, built on the first group planned there (_Room)
    for subject in sorted(touched.members):
        cluster, key = split_member_key(subject)
        state = world.members.clusters.get(cluster)
        if state is None or state.lists_pending:
            continue
        kind = key.partition("/")[0]
        if kind == POD_GROUP:
            out.extend(_decide_group(state, cluster, key, record, rooms))
        elif kind in OPERATION_KINDS:
            out.extend(_decide_operation(state, cluster, key, record))
        elif kind == POD:
            out.extend(_decide_stray(state, cluster, key))
    return out


__all__ = ["DECIDER", "GROUP_WAIT_PURPOSE", "GROUP_WAIT_TIMEOUT_MS", "WAIT_PURPOSE",
           "decide_pods"]
