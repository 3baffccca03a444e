"""The decider loop's position (``adapters/daemon/loops.py``, "Decider loop") on a real SQLite log.

Batches that produce no command do not commit their position on their own at once: the next batch that produces
commands commits it with them, or it is committed by itself a moment later (``position_delay``), or on the way
out (``save_position``). After a crash before that, the events are decided again and produce nothing again.
No test asserts a duration: each waits for a state (the delay is made huge where it must not fire).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tether.adapters.daemon.loops import Loops
from tether.adapters.kubernetes import manifests
from tether.adapters.log import Batch
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.tether_stack import eventually
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import Event, ObjectObserved, event_key
from tether.core.kube import trim
from tether.projections.snapshot import encode_world

NEVER = 3600.0  # a position_delay that does not fire during a test


def cluster(name: str) -> EventRecord:
    """An observation the deciders produce nothing for (no claim, no binding refers to clusters yet)."""
    return _record(ObjectObserved(obj=trim(manifests.cluster(name))))


def claim(name: str) -> EventRecord:
    """An observation the deciders answer with commands (finalizer, status: no plugin is configured)."""
    raw = manifests.claim(name, namespace="ns", table="db.t", workload="w")
    raw["metadata"].update(uid=f"uid-{name}", resourceVersion="5", generation=1)
    return _record(ObjectObserved(obj=trim(raw)))


def _record(event: Event) -> EventRecord:
    return EventRecord(at_ms=1_700_000_000_000, source="test", key=event_key(event), event=event)


class Decider:
    """A loops's decider loop in a task, over one log."""

    def __init__(self, log: SqliteLog, **options: Any) -> None:
        self.log = log
        self.loops = Loops(log, executors=[], **options)
        self.task: asyncio.Task[None] | None = None

    async def start(self) -> Decider:
        await self.loops.recover()
        self.task = asyncio.create_task(self.loops.decide_loop())
        return self

    async def crash(self) -> None:
        """Stop where it is: nothing more is committed (no save_position, no snapshot)."""
        assert self.task is not None
        self.task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self.task
        saver = self.loops._position_saver
        if saver is not None:
            saver.cancel()

    async def decided(self, n: int) -> None:
        await eventually(lambda: asyncio.sleep(0, self.loops.decided_events >= n), f"{n} events decided")

    async def position(self) -> int:
        return (await self.log.position("events", consumer="decider")).get(0, 0)

    async def commands(self) -> list[CommandRecord]:
        return [r for batch in [b async for b in self.log.read("commands")] for r in batch
                if isinstance(r, CommandRecord)]


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[SqliteLog]:
    opened = await SqliteLog.open(tmp_path / "tether.db")
    yield opened
    await opened.close()


async def test_batches_that_produce_nothing_commit_their_position_with_the_next_commands(log: SqliteLog) -> None:
    decider = await Decider(log, position_delay=NEVER).start()
    try:
        await log.append("events", [cluster("c1")])
        await decider.decided(1)
        await log.append("events", [cluster("c2")])
        await decider.decided(2)
        assert await decider.position() == 0  # decided, nothing produced, not committed on its own

        stored = await log.append("events", [claim("x")])
        await decider.decided(3)
        await eventually(lambda: decider.commands(), "the claim's commands")
        assert await decider.position() == stored[0].offset  # one commit: the commands and the whole position
        assert {r.causation for r in await decider.commands()} == {f"0:{stored[0].offset}"}
    finally:
        await decider.crash()


async def test_a_position_that_produced_nothing_is_committed_a_moment_later_or_on_the_way_out(
    log: SqliteLog,
) -> None:
    soon = await Decider(log, position_delay=0.01).start()
    try:
        await log.append("events", [cluster("c1"), cluster("c2")])
        await eventually(lambda: _at(soon, 2), "the position committed by itself")
    finally:
        await soon.crash()

    later = await Decider(log, position_delay=NEVER).start()
    try:
        await log.append("events", [cluster("c3")])
        await later.decided(1)
        assert await later.position() == 2
        await later.loops.save_position()  # what the daemon does on its way out
        assert await later.position() == 3
    finally:
        await later.crash()


async def test_after_a_crash_the_uncommitted_events_are_decided_again_and_produce_nothing_new(
    log: SqliteLog,
) -> None:
    first = await Decider(log, position_delay=NEVER).start()
    await log.append("events", [claim("x")])
    await eventually(lambda: _at(first, 1), "the claim decided")
    await log.append("events", [cluster("c1"), cluster("c2")])
    await first.decided(3)
    before = await first.commands()
    world = encode_world(first.loops.world)
    await first.crash()
    assert await first.position() == 1  # the crash lost the position past the two clusters

    again = await Decider(log, position_delay=0.01).start()
    try:
        await eventually(lambda: _at(again, 3), "the position past the events decided again")
        assert await again.commands() == before  # nothing new: they produced nothing the first time either
        assert encode_world(again.loops.world) == world  # the same world, not one folded twice
    finally:
        await again.crash()


async def test_a_snapshot_is_only_saved_at_a_committed_position(log: SqliteLog) -> None:
    decider = await Decider(log, position_delay=NEVER, snapshot_every=2).start()
    try:
        await log.append("events", [cluster("c1")])
        await decider.decided(1)
        await log.append("events", [cluster("c2")])
        await decider.decided(2)
        snapshot = await eventually(lambda: log.load_snapshot("world"), "the snapshot")
        assert snapshot.position == {0: 2} and await decider.position() == 2
    finally:
        await decider.crash()

    restarted = await Decider(log, position_delay=NEVER).start()  # from the snapshot: nothing to fold twice
    try:
        await log.append("events", [claim("x")])
        await eventually(lambda: _at(restarted, 3), "the claim decided after the restart")
        assert len(restarted.loops.world.clusters) == 2
    finally:
        await restarted.crash()


async def _at(decider: Decider, offset: int) -> bool:
    return await decider.position() >= offset


async def test_recovery_reports_its_progress_as_it_folds_the_committed_events(log: SqliteLog) -> None:
    await log.append("events", [cluster(f"m{i}") for i in range(600)])
    await log.commit(Batch(stream="events", records=[], position={0: 550}), consumer="decider")
    loops = Loops(log, executors=[])
    reports: list[tuple[int, int]] = []
    await loops.recover(progress=lambda done, total: reports.append((done, total)))
    assert reports == [(256, 550), (512, 550), (550, 550)]  # one per chunk read, up to the committed position
    assert sorted(loops.world.clusters) == sorted(f"m{i}" for i in range(550))
