"""A clock that moves only when a test says so, for code that takes ``clock`` and ``sleep`` keyword arguments.

Leader election (``adapters/kubernetes/leader.py``) waits whole retry periods and judges a Lease by lease
durations of seconds. Run on real time, a test either waits those seconds or shrinks them below what the API's
integer ``leaseDurationSeconds`` can say — and on a loaded 2-core runner a 0.7 s deadline passes by accident. On a
:class:`ManualClock` the test moves time itself: ``sleep`` parks the caller until :meth:`ManualClock.advance`
has moved the clock past its deadline, and :meth:`ManualClock.settle` waits until every loop driven by the clock
is parked again (it has done whatever the advance allowed and is waiting for the next one). Time never passes by
itself, so "nothing happened for three retry periods" is a statement about three finished loop turns, not about
a sleep that was long enough.

``now`` starts at the wall clock by default: times written into the API (a Lease's renewTime) look current to
anyone else reading them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Protocol


class ManualClock:
    """``time()`` for a ``clock`` argument, ``sleep()`` for a ``sleep`` argument; :meth:`advance` moves both."""

    def __init__(self, start: float | None = None) -> None:
        self.now = time.time() if start is None else start
        self._sleepers: list[tuple[float, asyncio.Future[None]]] = []

    def time(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        if seconds <= 0:
            await asyncio.sleep(0)
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        entry = (self.now + seconds, future)
        self._sleepers.append(entry)
        try:
            await future
        finally:
            if entry in self._sleepers:  # (cancelled while parked)
                self._sleepers.remove(entry)

    @property
    def sleeping(self) -> int:
        """How many callers are parked in :meth:`sleep`."""
        return sum(1 for _, future in self._sleepers if not future.done())

    def advance(self, seconds: float) -> None:
        """Move the clock forward and wake every sleeper whose deadline has come."""
        self.now += seconds
        due = [entry for entry in self._sleepers if entry[0] <= self.now]
        for entry in due:
            self._sleepers.remove(entry)
            if not entry[1].done():
                entry[1].set_result(None)

    async def settle(self, sleepers: int, *, within: float = 10.0) -> None:
        """Until ``sleepers`` callers are parked again (each has finished what the last advance let it do). Only
        the event loop's progress is waited for, never the clock: time stands still meanwhile."""
        deadline = time.monotonic() + within
        while self.sleeping < sleepers:
            if time.monotonic() > deadline:
                raise AssertionError(f"{self.sleeping} of {sleepers} loops parked on the manual clock after {within}s")
            await asyncio.sleep(0.005)


class Attempting(Protocol):
    """What :func:`next_attempt` watches: a loop that counts its attempts (``LeaderElector``)."""

    attempts: int


async def next_attempt(clock: ManualClock, loops: Sequence[Attempting], *, seconds: float,
                       parked: int | None = None, within: float = 10.0) -> None:
    """Advance ``clock`` by ``seconds`` (one retry period) and wait until each of ``loops`` has finished one more
    attempt and ``parked`` loops (default: all of them) are parked again — the loop turns the advance allowed,
    and nothing more, have happened."""
    before = [loop.attempts for loop in loops]
    clock.advance(seconds)
    deadline = time.monotonic() + within
    while any(loop.attempts == n for loop, n in zip(loops, before, strict=True)):
        if time.monotonic() > deadline:
            raise AssertionError(f"no new attempt {within}s after advancing the manual clock by {seconds}s")
        await asyncio.sleep(0.005)
    await clock.settle(len(loops) if parked is None else parked, within=within)
