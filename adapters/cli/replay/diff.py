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
"""

from __future__ import annotations

from collections import defaultdict
from typing import Any, Literal

import msgspec
from rich.console import Console
from rich.text import Text

from tether.adapters.cli.record_lines import line, type_name
from tether.adapters.log import EventLog, aclosing_iter, scan
from tether.core.admission.binding_events import TRANSITION_REASONS
from tether.core.admission.data_hold import HOLD_PURPOSE
from tether.core.admission.webhook_decision import decide_binding_admission
from tether.core.commands import EmitKubernetesEvent, StartTimer
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import BindingAdmissionDecided
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


async def diff(log: EventLog, *, until_offset: int | None = None, until_ms: int | None = None,
               use_snapshot: bool = True, on_progress: Progressed | None = None, settings: Settings | None = None,
               newer: list[Difference] | None = None) -> tuple[ReplayResult, list[Difference]]:
    """Re-derive the commands of every event in range and compare with the recorded ones. When the log records no
    decision of one of the :data:`NEWER_KINDS`, it was written before tether decided them: the ones derived now are
    moved to ``newer`` (when given) instead of being differences (module doc)."""
    begin = await start_of(log, use_snapshot=use_snapshot, until_offset=until_offset, until_ms=until_ms,
                           settings=settings)
    start = begin[1]
    recorded: dict[str, list[CommandRecord]] = defaultdict(list)
    unrecorded = set(NEWER_KINDS)  # the kinds of newer decision this log has not recorded (yet)
    async with aclosing_iter(scan(log, "commands")) as chunks:
        async for chunk in chunks:
            for command in chunk:
                recorded[command.causation].append(command)  # type: ignore[arg-type]
                if unrecorded:
                    unrecorded -= {kind for kind in unrecorded if kind(command)}  # type: ignore[arg-type]
    differences: list[Difference] = []
    admissions = await _admission_decisions(log, until_offset=until_offset)

    def fold(w: World, record: EventRecord) -> None:
        cause = f"{record.partition}:{record.offset}"
        derived = step(w, record)
        mine = recorded.pop(cause, [])
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
