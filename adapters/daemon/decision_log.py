"""The daemon's decision log: one structured line per decision that changed the world, in the process's own log.

The event log holds every decision; this is what an operator reads in ``kubectl logs`` without opening it. Every
line names the **event offset** that caused the decision (``offset``, and ``partition`` on Kafka's other
partitions), the **command id** and the **object key** (``key``), so one object's story comes out of the log
stream alone (``grep ResourceBinding/ml/clicks-train-deployment``), and each line leads to its records
(``tether replay LOG --explain KEY``, ``tether log tail``).

**When.** A decision is logged when its outcome is known, by the executor loop (``Loops.apply``): at the phrase's
level (``info`` for what changes the world: a claim bound, a binding placed, data moved, a binding admitted …) when
it changed something, at ``debug`` when the executor found it already so (a no-op) or it was superseded by a newer
request before it ran, at ``warning`` when it failed. Logging the outcome rather than the decision is what keeps
``info`` free of work that changed nothing; the decider loop adds one ``debug`` line per command as it is decided.
Nothing is logged where ``projections.step.step`` runs without the daemon — recovery, ``tether replay`` — so a replay
logs no decision twice, and ``core`` stays free of logging (the replay bench runs it).

**Phrases.** :data:`PHRASES` maps every command type to a function giving its level, a short phrase (the line's
event) and a few fields of its own; a test checks that every type in ``core.commands.COMMAND_TYPES`` has one, so a
new command cannot be forgotten. Catalog answers (the outcome of ``LookupDataLocation``) have phrases of their own:
``data located``, ``data not in catalog``, ``data lookup failed``.

**Cost.** Lines below the configured level cost one level test per command (structlog's filtering logger), so the
hot path is unchanged at ``warning`` (the benchmarks' level); at ``info`` it is one line per world-changing command.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from typing import Any

import structlog

from tether.core.commands import (
    AddFinalizer,
    AdmitRequest,
    Command,
    CreateDataSource,
    CreateQueue,
    DeleteDataSource,
    EmitKubernetesEvent,
    EmitMemberEvent,
    EvictBinding,
    LookupDataLocation,
    ReleasePod,
    RemoveFinalizer,
    ResumeBinding,
    SetAdmissionChecks,
    SetAdmissionHold,
    SetBindingPlacement,
    SetBindingTiers,
    SetMemberCondition,
    StartTimer,
    SuspendDispatching,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
    UpdateDataSourceStatus,
    UpdateQueueStatus,
)
from tether.core.envelope import CommandRecord, cause_position
from tether.core.events import (
    CommandFailed,
    CommandSucceeded,
    DataLocationLookupFailed,
    DataLocationResolved,
    DataSourceNotInCatalog,
    Event,
)
from tether.core.keys import OVERRUN_ANNOTATION

DEBUG, INFO, WARNING = logging.DEBUG, logging.INFO, logging.WARNING

#: (level, phrase, fields) for one command.
Phrase = tuple[int, str, dict[str, Any]]


def _names(clusters: Sequence[str]) -> str:
    return ",".join(clusters) or "-"


def _claim_status(c: UpdateClaimStatus) -> Phrase:
    conditions = {cond.type: cond for cond in c.conditions}
    bound = conditions.get("Bound")
    placement = conditions.get("PlacementInjected")
    fields: dict[str, Any] = {"phase": c.phase}
    if bound is not None:
        fields["condition"] = bound.reason
    if c.phase == "Bound":
        fields["data_source"] = c.bound_data_source
        if placement is not None:
            fields["placement"] = placement.reason
        return INFO, "claim bound", fields
    return INFO, "claim pending", fields


def _placement(c: SetBindingPlacement) -> Phrase:
    if not c.injected:
        return INFO, "binding placement stripped", {}
    fields: dict[str, Any] = {"excluded": _names(c.excluded_clusters)}
    if c.reschedule_at:
        return INFO, "binding rescheduled", fields
    return INFO, "binding placed", fields


def _tiers(c: SetBindingTiers) -> Phrase:
    groups = "; ".join(f"{t.name} {_names(t.clusters) if t.clusters is not None else 'any'}" for t in c.terms)
    return INFO, "binding rescheduled by tiers" if c.reschedule_at else "binding placed by tiers", {"tiers": groups}


def _hold(c: SetAdmissionHold) -> Phrase:
    overrun = c.annotation == OVERRUN_ANNOTATION
    if not c.text:
        return INFO, "binding over its queue no more" if overrun else "binding hold cleared", {}
    return INFO, "binding over its queue" if overrun else "binding held", {"hold": c.text}


def _member_event(c: EmitMemberEvent) -> Phrase:
    fields = {"cluster": c.cluster, "event_reason": c.reason}
    if c.involved.kind == "PodGroup":
        return INFO, "pod group placed" if c.reason == "Placed" else "pod group held", fields
    return DEBUG, "member Event", fields


def _member_condition(c: SetMemberCondition) -> Phrase:
    fields = {"cluster": c.cluster, "condition": c.condition.reason}
    if c.condition.status == "True":
        return INFO, "Fluid affinity inherited", fields
    return INFO, "Fluid affinity not inherited", fields


#: Every command type → its phrase (module doc). The lambdas take the command of their own type.
PHRASES: dict[type, Callable[[Any], Phrase]] = {
    AddFinalizer: lambda c: (DEBUG, "finalizer added", {"finalizer": c.finalizer}),
    RemoveFinalizer: lambda c: (DEBUG, "finalizer removed", {"finalizer": c.finalizer}),
    UpdateClaimStatus: _claim_status,
    UpdateDataSourceStatus: lambda c: (DEBUG, "DataSource claims counted", {"bound_claims": c.bound_claims}),
    CreateDataSource: lambda c: (INFO, "DataSource created", {"clusters": _names(c.cluster_names),
                                                              "location": c.location}),
    UpdateDataSourceLocality: lambda c: (INFO, "data moved", {"clusters": _names(c.cluster_names),
                                                              "location": c.location}),
    DeleteDataSource: lambda c: (INFO, "DataSource deleted", {}),
    SetBindingPlacement: _placement,
    SetBindingTiers: _tiers,
    LookupDataLocation: lambda c: (DEBUG, "data lookup", {"trigger": c.trigger, "attempt": c.attempt}),
    StartTimer: lambda c: (DEBUG, "timer started", {"purpose": c.purpose}),
    EmitKubernetesEvent: lambda c: (DEBUG, "Kubernetes Event", {"event_reason": c.reason}),
    ReleasePod: lambda c: (DEBUG, "pod released", {"cluster": c.cluster, "note": c.note}),
    SetMemberCondition: _member_condition,
    EmitMemberEvent: _member_event,
    ResumeBinding: lambda c: (INFO, "binding admitted", {"admitted": c.reason}),
    SetAdmissionHold: _hold,
    SetAdmissionChecks: lambda c: (INFO, "binding admission checks", {
        "checks": ", ".join(f"{check.name} {check.state}" for check in c.checks) or "none"}),
    UpdateQueueStatus: lambda c: (DEBUG, "queue status", {"pending": c.pending, "running": c.running}),
    CreateQueue: lambda c: (INFO, "queue created", {}),
    EvictBinding: lambda c: (INFO, "binding evicted", {"queue": c.queue, "policy": c.policy, "evicted_for":
                                                        c.for_binding, "hold": c.reason}),
    SuspendDispatching: lambda c: (INFO, "binding over its queue: dispatching suspended", {"hold": c.reason}),
    AdmitRequest: lambda c: (INFO, "binding's request admitted", {"admitted": c.reason}),
}


def phrase(command: Command) -> Phrase:
    """The level, phrase and fields of ``command`` (a type without a phrase — a test forbids it — is logged at
    info under its class name rather than not at all)."""
    describe = PHRASES.get(type(command))
    if describe is None:
        return INFO, type(command).__name__, {}
    return describe(command)


def _position(record: CommandRecord) -> dict[str, Any]:
    """The decision's ids: the causing event's offset (and partition when not 0), the command id, the key."""
    position = cause_position(record.causation)
    out: dict[str, Any] = {"offset": record.causation if position is None else position[1]}
    if position is not None and position[0] != 0:
        out["partition"] = position[0]
    out["command_id"] = record.id
    out["key"] = record.key
    return out


class DecisionLog:
    """Writes the lines (module doc) to ``logger`` (a structlog logger)."""

    def __init__(self, logger: Any = None) -> None:
        self.log = logger if logger is not None else structlog.get_logger("tether.decisions")

    def _enabled(self, level: int) -> bool:
        test = getattr(self.log, "is_enabled_for", None)
        return True if test is None else bool(test(level))

    def decided(self, records: Sequence[CommandRecord]) -> None:
        """One debug line per command the decider loop just committed."""
        if not records or not self._enabled(DEBUG):
            return
        for record in records:
            _, text, fields = phrase(record.command)
            self.log.debug(f"decided: {text}", **_position(record), decider=record.decider, why=record.reason,
                           **fields)

    def superseded(self, record: CommandRecord, *, by: CommandRecord) -> None:
        """A queued command skipped: a newer one (``by``) for the same object and purpose carries the newer state."""
        if self._enabled(DEBUG):
            _, text, fields = phrase(record.command)
            self.log.debug(f"{text}: superseded", **_position(record), superseded_by=by.id, **fields)

    def applied(self, record: CommandRecord, outcomes: Sequence[Event]) -> None:
        """The line of a command whose outcome is known (module doc, "When")."""
        level, text, fields = phrase(record.command)
        for outcome in outcomes:
            kind = type(outcome)
            if kind is CommandSucceeded:
                assert isinstance(outcome, CommandSucceeded)
                if outcome.noop:
                    self._line(DEBUG, f"{text}: already so", record, fields)
                else:
                    self._line(level, text, record, fields)
            elif kind is CommandFailed:
                assert isinstance(outcome, CommandFailed)
                self._line(WARNING, f"{text}: failed", record,
                           {**fields, "failure": outcome.reason, "message": outcome.message[:300],
                            "retryable": outcome.retryable})
            elif kind is DataLocationResolved:
                assert isinstance(outcome, DataLocationResolved)
                self._line(INFO, "data located", record, {"location": outcome.location})
            elif kind is DataSourceNotInCatalog:
                assert isinstance(outcome, DataSourceNotInCatalog)
                self._line(INFO, "data not in catalog", record, {"message": outcome.message[:300]})
            elif kind is DataLocationLookupFailed:
                assert isinstance(outcome, DataLocationLookupFailed)
                self._line(WARNING, "data lookup failed", record, {"message": outcome.message[:300],
                                                                   "retryable": outcome.retryable})

    def _line(self, level: int, text: str, record: CommandRecord, fields: dict[str, Any]) -> None:
        if self._enabled(level):
            self.log.log(level, text, **_position(record), decider=record.decider, why=record.reason, **fields)


__all__ = ["PHRASES", "DecisionLog", "Phrase", "phrase"]
