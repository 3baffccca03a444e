"""The daemon's engine: the decider loop, the executor loop and their recovery, over any :class:`EventLog`.

::

    sources ──append──▶ events ──decider loop (step)──▶ commands ──executor loop──▶ outcome events ─┐
       ▲                   ▲                                                                         │
       └── Kubernetes,     └─────────────────────────────────────────────────────────────────────────┘
           catalog poller, push endpoint, timers

**Decider loop.** Consumes the events stream as consumer ``decider``; for each batch, folds every record into
the world with :func:`tether.core.pipeline.step` and commits the resulting commands together with the new
position (one transaction on SQLite). A snapshot of the world is saved every ``snapshot_every`` events with
the position it covers.

**Recovery.** On start the world is loaded from the latest snapshot and the events between the snapshot and the
decider's committed position are folded again *with* ``step`` — so in-flight bookkeeping is rebuilt exactly —
but the commands it yields are dropped: they were committed before the crash. Then the loop resumes after the
committed position. Timers the world still holds are re-armed.

**Executor loop.** Consumes the commands stream as consumer ``executor``. Within a batch, commands for different
objects run concurrently (bounded), commands for the same object in order; a command superseded by a later
one for the same object and purpose in the same batch is skipped (reported as a no-op: the later one carries
the newer desired state). The outcome events are committed with the executor's position.

Both loops are at-least-once: a crash between an effect and its commit repeats the effect, which the
executors' read-compare-write discipline makes harmless.
"""

from __future__ import annotations

import asyncio
import time
from collections import defaultdict
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import structlog

from tether.adapters.log import Batch, EventLog, Snapshot
from tether.adapters.metrics import Metrics
from tether.adapters.timers import TimerService
from tether.core.commands import Command, LookupDataLocation, StartTimer, command_name
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import (
    CommandFailed,
    CommandSucceeded,
    DataLocationLookupFailed,
    DataLocationResolved,
    DataSourceNotInCatalog,
    Event,
    event_key,
)
from tether.core.pipeline import step
from tether.projections.snapshot import decode_world, encode_world
from tether.projections.world import Settings, World, initial_world, slot

log = structlog.get_logger("tether.runtime")

SNAPSHOT_NAME = "world"


class Executor(Protocol):
    def handles(self, command: Command) -> bool: ...

    async def apply(self, record: CommandRecord) -> list[Event]: ...


class CatalogExecutor:
    """Serves :class:`LookupDataLocation` with a resolver set (``adapters.iceberg_rest.ResolverSet``)."""

    def __init__(self, resolvers: Any, *, metrics: Metrics | None = None) -> None:
        self.resolvers = resolvers
        self.metrics = metrics

    def handles(self, command: Command) -> bool:
        return isinstance(command, LookupDataLocation)

    async def apply(self, record: CommandRecord) -> list[Event]:
        command = record.command
        assert isinstance(command, LookupDataLocation)
        outcome = await self.resolvers.resolve(command.identity, trigger="lookup")
        if self.metrics is not None:
            kind = {DataLocationResolved: "resolved", DataSourceNotInCatalog: "not-found",
                    DataLocationLookupFailed: "failed"}.get(type(outcome), "other")
            self.metrics.lookups.labels(command.identity.system, kind).inc()
        return [outcome]


def _now_ms() -> int:
    return int(time.time() * 1000)


class Runtime:
    """Runs the decider and executor loops of one tether process."""

    def __init__(
        self, log_: EventLog, *, executors: Sequence[Executor], timers: TimerService | None = None,
        settings: Settings | None = None, metrics: Metrics | None = None, snapshot_every: int = 50_000,
        concurrency: int = 32, batch_size: int = 512,
        on_world_changed: Callable[[World], None] | None = None,
    ) -> None:
        self.log = log_
        self.executors = list(executors)
        self.timers = timers
        if timers is not None:
            self.executors.append(timers)
        self.settings = settings or Settings()
        self.metrics = metrics or Metrics()
        self.snapshot_every = snapshot_every
        self.concurrency = concurrency
        self.batch_size = batch_size
        self.on_world_changed = on_world_changed
        self.world: World = initial_world(self.settings)
        self.recovered = asyncio.Event()
        self.decided_events = 0
        self.applied_commands = 0
        self._since_snapshot = 0
        self._rate_window: list[tuple[float, int]] = []

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
            async for records in self.log.read("events", after=after, until_offset=until):
                for record in records:
                    assert isinstance(record, EventRecord)
                    step(self.world, record)  # rebuilds in-flight bookkeeping; its commands were committed
                done += len(records)
                if progress is not None:
                    progress(done, total)
        if self.timers is not None:
            for timer_id, timer in sorted(self.world.timers.items()):
                self.timers.arm(StartTimer(timer_id=timer_id, fire_at_ms=timer.fire_at_ms, purpose=timer.purpose,
                                           subject=timer.subject))
        if self.on_world_changed is not None:
            self.on_world_changed(self.world)
        self.recovered.set()
        log.info("world recovered", snapshot=snapshot is not None, **self.world.summary())

    # --- decider -----------------------------------------------------------------------------------------

    async def decide_batch(self, batch: Batch) -> list[CommandRecord]:
        produced: list[CommandRecord] = []
        plugins = self.world.plugins
        for record in batch.records:
            assert isinstance(record, EventRecord)
            produced.extend(step(self.world, record))
            self.metrics.events.labels(type(record.event).__name__).inc()
        await self.log.commit(batch, consumer="decider", produced=produced, to="commands")
        now = time.time()
        for record in batch.records:
            self.metrics.decision_latency.observe(max(0.0, now - record.at_ms / 1000))
        for c in produced:
            self.metrics.commands.labels(command_name(c.command)).inc()
        self.decided_events += len(batch.records)
        self._rate_window.append((now, len(batch.records)))
        while self._rate_window and now - self._rate_window[0][0] > 10:
            self._rate_window.pop(0)
        span = max(1.0, now - self._rate_window[0][0]) if self._rate_window else 1.0
        self.metrics.events_per_second.set(sum(n for _, n in self._rate_window) / span)
        if self.world.plugins is not plugins and self.on_world_changed is not None:
            self.on_world_changed(self.world)
        self._since_snapshot += len(batch.records)
        if self._since_snapshot >= self.snapshot_every:
            await self.save_snapshot(batch.position)
        return produced

    async def save_snapshot(self, position: dict[int, int]) -> None:
        await self.log.save_snapshot(Snapshot(name=SNAPSHOT_NAME, position=dict(position),
                                              state=encode_world(self.world), at_ms=_now_ms()))
        self._since_snapshot = 0

    async def decide_loop(self) -> None:
        await self.recovered.wait()
        folded = dict(await self.log.position("events", consumer="decider"))
        async for batch in self.log.consume("events", consumer="decider", batch_size=self.batch_size):
            first = batch.records[0] if batch.records else None
            if first is not None and first.offset != folded.get(first.partition, 0) + 1:
                # not where this world stopped: another replica decided in between (a Kafka partition that moved
                # here from a replica that died). Rebuild the world up to the committed position first.
                log.info("decider position moved; recovering", expected=folded.get(first.partition, 0) + 1,
                         got=first.offset)
                self.world = initial_world(self.settings)
                self.recovered.clear()
                await self.recover()
            await self.decide_batch(batch)
            folded.update(batch.position)

    # --- executors ---------------------------------------------------------------------------------------

    def executor_for(self, command: Command) -> Executor | None:
        for executor in self.executors:
            if executor.handles(command):
                return executor
        return None

    async def _apply(self, record: CommandRecord) -> list[Event]:
        executor = self.executor_for(record.command)
        name = command_name(record.command)
        if executor is None:
            return [CommandFailed(command_id=record.id, command=name, target=record.key, reason="NoExecutor",
                                  message=f"no executor handles {type(record.command).__name__}", retryable=False)]
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
        for e in events:
            outcome = ("noop" if e.noop else "ok") if isinstance(e, CommandSucceeded) else (
                "failed" if isinstance(e, CommandFailed) else "answered")
            self.metrics.outcomes.labels(name, outcome).inc()
        return events

    async def execute_batch(self, batch: Batch) -> list[EventRecord]:
        records = [r for r in batch.records if isinstance(r, CommandRecord)]
        last_of_slot: dict[str, int] = {}
        for i, r in enumerate(records):
            last_of_slot[slot(command_name(r.command), r.key)] = i
        by_key: dict[str, list[tuple[int, CommandRecord]]] = defaultdict(list)
        for i, r in enumerate(records):
            by_key[r.key].append((i, r))
        results: dict[int, list[Event]] = {}
        limiter = asyncio.Semaphore(self.concurrency)

        async def run_key(items: list[tuple[int, CommandRecord]]) -> None:
            async with limiter:
                for i, r in items:
                    name = command_name(r.command)
                    if last_of_slot[slot(name, r.key)] != i and not isinstance(r.command, StartTimer):
                        results[i] = [CommandSucceeded(command_id=r.id, command=name, target=r.key, noop=True)]
                        continue
                    results[i] = await self._apply(r)

        await asyncio.gather(*(run_key(items) for items in by_key.values()))
        now = _now_ms()
        produced = [
            EventRecord(at_ms=now, source="executor", key=event_key(e), event=e, causation=records[i].id)
            for i in range(len(records)) for e in results[i]
        ]
        await self.log.commit(batch, consumer="executor", produced=produced, to="events")
        self.applied_commands += len(records)
        return produced

    async def execute_loop(self) -> None:
        async for batch in self.log.consume("commands", consumer="executor", batch_size=self.batch_size):
            await self.execute_batch(batch)

    # --- running -----------------------------------------------------------------------------------------

    async def run(self, *extra: Awaitable[Any]) -> None:
        """Recover, then run both loops (and the timers, and ``extra`` coroutines) until cancelled."""
        await self.recover()
        tasks = [self.decide_loop(), self.execute_loop(), *extra]
        if self.timers is not None:
            tasks.append(self.timers.run())
        await asyncio.gather(*tasks)

    async def wait_idle(self, *, within: float = 10.0, quiet: float = 0.05) -> None:
        """Wait until both loops have consumed everything in the log (for tests and the demo)."""
        deadline = time.monotonic() + within
        while time.monotonic() < deadline:
            events_end = (await self.log.end("events")).get(0, 0)
            commands_end = (await self.log.end("commands")).get(0, 0)
            decided = (await self.log.position("events", consumer="decider")).get(0, 0)
            executed = (await self.log.position("commands", consumer="executor")).get(0, 0)
            if decided >= events_end and executed >= commands_end:
                await asyncio.sleep(quiet)
                if (await self.log.end("events")).get(0, 0) == events_end:
                    return
            await asyncio.sleep(0.01)
        raise TimeoutError("the pipeline did not become idle")
