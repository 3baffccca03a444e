"""Timers as events: the adapter that turns :class:`StartTimer` commands into :class:`TimerFired` events.

The deciders never read a clock; when they need to act later (retry a lookup, retry a failed write) they
emit ``StartTimer(fire_at_ms=...)`` with a due time computed from the event time. This service keeps the armed
timers in a heap, sleeps until the earliest is due (woken early when an earlier one is armed — no polling),
and appends ``TimerFired``. Timers are not persisted here: the world keeps every started, unfired timer
(``World.timers``), and the runtime re-arms them all after a restart. A timer fired twice is ignored by the
projection, so arming one twice is harmless.
"""

from __future__ import annotations

import asyncio
import contextlib
import heapq
import random
import time

from tether.adapters.log import EventLog
from tether.core.commands import StartTimer
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import CommandSucceeded, Event, TimerFired


class TimerService:
    def __init__(self, log: EventLog, *, jitter: float = 0.1) -> None:
        self.log = log
        self.jitter = jitter  # spreads retries of many objects failing at once; decisions are unaffected
        self._heap: list[tuple[float, str, StartTimer]] = []
        self._armed: set[str] = set()
        self._wake = asyncio.Event()
        self.fired = 0

    def handles(self, command: object) -> bool:
        return isinstance(command, StartTimer)

    def arm(self, timer: StartTimer) -> None:
        if timer.timer_id in self._armed:
            return
        self._armed.add(timer.timer_id)
        due = timer.fire_at_ms / 1000.0
        delay = max(0.0, due - time.time())
        due += delay * self.jitter * random.random()
        heapq.heappush(self._heap, (due, timer.timer_id, timer))
        self._wake.set()

    async def apply(self, record: CommandRecord) -> list[Event]:
        assert isinstance(record.command, StartTimer)
        self.arm(record.command)
        return [CommandSucceeded(command_id=record.id, command="start_timer", target=record.key, noop=False)]

    @property
    def pending(self) -> int:
        return len(self._heap)

    async def run(self) -> None:
        while True:
            self._wake.clear()
            if not self._heap:
                await self._wake.wait()
                continue
            due, timer_id, timer = self._heap[0]
            delay = due - time.time()
            if delay > 0:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._wake.wait(), timeout=delay)
                continue
            heapq.heappop(self._heap)
            self._armed.discard(timer_id)
            event = TimerFired(timer_id=timer.timer_id, purpose=timer.purpose, subject=timer.subject)
            await self.log.append("events", [EventRecord(at_ms=int(time.time() * 1000), source="timer",
                                                         key=timer.subject, event=event)])
            self.fired += 1
