"""``tether replay --diff``: re-run the deciders over the recorded events and compare with the recorded commands.

:func:`diff` re-runs :func:`tether.projections.step.step` over the recorded events and compares what it derives with
the recorded commands, event by event (a command's causation is the position of its event). Kinds: ``missing``
(derived now, not in the log), ``extra`` (in the log, not derived now) and ``changed`` (same causing event, same
command type and target, different content). Reasons are wording and are not compared. The binding webhook's
recorded decisions are re-derived too, each from the world as it was when it was decided (:func:`_admission_decisions`).

Some decisions are newer than some logs: Kubernetes Events on bindings' transitions (``core.admission.binding_events``)
and the timer bounding a hold for data (``core.admission.data_hold``, ``--max-hold``). A log that records none of a
kind was written before tether decided that kind: those this version derives are set aside (``newer``) and counted
apart, not reported as missing. A log that records any was written by a version that decides them: there, one
missing is a difference.

Some decisions are older than this version: it stopped making them on purpose (issue 35, lighter on the API
server) — a finalizer on each claim, a Normal Event on a claim bound, a binding's ``Placed`` and
``PlacementChanged`` Events — and it words a claim's ``PlacementInjected`` condition by the data's clusters rather
than the exclusions; and it decides a claim's status again while an earlier one is on its way, so a transition may
be decided a few events before the recorded one. Recorded decisions of those kinds that are not derived again, a
claim status that differs from the recorded one in that condition's message alone, and a claim status derived at
another event than the recorded one are set aside (``retired``) and counted apart too: in a log that records a
retired kind (written before), a claim whose status ends in the same transition (``UpdateClaimStatus.transition``)
with the same Warnings was decided alike, whichever events its writes were decided at. Any other difference is
reported.
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

import msgspec
from rich.console import Console
from rich.text import Text

from tether.adapters.cli.record_lines import line, type_name
from tether.adapters.log import EventLog, aclosing_iter, scan
from tether.core.admission.binding_events import PLACED, PLACEMENT_CHANGED, TRANSITION_REASONS
from tether.core.admission.data_hold import HOLD_PURPOSE
from tether.core.admission.webhook_decision import decide_binding_admission
from tether.core.commands import (
    AddFinalizer,
    Command,
    EmitKubernetesEvent,
    StartTimer,
    UpdateClaimStatus,
)
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import BindingAdmissionDecided
from tether.core.keys import CLAIM_FINALIZER
from tether.core.kube import object_dict
from tether.core.world import Settings, World
from tether.projections.step import step

from .rebuild import Progressed, ReplayResult, cause_offset, replay, start_of


class Difference(msgspec.Struct):
    kind: Literal["missing", "extra", "changed"]
    causation: str
    recorded: CommandRecord | None = None
    replayed: CommandRecord | None = None
    detail: str = ""
    admission: str = ""  # a webhook decision that re-derives differently: its binding's key


def _builtins(command: CommandRecord) -> dict[str, Any]:
    raw = msgspec.to_builtins(command.command)
    return raw if isinstance(raw, dict) else {"value": raw}


def _detail(recorded: CommandRecord, replayed: CommandRecord) -> str:
    a, b = _builtins(recorded), _builtins(replayed)
    fields = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k))
    parts = [f"{k}: {msgspec.json.encode(a.get(k)).decode()} → {msgspec.json.encode(b.get(k)).decode()}"
             for k in fields]
    if recorded.id != replayed.id:
        parts.append(f"id: {recorded.id} → {replayed.id}")
    return "; ".join(parts) or "same command, different encoding"


def compare(causation: str, recorded: list[CommandRecord], replayed: list[CommandRecord]) -> list[Difference]:
    """The differences between the commands recorded for one event and those derived again."""
    def same(a: CommandRecord, b: CommandRecord) -> bool:
        return a.id == b.id and a.key == b.key and a.command == b.command

    left = list(recorded)
    right: list[CommandRecord] = []
    for r in replayed:
        match = next((i for i, c in enumerate(left) if same(c, r)), None)
        if match is None:
            right.append(r)
        else:
            del left[match]
    out: list[Difference] = []
    for r in right:  # pair what is left by (type, target): the same request, with another content
        match = next((i for i, c in enumerate(left) if (type_name(c), c.key) == (type_name(r), r.key)), None)
        if match is None:
            out.append(Difference(kind="missing", causation=causation, replayed=r))
        else:
            c = left.pop(match)
            out.append(Difference(kind="changed", causation=causation, recorded=c, replayed=r, detail=_detail(c, r)))
    out += [Difference(kind="extra", causation=causation, recorded=c) for c in left]
    return out


def _binding_transition_event(command: CommandRecord | None) -> bool:
    c = command.command if command is not None else None
    return isinstance(c, EmitKubernetesEvent) and c.involved.kind == "ResourceBinding" \
        and c.reason in TRANSITION_REASONS


def _hold_timer(command: CommandRecord | None) -> bool:
    c = command.command if command is not None else None
    return isinstance(c, StartTimer) and c.purpose == HOLD_PURPOSE


#: Kinds of decision a log may predate (module doc): a log that records none of a kind did not decide it yet.
NEWER_KINDS = (_binding_transition_event, _hold_timer)


def _retired_kind(command: Command | None) -> bool:
    """A kind of decision this tether no longer makes (module doc): a log recording one was written before."""
    if isinstance(command, AddFinalizer):
        return command.target.kind == "DataSourceClaim" and command.finalizer == CLAIM_FINALIZER
    if isinstance(command, EmitKubernetesEvent):
        kind, reason = command.involved.kind, command.reason
        return (kind == "DataSourceClaim" and command.event_type == "Normal") or (
            kind == "ResourceBinding" and reason in (PLACED, PLACEMENT_CHANGED))
    return False


def _retired(d: Difference) -> bool:
    """A decision an older tether made that this one no longer makes, or words otherwise (module doc)."""
    recorded = d.recorded.command if d.recorded is not None else None
    if d.kind == "extra":
        return _retired_kind(recorded)
    replayed = d.replayed.command if d.replayed is not None else None
    if d.kind == "changed" and isinstance(recorded, UpdateClaimStatus) and isinstance(replayed, UpdateClaimStatus):
        return _without_injected_message(recorded) == _without_injected_message(replayed)
    return False


class _ClaimOutcomes:
    """Per claim, the transition its status ends in and the Warnings it got, as recorded and as derived again: a
    claim that ends alike was decided alike, whichever events its writes were decided at (module doc)."""

    def __init__(self) -> None:
        self.recorded: dict[str, tuple[str, set[str]]] = {}
        self.derived: dict[str, tuple[str, set[str]]] = {}

    @staticmethod
    def note(into: dict[str, tuple[str, set[str]]], commands: list[CommandRecord]) -> None:
        for record in commands:
            c = record.command
            if isinstance(c, UpdateClaimStatus):
                into[record.key] = (_without_injected_message(c).transition, into.get(record.key, ("", set()))[1])
            elif isinstance(c, EmitKubernetesEvent) and c.involved.kind == "DataSourceClaim" \
                    and c.event_type == "Warning":
                into.setdefault(record.key, ("", set()))[1].add(c.reason)

    def alike(self, differences: list[Difference]) -> list[Difference]:
        """The claim status and Warning differences of the claims that ended alike."""
        def claim_of(d: Difference) -> str | None:
            subject = d.recorded if d.recorded is not None else d.replayed
            c = subject.command if subject is not None else None
            if isinstance(c, UpdateClaimStatus) or (
                    isinstance(c, EmitKubernetesEvent) and c.involved.kind == "DataSourceClaim"):
                assert subject is not None
                return subject.key
            return None

        return [d for d in differences if (key := claim_of(d)) is not None and key in self.recorded
                and self.recorded[key] == self.derived.get(key)]


def _without_injected_message(status: UpdateClaimStatus) -> UpdateClaimStatus:
    conditions = tuple(msgspec.structs.replace(c, message="") if c.type == "PlacementInjected" else c
                       for c in status.conditions)
    return msgspec.structs.replace(status, conditions=conditions)


async def diff(log: EventLog, *, until_offset: int | None = None, until_ms: int | None = None,
               use_snapshot: bool = True, on_progress: Progressed | None = None, settings: Settings | None = None,
               newer: list[Difference] | None = None, retired: list[Difference] | None = None
               ) -> tuple[ReplayResult, list[Difference]]:
    """Re-derive the commands of every event in range and compare with the recorded ones. When the log records no
    decision of one of the :data:`NEWER_KINDS`, it was written before tether decided them: the ones derived now are
    moved to ``newer`` (when given) instead of being differences; recorded decisions this version no longer makes
    (:func:`_retired`) are moved to ``retired`` (module doc)."""
    begin = await start_of(log, use_snapshot=use_snapshot, until_offset=until_offset, until_ms=until_ms,
                           settings=settings)
    start = begin[1]
    recorded: dict[str, list[CommandRecord]] = defaultdict(list)
    unrecorded = set(NEWER_KINDS)  # the kinds of newer decision this log has not recorded (yet)
    written_before = False  # whether the log records a decision this version no longer makes (_retired_kind)
    async with aclosing_iter(scan(log, "commands")) as chunks:
        async for chunk in chunks:
            for command in chunk:
                recorded[command.causation].append(command)  # type: ignore[arg-type]
                if unrecorded:
                    unrecorded -= {kind for kind in unrecorded if kind(command)}  # type: ignore[arg-type]
                if not written_before:
                    written_before = _retired_kind(command.command)  # type: ignore[union-attr]
    differences: list[Difference] = []
    admissions = await _admission_decisions(log, until_offset=until_offset)

    claims = _ClaimOutcomes()

    def fold(w: World, record: EventRecord) -> None:
        cause = f"{record.partition}:{record.offset}"
        derived = step(w, record)
        mine = recorded.pop(cause, [])
        claims.note(claims.recorded, mine)
        claims.note(claims.derived, derived)
        if derived or mine:
            differences.extend(compare(cause, mine, derived))
        for decided in admissions.pop(record.offset, ()):  # decided from the world as of this very event
            differences.extend(_rederive_admission(w, decided))

    if start:  # the replay starts from a snapshot: commands of the events it covers are out of range
        for cause in [c for c in recorded if (o := cause_offset(c)) is not None and o <= start]:
            del recorded[cause]
    result = await replay(log, until_offset=until_offset, until_ms=until_ms, use_snapshot=use_snapshot,
                          on_progress=on_progress, fold=fold, start=begin)
    for cause, commands in sorted(recorded.items()):
        offset = cause_offset(cause)
        if offset is None or offset <= result.last_offset or (until_offset is None and until_ms is None):
            differences += [Difference(kind="extra", causation=cause, recorded=c,
                                       detail="its causing event was not replayed") for c in commands]
    older = [d for d in differences if _retired(d)]
    if written_before:  # (only a log of an earlier version decided claim statuses at other events)
        older += [d for d in claims.alike(differences) if not any(d is o for o in older)]
    if older:
        set_aside = {id(d) for d in older}
        differences = [d for d in differences if id(d) not in set_aside]
        if retired is not None:
            retired.extend(older)
    if unrecorded:
        later = [d for d in differences if d.kind == "missing" and any(kind(d.replayed) for kind in unrecorded)]
        if later:
            set_aside = {id(d) for d in later}
            differences = [d for d in differences if id(d) not in set_aside]
            if newer is not None:
                newer.extend(later)
    return result, differences


async def _admission_decisions(log: EventLog, *, until_offset: int | None) -> dict[int, list[EventRecord]]:
    """The webhook's recorded decisions by the offset of the world they were decided from.

    A decision is appended *after* the position it was decided at (the webhook answers between two of the
    decider's batches, and other events are appended meanwhile), so the world it saw is the fold up to
    ``decided_at``, not up to the decision's own offset. ``--diff`` therefore reads the decisions first (one pass
    over the events) and re-derives each right after folding the event at its ``decided_at``."""
    out: dict[int, list[EventRecord]] = defaultdict(list)
    async with aclosing_iter(scan(log, "events", until_offset=until_offset)) as chunks:
        async for chunk in chunks:
            for record in chunk:
                if isinstance(record, EventRecord) and isinstance(record.event, BindingAdmissionDecided):
                    out[record.event.decided_at].append(record)
    return out


def _rederive_admission(world: World, record: EventRecord) -> list[Difference]:
    event = record.event
    assert isinstance(event, BindingAdmissionDecided)
    obj = {"apiVersion": event.obj.api_version, "kind": event.obj.kind,
           "metadata": msgspec.to_builtins(event.obj.metadata), "spec": object_dict(event.obj.spec),
           "status": object_dict(event.obj.status)}
    verdict = decide_binding_admission(world=world, operation=event.operation, obj=obj)
    if verdict.patch == event.patch:
        return []
    was, now = (msgspec.json.encode(list(patch)).decode() for patch in (event.patch, verdict.patch))
    detail = f"webhook decision at event {record.offset} (decided at {event.decided_at}): patch {was} → {now}"
    return [Difference(kind="changed", causation=f"{record.partition}:{record.offset}", detail=detail,
                       admission=event.key)]


def print_differences(differences: list[Difference], out: Console) -> None:
    for d in differences:
        if d.admission:
            out.print(Text(f"{d.kind:<8}", style="bold magenta") + Text(f" event {d.causation}: admission of "
                                                                          f"{d.admission}"))
            out.print(Text(f"         {d.detail}", style="dim"))
            continue
        style = {"missing": "red", "extra": "yellow", "changed": "magenta"}[d.kind]
        subject = d.recorded if d.kind != "missing" else d.replayed
        assert subject is not None
        head = Text(f"{d.kind:<8}", style=f"bold {style}") + Text(f" event {d.causation}: ")
        out.print(head + line(subject))
        if d.detail:
            out.print(Text(f"         {d.detail}", style="dim"))
