"""The executor loop: commands applied as soon as they are read, the scheduling path first, bookkeeping deferred
and coalesced, over any :class:`~tether.adapters.log.EventLog` (``loops.py`` runs it beside the decider loop).

Consumes the commands stream as consumer ``executor``, *pipelined* rather than batch by batch:
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
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from bisect import bisect_left, insort
from collections import defaultdict, deque
from typing import TYPE_CHECKING

from tether.adapters.log import Batch
from tether.core.commands import (
    Command,
    EmitKubernetesEvent,
    EmitMemberEvent,
    StartTimer,
    UpdateClaimStatus,
    UpdateDataSourceStatus,
    UpdateQueueStatus,
    command_name,
)
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import CommandSucceeded, Event, event_key
from tether.core.world import slot

if TYPE_CHECKING:
    from tether.adapters.daemon.loops import Loops

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


class ExecutorLoop:
    """The executor loop of one :class:`Loops` (module doc).

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
                    events = await rt.apply(record)
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
                        events = await rt.apply(record)
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
                return await self.rt.apply(record)
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
            now = int(time.time() * 1000)
            produced = [EventRecord(at_ms=now, source="executor", key=event_key(e), event=e, causation=record.id)
                        for record, events in done for e in events]
            await rt.log.commit(Batch(stream="commands", records=[], position=moved), consumer="executor",
                                produced=produced, to="events")
            self.committed.update(moved)
            rt.applied_commands += len(done)
            self.outstanding -= len(done)
            if self.outstanding < rt.max_pending:
                self.room.set()
