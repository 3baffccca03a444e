"""The composition root: fold an event into the world, run every capability's decider, stamp the commands.

``step`` is the whole of tether's logic as a pure function of (world, event) — the daemon, ``tether replay
--diff``, the Kafka benchmark and the property tests all call it, so what runs in production is exactly what
is replayed. It adds to the deciders four things that belong to no single decider:

* **no decision from a half-listed world** — between a :class:`~tether.core.events.ListsStarted` and the last
  of its lists' ends, the world may hold bindings whose claims are not listed yet (a cold start, a takeover) or
  objects deleted during a watch gap (a relist): nothing is decided then, and every object is reconciled once
  when the lists have all ended;
* **in-flight suppression** — a command identical to one still in flight (same content-derived id, no outcome
  yet) is not issued again; a *different* request for the same object replaces it;
* **retries of failed commands** — a retryable failure (the executor already retried briefly) parks the
  object's command slot and starts a timer with exponential backoff from the event time; when it fires, the
  object is reconciled again from scratch (level-triggered: the retry re-decides, it does not replay the old
  request).
* **Events on bindings** — a binding's observation is compared with the one before it, and what changed in what
  tether owns there (placed, rescheduled, stripped, suspended: ``core.admission.binding_events``) becomes a
  Kubernetes Event on it; the views before the fold are taken here, since the fold replaces them.

It sits at the top of the pure stack: it composes the fold (``projections.fold``) with every capability's decider
(``core/<capability>/decider.py``), so it imports both, and both lie below it.
"""

from __future__ import annotations

from tether.core.admission.checks import decide_checks
from tether.core.admission.decider import binding_observed, decide_admission, decide_binding_events
from tether.core.commands import StartTimer, command_id, command_name, command_target
from tether.core.datadependency.decider import decide
from tether.core.decision import Decision, backoff_ms
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import CommandFailed
from tether.core.placement.decider import decide_pods
from tether.core.world import World, slot

from .fold import evolve, note_issued


def _retry_failed(world: World, record: EventRecord) -> list[Decision]:
    event = record.event
    if not isinstance(event, CommandFailed) or not event.retryable:
        return []
    attempt = world.retry_wait.get(slot(event.command, event.target), 1)
    fire_at = record.at_ms + backoff_ms(attempt)
    return [
        Decision(
            command=StartTimer(timer_id=f"retry-command|{event.command}|{attempt}|{event.target}",
                               fire_at_ms=fire_at, purpose="retry-command", subject=event.target),
            reason=f"{event.command} on {event.target} failed ({event.reason}: {event.message}); retry #{attempt}",
            decider="retry",
        )
    ]


def step(world: World, record: EventRecord) -> list[CommandRecord]:
    """Fold ``record`` into ``world`` and return the commands it leads to (deterministic)."""
    observed = binding_observed(world, record)  # a binding's views before the fold: its Events say what changed
    touched = evolve(world, record)
    # Nothing is decided from a half-listed world (events.ListsStarted): what the lists touch is reconciled once
    # they have all ended. A failed command's retry timer is still started, so that its slot is not left parked.
    decisions = [] if world.lists_pending else decide(world, record, touched)  # (the retry may be computed after it)
    if touched.members:  # pod placement waits for its own member's lists only (core/placement/decider.py)
        decisions += decide_pods(world, record, touched)
    if not world.lists_pending and world.admission.bindings:  # queue admission, a sibling decider (its own module)
        decisions += decide_admission(world, record, touched)
        decisions += decide_checks(world, record, touched)  # its admission checks (core/admission/checks.py)
    if observed is not None and (noted := decide_binding_events(world, record, observed)):
        decisions = noted + decisions  # what the binding became, before what is decided on it
    if isinstance(record.event, CommandFailed):
        decisions = _retry_failed(world, record) + decisions
    if not decisions:
        return []
    cause = f"{record.partition}:{record.offset}"
    inflight, timers = world.inflight, world.timers
    out: list[CommandRecord] = []
    for decision in decisions:
        command = decision.command
        cid = decision.id
        if cid:  # computed by the decider
            target, at = decision.key, decision.slot
        else:
            cid = command_id(command)
            target = command_target(command)
            at = slot(command_name(command), target)
        if inflight.get(at) == cid:
            continue
        if isinstance(command, StartTimer) and command.timer_id in timers:
            continue  # armed and not fired yet: starting it again would loop (its success re-touches the subject)
        note_issued(world, command, cid, command_slot=at, at_ms=record.at_ms)
        out.append(CommandRecord(id=cid, at_ms=record.at_ms, key=target, command=command, causation=cause,
                                 reason=decision.reason, decider=decision.decider))
    return out
