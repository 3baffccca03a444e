"""Commands: what the deciders ask the outside world to do.

A command states a desired result, not a procedure: "this claim's status should be X", "this binding should
exclude these clusters". The executor that applies it (``adapters/kubernetes.py`` has one function per command,
named ``apply_<CommandName in snake_case>``; ``adapters/catalog/iceberg_rest.py`` serves :class:`LookupDataLocation`,
``adapters/daemon/timers.py`` serves :class:`StartTimer`) reads the current object, changes only what differs, and
guards the write with the resourceVersion it read — so applying a command twice, or late, is harmless.

Command ids are derived from the command's content (:func:`command_id`), never from a counter or a clock: a
replay re-derives the same ids byte for byte, and re-emitting a command is recognisably the same request.
Commands encode every field (no ``omit_defaults``): msgspec omits a field only when it *is* the default object,
so a ``"Retain"`` decoded from a snapshot would be encoded where the literal default is not — the same request
would get two ids depending on where a string came from.
Anything time-dependent inside a command (a condition's lastTransitionTime, ``rescheduleTriggeredAt``) comes
from the time of the event that caused it.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from typing import Any

import msgspec

from .identity import DataIdentity
from .kube import Condition, NodeSelectorTerm, ObjectKey, ObjectRef, PreferredSchedulingTerm, object_key

DATA_GROUP_VERSION = "datadependency.volcano.sh/v1alpha1"


class AddFinalizer(msgspec.Struct, tag=True, frozen=True):
    target: ObjectRef
    finalizer: str


class RemoveFinalizer(msgspec.Struct, tag=True, frozen=True):
    target: ObjectRef
    finalizer: str


class UpdateClaimStatus(msgspec.Struct, tag=True, frozen=True):
    """Write a DataSourceClaim's status (phase, boundDataSource, conditions) on the status subresource."""

    claim: ObjectRef
    phase: str
    bound_data_source: str
    conditions: tuple[Condition, ...]

    @property
    def transition(self) -> str:
        """What a user sees of this write: :func:`status_transition` (the times of its conditions aside)."""
        return status_transition(self.phase, self.bound_data_source, self.conditions)


def status_transition(phase: str, bound_data_source: str, conditions: tuple[Condition, ...]) -> str:
    """A claim's status as a user reads it — phase, DataSource, each condition's type, status and reason — without
    the times: two decisions of one transition, at different event times, give the same string."""
    return "|".join([phase, bound_data_source, *(f"{c.type}={c.status}/{c.reason}" for c in conditions)])


class UpdateDataSourceStatus(msgspec.Struct, tag=True, frozen=True):
    """Write a DataSource's status: the exact list of claims bound to it, their count, conditions."""

    name: str
    claim_refs: tuple[ObjectRef, ...]
    bound_claims: int
    conditions: tuple[Condition, ...] = ()


class CreateDataSource(msgspec.Struct, tag=True, frozen=True):
    """Create the DataSource caching ``identity`` (with its finalizer) at ``cluster_names``."""

    name: str
    identity: DataIdentity
    cluster_names: tuple[str, ...]
    location: str
    reclaim_policy: str = "Retain"


class UpdateDataSourceLocality(msgspec.Struct, tag=True, frozen=True):
    """The data moved: set ``spec.locality.clusterNames`` (and the location annotation)."""

    name: str
    cluster_names: tuple[str, ...]
    location: str


class DeleteDataSource(msgspec.Struct, tag=True, frozen=True):
    """Delete a DataSource whose reclaimPolicy is Delete and that no claim uses (uid precondition)."""

    name: str
    uid: str


class SetBindingPlacement(msgspec.Struct, tag=True, frozen=True):
    """Make tether's share of a ResourceBinding's placement equal to this.

    ``excluded_clusters`` are the clusters tether wants excluded (the union over every bound claim of the
    workload); the executor adds them to each cluster-affinity term next to the user's own exclusions, records
    what it added in the ``excluded-clusters`` annotation and sets the ``placement-injected`` gate annotation.
    ``injected=False`` strips what tether added and both annotations. A non-empty ``reschedule_at`` also sets
    ``spec.rescheduleTriggeredAt`` so Karmada moves a workload already placed where its data no longer is.
    """

    binding: ObjectRef
    excluded_clusters: tuple[str, ...]
    injected: bool = True
    reschedule_at: str = ""


class TierTerm(msgspec.Struct, frozen=True):
    """One cluster group of a binding placed by locality tiers (``core.datadependency.tiers``): ``name`` is its
    ``affinityName``, ``tier`` the tier it belongs to (data, near-data, anywhere), ``user_term`` the index of the
    user's own affinity term it is intersected with, and ``clusters`` the tier's clusters (None: the user's term as
    it is — the ``anywhere`` tier)."""

    name: str
    tier: str
    user_term: int
    clusters: tuple[str, ...] | None


class SetBindingTiers(msgspec.Struct, tag=True, frozen=True):
    """Make a binding's ``placement.clusterAffinities`` these ordered groups, each the user's own affinity term
    intersected with a tier (``terms``), and record the user's affinity they replace in the
    ``tether.dev/locality-tiers`` annotation (with ``note``: what was left out, and why). karmada-scheduler tries the
    groups in order. A non-empty ``reschedule_at`` also sets ``spec.rescheduleTriggeredAt`` when the binding runs
    on a cluster outside every group."""

    binding: ObjectRef
    terms: tuple[TierTerm, ...]
    note: str = ""
    reschedule_at: str = ""


class LookupDataLocation(msgspec.Struct, tag=True, frozen=True):
    """Ask the catalog where ``identity``'s data lives. ``trigger``: miss | retry | refresh."""

    identity: DataIdentity
    trigger: str = "miss"
    attempt: int = 1


class StartTimer(msgspec.Struct, tag=True, frozen=True):
    """Append a :class:`~tether.core.events.TimerFired` once the wall clock reaches ``fire_at_ms``."""

    timer_id: str
    fire_at_ms: int
    purpose: str
    subject: str


class EmitKubernetesEvent(msgspec.Struct, tag=True, frozen=True):
    """Record a Kubernetes Event on ``involved`` (what ``kubectl describe`` shows)."""

    involved: ObjectRef
    event_type: str
    reason: str
    message: str


class ReleasePod(msgspec.Struct, tag=True, frozen=True):
    """Tighten a gated pod's node affinity by ``required`` (ORed terms, ANDed into the pod's own) and ``preferred``,
    then remove the scheduling gate ``gate`` — one write, in that order of meaning: the API server checks the update
    against the pod as it was (still gated), so the tightening is allowed and the gate is gone in the same
    resourceVersion; there is no moment where the pod is schedulable without tether's terms. ``note`` goes into
    the pod's ``tether.dev/placement`` annotation (what decided it). A pod already without the gate is left
    alone (a no-op: an ungated pod's affinity can no longer change)."""

    cluster: str
    pod: ObjectRef
    gate: str
    required: tuple[NodeSelectorTerm, ...] = ()
    preferred: tuple[PreferredSchedulingTerm, ...] = ()
    note: str = ""


class SetMemberCondition(msgspec.Struct, tag=True, frozen=True):
    """Insert or replace ``condition`` (by type) in ``status.conditions`` of an object in a member cluster (a Fluid
    operation), keeping every other condition — the owner's controller writes there too."""

    cluster: str
    target: ObjectRef
    condition: Condition


class EmitMemberEvent(msgspec.Struct, tag=True, frozen=True):
    """Record a Kubernetes Event on ``involved`` in the member cluster ``cluster``."""

    cluster: str
    involved: ObjectRef
    event_type: str
    reason: str
    message: str
class ResumeBinding(msgspec.Struct, tag=True, frozen=True):
    """Lift ``spec.suspension.scheduling`` of a binding admission let go (``binding`` carries its uid), recording
    the whole request admitted (``admitted_request``: resource → quantity) and clearing the hold annotation.

    The binding counts as admitted from the moment this is issued (``projections.admission_fold``): a retry is the same
    command, never a second admission."""

    binding: ObjectRef
    admitted_request: tuple[tuple[str, str], ...]
    reason: str = ""


class SetAdmissionHold(msgspec.Struct, tag=True, frozen=True):
    """Say on a binding why admission holds it (``tether.dev/admission``), or, with ``overrun``, why its grown
    request no longer fits its queue (``tether.dev/admission-overrun``). An empty text removes the annotation."""

    binding: ObjectRef
    annotation: str
    text: str


class CheckStatus(msgspec.Struct, frozen=True):
    """One admission check of a binding (``core.admission.checks``): its ``state`` (Pending, Ready, Retry,
    Rejected), the attempt it is at, when the state began (``since_ms``) and when it ends by itself
    (``until_ms``: a Pending attempt's timeout, a Retry's backoff; 0: never), why, and for ``data-loaded`` the
    clusters the data is loaded in."""

    name: str
    state: str
    attempt: int = 1
    since_ms: int = 0
    until_ms: int = 0
    reason: str = ""
    clusters: tuple[str, ...] = ()


class SetAdmissionChecks(msgspec.Struct, tag=True, frozen=True):
    """The admission checks of a queue-managed binding are now ``checks``: say so on the binding
    (``tether.dev/admission-checks``; none: the annotation removed). The world holds them from the moment this is
    issued (``projections.admission_fold``), as it holds an admission."""

    binding: ObjectRef
    checks: tuple[CheckStatus, ...]


class EvictBinding(msgspec.Struct, tag=True, frozen=True):
    """Take an admitted binding's admission back to make room for ``for_binding`` (``namespace/name``): suspend its
    scheduling again and clear its clusters in one merge patch guarded by the resourceVersion — Karmada then leaves
    it unscheduled while the suspension lasts, and its binding controller withdraws the Works from the members —
    with tether's hold annotation saying why (``reason``) and ``tether.dev/evicted-for`` naming ``for_binding``.
    ``queue`` is the binding's queue; ``policy`` what allowed it: ``preempt`` (within its own queue) or ``reclaim``
    (what its queue borrowed beyond its deserved share).

    The binding counts as evicted from the moment this is issued (``projections.admission_fold``) until it is seen
    suspended: a retry is the same command, never a second eviction."""

    binding: ObjectRef
    for_binding: str
    queue: str
    policy: str
    reason: str


class SuspendDispatching(msgspec.Struct, tag=True, frozen=True):
    """An admitted binding asks more than its queue admitted (scaled up, larger requests, more components): set
    ``spec.suspension.dispatching`` so that Karmada keeps its Works as they are, with the reason in
    ``tether.dev/admission-overrun``, until the queue admits the new size (:class:`AdmitRequest`)."""

    binding: ObjectRef
    reason: str


class AdmitRequest(msgspec.Struct, tag=True, frozen=True):
    """The queue admits an admitted binding's current request (``admitted_request``: resource → quantity) — its
    growth fits, or it shrank: record it in ``tether.dev/admitted-request`` and lift the dispatching suspension
    tether set for the growth (the one with ``tether.dev/admission-overrun``), removing that annotation."""

    binding: ObjectRef
    admitted_request: tuple[tuple[str, str], ...]
    reason: str = ""


class UpdateQueueStatus(msgspec.Struct, tag=True, frozen=True):
    """Write a Volcano Queue's status as admission sees it: ``allocated`` (quantities), ``pending`` (bindings
    held), ``running`` (bindings admitted), ``inqueue`` (admitted in the last cycle, not scheduled yet)."""

    queue: ObjectRef
    allocated: tuple[tuple[str, str], ...]
    pending: int
    running: int
    inqueue: int


class CreateQueue(msgspec.Struct, tag=True, frozen=True):
    """Create a Volcano Queue (the ``default`` queue, as Volcano Global does at start-up), if it does not exist."""

    name: str
    weight: int = 1


Command = (
    AddFinalizer
    | RemoveFinalizer
    | UpdateClaimStatus
    | UpdateDataSourceStatus
    | CreateDataSource
    | UpdateDataSourceLocality
    | DeleteDataSource
    | SetBindingPlacement
    | SetBindingTiers
    | LookupDataLocation
    | StartTimer
    | EmitKubernetesEvent
    | ReleasePod
    | SetMemberCondition
    | EmitMemberEvent
    | ResumeBinding
    | SetAdmissionHold
    | SetAdmissionChecks
    | UpdateQueueStatus
    | CreateQueue
    | EvictBinding
    | SuspendDispatching
    | AdmitRequest
)

COMMAND_TYPES: tuple[type[Command], ...] = (
    AddFinalizer,
    RemoveFinalizer,
    UpdateClaimStatus,
    UpdateDataSourceStatus,
    CreateDataSource,
    UpdateDataSourceLocality,
    DeleteDataSource,
    SetBindingPlacement,
    SetBindingTiers,
    LookupDataLocation,
    StartTimer,
    EmitKubernetesEvent,
    ReleasePod,
    SetMemberCondition,
    EmitMemberEvent,
    ResumeBinding,
    SetAdmissionHold,
    SetAdmissionChecks,
    UpdateQueueStatus,
    CreateQueue,
    EvictBinding,
    SuspendDispatching,
    AdmitRequest,
)

_encoder = msgspec.json.Encoder()


def command_id(command: Command) -> str:
    """A content-derived id: the same request always gets the same id (24 hex characters)."""
    return hashlib.blake2b(_encoder.encode(command), digest_size=12).hexdigest()


def _target_by_match(command: Command) -> ObjectKey:
    match command:
        case AddFinalizer(target=ref) | RemoveFinalizer(target=ref):
            return ref.key
        case UpdateClaimStatus(claim=ref):
            return ref.key
        case (
            UpdateDataSourceStatus(name=name)
            | CreateDataSource(name=name)
            | UpdateDataSourceLocality(name=name)
            | DeleteDataSource(name=name)
        ):
            return object_key("DataSource", "", name)
        case SetBindingPlacement(binding=ref) | SetBindingTiers(binding=ref):
            return ref.key
        case LookupDataLocation(identity=identity):
            return ObjectKey(f"Data/{identity.key}")
        case StartTimer(subject=subject):
            return ObjectKey(subject)
        case EmitKubernetesEvent(involved=ref):
            return ref.key
        case ReleasePod(cluster=cluster, pod=ref):
            return ObjectKey(f"{cluster}:{ref.key}")
        case SetMemberCondition(cluster=cluster, target=ref) | EmitMemberEvent(cluster=cluster, involved=ref):
            return ObjectKey(f"{cluster}:{ref.key}")
        case ResumeBinding(binding=ref) | SetAdmissionHold(binding=ref) | SetAdmissionChecks(binding=ref):
            return ref.key
        case UpdateQueueStatus(queue=ref):
            return ref.key
        case CreateQueue(name=name):
            return object_key("Queue", "", name)
        case EvictBinding(binding=ref) | SuspendDispatching(binding=ref) | AdmitRequest(binding=ref):
            return ref.key


def _data_source_target(command: Any) -> ObjectKey:
    return object_key("DataSource", "", command.name)


#: command_target by exact type: one dict hit instead of trying the match cases in turn (it runs two or three
#: times per command on the decider's hot path). Subclasses, if anyone makes one, take the match.
_TARGETS: dict[type, Callable[[Any], ObjectKey]] = {
    AddFinalizer: lambda c: c.target.key,
    RemoveFinalizer: lambda c: c.target.key,
    UpdateClaimStatus: lambda c: c.claim.key,
    UpdateDataSourceStatus: _data_source_target,
    CreateDataSource: _data_source_target,
    UpdateDataSourceLocality: _data_source_target,
    DeleteDataSource: _data_source_target,
    SetBindingPlacement: lambda c: c.binding.key,
    SetBindingTiers: lambda c: c.binding.key,
    LookupDataLocation: lambda c: ObjectKey(f"Data/{c.identity.key}"),
    StartTimer: lambda c: ObjectKey(c.subject),
    EmitKubernetesEvent: lambda c: c.involved.key,
    ReleasePod: lambda c: ObjectKey(f"{c.cluster}:{c.pod.key}"),
    SetMemberCondition: lambda c: ObjectKey(f"{c.cluster}:{c.target.key}"),
    EmitMemberEvent: lambda c: ObjectKey(f"{c.cluster}:{c.involved.key}"),
    ResumeBinding: lambda c: c.binding.key,
    SetAdmissionHold: lambda c: c.binding.key,
    SetAdmissionChecks: lambda c: c.binding.key,
    UpdateQueueStatus: lambda c: c.queue.key,
    CreateQueue: lambda c: object_key("Queue", "", c.name),
    EvictBinding: lambda c: c.binding.key,
    SuspendDispatching: lambda c: c.binding.key,
    AdmitRequest: lambda c: c.binding.key,
}


def command_target(command: Command) -> ObjectKey:
    """The key of the object a command acts on — its log key, so one object's commands stay ordered."""
    target = _TARGETS.get(type(command))
    return target(command) if target is not None else _target_by_match(command)


_CAMEL = re.compile(r"(?<!^)(?=[A-Z])")


_NAMES: dict[type, str] = {}


def command_name(command: Command | type[Command]) -> str:
    """``SetBindingPlacement`` → ``set_binding_placement``: the executor of a command is ``apply_<that>``."""
    cls = command if isinstance(command, type) else type(command)
    name = _NAMES.get(cls)
    if name is None:  # on the hot path of every decision: derive each class's name once
        name = _NAMES[cls] = _CAMEL.sub("_", cls.__name__).lower()
    return name
