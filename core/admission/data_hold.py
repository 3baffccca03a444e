"""Holding a new binding for its data, and its bound: what the webhook and the admission decider share.

A binding is created suspended (``spec.suspension.scheduling``) when its workload's data is **on its way**: a claim
with no DataSource yet whose lookup or DataSource creation is under way (``Resolving``, ``CreatingDataSource``), or
whose lookup **failed transiently** — the catalog unavailable, a timeout, its circuit open, a 5xx
(``DataLocationLookupFailed.retryable``; the decider retries it on a timer). Without that hold, Karmada schedules
the binding at once, anywhere, and the workload moves once the catalog answers: during a catalog outage every new
workload would start in the wrong cluster. A **permanent** failure (a table not in the catalog, an unknown system, a
location no cluster maps, an invalid claim, a refused authentication) holds nothing: the claim's condition says
what is wrong, and waiting would not fix it.

**The bound** (``--max-hold``, :data:`~tether.core.world.admission_state.DEFAULT_MAX_HOLD_MS`): no binding is held
for its data longer than ``max_hold_ms`` after its creation. Past it, it is released *without* the data constraint —
a Warning Event and the annotation :data:`~tether.core.world.admission_state.RELEASED_ANNOTATION` saying ``released
without the data constraint after 10m0s: <the last failure>`` — and the data-dependency decider moves it to its data
(``rescheduleTriggeredAt``) once the catalog answers, as for any scheduled binding. An outage longer than that
costs a move; an unbounded hold would cost a workload that never starts. The default, ten minutes, covers the
lookup's retries while the catalog's circuit breaker resets (the decider's lookup backoff is 5 s doubling to
5 min: six retries in ten minutes) and the restart of a catalog pod; it is short enough that a workload whose data
nobody can locate still runs the same day. ``0`` turns the hold off: no binding is suspended for its data.

Time comes from events only: the hold starts at the binding's ``creationTimestamp`` (only a CREATE is suspended; a
time from the object, so a replay, a restart or a second replica compute the same deadline, whoever decides), and
the deadline is a ``StartTimer`` whose ``TimerFired`` decides again (:data:`HOLD_PURPOSE`); queue-managed bindings
are also looked at by every admission cycle. The creation time is the API server's clock and the firing tether's:
a skew between them moves the release by as much, which is immaterial against minutes. The setting itself is an
event (``SettingsApplied``), so a replay decides under the bound the daemon had.

This module is the pure part (the texts, the durations); which claims wait is decided from the world by
``webhook_decision.waiting_for_data``.
"""

from __future__ import annotations

import msgspec

#: The purpose of the timer that ends a binding's hold at its bound.
HOLD_PURPOSE = "admission-max-hold"


class Waiting(msgspec.Struct, frozen=True, kw_only=True):
    """A claim whose data a binding waits for: ``claim`` (``namespace/name``), the reason of its ``Bound=False``
    condition, whether it is a transient catalog failure, and what its last failure (or its state) says."""

    claim: str
    reason: str
    transient: bool = False
    detail: str = ""


def format_duration(ms: int) -> str:
    """``600000`` → ``10m0s``, ``90000`` → ``1m30s``, ``1500`` → ``1.5s`` (Go's ``time.Duration`` spelling, which
    Kubernetes users read everywhere)."""
    if ms <= 0:
        return "0s"
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    seconds = f"{rest // 1000}s" if rest % 1000 == 0 else f"{rest / 1000:g}s"
    if hours:
        return f"{hours}h{minutes}m{seconds}"
    if minutes:
        return f"{minutes}m{seconds}"
    return seconds


def hold_text(waiting: list[Waiting], *, max_hold_ms: int) -> str:
    """The ``tether.dev/admission`` annotation of a binding held for its data. A claim still resolving reads as
    before (``waiting for the data of claim ns/c (Resolving)``); a transient catalog failure adds the bound. The
    text changes with the claims' reasons only, never with a failure's wording, so a catalog failing the same way
    again writes nothing."""
    claims = ", ".join(f"{w.claim} ({w.reason})" for w in waiting)
    text = f"waiting for the data of claim {claims}"
    if any(w.transient for w in waiting):
        text += (f"; the catalog fails transiently: held {format_duration(max_hold_ms)} at most, then released "
                 "without the data constraint")
    return text


def release_text(waiting: list[Waiting], *, max_hold_ms: int) -> str:
    """What a binding released at its bound says (annotation, Event, the resume's reason)."""
    why = "; ".join(f"claim {w.claim}: {w.detail or w.reason}" for w in waiting)
    return f"released without the data constraint after {format_duration(max_hold_ms)}: {why}"


__all__ = ["HOLD_PURPOSE", "Waiting", "format_duration", "hold_text", "release_text"]
