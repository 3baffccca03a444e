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
* ``EvictBinding`` for each admitted binding the cycle evicts to make room (a queue's preemption policy,
  ``core.admission.preemption``), with one ``Evicted`` Event: it counts as evicted from the moment the command is
  issued (``note_evict``) until it is seen suspended, and is retried as the same command;
* re-check of admitted bindings whose request changed (scale-up or down, more components, Divided → Duplicated): a
  growth past the queue gets ``SuspendDispatching`` — Karmada keeps its Works as they are — with the reason in
  ``tether.dev/admission-overrun`` and a Warning Event, decided on the observation that shows it (before Karmada
  dispatches it) and again each cycle; a growth that fits, or a shrink, gets ``AdmitRequest`` (the new size is
  admitted, the suspension lifted). The queue is charged what the binding asks now, so it admits nothing new
  until a growth fits, and a shrink frees room at the next cycle.

It also hosts the world-reading half of the Events on bindings (``core.admission.binding_events``, the pure half):
:func:`binding_observed` takes a binding's views before ``projections.step.step`` folds its observation, and
:func:`decide_binding_events` compares them with the views after — admission is the room that reads both data
dependency's view of a binding (its exclusions) and its own (its suspension).
"""

from __future__ import annotations

from ..commands import (
    AdmitRequest,
    Command,
    CreateQueue,
    EmitKubernetesEvent,
    EvictBinding,
    ResumeBinding,
    SetAdmissionHold,
    StartTimer,
    SuspendDispatching,
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
from .model import DEFAULT_QUEUE, Binding, ClusterCapacity, Eviction, QueueStatus
from .objects import binding_copies, binding_request, cluster_capacities, per_copy_request
from .session import admission_cycle, recheck_admitted
from .webhook_decision import waiting_for_data

DECIDER = "admission"
CYCLE_INTERVAL_MS = 1_000
#: The Kubernetes Event on a binding a cycle evicts (one per eviction, with the command).
EVICTED = "Evicted"
_BINDING_KEY_PREFIX = "ResourceBinding/"


def _quantities(request: ResourceList) -> tuple[tuple[str, str], ...]:
    return tuple((name, format_milli(amount)) for name, amount in sorted(request.items()))


def _nonzero(request: ResourceList) -> ResourceList:
    return {name: amount for name, amount in request.items() if amount}


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
        total = self.total(binding)
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

    def total(self, binding: AdmissionBinding) -> ResourceList:
        """The binding's whole request: one copy's (every replica of every pod template) x its copies."""
        return scale(per_copy_request(binding), self.copies(binding))

    def copies(self, binding: AdmissionBinding) -> int:
        """How many copies of the binding run (``objects.binding_copies``)."""
        return binding_copies(self.world.admission, binding, self.capacities)

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
            evicting = state.evicting.get(key) if state.evicting else None
            suspended = (binding.suspended and key not in state.admitted) or evicting is not None
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
                self.resume(binding, self.total(binding), "admitted earlier; resuming again")
            if evicting is not None and not binding.suspended:
                self.emit(evicting, f"{key}: evicted earlier; evicting again")  # (its retry: the same request)
            views[key] = binding
            session_bindings.append(self.session_binding(key, binding, suspended=suspended))
        queues = [observed.queue for _, observed in sorted(state.queues.items())]
        if any(b.queue == DEFAULT_QUEUE for b in session_bindings) and DEFAULT_QUEUE not in state.queues:
            self.emit(CreateQueue(name=DEFAULT_QUEUE), "a binding is in the default queue, which does not exist")
        outcome = admission_cycle(queues=queues, bindings=session_bindings, clusters=list(self.capacities.values()),
                                  config=state.config)
        by_key = {b.key: b for b in session_bindings}
        made_room: dict[str, list[str]] = {}
        for eviction in outcome.evicted:  # first: the executor starts them before the admissions they make room for
            self.evict(views[eviction.binding], eviction)
            made_room.setdefault(eviction.for_binding, []).append(eviction.binding.split("/", 1)[-1])
        evicted = {eviction.binding for eviction in outcome.evicted}
        for key in outcome.resume:
            admitted = f"admitted by queue {by_key[key].queue}"
            if key in made_room:
                admitted += f", evicting {', '.join(made_room[key])}"
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
            if hold.binding in evicted:
                continue  # (its eviction writes the reason)
            reason = hold.reason if hold.reason.startswith("queue ") else f"queue {by_key[hold.binding].queue}: " \
                f"{hold.reason}"
            self.annotate(views[hold.binding], ADMISSION_ANNOTATION, reason, event="AdmissionHeld")
        self.queue_statuses(state, outcome.queues)
        return self.overruns(state, session_bindings, views) or holding

    def session_binding(self, key: str, binding: AdmissionBinding, *, suspended: bool) -> Binding:
        state = self.world.admission
        workload = state.workloads.get(binding.workload)
        priority = binding.schedule_priority
        if priority is None:
            priority = state.priority_classes.get(workload.priority_class, state.default_priority) \
                if workload is not None and workload.priority_class else state.default_priority
        data_dependent = binding.workload in self.world.claims_by_workload
        request, whole = binding_request(binding)
        return Binding(key=key, queue=workload.queue if workload is not None else DEFAULT_QUEUE, priority=priority,
                       creation_ms=binding.creation_ms, uid=binding.ref.uid, request=request,
                       replicas=binding.replicas, copies=self.copies(binding), suspended=suspended,
                       data_dependent=data_dependent,
                       placement_injected=not data_dependent or (self.placement_in(key)
                                                                 and not self.waiting(binding)),
                       admitted_request=binding.admitted_request, whole=whole,
                       admitted_ms=state.admitted_at.get(key, 0), scheduled=bool(binding.target_clusters),
                       evictable=key not in state.admitted,
                       evicted_for=f"{_BINDING_KEY_PREFIX}{binding.evicted_for}" if binding.evicted_for else "")

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

    def overruns(self, state: AdmissionState, bindings: list[Binding], views: dict[str, AdmissionBinding], *,
                 only: str = "") -> bool:
        """The admitted bindings whose request changed since admission (``only``: that one): a growth past the
        queue gets its dispatching suspended, with the reason (``tether.dev/admission-overrun``) and a Warning Event
        when it changes; a growth that fits, or a shrink, is admitted as it is now (which lifts a suspension tether
        set). Returns whether a growth waits (then cycles go on)."""
        holds = {h.binding: h.reason for h in recheck_admitted(
            queues=[o.queue for _, o in sorted(state.queues.items())], bindings=bindings, config=state.config)}
        waiting = False
        for binding in bindings:
            if binding.suspended or (only and binding.key != only):
                continue
            view = views[binding.key]
            reason = holds.get(binding.key)
            if reason:
                self.suspend_dispatching(view, reason)
                waiting = True
                continue
            total = _nonzero(binding.total_request())
            admitted = _nonzero(binding.admitted_request) if binding.admitted_request is not None else None
            if view.overrun is not None or (admitted is not None and total != admitted):
                if admitted is not None and any(amount > admitted.get(name, 0) for name, amount in total.items()):
                    why = "its growth fits"
                elif admitted is not None and total != admitted:
                    why = "its request shrank"
                else:
                    why = "it fits again"
                self.emit(AdmitRequest(binding=view.ref, admitted_request=_quantities(total),
                                       reason=f"queue {binding.queue}: {why}"),
                          f"{binding.key}: queue {binding.queue} admits its request as it is now ({why})")
        return waiting

    def suspend_dispatching(self, binding: AdmissionBinding, reason: str) -> None:
        """An admitted binding grew past its queue: Karmada keeps its Works as they are until the queue admits the
        new size; a Warning Event when the reason changes."""
        if binding.dispatching_suspended and binding.overrun == reason:
            return
        key = binding.ref.key
        if self.emit(SuspendDispatching(binding=binding.ref, reason=reason),
                     f"{key}: dispatching suspended: {reason}") and binding.overrun != reason:
            self.emit(EmitKubernetesEvent(involved=binding.ref, event_type="Warning", reason="AdmissionOverrun",
                                          message=reason), f"{key}: AdmissionOverrun")

    def evict(self, binding: AdmissionBinding, eviction: Eviction) -> None:
        """Take the binding's admission back (``EvictBinding``), with one Event saying why."""
        key = binding.ref.key
        command = EvictBinding(binding=binding.ref, for_binding=eviction.for_binding.split("/", 1)[-1],
                               queue=eviction.queue, policy=eviction.policy, reason=eviction.reason)
        if self.emit(command, f"{key} evicted: {eviction.reason}"):
            self.emit(EmitKubernetesEvent(involved=binding.ref, event_type="Normal", reason=EVICTED,
                                          message=eviction.reason), f"{key}: {EVICTED}")

    def grown(self, key: str) -> bool:
        """Whether the binding ``key`` is admitted and asks more than was admitted, with nothing of it decided yet
        (dispatching not suspended for it): a growth Karmada would dispatch at once."""
        state = self.world.admission
        binding = state.bindings[key]
        if binding.suspended or binding.admitted_request is None or binding.dispatching_suspended or \
                key in state.admitted or not state.managed.manages(binding.workload_kind, binding.ref.namespace):
            return False
        admitted = binding.admitted_request
        return any(amount > admitted.get(name, 0) for name, amount in self.total(binding).items())

    def growth(self, key: str) -> None:
        """Decide a growth the moment it is seen (before Karmada dispatches it): the queue's verdict on every
        admitted binding, acted on for this one (``overruns``)."""
        state = self.world.admission
        bindings: list[Binding] = []
        views: dict[str, AdmissionBinding] = {}
        for other in sorted(state.bindings):
            binding = state.bindings[other]
            if binding.problem or (binding.suspended and other not in state.admitted) or other in state.evicting or \
                    not state.managed.manages(binding.workload_kind, binding.ref.namespace):
                continue
            views[other] = binding
            bindings.append(self.session_binding(other, binding, suspended=False))
        self.overruns(state, bindings, views, only=key)


def _waiting(state: AdmissionState, key: str) -> bool:
    """Whether the binding waits for a cycle: suspended and not admitted, or its growth held (dispatching suspended
    by tether, its overrun annotation the mark)."""
    binding = state.bindings.get(key)
    if binding is None:
        return False
    if not binding.suspended:
        return binding.dispatching_suspended and binding.overrun is not None and key not in state.evicting and \
            state.managed.manages(binding.workload_kind, binding.ref.namespace)
    return key not in state.admitted and (
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
                decider.resume(binding, decider.total(binding), "admitted earlier; resuming again")
            if state.evicting and not binding.suspended and (evicting := state.evicting.get(key)) is not None:
                decider.emit(evicting, f"{key}: evicted earlier; evicting again")  # (its retry, as the resume's)
            elif not binding.problem and decider.grown(key):
                decider.growth(key)
            if not _waiting(state, key):
                continue
            waiting = True
            binding = state.bindings[key]
            if binding.suspended and not state.managed.manages(binding.workload_kind, binding.ref.namespace):
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
                       hold=(admission.hold or "") if admission is not None else "",
                       evicted=admission is not None and bool(admission.evicted_for))


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
