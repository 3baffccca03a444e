"""The daemon's engine: the decider loop, the executor loop and their recovery, over any :class:`EventLog`.

::

    sources ──append──▶ events ──decider loop (step)──▶ commands ──executor loop──▶ outcome events ─┐
       ▲                   ▲                                                                         │
       └── Kubernetes,     └─────────────────────────────────────────────────────────────────────────┘
           catalog poller, push endpoint, timers

**Decider loop.** Consumes the events stream as consumer ``decider``; for each batch, folds every record into
the world with :func:`tether.projections.step.step` and commits the resulting commands together with the new
position (one transaction on SQLite). Most batches produce no command (the watch echo of tether's own writes,
outcomes): their position is not committed on its own at once but with the next batch that produces commands,
or by itself ``position_delay`` seconds later if none comes — a log transaction saved on most events, and the
decider reads on without waiting for it. That is safe because such a batch has nothing to lose: after a crash
before its position was committed, the events are decided again by the same deterministic ``step`` on the same
world, and produce nothing again. A snapshot of the world is saved every ``snapshot_every`` events with the
position it covers, always after that position was committed (so recovery never folds an event twice).

**Recovery.** On start the world is loaded from the latest snapshot and the events between the snapshot and the
decider's committed position are folded again *with* ``step`` — so in-flight bookkeeping is rebuilt exactly —
but the commands it yields are dropped: they were committed before the crash. Then the loop resumes after the
committed position. Timers the world still holds are re-armed.

**Executor loop** (``executor_loop.py``, its module doc: the scheduling path first, bookkeeping deferred and
coalesced, superseded commands skipped, the low-water position). Consumes the commands stream as consumer
``executor``, pipelined; each command is applied by the first of ``executors`` that handles it (:meth:`Loops.apply`).

Both loops are at-least-once: a crash between an effect and its commit repeats the effect, which the
executors' read-compare-write discipline makes harmless.

**Decision log.** Each command's outcome is also one line in the process's own log (``decision_log.py``): at info
when it changed the world, with the causing event's offset, the command id and the object key; the decider loop
adds a debug line per command decided. Recovery folds with ``step`` and logs nothing: its commands were logged
when they ran.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections import deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import structlog

from tether.adapters.daemon.decision_log import DecisionLog
from tether.adapters.daemon.executor_loop import BOOKKEEPING_LULL, ExecutorLoop, bookkeeping
from tether.adapters.daemon.metrics import Metrics
from tether.adapters.daemon.recent import Recent
from tether.adapters.daemon.timers import TimerService
from tether.adapters.log import Batch, EventLog, Snapshot, aclosing_iter, scan
from tether.core.commands import (
    Command,
    EvictBinding,
    LookupDataLocation,
    SetBindingPlacement,
    StartTimer,
    command_name,
)
from tether.core.envelope import CommandRecord, EventRecord, cause_position
from tether.core.events import (
    CommandFailed,
    CommandSucceeded,
    Event,
    TimerFired,
)
from tether.core.world import Settings, World, initial_world
from tether.core.world.admission_state import CYCLE_PURPOSE as ADMISSION_CYCLE
from tether.projections.snapshot import decode_world, encode_world
from tether.projections.step import step

log = structlog.get_logger("tether.loops")

SNAPSHOT_NAME = "world"

class Executor(Protocol):
    def handles(self, command: Command) -> bool: ...

    async def apply(self, record: CommandRecord) -> list[Event]: ...


def _now_ms() -> int:
    return int(time.time() * 1000)


class Loops:
    """Runs the decider and executor loops of one tether process."""

    def __init__(
        self, log_: EventLog, *, executors: Sequence[Executor], timers: TimerService | None = None,
        settings: Settings | None = None, metrics: Metrics | None = None, snapshot_every: int = 50_000,
        concurrency: int = 32, batch_size: int = 512, max_pending: int = 4096,
        first: tuple[type[Command], ...] = (SetBindingPlacement, LookupDataLocation),
        hold_for: tuple[type[Command], ...] = (SetBindingPlacement,),
        on_world_changed: Callable[[World], None] | None = None, position_delay: float = 0.05,
        decision_log: DecisionLog | None = None, follows_world: tuple[type[Command], ...] = (LookupDataLocation,),
        defer: dict[type[Command], float] | None = None, bookkeeping_concurrency: int = 16,
        bookkeeping_patience: float = 5.0, bookkeeping_lull: float = BOOKKEEPING_LULL,
    ) -> None:
        self.log = log_
        self.decisions = decision_log or DecisionLog()
        self.executors = list(executors)
        self.timers = timers
        if timers is not None:
            self.executors.append(timers)
        self.settings = settings or Settings()
        self.metrics = metrics or Metrics()
        self.snapshot_every = snapshot_every
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.max_pending = max_pending
        self.first = first
        self.hold_for = hold_for
        self.on_world_changed = on_world_changed
        self.position_delay = position_delay
        self.follows_world = follows_world
        self.defer = bookkeeping() if defer is None else defer
        self.bookkeeping_concurrency = bookkeeping_concurrency
        self.bookkeeping_patience = bookkeeping_patience
        self.bookkeeping_lull = bookkeeping_lull
        self.world: World = initial_world(self.settings)
        self.folded: dict[int, int] = {}  # the events position the world covers (recovered, then decided)
        self._folded_moved = asyncio.Event()  # set (and replaced) whenever ``folded`` moves
        self.waiting_for_decider = 0  # commands of ``follows_world`` waiting for their cause to be folded
        self.executor_waited = asyncio.Event()  # set the first time one waited (for tests)
        self.recent = Recent()  # the last decisions and errors, for GET /status (adapters/daemon/recent.py)
        self.recovered = asyncio.Event()
        self.decided_events = 0
        self.applied_commands = 0
        self._since_snapshot = 0
        self._rate_window: deque[tuple[float, int]] = deque()  # (time, events) of the batches of the last 10 s
        self._rate_sum = 0  # the events in _rate_window
        self._unsaved: dict[int, int] = {}  # the decider's position past batches that produced nothing, uncommitted
        self._commit_lock = asyncio.Lock()  # the decider's commits, in order
        self._position_saver: asyncio.Task[None] | None = None

    # --- recovery ----------------------------------------------------------------------------------------

    async def recover(self, *, progress: Callable[[int, int], None] | None = None) -> None:
        """Rebuild the world up to the decider's committed position (snapshot + tail, commands dropped)."""
        snapshot = await self.log.load_snapshot(SNAPSHOT_NAME)
        after: dict[int, int] | None = None
        world = decode_world(snapshot.state) if snapshot is not None else None
        if world is not None and snapshot is not None:
            self.world = world
            after = snapshot.position
        committed = await self.log.position("events", consumer="decider")
        until = committed.get(0)
        if until is not None and (after is None or after.get(0, -1) < until):
            done = 0
            total = until - (after or {}).get(0, 0)
            async with aclosing_iter(scan(self.log, "events", after=after, until_offset=until)) as chunks:
                async for chunk in chunks:
                    for record in chunk:
                        assert isinstance(record, EventRecord)
                        step(self.world, record)  # rebuilds in-flight bookkeeping; its commands were committed
                    done += chunk.rows
                    if progress is not None:
                        progress(done, total)
        if self.timers is not None:
            for timer_id, timer in sorted(self.world.timers.items()):
                self.timers.arm(StartTimer(timer_id=timer_id, fire_at_ms=timer.fire_at_ms, purpose=timer.purpose,
                                           subject=timer.subject))
        if self.on_world_changed is not None:
            self.on_world_changed(self.world)
        self.recovered.set()
        self._set_folded(dict(committed) if committed else dict(after or {}), replace=True)
        log.info("world recovered", snapshot=snapshot is not None, **self.world.summary())

    # --- decider -----------------------------------------------------------------------------------------

    async def decide_batch(self, batch: Batch) -> list[CommandRecord]:
        produced: list[CommandRecord] = []
        plugins = self.world.plugins
        for record in batch.records:
            assert isinstance(record, EventRecord)
            event = record.event
            if type(event) is TimerFired and event.purpose == ADMISSION_CYCLE:  # timed: the admission cycle's step
                began = time.perf_counter()
                produced.extend(step(self.world, record))
                self.metrics.admission_cycle.observe(time.perf_counter() - began)
            else:
                produced.extend(step(self.world, record))
            self.metrics.events.labels(type(event).__name__).inc()
        self._since_snapshot += len(batch.records)
        snapshot_due = self._since_snapshot >= self.snapshot_every
        if produced or snapshot_due:
            if self._unsaved:  # this commit's position covers the batches before it that produced nothing
                batch = Batch(stream=batch.stream, records=batch.records, position={**self._unsaved, **batch.position})
                self._unsaved = {}
            async with self._commit_lock:
                await self.log.commit(batch, consumer="decider", produced=produced, to="commands")
        else:
            self._unsaved.update(batch.position)
            if self._position_saver is None or self._position_saver.done():
                self._position_saver = asyncio.create_task(self._save_position_later(), name="decider-position")
        self.decisions.decided(produced)
        now = time.time()
        for record in batch.records:
            self.metrics.decision_latency.observe(max(0.0, now - record.at_ms / 1000))
        for c in produced:
            self.metrics.commands.labels(command_name(c.command)).inc()
            if type(c.command) is EvictBinding:
                self.metrics.admission_evictions.labels(c.command.queue, c.command.policy).inc()
        self.recent.decided(produced)
        self.decided_events += len(batch.records)
        self._rate_window.append((now, len(batch.records)))
        self._rate_sum += len(batch.records)
        while now - self._rate_window[0][0] > 10:
            self._rate_sum -= self._rate_window.popleft()[1]
        span = max(1.0, now - self._rate_window[0][0])
        self.metrics.events_per_second.set(self._rate_sum / span)
        if self.world.plugins is not plugins and self.on_world_changed is not None:
            self.on_world_changed(self.world)
        if snapshot_due:
            await self.save_snapshot(batch.position)
        return produced

    async def _save_position_later(self) -> None:
        await asyncio.sleep(self.position_delay)
        try:
            await self.save_position()
        except Exception as exc:  # the next commit carries the position anyway (and fails loudly if the log does)
            log.warning("could not commit the decider's position", error=repr(exc)[:200])

    async def save_position(self) -> None:
        """Commit the decider's position past the batches that produced nothing, if it is not yet (module doc,
        "Decider loop"); the daemon calls it on its way out, before its snapshot."""
        saver = self._position_saver
        if saver is not None and saver is not asyncio.current_task() and not saver.done():
            saver.cancel()
        async with self._commit_lock:
            if not self._unsaved:
                return
            position, self._unsaved = self._unsaved, {}
            await self.log.commit(Batch(stream="events", records=[], position=position), consumer="decider")

    async def save_snapshot(self, position: dict[int, int]) -> None:
        await self.log.save_snapshot(Snapshot(name=SNAPSHOT_NAME, position=dict(position),
                                              state=encode_world(self.world), at_ms=_now_ms()))
        self._since_snapshot = 0

    def _set_folded(self, position: dict[int, int], *, replace: bool = False) -> None:
        if replace:
            self.folded = dict(position)
        else:
            self.folded.update(position)
        moved, self._folded_moved = self._folded_moved, asyncio.Event()
        moved.set()

    def has_folded(self, causation: str) -> bool:
        """Whether the world has folded the event ``causation`` names (``partition:offset``, what the decider records
        on a command); True for a causation of another form (``executor_loop.py``: ``follows_world``)."""
        position = cause_position(causation)
        if position is None:
            return True
        return self.recovered.is_set() and self.folded.get(position[0], 0) >= position[1]

    async def folded_through(self, causation: str) -> None:
        """Return once :meth:`has_folded` ``causation``."""
        while not self.has_folded(causation):
            await self._folded_moved.wait()

    async def decide_loop(self) -> None:
        await self.recovered.wait()
        self._set_folded(dict(await self.log.position("events", consumer="decider")), replace=True)
        async for batch in self.log.consume("events", consumer="decider", batch_size=self.batch_size):
            first = batch.records[0] if batch.records else None
            if first is not None and first.offset != self.folded.get(first.partition, 0) + 1:
                # not where this world stopped: another replica decided in between (a Kafka partition that moved
                # here from a replica that died). Rebuild the world up to the committed position first.
                log.info("decider position moved; recovering", expected=self.folded.get(first.partition, 0) + 1,
                         got=first.offset)
                self.world = initial_world(self.settings)
                self.recovered.clear()
                await self.recover()
            await self.decide_batch(batch)
            self._set_folded(batch.position)

    # --- executors ---------------------------------------------------------------------------------------

    def executor_for(self, command: Command) -> Executor | None:
        for executor in self.executors:
            if executor.handles(command):
                return executor
        return None

    async def apply(self, record: CommandRecord) -> list[Event]:
        """Apply one command with the first executor that handles it: its outcome events, logged and counted; an
        executor that raises is reported as a retryable failure."""
        executor = self.executor_for(record.command)
        name = command_name(record.command)
        if executor is None:
            failed: list[Event] = [CommandFailed(
                command_id=record.id, command=name, target=record.key, reason="NoExecutor",
                message=f"no executor handles {type(record.command).__name__}", retryable=False)]
            self.decisions.applied(record, failed)
            return failed
        started = time.perf_counter()
        try:
            events = await executor.apply(record)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # an executor bug must not stop the loop: report it as a retryable failure
            log.exception("executor raised", command=name, command_id=record.id, key=record.key)
            events = [CommandFailed(command_id=record.id, command=name, target=record.key, reason="ExecutorError",
                                    message=repr(exc)[:500], retryable=True)]
        self.metrics.apply_latency.labels(name).observe(time.perf_counter() - started)
        self.recent.applied(record, events, at_ms=_now_ms())
        for e in events:
            outcome = ("noop" if e.noop else "ok") if isinstance(e, CommandSucceeded) else (
                "failed" if isinstance(e, CommandFailed) else "answered")
            self.metrics.outcomes.labels(name, outcome).inc()
        self.decisions.applied(record, events)
        return events

    async def execute_loop(self) -> None:
        """Run the pipelined executor (``executor_loop.py``) until cancelled."""
        await ExecutorLoop(self).run()

    # --- running -----------------------------------------------------------------------------------------

    async def run(self, *extra: Awaitable[Any]) -> None:
        """Recover, then run both loops (and the timers, and ``extra`` coroutines) until cancelled.

        ``extra`` are coroutines already made (the daemon's watches, reporters): when the run ends before they
        are started — stopped, or failed, during recovery — they are closed, not left to the garbage collector's
        "coroutine was never awaited"."""
        try:
            await self.recover()
        except BaseException:
            for coroutine in extra:
                if inspect.iscoroutine(coroutine):
                    coroutine.close()
            raise
        tasks = [self.decide_loop(), self.execute_loop(), *extra]
        if self.timers is not None:
            tasks.append(self.timers.run())
        await asyncio.gather(*tasks)

    async def wait_idle(self, *, within: float = 10.0, quiet: float = 0.05) -> None:
        """Wait until both loops have consumed everything in the log (for tests and the demo).

        ``within`` bounds the time **without progress** — neither loop's position moving on — not the whole wait:
        a daemon with more to read (the lists of a lived-in control plane, a loaded machine) is given the time it
        takes while it moves. A pipeline that stops, or one that never ends (more than ``10 * within`` in all: a
        write loop), still fails, saying where it was."""
        started = time.monotonic()
        deadline = started + within
        seen: tuple[int, ...] = ()
        while True:
            events_end = (await self.log.end("events")).get(0, 0)
            commands_end = (await self.log.end("commands")).get(0, 0)
            decided = (await self.log.position("events", consumer="decider")).get(0, 0)
            executed = (await self.log.position("commands", consumer="executor")).get(0, 0)
            if decided >= events_end and executed >= commands_end:
                await asyncio.sleep(quiet)
                if (await self.log.end("events")).get(0, 0) == events_end:
                    return
            now = time.monotonic()
            if (decided, executed) != seen:
                seen, deadline = (decided, executed), now + within
            if now > deadline or now - started > 10 * within:
                why = f"no progress for {within:g} s" if now > deadline else f"still busy after {10 * within:g} s"
                raise TimeoutError(f"the pipeline did not become idle ({why}): events decided {decided} of "
                                   f"{events_end}, commands executed {executed} of {commands_end}")
            await asyncio.sleep(0.01)
