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

**Executor loop.** Consumes the commands stream as consumer ``executor``, *pipelined* rather than batch by batch:
a command is dispatched as soon as it is read, and its outcome events are appended as soon as it finishes, so a
slow command (a catalog lookup, a write retried after a 409) holds back neither the outcomes of other objects
nor the reading of later commands. Ordering and bounds:

* commands for the same key (object) run one after the other, in log order; different keys run concurrently,
  at most ``concurrency`` commands at a time; reading pauses while ``max_pending`` commands are unfinished;
* the **scheduling path goes first**: among the commands read together, the objects whose next command is one
  of ``first`` (by default ``SetBindingPlacement``, the write that gates a workload's scheduling, and the step of a
  cache miss that the binding waits for, ``LookupDataLocation``) are started first; and while a command of
  ``hold_for`` (by default ``SetBindingPlacement``) is being applied, the other commands (not in ``first``) wait for
  it before they start, so the request that gates scheduling is not served by the API server, nor its answer read,
  behind the DataSource's creation, the claim's and the DataSource's status writes and Events decided with it (a
  miss's binding is placed from the lookup's answer in the decision that creates its DataSource: the creation, on
  the server at the same moment, made a miss's placement two to three times slower than a hit's). A command waits
  only for the ones already running when its turn came, so it is never starved by a stream of later ones; a catalog
  lookup (which may be slow) holds nothing;
* **bookkeeping waits, and coalesces** (``defer``): the writes a user reads but no scheduling waits for — a claim's
  status, a DataSource's ``claimRefs``, a finalizer, an Event, a Queue's status — are not started before a deadline
  set when their object's slot (purpose and object) first got one queued (``bookkeeping_delay`` seconds after, three
  times that for a DataSource's status), nor until the placements pause: no command of ``first`` read and not yet
  started, and none started for ``bookkeeping_lull`` seconds (0.1 s: at 20 claims/s and more, a claim's status waits
  until the stream of placements ends, so the API server, sharing its cores with every controller, serves the
  placements of a burst alone). They yield for ``bookkeeping_patience`` seconds past the deadline at most: then they
  queue for a slot in turn, so a stream of placements that never lets up cannot starve them. At most
  ``bookkeeping_concurrency`` of them run at once. A later command for the same slot keeps that deadline (a stream of
  them cannot postpone the write) and replaces the earlier one (below): a claim's status goes from nothing to Bound in
  one write when its lookup answered meanwhile, and the claims of a table that arrived together are listed in its
  DataSource in one write. The API server every controller shares is written to less, and never serves bookkeeping
  ahead of a placement this process has to make. A deferred command leaves its key's queue for a queue of its slot (so
  that it holds back nothing of its object: a binding's placement never waits behind an Event on it); within a slot,
  commands keep their log order;
* a queued command superseded by a later queued one for the same object and purpose is skipped (recorded as a
  no-op naming the later command, ``superseded_by``, and counted as the outcome ``superseded``: the later one
  carries the newer desired state); ``StartTimer`` commands are never skipped, nor are
  Kubernetes Events (each reports a transition of its own: a later one does not carry an earlier one's news);
* a command applied with state that follows the decider's world (``follows_world``: by default
  ``LookupDataLocation`` — the catalog resolvers are rebuilt from ``world.plugins``) waits until this process's
  decider has folded the event that caused it (its ``causation``). On SQLite that is always so once recovered (the
  decider's position is committed with its commands); on Kafka it is not: commands are acknowledged before the
  decider's offset is committed, so a new leader reads commands its predecessor decided past the position it
  recovers to — and applied at once, a lookup met resolvers that did not know the plugin yet ("no plugin
  configured", not retryable: the claim stuck). The same held, for a moment, for this decider's own commands: the
  resolvers are synced after the batch's commit call returns;
* outcomes are appended in the order their commands finished (so in log order per key), and every outcome
  finished while the previous append ran goes into the next one (group commit: one log transaction each);
* the executor's position is committed with those outcomes (one :meth:`EventLog.commit`: atomic on SQLite,
  produce-then-commit on Kafka) and is, per partition, the **low-water mark** of the commands read: just
  before the oldest one whose outcome is not appended yet. It never passes an unfinished command, so after a
  crash exactly the commands from the oldest unfinished one on are applied again — finished ones after it
  among them, which the executors' read-compare-write makes no-ops.

Both loops are at-least-once: a crash between an effect and its commit repeats the effect, which the
executors' read-compare-write discipline makes harmless.

**Decision log.** Each command's outcome is also one line in the process's own log (``decision_log.py``): at info
when it changed the world, with the causing event's offset, the command id and the object key; the decider loop
adds a debug line per command decided. Recovery folds with ``step`` and logs nothing: its commands were logged
when they ran.
"""

from __future__ import annotations

import asyncio
import contextlib
import inspect
import time
from bisect import bisect_left, insort
from collections import defaultdict, deque
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

import structlog

from tether.adapters.daemon.decision_log import DecisionLog
from tether.adapters.daemon.metrics import Metrics
from tether.adapters.daemon.recent import Recent
from tether.adapters.daemon.timers import TimerService
from tether.adapters.log import Batch, EventLog, Snapshot, aclosing_iter, scan
from tether.core.commands import (
    Command,
    EmitKubernetesEvent,
    EmitMemberEvent,
    EvictBinding,
    LookupDataLocation,
    SetBindingPlacement,
    StartTimer,
    UpdateClaimStatus,
    UpdateDataSourceStatus,
    UpdateQueueStatus,
    command_name,
)
from tether.core.envelope import CommandRecord, EventRecord, cause_position
from tether.core.events import (
    CommandFailed,
    CommandSucceeded,
    Event,
    TimerFired,
    event_key,
)
from tether.core.world import Settings, World, initial_world, slot
from tether.core.world.admission_state import CYCLE_PURPOSE as ADMISSION_CYCLE
from tether.projections.snapshot import decode_world, encode_world
from tether.projections.step import step

log = structlog.get_logger("tether.loops")

SNAPSHOT_NAME = "world"

#: Commands a later one for the same object and purpose never supersedes in the executor's queue (module doc).
NEVER_SUPERSEDED: tuple[type[Command], ...] = (StartTimer, EmitKubernetesEvent, EmitMemberEvent)


#: The default of ``--bookkeeping-delay``: how long a bookkeeping write waits for the next one of its object.
BOOKKEEPING_DELAY = 1.0
#: How long the placements must pause before bookkeeping starts (module doc: "bookkeeping waits, and coalesces").
BOOKKEEPING_LULL = 0.1


def bookkeeping(delay: float = BOOKKEEPING_DELAY) -> dict[type[Command], float]:
    """The commands the executor defers and coalesces, with their delay (module doc): the writes users read that no
    scheduling waits for. A DataSource's ``claimRefs`` wait three times as long: they list every claim of a table,
    so one write carries the claims of a table that arrive up to a few seconds apart too (at 5 claims/s over ten
    tables, two seconds apart), and a user reads the claim first."""
    return {**dict.fromkeys((UpdateClaimStatus, EmitKubernetesEvent, UpdateQueueStatus), delay),
            UpdateDataSourceStatus: 3 * delay}


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
        on a command); True for a causation of another form (module doc, "Executor loop")."""
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

    async def _apply(self, record: CommandRecord) -> list[Event]:
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
        """Run the pipelined executor (module doc) until cancelled."""
        await _ExecutorLoop(self).run()

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


class _ExecutorLoop:
    """The executor loop of one :class:`Loops` (see the module doc, "Executor loop").

    Three kinds of tasks share this object, all on one event loop:

    * the **reader** consumes the commands stream, registers each record as pending at its (partition, offset)
      and appends it to its key's queue, starting a worker for the key if none runs; it stops reading while
      ``max_pending`` commands are pending (back-pressure);
    * one **worker** per key with queued commands applies them one after the other (each holding one of the
      ``concurrency`` slots while it runs) and hands each outcome to the committer in that order;
    * the **committer** appends every outcome handed in since its last write, together with the consumer
      position, in one ``commit`` call: while one write is running the next outcomes pile up and go in the next
      one (group commit), so a write costs one log transaction however many commands finished meanwhile.

    The position committed is, per partition, the low-water mark of the pending commands: just before the
    oldest command whose outcome is not appended yet, or the end of what was read when none is pending.
    """

    def __init__(self, loops: Loops) -> None:
        self.rt = loops
        self.slots = asyncio.Semaphore(loops.concurrency)
        self.queues: dict[str, deque[CommandRecord]] = {}
        self.last_of_slot: dict[str, CommandRecord] = {}  # the latest queued command of each (purpose, object)
        self.pending: dict[int, list[int]] = defaultdict(list)  # partition → offsets read, outcome not appended
        self.read_to: dict[int, int] = {}  # partition → the position after the last batch read
        self.committed: dict[int, int] = {}
        self.outstanding = 0
        self.done: list[tuple[CommandRecord, list[Event]]] = []  # outcomes not yet handed to the log
        self.wake_committer = asyncio.Event()
        self.room = asyncio.Event()
        self.room.set()
        self.tasks: asyncio.TaskGroup | None = None
        self.holding: set[asyncio.Future[None]] = set()  # one per running command of ``hold_for``
        self.deferred: dict[str, deque[CommandRecord]] = {}  # slot → its queued bookkeeping commands (module doc)
        self.deadlines: dict[str, float] = {}  # slot → when its deferred commands may start
        self.bookkeeping = asyncio.Semaphore(loops.bookkeeping_concurrency)
        self.first_waiting = 0  # commands of ``first`` read and not started yet (no slot of ``concurrency``)
        self.lull = asyncio.Event()  # set while no command of ``first`` waits and none started for the lull
        self.lull.set()
        self._lull_timer: asyncio.TimerHandle | None = None

    async def run(self) -> None:
        async with asyncio.TaskGroup() as tasks:
            self.tasks = tasks
            tasks.create_task(self.commit_loop(), name="executor-commit")
            tasks.create_task(self.read_loop(), name="executor-read")

    # --- reading -----------------------------------------------------------------------------------------

    async def read_loop(self) -> None:
        rt = self.rt
        async for batch in rt.log.consume("commands", consumer="executor", batch_size=rt.batch_size):
            idle: list[tuple[str, deque[CommandRecord]]] = []  # keys with no worker yet
            for record in batch.records:
                if not isinstance(record, CommandRecord):
                    continue
                insort(self.pending[record.partition], record.offset)
                self.outstanding += 1
                slot_ = slot(command_name(record.command), record.key)
                self.last_of_slot[slot_] = record
                delay = rt.defer.get(type(record.command))
                if delay is not None:  # bookkeeping: its slot's queue (module doc)
                    self._defer_record(slot_, record, delay)
                    continue
                if isinstance(record.command, rt.first):
                    self._first_read()
                queue = self.queues.get(record.key)
                if queue is None:
                    queue = self.queues[record.key] = deque()
                    idle.append((record.key, queue))
                queue.append(record)
            # workers start (and send their first request) in creation order: the keys whose next command is on
            # the scheduling path go first (sorted stably, and per key nothing changes order)
            idle.sort(key=lambda item: not isinstance(item[1][0].command, rt.first))
            assert self.tasks is not None
            for key, queue in idle:
                work = self.work(key, queue)
                try:
                    self.tasks.create_task(work)
                except RuntimeError:  # the group is shutting down (the daemon stops): the command runs after restart
                    work.close()
                    return
            self.read_to.update(batch.position)
            self.wake_committer.set()  # a batch of only skipped records still moves the position
            if self.outstanding >= rt.max_pending:
                self.room.clear()
                await self.room.wait()

    # --- applying ----------------------------------------------------------------------------------------

    async def _placements_paused(self) -> None:
        while not self.lull.is_set():
            await self.lull.wait()

    def _no_lull(self) -> None:
        self.lull.clear()
        if self._lull_timer is not None:
            self._lull_timer.cancel()
            self._lull_timer = None

    def _first_read(self) -> None:
        self.first_waiting += 1
        self._no_lull()

    def _first_started(self) -> None:
        self.first_waiting -= 1
        self._no_lull()
        if not self.first_waiting:  # the lull begins: bookkeeping may start once it lasted bookkeeping_lull
            self._lull_timer = asyncio.get_running_loop().call_later(self.rt.bookkeeping_lull, self.lull.set)

    def _superseded(self, record: CommandRecord, slot_: str) -> bool:
        """Whether a later command of ``record``'s slot is queued, so that ``record`` is skipped (and reported so);
        forgets the slot's latest when ``record`` is it."""
        latest = self.last_of_slot.get(slot_)
        if latest is record:
            del self.last_of_slot[slot_]
            return False
        if latest is None or isinstance(record.command, NEVER_SUPERSEDED):
            return False
        # a later command for the same object and purpose is queued: it carries the newer desired state
        name = command_name(record.command)
        self.rt.decisions.superseded(record, by=latest)
        self.rt.metrics.outcomes.labels(name, "superseded").inc()
        self.finish(record, [CommandSucceeded(command_id=record.id, command=name, target=record.key, noop=True,
                                              superseded_by=latest.id)])
        return True

    def _defer_record(self, slot_: str, record: CommandRecord, delay: float) -> None:
        """Queue a bookkeeping command on its slot; the slot's deadline is set by the first one queued there."""
        queue = self.deferred.get(slot_)
        if queue is None:
            queue = self.deferred[slot_] = deque()
            self.deadlines[slot_] = time.monotonic() + delay
            assert self.tasks is not None
            work = self.work_deferred(slot_, queue)
            try:
                self.tasks.create_task(work)
            except RuntimeError:  # the group is shutting down: the command runs after restart
                work.close()
        queue.append(record)

    async def work_deferred(self, slot_: str, queue: deque[CommandRecord]) -> None:
        """Apply a slot's bookkeeping commands once its deadline passed and the placements paused, skipping those a
        later one of the slot replaces (module doc)."""
        rt = self.rt
        try:
            if (wait := self.deadlines[slot_] - time.monotonic()) > 0:
                await asyncio.sleep(wait)
            while queue:
                # placements first — until they pause, for ``bookkeeping_patience`` past the deadline at most: a
                # stream of them that never lets up (a burst, a federation of churning clusters) must not starve the
                # status users read
                patience = self.deadlines[slot_] + rt.bookkeeping_patience - time.monotonic()
                if not self.lull.is_set() and patience > 0:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._placements_paused(), patience)
                record = queue.popleft()
                if self._superseded(record, slot_):
                    continue
                if self.holding:
                    await asyncio.wait(set(self.holding))  # the placements running now, not later ones
                async with self.bookkeeping, self.slots:
                    events = await rt._apply(record)
                self.finish(record, events)
        finally:
            if self.deferred.get(slot_) is queue:
                del self.deferred[slot_]
                del self.deadlines[slot_]

    async def work(self, key: str, queue: deque[CommandRecord]) -> None:
        """Apply ``key``'s commands in order until its queue is empty."""
        rt = self.rt
        try:
            while queue:
                record = queue.popleft()
                first = isinstance(record.command, rt.first)
                if self._superseded(record, slot(command_name(record.command), record.key)):
                    if first:
                        self._first_started()
                    continue
                if isinstance(record.command, rt.follows_world):
                    await self._after_its_cause(record)
                if isinstance(record.command, rt.hold_for):
                    events = await self._apply_holding(record)
                else:
                    if self.holding and not first:
                        await asyncio.wait(set(self.holding))  # the ones running now, not later ones
                    async with self.slots:
                        if first:
                            self._first_started()
                        events = await rt._apply(record)
                self.finish(record, events)
        finally:
            if self.queues.get(key) is queue:
                del self.queues[key]

    async def _after_its_cause(self, record: CommandRecord) -> None:
        """Wait until the decider has folded ``record``'s cause (module doc: ``follows_world``)."""
        rt = self.rt
        if rt.has_folded(record.causation):
            return
        rt.waiting_for_decider += 1
        rt.executor_waited.set()
        try:
            await rt.folded_through(record.causation)
        finally:
            rt.waiting_for_decider -= 1

    async def _apply_holding(self, record: CommandRecord) -> list[Event]:
        """Apply a command of ``hold_for``: the other commands starting meanwhile wait until it finished."""
        held: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.holding.add(held)
        try:
            async with self.slots:
                if isinstance(record.command, self.rt.first):
                    self._first_started()
                return await self.rt._apply(record)
        finally:
            self.holding.discard(held)
            held.set_result(None)

    def finish(self, record: CommandRecord, events: list[Event]) -> None:
        self.done.append((record, events))
        self.wake_committer.set()

    # --- committing --------------------------------------------------------------------------------------

    def low_water(self) -> dict[int, int]:
        """Per partition: the position before the oldest pending command, or the end of what was read."""
        position: dict[int, int] = {}
        for partition, end in self.read_to.items():
            offsets = self.pending.get(partition)
            position[partition] = offsets[0] - 1 if offsets else end
        return position

    async def commit_loop(self) -> None:
        rt = self.rt
        while True:
            await self.wake_committer.wait()
            self.wake_committer.clear()
            done, self.done = self.done, []
            for record, _ in done:  # settled once the commit below returns; a crash before it re-applies them
                offsets = self.pending[record.partition]
                del offsets[bisect_left(offsets, record.offset)]
            position = self.low_water()
            moved = {p: o for p, o in position.items() if self.committed.get(p) != o}
            if not done and not moved:
                continue
            now = _now_ms()
            produced = [EventRecord(at_ms=now, source="executor", key=event_key(e), event=e, causation=record.id)
                        for record, events in done for e in events]
            await rt.log.commit(Batch(stream="commands", records=[], position=moved), consumer="executor",
                                produced=produced, to="events")
            self.committed.update(moved)
            rt.applied_commands += len(done)
            self.outstanding -= len(done)
            if self.outstanding < rt.max_pending:
                self.room.set()
