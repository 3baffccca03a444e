"""``tether replay --explain KEY``: the decision trail of one log key, gathered without folding anything.

:func:`explain` collects every event whose key is the object's (observations, catalog answers for it, outcomes of
commands on it; for a member's pod, also the pod webhook's answer its ``tether.dev/admission`` annotation names),
every command targeting it, every command caused by one of those events, and the events that caused the commands
targeting it — in log order, each command right under the event that caused it, with the decider's reason. For a
binding queue admission admitted by evicting others, or evicted for another, the other side of the eviction too
(:func:`preemption_chain`): who preempted whom, and why.

It asks the log four indexed questions (:class:`LogIndex`); a backend without indexes (Kafka) answers each with
one pass over a stream. The chain of a workload (``why.py``) reuses the same questions for the objects it links.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Sequence
from typing import Protocol

import msgspec
from rich.console import Console
from rich.text import Text

from tether.adapters.cli.record_lines import line
from tether.adapters.log import EventLog, Record, Stream, aclosing_iter, scan
from tether.core.commands import EvictBinding, ResumeBinding
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import ObjectDeleted, ObjectObserved, pod_admission_key, split_member_key
from tether.core.keys import ADMISSION_ANNOTATION

from .rebuild import cause_offset


class Trail(msgspec.Struct):
    key: str
    events: list[EventRecord]
    caused: dict[int, list[CommandRecord]]  # event offset → commands it caused (relevant to the trail)
    orphans: list[CommandRecord]  # commands targeting the key whose causing event is unknown


class LogIndex(Protocol):
    """The queries ``--explain`` asks of a log. ``SqliteLog`` answers them from its indexes; any other backend
    through :class:`ScanningIndex`."""

    async def records_by_key(self, stream: Stream, key: str, *, until_offset: int | None = None) -> list[Record]: ...

    async def commands_caused_by(self, causations: Sequence[str]) -> list[Record]: ...

    async def records_at(self, stream: Stream, offsets: Sequence[int]) -> list[Record]: ...

    async def keys(self, stream: Stream, *, until_offset: int | None = None) -> list[str]: ...


def index_of(log: EventLog) -> LogIndex:
    """The log itself when it answers :class:`LogIndex`'s queries, else a scanning stand-in."""
    if all(hasattr(log, name) for name in ("records_by_key", "commands_caused_by", "records_at", "keys")):
        return log  # type: ignore[return-value]
    return ScanningIndex(log)


class ScanningIndex:
    """:class:`LogIndex` for a backend without indexes: one pass over a stream per query."""

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

    async def keys(self, stream: Stream, *, until_offset: int | None = None) -> list[str]:
        seen: set[str] = set()
        async with aclosing_iter(scan(self.log, stream, until_offset=until_offset)) as chunks:
            async for chunk in chunks:
                seen.update(r.key for r in chunk)
        return sorted(seen)


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


class Bounds(msgspec.Struct, frozen=True):
    """``--until``: an offset of the events stream, or a time (the prefix appended until then), or neither."""

    until_offset: int | None = None
    until_ms: int | None = None

    def holds(self, record: Record) -> bool:
        """Whether an *event* is in range (commands are bounded through the events that caused them)."""
        return (self.until_offset is None or record.offset <= self.until_offset) and (
            self.until_ms is None or record.at_ms <= self.until_ms)

    @property
    def whole_log(self) -> bool:
        return self.until_offset is None and self.until_ms is None


async def events_by_key(index: LogIndex, key: str, bounds: Bounds) -> list[EventRecord]:
    """The events of ``key`` in range, in log order."""
    return [r for r in await index.records_by_key("events", key, until_offset=bounds.until_offset)
            if isinstance(r, EventRecord) and bounds.holds(r)]


async def commands_by_key(index: LogIndex, key: str) -> list[CommandRecord]:
    """Every command targeting ``key``, in log order (the caller bounds them by their causing event)."""
    return [r for r in await index.records_by_key("commands", key) if isinstance(r, CommandRecord)]


async def events_at(index: LogIndex, offsets: Sequence[int], bounds: Bounds) -> list[EventRecord]:
    return [r for r in await index.records_at("events", sorted(set(offsets)))
            if isinstance(r, EventRecord) and bounds.holds(r)]


async def preemption_chain(index: LogIndex, key: str, targeting: Sequence[CommandRecord]) -> list[CommandRecord]:
    """Who preempted whom: for a binding admitted by evicting others, the ``EvictBinding`` made for it; for an
    evicted binding, the ``ResumeBinding`` of the binding it made room for — each decided by the same cycle (the
    same causing event) as the binding's own command."""
    binding = key.split("/", 1)[-1]
    wanted: dict[str, set[str]] = defaultdict(set)  # causation → the keys of the commands it also decided
    for command in targeting:
        match command.command:
            case ResumeBinding(reason=reason) if ", evicting " in reason:
                wanted[command.causation].add("")  # (any EvictBinding made for this binding)
            case EvictBinding(for_binding=arrival):
                wanted[command.causation].add(f"ResourceBinding/{arrival}")
    if not wanted:
        return []
    out: list[CommandRecord] = []
    for record in await index.commands_caused_by(sorted(wanted)):
        if not isinstance(record, CommandRecord) or record.key == key:
            continue
        keys = wanted[record.causation]
        command = record.command
        if isinstance(command, EvictBinding):
            if "" in keys and command.for_binding == binding:
                out.append(record)
        elif isinstance(command, ResumeBinding) and record.key in keys:
            out.append(record)
    return out


async def explain(log: EventLog, key: str, *, until_offset: int | None = None, until_ms: int | None = None,
                  exact: bool = False) -> Trail:
    """The trail of ``key`` (``Kind/name`` is taken as cluster-scoped, unless ``exact``: a key as the log has it,
    such as ``*/lists``)."""
    index = index_of(log)
    bounds = Bounds(until_offset=until_offset, until_ms=until_ms)
    key = key if exact else normalise_key(key)
    own = await events_by_key(index, key, bounds)
    for admission in _admission_keys(key, own):  # the pod webhook's answer, recorded before the pod had a name
        seen_offsets = {o.offset for o in own}
        own += [r for r in await events_by_key(index, admission, bounds) if r.offset not in seen_offsets]
    targeting = await commands_by_key(index, key)
    caused_by_own = [r for r in await index.commands_caused_by([f"{r.partition}:{r.offset}" for r in own])
                     if isinstance(r, CommandRecord)]
    targeting += await preemption_chain(index, key, targeting)
    own_offsets = {r.offset for r in own}
    extra_offsets = {o for c in targeting if (o := cause_offset(c.causation)) is not None and o not in own_offsets}
    causes = await events_at(index, sorted(extra_offsets), bounds)
    events = sorted(own + causes, key=lambda r: r.offset)
    known = {r.offset for r in events}
    caused: dict[int, list[CommandRecord]] = defaultdict(list)
    orphans: list[CommandRecord] = []
    seen: set[int] = set()
    for command in sorted(caused_by_own + targeting, key=lambda c: c.offset):
        if command.offset in seen:
            continue
        seen.add(command.offset)
        offset = cause_offset(command.causation)
        if offset is not None and offset in known:
            caused[offset].append(command)
        elif offset is None and bounds.whole_log:
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
