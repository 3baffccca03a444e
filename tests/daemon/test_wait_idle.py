"""``Loops.wait_idle`` waits as long as the pipeline moves, and no longer than it stands still (issue 38 item 7).

Beside thousands of foreign objects on a loaded machine, a test's daemon had more to read than the fixed 10 s of
``wait_idle`` allowed, and the test failed with "the pipeline did not become idle" while the daemon was working.
The bound is now on a time **without progress**: a slow pipeline that keeps moving is waited for; a stuck one still
fails, saying how far it got.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from tether.adapters.daemon.loops import Loops
from tether.adapters.log.sqlite import SqliteLog
from tether.core.commands import Command, StartTimer, command_id, command_target
from tether.core.envelope import CommandRecord
from tether.core.events import CommandSucceeded, Event

COMMANDS = 8


class Slow:
    """Applies each command after ``seconds``, or never while ``stuck`` is clear."""

    def __init__(self, seconds: float, *, stuck: bool = False) -> None:
        self.seconds = seconds
        self.moving = asyncio.Event()
        if not stuck:
            self.moving.set()

    def handles(self, command: Command) -> bool:
        return True

    async def apply(self, record: CommandRecord) -> list[Event]:
        await self.moving.wait()
        await asyncio.sleep(self.seconds)
        return [CommandSucceeded(command_id=record.id, command="start_timer", target=record.key)]


async def commands(log: SqliteLog) -> None:
    timers = [StartTimer(timer_id=f"t{i}", fire_at_ms=0, purpose="p", subject="s") for i in range(COMMANDS)]
    await log.append("commands", [CommandRecord(id=command_id(t), at_ms=0, key=command_target(t) + "-same-key",
                                                command=t, causation="") for t in timers])


async def test_a_slow_pipeline_that_keeps_moving_is_waited_for(tmp_path: Path) -> None:
    log = await SqliteLog.open(tmp_path / "t.db")
    try:
        await commands(log)
        loops = Loops(log, executors=[Slow(0.15)], concurrency=1)
        loop = asyncio.create_task(loops.run())
        try:
            # one key: one command after the other, 8 x 0.15 s — longer in all than `within`, never idle that long
            await loops.wait_idle(within=0.6)
            assert (await log.position("commands", consumer="executor")).get(0) == COMMANDS
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    finally:
        await log.close()


async def test_a_pipeline_that_stands_still_fails_saying_where_it_is(tmp_path: Path) -> None:
    log = await SqliteLog.open(tmp_path / "t.db")
    try:
        await commands(log)
        loops = Loops(log, executors=[Slow(0, stuck=True)], concurrency=1)
        loop = asyncio.create_task(loops.run())
        try:
            with pytest.raises(TimeoutError, match=rf"no progress for 0.3 s\): .*commands executed 0 of {COMMANDS}"):
                await loops.wait_idle(within=0.3)
        finally:
            loop.cancel()
            await asyncio.gather(loop, return_exceptions=True)
    finally:
        await log.close()
