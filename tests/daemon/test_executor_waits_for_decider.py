"""A catalog lookup is applied only once this process's decider has folded the event that caused it (loops.py,
"Executor loop", ``follows_world``).

The situation of a Kafka takeover, played on a SQLite log: the commands stream holds a lookup whose cause lies past
the decider's committed position (on Kafka a command is acknowledged before the decider's offset is committed, so
a leader killed in between leaves exactly that). The new process recovers to the committed position — a world
without the plugin configuration, so catalog resolvers without the plugin — and its executor reads the lookup at
once. Applied then, it failed "no plugin configured" (not retryable: the claim stuck, the Kafka chaos run never
converged, seed 752519935). It must wait for the decider instead, which the test holds until it has seen the wait.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

from tether.adapters.daemon.loops import Loops
from tether.adapters.log import Batch
from tether.adapters.log.sqlite import SqliteLog
from tether.core.commands import Command, LookupDataLocation, command_id, command_target
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import Event, TimerFired, event_key
from tether.core.identity import DataIdentity

EVENTS = 5


class HeldDecider:
    """The log, with the decider's stream held back until ``release`` is set."""

    def __init__(self, inner: SqliteLog) -> None:
        self.inner = inner
        self.release = asyncio.Event()

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def consume(self, stream: Any, **kwargs: Any) -> AsyncIterator[Batch]:
        if stream == "events":
            await self.release.wait()
        async for batch in self.inner.consume(stream, **kwargs):
            yield batch


class Lookups:
    """Applies lookups, noting how far the decider had folded when each was applied."""

    def __init__(self) -> None:
        self.loops: Loops | None = None
        self.folded_at_apply: list[int] = []
        self.applied = asyncio.Event()

    def handles(self, command: Command) -> bool:
        return isinstance(command, LookupDataLocation)

    async def apply(self, record: CommandRecord) -> list[Event]:
        assert self.loops is not None
        self.folded_at_apply.append(self.loops.folded.get(0, 0))
        self.applied.set()
        return []


async def test_a_lookup_decided_past_the_committed_position_waits_for_the_decider(tmp_path: Path) -> None:
    log = await SqliteLog.open(tmp_path / "tether.db")
    try:
        fired = [TimerFired(timer_id=f"t{i}", purpose="test", subject="Obj/ns/o") for i in range(EVENTS)]
        await log.append("events", [EventRecord(at_ms=i, source="test", key=event_key(event), event=event)
                                    for i, event in enumerate(fired)])  # (decided, they produce nothing)
        lookup = LookupDataLocation(identity=DataIdentity(system="amoro", type="table", name="db.t"))
        await log.append("commands", [CommandRecord(id=command_id(lookup), at_ms=EVENTS, key=command_target(lookup),
                                                    command=lookup, causation=f"0:{EVENTS}")])  # the last event
        held = HeldDecider(log)
        lookups = Lookups()
        loops = lookups.loops = Loops(held, executors=[lookups])  # type: ignore[arg-type]
        running = asyncio.create_task(loops.run())
        try:
            either = [asyncio.ensure_future(loops.executor_waited.wait()),
                      asyncio.ensure_future(lookups.applied.wait())]
            await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED, timeout=30)
            for waiter in either:
                waiter.cancel()
            assert not lookups.applied.is_set(), "the lookup was applied before the decider folded its cause"
            assert loops.executor_waited.is_set() and loops.waiting_for_decider == 1

            held.release.set()  # the decider folds the events: the lookup goes
            await asyncio.wait_for(lookups.applied.wait(), 30)
            assert lookups.folded_at_apply == [EVENTS] and loops.waiting_for_decider == 0
        finally:
            running.cancel()
            await asyncio.gather(running, return_exceptions=True)
    finally:
        await log.close()


async def test_coroutines_handed_to_a_run_stopped_during_recovery_are_closed(tmp_path: Path) -> None:
    """The daemon hands its watches and reporters to ``Loops.run`` as coroutines; stopped while it recovers,
    the run closes them (no "coroutine ... was never awaited" on shutdown)."""
    log = await SqliteLog.open(tmp_path / "tether.db")
    try:
        loops = Loops(log, executors=[])
        recovering = asyncio.Event()

        async def slow_recover(**_: Any) -> None:
            recovering.set()
            await asyncio.sleep(3600)

        loops.recover = slow_recover  # type: ignore[method-assign]

        async def watch() -> None:
            raise AssertionError("never started")

        handed = watch()
        running = asyncio.create_task(loops.run(handed))
        await asyncio.wait_for(recovering.wait(), 10)
        running.cancel()
        await asyncio.gather(running, return_exceptions=True)
        assert inspect.getcoroutinestate(handed) == inspect.CORO_CLOSED
    finally:
        await log.close()
