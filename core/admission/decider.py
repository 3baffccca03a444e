"""The admission decider: which suspended ResourceBindings may go, decided from the world on a timer.

A sibling of the data-dependency decider in ``projections.step.step``. Two kinds of held bindings:

* **held for their data** (the webhook suspended them because the data of a claim of the workload was on its way —
  a lookup or creation under way, or a lookup failing transiently — and their kind is not queue-managed): resumed
  as soon as tether's placement is on the binding and no claim's data is on its way any more — decided on the
  event that shows it (the binding's own write), no cycle needed. A hold is bounded (``core.admission.data_hold``):
  at ``creationTimestamp + max_hold_ms`` (a ``StartTimer`` whose firing decides again) the binding is released
  without the data constraint, with the annotation ``tether.dev/admission-released`` and a Warning Event saying
  so; the annotation goes once tether's data placement is on the binding. While a claim's lookup fails
  transiently, ``tether.dev/admission`` says so (and a Warning Event, when that becomes so);
* **queue-managed** (the admission ConfigMap's ``queue-managed`` kinds and namespaces): admitted by a Volcano-style
  session, :func:`tether.core.admission.session.admission_cycle`, once per **cycle**. A cycle is a ``TimerFired`` event
  (purpose ``admission-cycle``): the decider arms the next one, one second after the event that shows a binding
  waiting, whenever one is waiting and none is armed. Time therefore comes only from events, and a replay
  re-derives every admission.

Per cycle the session's inputs are built from the world alone (``core.world.admission_state``): Queues, PriorityClasses,
the ready Karmada Clusters' ``resourceSummary``, each binding's request (``resourceRequest`` x replicas x copies —
copies is 1 for a Divided placement, the number of clusters it runs on, or may run on, for a Duplicated one), its
priority (``schedulePriority``, else the workload's PriorityClass, else the global default), its queue (from the
workload, resolved as Volcano Global does, at the workload's observation). Its outcome becomes commands:

* ``ResumeBinding`` for each binding admitted, in admission order; the binding counts as admitted from the moment
  the command is issued (``note_resume``), so a retry, or a cycle before the outcome, never admits it twice;
* ``SetAdmissionHold`` with the reason of each held binding (``tether.dev/admission: queue q1: cpu 10/8``) and a
  Kubernetes Event when the reason changes (Karmada writes nothing on a suspended binding);
* ``UpdateQueueStatus`` (allocated, pending, running, inqueue) on each Queue whose status differs;
* ``CreateQueue`` for ``default`` when a binding wants it and it does not exist;
* re-check of admitted bindings whose request grew (scale-up, Divided → Duplicated): Karmada forbids suspending a
  scheduled binding, so the outcome is the ``tether.dev/admission-overrun`` annotation and a Warning Event — the
  workload keeps running, and its queue, charged the grown request, admits nothing new until it fits again.

It also hosts the world-reading half of the Events on bindings (``core.admission.binding_events``, the pure half):
:func:`binding_observed` takes a binding's views before ``projections.step.step`` folds its observation, and
:func:`decide_binding_events` compares them with the views after — admission is the room that reads both data
dependency's view of a binding (its exclusions) and its own (its suspension).
"""

from __future__ import annotations

from ..commands import (
    Command,
    CreateQueue,
    EmitKubernetesEvent,
    ResumeBinding,
    SetAdmissionHold,
    StartTimer,
    UpdateQueueStatus,
    command_id,
    command_name,
    command_target,
)
from ..datadependency.decider import DecisionPass
from ..decision import Decision
from ..envelope import EventRecord, rfc3339
from ..events import CommandSucceeded, ObjectObserved, TimerFired
from ..keys import ADMISSION_ANNOTATION, OVERRUN_ANNOTATION, RELEASED_ANNOTATION
from ..quantity import ResourceList, format_milli, scale
from ..world import Touched, World
from ..world.admission_state import CYCLE_PURPOSE, CYCLE_SUBJECT, AdmissionBinding, AdmissionState
from ..world.views import Binding as BindingView
from .binding_events import UNSEEN, BindingMark, binding_events
from .checks import checks_hold, checks_passed
from .data_hold import HOLD_PURPOSE, Waiting, hold_text, release_text
from .model import DEFAULT_QUEUE, Binding, ClusterCapacity, QueueStatus
from .objects import cluster_capacities
from .session import admission_cycle, recheck_admitted
from .webhook_decision import waiting_for_data

DECIDER = "admission"
CYCLE_INTERVAL_MS = 1_000


def _quantities(request: ResourceList) -> tuple[tuple[str, str], ...]:
    return tuple((name, format_milli(amount)) for name, amount in sorted(request.items()))


class _Pass:
    """One decision pass: the commands, filtered as the data-dependency decider filters its own."""

    def __init__(self, world: World, record: EventRecord) -> None:
        self.world = world
        self.record = record
        self.out: list[Decision] = []
        self.data = DecisionPass(world, record)
        self._capacities: dict[str, ClusterCapacity] | None = None

    @property
    def capacities(self) -> dict[str, ClusterCapacity]:
        """The Clusters' capacities, parsed once per pass (``objects.cluster_capacities``)."""
        if self._capacities is None:
            self._capacities = cluster_capacities(self.world.admission)
        return self._capacities

    def emit(self, command: Command, reason: str) -> bool:
        """Decide ``command`` unless it would change nothing now; returns whether it was decided."""
        world = self.world
        cid = command_id(command)
        target = command_target(command)
        at = f"{command_name(command)}:{target}"
        if (world.rejected and cid in world.rejected) or (world.retry_wait and at in world.retry_wait):
            return False  # refused for good, or waiting for its retry timer (which brings the object back)
        if world.inflight.get(at) == cid:
            return False  # the same request is in flight
        self.out.append(Decision(command=command, reason=reason, decider=DECIDER, id=cid, key=target, slot=at))
        return True

    # --- bindings held for their data -----------------------------------------------------------------------

    def waiting(self, binding: AdmissionBinding) -> list[Waiting]:
        """The claims whose data the binding waits for, while its hold lasts (``core.admission.data_hold``): none
        once the bound is passed (``released_at_bound`` then says what it waited for)."""
        if self.past_bound(binding):
            return []
        return waiting_for_data(self.data, self.world, binding.workload)

    def past_bound(self, binding: AdmissionBinding) -> bool:
        return self.record.at_ms >= self.deadline(binding)

    def deadline(self, binding: AdmissionBinding) -> int:
        """When the binding's hold for its data ends: its creation + the bound (a time from the object)."""
        return binding.creation_ms + self.world.admission.max_hold_ms

    def released_at_bound(self, binding: AdmissionBinding) -> list[Waiting]:
        """What the binding still waits for when its bound is passed (empty: it waits for nothing)."""
        if not self.past_bound(binding):
            return []
        return waiting_for_data(self.data, self.world, binding.workload)

    def placement_in(self, key: str) -> bool:
        """Whether tether's data placement is on the binding, as the data-dependency decider wants it."""
        binding = self.world.bindings.get(key)
        if binding is None:
            return False
        plan, desired = self.data.plan(key, binding)
        return desired is None or (binding.injected and not plan.changed)

    def data_hold(self, key: str, binding: AdmissionBinding) -> None:
        """Resume a binding held only for its data once its placement is in; keep it held while its data is on its
        way, until its bound; past the bound, release it without the data constraint (module doc)."""
        total = scale(binding.request, binding.replicas * self.copies(binding))
        late = self.released_at_bound(binding)
        if late:
            self.release_without_data(binding, late, total)
            return
        waiting = self.waiting(binding)
        if waiting:
            self.hold_for_data(binding, waiting)
            return
        if self.placement_in(key):
            self.resume(binding, total, "its data placement is in place")

    def hold_for_data(self, binding: AdmissionBinding, waiting: list[Waiting]) -> None:
        """Keep holding: the deadline armed as a timer; the annotation says so when a lookup fails transiently."""
        deadline, key = self.deadline(binding), binding.ref.key
        self.emit(StartTimer(timer_id=f"{HOLD_PURPOSE}|{key}|{deadline}", fire_at_ms=deadline, purpose=HOLD_PURPOSE,
                             subject=key),
                  f"{key} is held for its data until {rfc3339(deadline)} at the latest")
        if any(w.transient for w in waiting):  # (back to Resolving on the retry: nothing to write for that)
            text = hold_text(waiting, max_hold_ms=self.world.admission.max_hold_ms)
            self.annotate(binding, ADMISSION_ANNOTATION, text, event="WaitingForData", warning=True)

    def release_without_data(self, binding: AdmissionBinding, waiting: list[Waiting], total: ResourceList) -> None:
        """The bound is passed: say so on the binding (annotation), then resume it as it is (Warning Event)."""
        text = release_text(waiting, max_hold_ms=self.world.admission.max_hold_ms)
        self.annotate(binding, RELEASED_ANNOTATION, text)
        self.resume(binding, total, text, event="ReleasedWithoutData", warning=True)

    def constrained(self, key: str) -> bool:
        """Whether tether's data constraint is on the binding (not merely nothing to constrain)."""
        binding = self.world.bindings.get(key)
        if binding is None:
            return False
        plan, desired = self.data.plan(key, binding)
        return desired is not None and binding.injected and not plan.changed

    # --- commands -------------------------------------------------------------------------------------------

    def resume(self, binding: AdmissionBinding, total: ResourceList, why: str, *, event: str = "Admitted",
               warning: bool = False) -> None:
        """Resume the binding, with one Event saying why (one: the executor keeps only the last of several Events
        queued for one object)."""
        key = binding.ref.key
        if self.emit(ResumeBinding(binding=binding.ref, admitted_request=_quantities(total), reason=why),
                     f"{key} admitted: {why}"):
            self.emit(EmitKubernetesEvent(involved=binding.ref, event_type="Warning" if warning else "Normal",
                                          reason=event, message=why), f"{key}: {event}")

    def annotate(self, binding: AdmissionBinding, annotation: str, text: str, *, event: str = "",
                 warning: bool = False) -> None:
        held = {ADMISSION_ANNOTATION: binding.hold, OVERRUN_ANNOTATION: binding.overrun,
                RELEASED_ANNOTATION: binding.released}[annotation]
        if (held or "") == text:
            return
        key = binding.ref.key
        if not self.emit(SetAdmissionHold(binding=binding.ref, annotation=annotation, text=text),
                         f"{key}: {text}" if text else f"{key}: {annotation} no longer applies"):
            return
        if text and event:
            self.emit(EmitKubernetesEvent(involved=binding.ref, event_type="Warning" if warning else "Normal",
                                          reason=event, message=text), f"{key}: {event}")

    def copies(self, binding: AdmissionBinding) -> int:
        """1 for Divided; for Duplicated the clusters it runs on, or may run on (ready, not excluded, in its
        clusterNames when it has some) — every one of them runs all replicas."""
        if binding.divided:
            return 1
        if binding.target_clusters:
            return len(binding.target_clusters)
        state = self.world.admission
        names = binding.affinity_names or tuple(sorted(state.clusters))
        excluded = set(binding.affinity_exclude)
        capacities = self.capacities
        return max(1, sum(1 for n in names if n not in excluded and (c := capacities.get(n)) is not None
                          and c.ready))

    # --- the cycle ------------------------------------------------------------------------------------------

    def cycle(self) -> bool:
        """One admission session; returns whether bindings are still held (then the next cycle is armed)."""
        world = self.world
        state = world.admission
        session_bindings: list[Binding] = []
        views: dict[str, AdmissionBinding] = {}
        holding = False
        for key in sorted(state.bindings):
            binding = state.bindings[key]
            managed = state.managed.manages(binding.workload_kind, binding.ref.namespace)
            suspended = binding.suspended and key not in state.admitted
            if not managed:
                if suspended and binding.hold is not None:
                    holding = True
                    self.data_hold(key, binding)
                continue
            if suspended and binding.problem:
                holding = True
                self.annotate(binding, ADMISSION_ANNOTATION, f"invalid binding: {binding.problem}",
                              event="AdmissionInvalid", warning=True)
                continue
            if suspended and (waiting_for := checks_hold(state, key, binding)):
                holding = True  # its queue's admission checks have not all passed (core/admission/checks.py)
                self.annotate(binding, ADMISSION_ANNOTATION, waiting_for)
                continue
            if binding.suspended and not suspended and f"resume_binding:{key}" not in world.inflight:
                # admitted, its resume not seen yet and not in flight (it failed and is retried): the same request
                self.resume(binding, scale(binding.request, binding.replicas * self.copies(binding)),
                            "admitted earlier; resuming again")
            views[key] = binding
            session_bindings.append(self.session_binding(key, binding, suspended=suspended))
        queues = [observed.queue for _, observed in sorted(state.queues.items())]
        if any(b.queue == DEFAULT_QUEUE for b in session_bindings) and DEFAULT_QUEUE not in state.queues:
            self.emit(CreateQueue(name=DEFAULT_QUEUE), "a binding is in the default queue, which does not exist")
        outcome = admission_cycle(queues=queues, bindings=session_bindings, clusters=list(self.capacities.values()),
                                  config=state.config)
        by_key = {b.key: b for b in session_bindings}
        for key in outcome.resume:
            admitted = f"admitted by queue {by_key[key].queue}"
            late = self.released_at_bound(views[key]) if by_key[key].data_dependent else []
            if late:  # its data did not come within its bound: the queue admits it without the data constraint
                text = release_text(late, max_hold_ms=state.max_hold_ms)
                self.annotate(views[key], RELEASED_ANNOTATION, text)
                self.resume(views[key], by_key[key].total_request(), f"{admitted}; {text}",
                            event="ReleasedWithoutData", warning=True)
            else:
                passed = checks_passed(state, key, views[key])
                self.resume(views[key], by_key[key].total_request(), f"{admitted}; {passed}" if passed else admitted)
        for hold in outcome.held:
            holding = True
            reason = hold.reason if hold.reason.startswith("queue ") else f"queue {by_key[hold.binding].queue}: " \
                f"{hold.reason}"
            self.annotate(views[hold.binding], ADMISSION_ANNOTATION, reason, event="AdmissionHeld")
        self.queue_statuses(state, outcome.queues)
        self.overruns(state, session_bindings, views)
        return holding

    def session_binding(self, key: str, binding: AdmissionBinding, *, suspended: bool) -> Binding:
        state = self.world.admission
        workload = state.workloads.get(binding.workload)
        priority = binding.schedule_priority
        if priority is None:
            priority = state.priority_classes.get(workload.priority_class, state.default_priority) \
                if workload is not None and workload.priority_class else state.default_priority
        data_dependent = binding.workload in self.world.claims_by_workload
        return Binding(key=key, queue=workload.queue if workload is not None else DEFAULT_QUEUE, priority=priority,
                       creation_ms=binding.creation_ms, uid=binding.ref.uid, request=binding.request,
                       replicas=binding.replicas, copies=self.copies(binding), suspended=suspended,
                       data_dependent=data_dependent,
                       placement_injected=not data_dependent or (self.placement_in(key)
                                                                 and not self.waiting(binding)),
                       admitted_request=binding.admitted_request)

    def queue_statuses(self, state: AdmissionState, statuses: tuple[QueueStatus, ...]) -> None:
        for status in statuses:
            observed = state.queues.get(status.name)
            if observed is None:
                continue
            allocated = _quantities(status.allocated)
            wanted: dict[str, object] = {"allocated": dict(allocated), "pending": status.pending,
                                         "running": status.admitted, "inqueue": status.resumed}
            seen = {k: observed.status.get(k, {} if k == "allocated" else 0) for k in wanted}
            if seen == wanted:
                continue
            self.emit(UpdateQueueStatus(queue=observed.ref, allocated=allocated, pending=status.pending,
                                        running=status.admitted, inqueue=status.resumed),
                      f"queue {observed.ref.name}: {status.admitted} admitted, {status.pending} held")

    def overruns(self, state: AdmissionState, bindings: list[Binding], views: dict[str, AdmissionBinding]) -> None:
        holds = {h.binding: h.reason for h in recheck_admitted(
            queues=[o.queue for _, o in sorted(state.queues.items())], bindings=bindings, config=state.config)}
        for binding in bindings:
            if binding.suspended:
                continue
            self.annotate(views[binding.key], OVERRUN_ANNOTATION, holds.get(binding.key, ""),
                          event="AdmissionOverrun", warning=True)


def _waiting(state: AdmissionState, key: str) -> bool:
    binding = state.bindings.get(key)
    return binding is not None and binding.suspended and key not in state.admitted and (
        binding.hold is not None or state.managed.manages(binding.workload_kind, binding.ref.namespace))


def decide_admission(world: World, record: EventRecord, touched: Touched) -> list[Decision]:
    """Admission's decisions for one event (the world already folded it): a cycle on its timer; otherwise the
    data holds the event may release, and the next cycle armed when a binding waits and none is armed."""
    state = world.admission
    if not state.bindings:
        return []
    event = record.event
    decider = _Pass(world, record)
    if isinstance(event, TimerFired) and event.purpose == CYCLE_PURPOSE:
        waiting = decider.cycle()
    else:
        keys = sorted(state.bindings) if touched.all_bindings else sorted(k for k in touched.bindings
                                                                          if k in state.bindings)
        waiting = False
        for key in keys:
            binding = state.bindings[key]
            if binding.released and not binding.suspended and decider.constrained(key):
                decider.annotate(binding, RELEASED_ANNOTATION, "")  # its data constraint is on it now
            if binding.suspended and key in state.admitted and f"resume_binding:{key}" not in world.inflight:
                # admitted, its resume failed and its retry timer fired: the same request again (counted once)
                decider.resume(binding, scale(binding.request, binding.replicas * decider.copies(binding)),
                               "admitted earlier; resuming again")
            if not _waiting(state, key):
                continue
            waiting = True
            binding = state.bindings[key]
            if not state.managed.manages(binding.workload_kind, binding.ref.namespace):
                decider.data_hold(key, binding)
    if waiting and state.cycle_due == 0:
        fire_at = record.at_ms + CYCLE_INTERVAL_MS
        decider.emit(StartTimer(timer_id=f"{CYCLE_PURPOSE}|{fire_at}", fire_at_ms=fire_at, purpose=CYCLE_PURPOSE,
                                subject=CYCLE_SUBJECT), "bindings wait for admission: next cycle in 1s")
    return decider.out


# --- Events on bindings (core.admission.binding_events) -------------------------------------------------------

EVENTS_DECIDER = "binding-events"
_BINDING = "ResourceBinding"

#: The binding an event brings a new observation of: its key and its two views (data dependency's, admission's)
#: as they were before the event was folded.
Observed = tuple[str, BindingView | None, AdmissionBinding | None]


def _mark(view: BindingView, admission: AdmissionBinding | None) -> BindingMark:
    injected = view.injected
    return BindingMark(injected=injected, excluded=view.added if injected else (),
                       suspended=admission is not None and admission.suspended,
                       hold=(admission.hold or "") if admission is not None else "")


def binding_observed(world: World, record: EventRecord) -> Observed | None:
    """The binding ``record`` observes (a watch event, or the object a write returned) with its views before the
    event is folded; None for every other event (the common case: two type tests)."""
    event = record.event
    if type(event) is ObjectObserved:
        if event.cluster:
            return None
        obj = event.obj
    elif type(event) is CommandSucceeded and event.result is not None:
        obj = event.result
    else:
        return None
    if obj.kind != _BINDING:
        return None
    key = f"{_BINDING}/{obj.metadata.namespace}/{obj.metadata.name}"
    return key, world.bindings.get(key), world.admission.bindings.get(key)


def decide_binding_events(world: World, record: EventRecord, observed: Observed) -> list[Decision]:
    """The Events on a binding whose observation changed what tether owns on it (``binding_events`` module doc).

    ``observed`` is :func:`binding_observed` of ``record`` before it was folded; the world has folded it now. A
    binding first seen on a list of bindings (a start, a relist) is as tether found it, not a transition it saw:
    nothing is said. Filtered like every decision: not again while the very same Event is in flight, not when the
    API refused it for good or its slot waits for a retry."""
    key, old, old_admission = observed
    new = world.bindings.get(key)
    admission = world.admission.bindings.get(key)
    if new is None or (new is old and admission is old_admission):
        return []  # deleted, or an echo of a version already folded
    if old is None and world.lists_pending and any(s.startswith(_BINDING) for s in world.lists_pending):
        return []
    before = _mark(old, old_admission) if old is not None else UNSEEN
    after = _mark(new, admission)
    if after == before:
        return []
    out: list[Decision] = []
    for command in binding_events(involved=new.ref, workload=new.workload, before=before, after=after,
                                  scheduled=new.scheduled_clusters):
        cid = command_id(command)
        at = f"{command_name(command)}:{key}"
        if (world.rejected and cid in world.rejected) or (world.retry_wait and at in world.retry_wait) \
                or world.inflight.get(at) == cid:
            continue
        out.append(Decision(command=command, reason=f"{key}: {command.reason}: {command.message}",
                            decider=EVENTS_DECIDER, id=cid, key=command_target(command), slot=at))
    return out


__all__ = ["CYCLE_INTERVAL_MS", "CYCLE_PURPOSE", "CYCLE_SUBJECT", "DECIDER", "EVENTS_DECIDER", "Observed",
           "binding_observed", "decide_admission", "decide_binding_events"]
