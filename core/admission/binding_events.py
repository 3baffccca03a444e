"""Kubernetes Events on a ResourceBinding: what tether did to it, said once per transition.

``kubectl describe resourcebinding`` is where an operator looks first; Karmada writes nothing there about a binding
that tether placed or suspended. These Events say it. They report **observed transitions** of what tether owns on
a binding — its exclusions (the ``placement-injected`` gate and the ``excluded-clusters`` annotation) and a suspension
with tether's hold annotation — rather than the commands that asked for them, because:

* the binding webhook places and suspends a binding *in the write*, with no command at all: only the observed
  binding shows that it happened;
* a command may be skipped (superseded by a newer one before it ran), find nothing to change, or fail and be
  retried: the observation says what the binding actually became, exactly once;
* every version of a binding is folded once (an echo of the same resourceVersion is ignored), so a transition
  is seen once — a restart or a relist that finds the binding unchanged reports nothing.

Each observation is compared with the one before it (:class:`BindingMark` of both), and :func:`binding_events`
says what changed. Whether the binding must move is read from the observation itself — the clusters it is scheduled
on (``spec.clusters``, still the old ones when tether's write is observed) that its exclusions now name — not from
``spec.rescheduleTriggeredAt``: Karmada moves a binding whose placement excludes where it runs either way, and
the trigger has second precision (two changes within one second trigger once).

========================  =========================================================================================
``Rescheduled``           the exclusions changed and now exclude a cluster the binding runs on: Karmada moves it
                          (the data moved, or a cluster it was scheduled to is now known not to hold the data)
``PlacementStripped``     no bound claim is left: tether's exclusions are gone
``Suspended``             the binding was created suspended, with tether's hold annotation saying why
========================  =========================================================================================

Only what changes where a workload runs, or stops it, is an Event: each is a write on the API server every
controller shares, delivered to every watcher of Events. A binding's first placement follows from the claim its user
just created (the claim's ``PlacementInjected`` condition and the binding's annotations say it), and exclusions that
change while the binding runs on none of the clusters they name (a cluster joined, another claim of the workload)
move nothing: neither gets an Event (``Placed`` and ``PlacementChanged`` did, until issue 35; their names stay
known to ``tether replay --diff`` for the logs that recorded them). The log has every transition, and
``tether replay --explain`` tells it.

Admission's own Events (``Admitted``, ``AdmissionHeld``, ``AdmissionOverrun``, ``AdmissionInvalid``, ``Evicted``)
go with the commands that decide them (``core.admission.decider``): a hold's reason lives in tether's annotation,
written by the very command the Event goes with.

This module is pure and reads no projection: ``core.admission.decider.decide_binding_events`` builds the marks
from the world and turns what this returns into decisions. A message never carries a time, so the same transition
gets the same Event (the executor names it from the object, reason and message, and counts a repeat).
"""

from __future__ import annotations

import msgspec

from ..commands import EmitKubernetesEvent
from ..kube import ObjectRef

PLACED = "Placed"  # (no longer decided: module doc)
PLACEMENT_CHANGED = "PlacementChanged"  # (no longer decided: module doc)
RESCHEDULED = "Rescheduled"
PLACEMENT_STRIPPED = "PlacementStripped"
SUSPENDED = "Suspended"

#: The reasons of the Events decided from observed transitions (``tether replay --diff`` knows them: a log written
#: before tether decided them has none, and must not be told that it misses them).
TRANSITION_REASONS = frozenset({PLACED, PLACEMENT_CHANGED, RESCHEDULED, PLACEMENT_STRIPPED, SUSPENDED})


class BindingMark(msgspec.Struct, frozen=True, kw_only=True):
    """What tether owns on one observation of a binding."""

    injected: bool = False  # the placement-injected gate annotation
    excluded: tuple[str, ...] = ()  # the clusters tether's exclusions added (sorted)
    suspended: bool = False  # spec.suspension.scheduling
    hold: str = ""  # tether's hold annotation (tether.dev/admission), "" when absent
    evicted: bool = False  # tether.dev/evicted-for: queue admission evicted it (its Event went with the command)


#: A binding not seen before.
UNSEEN = BindingMark()


def _names(clusters: tuple[str, ...] | list[str]) -> str:
    return ",".join(clusters) or "<none>"


def binding_events(*, involved: ObjectRef, workload: str, before: BindingMark, after: BindingMark,
                   scheduled: tuple[str, ...]) -> list[EmitKubernetesEvent]:
    """The Events for one binding whose observation went from ``before`` to ``after`` (``scheduled``: its
    ``spec.clusters`` now). At most one about its placement, one about its suspension."""
    out: list[EmitKubernetesEvent] = []
    of = f"the data of {workload}" if workload else "its data"

    def event(reason: str, message: str) -> None:
        out.append(EmitKubernetesEvent(involved=involved, event_type="Normal", reason=reason, message=message))

    away = sorted(set(scheduled).intersection(after.excluded)) if after.injected else []
    if after.injected and before.injected and after.excluded != before.excluded:
        # only when it must now leave a cluster it was not leaving already: a binding Karmada has not moved yet
        # whose exclusions change again (a cluster joined) says nothing new
        if set(away).difference(before.excluded):
            event(RESCHEDULED, f"{of} is no longer where the binding runs: excluding {_names(after.excluded)} "
                               f"(was {_names(before.excluded)}); rescheduling away from {_names(away)}")
    elif before.injected and not after.injected:
        event(PLACEMENT_STRIPPED, f"no bound claim left for {workload or 'its workload'}: tether's exclusions "
                                  f"({_names(before.excluded)}) removed")
    if after.suspended and after.hold and not before.suspended and not after.evicted:  # (someone else's: not
        # tether's to say; an eviction's: said once, by the Event that goes with EvictBinding)
        event(SUSPENDED, f"scheduling suspended by tether: {after.hold}")
    return out


__all__ = [
    "PLACED",
    "PLACEMENT_CHANGED",
    "PLACEMENT_STRIPPED",
    "RESCHEDULED",
    "SUSPENDED",
    "TRANSITION_REASONS",
    "UNSEEN",
    "BindingMark",
    "binding_events",
]
