"""Rebuild the world from the log, the events stream folded: what ``tether replay`` does first, and what ``--explain``,
``--diff`` and ``--what-if`` build on.

:func:`replay` folds the events (from a stored snapshot when one covers a prefix of the requested range) with
:class:`tether.projections.replay_fold.ReplayFold` (each object parsed once, for its last version) and notes each
recorded command as issued right after the event that caused it (:class:`_Issued`), which rebuilds the daemon's world
exactly without running the deciders. ``fold`` replaces that for callers that re-decide (``--diff`` passes
``step``).

``--until`` bounds everything by an offset of the events stream or by a time (the prefix of the log appended until
then). Snapshots are used only for offset bounds (a time cannot be placed before a snapshot cheaply).
"""

from __future__ import annotations

import gc
import time
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager

import msgspec

from tether.adapters.log import EventLog, Snapshot, aclosing_iter, scan
from tether.core.envelope import CommandHead, EventRecord, cause_position
from tether.core.world import Settings, World, initial_world
from tether.projections.fold import note_recorded
from tether.projections.replay_fold import ReplayFold
from tether.projections.snapshot import decode_world

SNAPSHOT_NAME = "world"
Progressed = Callable[[int], None]


def cause_offset(causation: str) -> int | None:
    """The events offset a command's causation names (``core.envelope.cause_position``); None for anything else."""
    position = cause_position(causation)
    return None if position is None else position[1]


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


async def start_of(log: EventLog, *, use_snapshot: bool, until_offset: int | None, until_ms: int | None,
                   settings: Settings | None = None) -> tuple[World, int, int | None]:
    """Where a fold of the range starts: (world, offset it covers, snapshot offset or None) — the stored snapshot
    when it covers a prefix of the range (with the daemon's own settings), else the initial world under
    ``settings`` (``installation.infer_settings``)."""
    if use_snapshot and until_ms is None:
        snap: Snapshot | None = await log.load_snapshot(SNAPSHOT_NAME)
        if snap is not None:
            offset = snap.position.get(0, 0)
            world = decode_world(snap.state)
            if world is not None and (until_offset is None or offset <= until_offset):
                return world, offset, offset
    return initial_world(settings), 0, None


async def events_to_fold(log: EventLog, *, start: int, until_offset: int | None) -> int:
    """How many events a fold from ``start`` reads (for a progress bar)."""
    end = (await log.end("events")).get(0, 0)
    if until_offset is not None:
        end = min(end, until_offset)
    return max(0, end - start)


class _Issued:
    """The recorded commands, read alongside the events: each is noted in the world (in flight) right after the
    event that caused it, as ``step`` did when it issued it. Without this, a fold of the events alone would not
    know which commands are in flight (and lookup attempts), so its world would differ from the daemon's.

    Commands are read as heads (``adapters.log.scan``): most are noted from their type, target and id alone, and
    decoding a whole command record — its patch, its claimRefs — took a faithful replay twice as long as folding
    the events (ops/bench/replay.py, ``faithful``)."""

    def __init__(self, log: EventLog, after: int) -> None:
        self.after = after
        self.batches = scan(log, "commands", heads=True)
        self.pending: list[tuple[int, CommandHead]] = []  # (offset of the causing event, command)
        self.exhausted = False

    async def through(self, offset: int) -> dict[int, list[CommandHead]]:
        """The commands caused by events up to ``offset`` (not returned before), by causing event."""
        out: dict[int, list[CommandHead]] = defaultdict(list)
        while True:
            keep: list[tuple[int, CommandHead]] = []
            for cause, command in self.pending:
                if cause <= offset:
                    out[cause].append(command)
                else:
                    keep.append((cause, command))
            self.pending = keep
            if keep or self.exhausted:
                return out
            try:
                chunk: Iterable[CommandHead] = await anext(self.batches)  # type: ignore[arg-type]
            except StopAsyncIteration:
                self.exhausted = True
                continue
            after = self.after
            self.pending = [(caused_at, command) for command in chunk
                            if (caused_at := cause_offset(command.causation)) is not None and caused_at > after]

    async def aclose(self) -> None:
        close = getattr(self.batches, "aclose", None)
        if close is not None:
            await close()


async def replay(log: EventLog, *, until_offset: int | None = None, until_ms: int | None = None,
                 use_snapshot: bool = True, on_progress: Progressed | None = None,
                 fold: Callable[[World, EventRecord], object] | None = None,
                 start: tuple[World, int, int | None] | None = None, settings: Settings | None = None
                 ) -> ReplayResult:
    """Fold the events (up to the bounds) into a world.

    By default the events are folded (:class:`ReplayFold`) and the recorded commands each caused are noted as issued
    (:class:`_Issued`), which rebuilds the daemon's world exactly without running the deciders. ``fold``
    replaces that (``step`` re-decides instead; ``evolve`` alone folds only the events, the fastest).
    ``start`` is ``(world, offset it covers, snapshot offset or None)``; by default the snapshot or nothing.

    The replay fold takes the versions of the objects it holds undecoded (``scan(undecoded=True)``: most are
    superseded before anything reads them) and decodes the one it keeps. Should one of them turn out damaged, the
    versions before it are gone from this pass, so the replay starts over decoding every record, and skips (and
    dead-letters) the damaged ones as any reader does: the world is what it would have been."""
    began = time.perf_counter()
    undecoded = fold is None and start is None
    while True:
        world, offset, snapshot_at = start or await start_of(
            log, use_snapshot=use_snapshot, until_offset=until_offset, until_ms=until_ms, settings=settings)
        count, last = 0, offset
        issued = _Issued(log, offset) if fold is None else None
        bulk = ReplayFold(world) if fold is None else None
        try:
            async with aclosing_iter(scan(log, "events", after={0: offset} if offset else None,
                                          until_offset=until_offset, until_ms=until_ms,
                                          undecoded=undecoded)) as chunks:
                async for chunk in chunks:  # records decoded as they are folded (adapters.log.scan)
                    if issued is None or bulk is None:
                        assert fold is not None
                        for record in chunk:
                            fold(world, record)  # type: ignore[arg-type]
                    else:
                        caused = await issued.through(chunk.last_offset)
                        bulk.fold(chunk, caused)  # type: ignore[arg-type]
                        for late in caused.values():  # caused by an event before this chunk (out of order)
                            for head in late:
                                note_recorded(world, head)
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
            if bulk.undecodable and undecoded:  # (module doc: start over, decoding every record)
                undecoded = False
                continue
        return ReplayResult(world=world, events=count, last_offset=last, from_snapshot=snapshot_at,
                            seconds=time.perf_counter() - began)
