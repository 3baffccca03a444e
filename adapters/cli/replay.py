"""``tether replay``: rebuild the world from the log, explain one object's decision trail, diff the deciders.

* :func:`replay` folds the events stream (from a stored snapshot when one covers a prefix of the requested
  range) with :class:`tether.projections.bulk.BulkFold` (each object parsed once, for its last version) and
  returns the world.
* :func:`explain` gathers the trail of one object key without folding anything: every event whose key is the
  object's (observations, catalog answers for it, outcomes of commands on it; for a member's pod, also the pod
  webhook's answer its ``tether.dev/admission`` annotation names), every command targeting it,
  every command caused by one of those events, and the events that caused the commands targeting it — in log
  order, each command right under the event that caused it, with the decider's reason.
* :func:`diff` re-runs :func:`tether.core.pipeline.step` over the recorded events and compares what it derives
  with the recorded commands, event by event (a command's causation is the position of its event). Kinds:
  ``missing`` (derived now, not in the log), ``extra`` (in the log, not derived now) and ``changed`` (same
  causing event, same command type and target, different content). Reasons are wording and are not compared.

``--until`` bounds everything by an offset of the events stream or by a time (the prefix of the log appended
until then). Snapshots are used only for offset bounds (a time cannot be placed before a snapshot cheaply).
"""

from __future__ import annotations

import asyncio
import gc
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any, Literal

import click
import msgspec
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from tether.adapters.cli.log import console, open_for_cli
from tether.adapters.cli.render import line, type_name
from tether.adapters.log import EventLog, Record, Snapshot, Stream, aclosing_iter, scan
from tether.core.admission.webhook_decision import decide_binding_admission
from tether.core.envelope import CommandRecord, EventRecord, parse_rfc3339_ms, rfc3339
from tether.core.events import (
    BindingAdmissionDecided,
    ObjectDeleted,
    ObjectObserved,
    pod_admission_key,
    split_member_key,
)
from tether.core.kube import object_dict
from tether.core.pipeline import step
from tether.core.placement.webhook_decision import ADMISSION_ANNOTATION
from tether.projections.bulk import BulkFold
from tether.projections.snapshot import decode_world, encode_world
from tether.projections.world import World, initial_world, note_issued

SNAPSHOT_NAME = "world"
Progressed = Callable[[int], None]


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause CPython's cyclic garbage collector for a bulk replay.

    A replay allocates millions of short-lived, acyclic objects (decoded records) while a large world stays
    alive; the generational collector promotes each batch and then rescans the whole world again and again
    (measured on the replay bench: reading + decoding 3-5x slower, folding ~2x). Reference counting still frees
    everything the replay drops at once, so nothing accumulates; the collector resumes afterwards."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


class ReplayResult(msgspec.Struct):
    world: World
    events: int  # folded in this run (after the snapshot, if any)
    last_offset: int  # of the last event folded (or the snapshot's)
    from_snapshot: int | None  # the snapshot's offset when one was used
    seconds: float


class Difference(msgspec.Struct):
    kind: Literal["missing", "extra", "changed"]
    causation: str
    recorded: CommandRecord | None = None
    replayed: CommandRecord | None = None
    detail: str = ""
    admission: str = ""  # a webhook decision that re-derives differently: its binding's key


async def _start(log: EventLog, use_snapshot: bool, until_offset: int | None, until_ms: int | None
                 ) -> tuple[World, int, int | None]:
    if use_snapshot and until_ms is None:
        snap: Snapshot | None = await log.load_snapshot(SNAPSHOT_NAME)
        if snap is not None:
            offset = snap.position.get(0, 0)
            world = decode_world(snap.state)
            if world is not None and (until_offset is None or offset <= until_offset):
                return world, offset, offset
    return initial_world(), 0, None


async def _total(log: EventLog, start: int, until_offset: int | None) -> int:
    end = (await log.end("events")).get(0, 0)
    if until_offset is not None:
        end = min(end, until_offset)
    return max(0, end - start)


class _Issued:
    """The recorded commands, read alongside the events: each is noted in the world (in flight) right after the
    event that caused it, as ``step`` did when it issued it. Without this, a fold of the events alone would not
    know which commands are in flight (and lookup attempts), so its world would differ from the daemon's."""

    def __init__(self, log: EventLog, after: int) -> None:
        self.after = after
        self.batches = scan(log, "commands")
        self.pending: list[tuple[int, CommandRecord]] = []  # (offset of the causing event, command)
        self.exhausted = False

    async def through(self, offset: int) -> dict[int, list[CommandRecord]]:
        """The commands caused by events up to ``offset`` (not returned before), by causing event."""
        out: dict[int, list[CommandRecord]] = defaultdict(list)
        while True:
            keep: list[tuple[int, CommandRecord]] = []
            for cause, command in self.pending:
                if cause <= offset:
                    out[cause].append(command)
                else:
                    keep.append((cause, command))
            self.pending = keep
            if keep or self.exhausted:
                return out
            try:
                chunk: Iterable[CommandRecord] = await anext(self.batches)  # type: ignore[assignment]
            except StopAsyncIteration:
                self.exhausted = True
                continue
            after = self.after
            self.pending = [(cause, command) for command in chunk
                            if (cause := _cause_offset(command.causation)) is not None and cause > after]

    async def aclose(self) -> None:
        close = getattr(self.batches, "aclose", None)
        if close is not None:
            await close()


async def replay(log: EventLog, *, until_offset: int | None = None, until_ms: int | None = None,
                 use_snapshot: bool = True, on_progress: Progressed | None = None,
                 fold: Callable[[World, EventRecord], object] | None = None,
                 start: tuple[World, int, int | None] | None = None) -> ReplayResult:
    """Fold the events (up to the bounds) into a world.

    By default the events are folded (:class:`BulkFold`) and the recorded commands each caused are noted as issued
    (:class:`_Issued`), which rebuilds the daemon's world exactly without running the deciders. ``fold``
    replaces that (``step`` re-decides instead; ``evolve`` alone folds only the events, the fastest).
    ``start`` is ``(world, offset it covers, snapshot offset or None)``; by default the snapshot or nothing."""
    began = time.perf_counter()
    world, offset, snapshot_at = start or await _start(log, use_snapshot, until_offset, until_ms)
    count, last = 0, offset
    issued = _Issued(log, offset) if fold is None else None
    bulk = BulkFold(world) if fold is None else None
    try:
        async with aclosing_iter(scan(log, "events", after={0: offset} if offset else None,
                                      until_offset=until_offset, until_ms=until_ms)) as chunks:
            async for chunk in chunks:  # records decoded as they are folded (adapters.log.scan)
                if issued is None or bulk is None:
                    assert fold is not None
                    for record in chunk:
                        fold(world, record)  # type: ignore[arg-type]
                else:
                    caused = await issued.through(chunk.last_offset)
                    bulk.fold(chunk, caused)  # type: ignore[arg-type]
                    for late in caused.values():  # caused by an event before this chunk (out of order)
                        for command in late:
                            note_issued(world, command.command, command.id)
                count += chunk.decoded
                if chunk.rows:
                    last = chunk.last_offset
                if on_progress is not None:
                    on_progress(chunk.rows)
    finally:
        if issued is not None:
            await issued.aclose()
    if bulk is not None:
        bulk.finish()
    return ReplayResult(world=world, events=count, last_offset=last, from_snapshot=snapshot_at,
                        seconds=time.perf_counter() - began)


# -- explain -----------------------------------------------------------------------------------------------


class Trail(msgspec.Struct):
    key: str
    events: list[EventRecord]
    caused: dict[int, list[CommandRecord]]  # event offset → commands it caused (relevant to the trail)
    orphans: list[CommandRecord]  # commands targeting the key whose causing event is unknown


def _cause_offset(causation: str) -> int | None:
    partition, _, offset = causation.partition(":")
    return int(offset) if partition.isdigit() and offset.isdigit() else None


class _Scan:
    """explain's queries for a backend without indexes: one pass over each stream."""

    def __init__(self, log: EventLog) -> None:
        self.log = log

    async def _all(self, stream: Stream, keep: Callable[[Record], bool], until: int | None = None) -> list[Record]:
        out: list[Record] = []
        async with aclosing_iter(scan(self.log, stream, until_offset=until)) as chunks:
            async for chunk in chunks:
                out += [r for r in chunk if keep(r)]
        return out

    async def records_by_key(self, stream: Stream, key: str, *, until_offset: int | None = None) -> list[Record]:
        return await self._all(stream, lambda r: r.key == key, until_offset)

    async def commands_caused_by(self, causations: Sequence[str]) -> list[Record]:
        wanted = set(causations)
        return await self._all("commands", lambda r: r.causation in wanted)

    async def records_at(self, stream: Stream, offsets: Sequence[int]) -> list[Record]:
        wanted = set(offsets)
        return await self._all(stream, lambda r: r.offset in wanted)


def normalise_key(key: str) -> str:
    """``Kind/ns/name`` as is; ``Kind/name`` → ``Kind//name`` (cluster-scoped)."""
    return key if key.count("/") >= 2 else key.replace("/", "//", 1)


def _admission_keys(key: str, own: Sequence[EventRecord]) -> list[str]:
    """For a member pod: the keys of the :class:`~tether.core.events.PodGateDecided` its observations point to
    (annotation ``tether.dev/admission``; a CREATE rarely has a name yet, so the answer has a key of its own)."""
    cluster, rest = split_member_key(key)
    kind, _, ns_name = rest.partition("/")
    if not cluster or kind != "Pod":
        return []
    namespace = ns_name.partition("/")[0]
    uids = {r.event.obj.metadata.annotations.get(ADMISSION_ANNOTATION, "") for r in own
            if isinstance(r.event, ObjectObserved | ObjectDeleted)}
    return sorted(pod_admission_key(cluster, namespace, "", uid) for uid in uids if uid)


async def explain(log: EventLog, key: str, *, until_offset: int | None = None, until_ms: int | None = None) -> Trail:
    index: Any = log if hasattr(log, "records_by_key") else _Scan(log)
    key = normalise_key(key)

    def in_range(r: Record) -> bool:
        return until_ms is None or r.at_ms <= until_ms

    own: list[EventRecord] = [r for r in await index.records_by_key("events", key, until_offset=until_offset)
                              if in_range(r)]
    for admission in _admission_keys(key, own):  # the pod webhook's answer, recorded before the pod had a name
        own += [r for r in await index.records_by_key("events", admission, until_offset=until_offset)
                if in_range(r) and r.offset not in {o.offset for o in own}]
    targeting: list[CommandRecord] = await index.records_by_key("commands", key)
    caused_by_own: list[CommandRecord] = await index.commands_caused_by([f"{r.partition}:{r.offset}" for r in own])
    own_offsets = {r.offset for r in own}
    extra_offsets = {o for c in targeting if (o := _cause_offset(c.causation)) is not None and o not in own_offsets}
    causes = [r for r in await index.records_at("events", sorted(extra_offsets))
              if (until_offset is None or r.offset <= until_offset) and in_range(r)]
    events = sorted(own + causes, key=lambda r: r.offset)
    known = {r.offset for r in events}
    caused: dict[int, list[CommandRecord]] = defaultdict(list)
    orphans: list[CommandRecord] = []
    seen: set[int] = set()
    for command in sorted(caused_by_own + targeting, key=lambda c: c.offset):
        if command.offset in seen:
            continue
        seen.add(command.offset)
        offset = _cause_offset(command.causation)
        if offset in known:
            caused[offset].append(command)  # type: ignore[index]
        elif offset is None and until_offset is None and until_ms is None:
            orphans.append(command)
    return Trail(key=key, events=events, caused=dict(caused), orphans=orphans)


def print_trail(trail: Trail, out: Console) -> None:
    out.print(Text(f"Decision trail of {trail.key}", style="bold underline"))
    for event in trail.events:
        text = line(event, show_key=event.key != trail.key)
        out.print(text)
        for command in trail.caused.get(event.offset, []):
            out.print(Text("  └─ ") + line(command, show_key=command.key != trail.key))
    for command in trail.orphans:
        out.print(Text("  ?─ ") + line(command))


# -- diff --------------------------------------------------------------------------------------------------


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


async def diff(log: EventLog, *, until_offset: int | None = None, until_ms: int | None = None,
               use_snapshot: bool = True, on_progress: Progressed | None = None
               ) -> tuple[ReplayResult, list[Difference]]:
    """Re-derive the commands of every event in range and compare with the recorded ones."""
    begin = await _start(log, use_snapshot, until_offset, until_ms)
    start = begin[1]
    recorded: dict[str, list[CommandRecord]] = defaultdict(list)
    async with aclosing_iter(scan(log, "commands")) as chunks:
        async for chunk in chunks:
            for command in chunk:
                recorded[command.causation].append(command)  # type: ignore[arg-type]
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
        for cause in [c for c in recorded if (o := _cause_offset(c)) is not None and o <= start]:
            del recorded[cause]
    result = await replay(log, until_offset=until_offset, until_ms=until_ms, use_snapshot=use_snapshot,
                          on_progress=on_progress, fold=fold, start=begin)
    for cause, commands in sorted(recorded.items()):
        offset = _cause_offset(cause)
        if offset is None or offset <= result.last_offset or (until_offset is None and until_ms is None):
            differences += [Difference(kind="extra", causation=cause, recorded=c,
                                       detail="its causing event was not replayed") for c in commands]
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


# -- the command -------------------------------------------------------------------------------------------


def parse_until(value: str | None) -> tuple[int | None, int | None]:
    """``--until``: an offset of the events stream, or an RFC3339 time → (until_offset, until_ms)."""
    if value is None:
        return None, None
    if value.isdigit():
        return int(value), None
    at_ms = parse_rfc3339_ms(value)
    if at_ms is None:
        raise click.BadParameter(f"{value!r} is neither an offset nor an RFC3339 time", param_hint="--until")
    return None, at_ms


def _summary_table(result: ReplayResult, log_end: int) -> Table:
    table = Table(title="World after replay", show_header=False, title_justify="left", box=None)
    table.add_column(style="bold")
    table.add_column(justify="right")
    for name, value in result.world.summary().items():
        table.add_row(name.replace("_", " "), str(value))
    rate = result.events / result.seconds if result.seconds > 0 else 0.0
    table.add_row("replayed", f"{result.events} events in {result.seconds:.2f}s ({rate:,.0f}/s)")
    table.add_row("up to", f"offset {result.last_offset} of {log_end}")
    if result.from_snapshot is not None:
        table.add_row("from snapshot", f"offset {result.from_snapshot}")
    if result.world.last_at_ms:
        table.add_row("last event at", rfc3339(result.world.last_at_ms))
    return table


async def run_replay(url: str, until: str | None, explain_key: str | None, show_diff: bool, use_snapshot: bool,
                     save_snapshot: bool, out: Console) -> int:
    until_offset, until_ms = parse_until(until)
    if show_diff:
        use_snapshot = False  # a snapshot is the deciders' own output: a diff must re-derive from the first event
    log = await open_for_cli(url)
    try:
        if explain_key is not None:
            trail = await explain(log, explain_key, until_offset=until_offset, until_ms=until_ms)
            if not trail.events and not trail.orphans:
                out.print(f"no record about {trail.key} in {url}" + (f" up to {until}" if until else ""))
                return 1
            print_trail(trail, out)
            if not show_diff:
                return 0
        start = 0
        if use_snapshot and until_ms is None and (snap := await log.load_snapshot(SNAPSHOT_NAME)) is not None:
            start = snap.position.get(0, 0) if until_offset is None or snap.position.get(0, 0) <= until_offset else 0
        total = await _total(log, start, until_offset)
        log_end = (await log.end("events")).get(0, 0)
        with Progress(TextColumn("replaying"), BarColumn(), MofNCompleteColumn(), TimeRemainingColumn(),
                      console=out, transient=True, disable=not out.is_terminal or total < 50_000) as progress:
            task = progress.add_task("replay", total=total)

            def advance(n: int) -> None:
                progress.advance(task, n)

            if show_diff:
                with gc_paused():
                    result, differences = await diff(log, until_offset=until_offset, until_ms=until_ms,
                                                     use_snapshot=use_snapshot, on_progress=advance)
            else:
                with gc_paused():
                    result = await replay(log, until_offset=until_offset, until_ms=until_ms,
                                          use_snapshot=use_snapshot, on_progress=advance)
                differences = []
        if explain_key is None:
            out.print(_summary_table(result, log_end))
        dead = getattr(log, "dead_letters", None)
        if dead is not None and (letters := await dead()):
            out.print(Text(f"{len(letters)} corrupt record(s) were skipped (dead_letters table)", style="bold red"))
        if save_snapshot and until_offset is None and until_ms is None:
            await log.save_snapshot(Snapshot(name=SNAPSHOT_NAME, position={0: result.last_offset},
                                             state=encode_world(result.world)))
            out.print(f"saved snapshot at offset {result.last_offset}")
        if show_diff:
            print_differences(differences, out)
            kinds = {k: sum(1 for d in differences if d.kind == k) for k in ("missing", "extra", "changed")}
            if differences:
                out.print(Text("commands differ: " + ", ".join(f"{n} {k}" for k, n in kinds.items()),
                               style="bold red"))
                return 1
            out.print(Text(f"no difference: the deciders re-derive the recorded commands of {result.events} events",
                           style="bold green"))
        return 0
    finally:
        await log.close()


@click.command("replay")
@click.argument("log_url", metavar="LOG")
@click.option("--until", metavar="OFFSET|TIME", help="Stop after this events offset or at this RFC3339 time.")
@click.option("--explain", "explain_key", metavar="KIND/NAMESPACE/NAME",
              help="Print the decision trail of one object (Kind/name for cluster-scoped ones; a member cluster's "
                   "object with --cluster, or as CLUSTER:Kind/namespace/name).")
@click.option("--cluster", "member", default="", metavar="NAME",
              help="With --explain: the member cluster the object lives in (pods, PodGroups, Fluid operations).")
@click.option("--diff", "show_diff", is_flag=True,
              help="Re-run the deciders over every recorded event (never from a snapshot); exit 1 if any command "
                   "differs.")
@click.option("--snapshot/--no-snapshot", "use_snapshot", default=True, show_default=True,
              help="Start from the stored world snapshot when it covers a prefix of the range.")
@click.option("--save-snapshot", is_flag=True, help="Store the replayed world as the snapshot (whole log only).")
@click.option("--what-if", "what_if_config", type=click.Path(exists=True, dir_okay=False), default=None,
              metavar="CONFIGMAP.yaml",
              help="Re-decide the history under this plugin ConfigMap; print the decisions that would change.")
def replay_cmd(log_url: str, until: str | None, explain_key: str | None, member: str, show_diff: bool,
               use_snapshot: bool, save_snapshot: bool, what_if_config: str | None) -> None:
    """Rebuild the state from LOG and summarise it; explain one object; diff the deciders against the log."""
    if explain_key is not None and member:
        explain_key = f"{member}:{normalise_key(explain_key)}"  # core.events.member_key
    if what_if_config is not None:
        code = asyncio.run(run_what_if(log_url, what_if_config, until, console()))
    else:
        code = asyncio.run(run_replay(log_url, until, explain_key, show_diff, use_snapshot, save_snapshot,
                                      console()))
    click.get_current_context().exit(code)


async def run_what_if(url: str, config_path: str, until: str | None, out: Console) -> int:
    """Print, per recorded event, the commands the candidate configuration would add or drop (exit 0)."""
    from tether.adapters.cli.whatif import load_candidate, what_if  # keeps ``tether replay`` start-up light

    until_offset, _ = parse_until(until)
    try:
        candidate = load_candidate(config_path)
    except (OSError, ValueError) as exc:
        out.print(Text(f"cannot read {config_path}: {exc}", style="bold red"))
        return 2
    log = await open_for_cli(url)
    try:
        with gc_paused():
            differences = await what_if(log, candidate, until_offset=until_offset)
    finally:
        await log.close()
    for d in differences:
        out.print(Text(f"event {d.event_offset} {d.event_key}", style="bold"))
        for c in d.only_recorded_config:
            out.print(Text(f"  - {type(c.command).__name__} {c.key}: {c.reason}", style="red"))
        for c in d.only_candidate_config:
            out.print(Text(f"  + {type(c.command).__name__} {c.key}: {c.reason}", style="green"))
    changed = len({c.key for d in differences for c in [*d.only_recorded_config, *d.only_candidate_config]})
    out.print(Text(f"{len(differences)} decision(s) differ, touching {changed} object(s)"
                   if differences else "no decision differs under the candidate configuration", style="bold"))
    return 0


def register(main: click.Group) -> None:
    main.add_command(replay_cmd)
