"""The ordered, pipelined produce queue under :class:`~tether.adapters.log.kafka.KafkaLog`.

Every produce of a log — an awaited ``append``, a dead letter, a snapshot, and the produce-then-commit of
``KafkaLog.commit`` — is one :class:`_Group` in **one queue, in call order**. This module owns that queue: it
hands groups to the producer, awaits their acknowledgements head first, resends after failures, and commits a
consumer's offsets once everything produced up to its ``commit`` call is acknowledged. ``kafka_log.py`` keeps
everything else (topics, consumers, encoding, reading, snapshots) and talks to this module through two seams:
a :class:`BatchProducer` (aiokafka's producer) and an :class:`OffsetCommitter` (its consumer-group commit).

Design, and why
---------------

* **One queue, in call order.** A group is sent only when no earlier group waits to be (re)sent, under a lock, so
  the producer sees the records in the queue's order and records with the same key are consumed in call order.
  The price: a group stuck behind a slow partition holds back every later one (head-of-line blocking) — accepted,
  because the alternative (per-partition queues) would let a later commit's offsets overtake an earlier commit's
  unacknowledged commands.
* **Resend from the first failure, with everything after it.** When a record batch fails, its group is resent from
  the first unacknowledged record on, *together with every later group* (in queue order), after a backoff
  (0.1 s doubling to 2 s). A key's records may then be repeated, but their *last* occurrences are always in
  append order — which is what a folding consumer needs. There is no idempotent producer (absent in some
  brokers), so repeats are the price of never reordering.
* **Pipelined commits.** :meth:`ProduceQueue.commit` enqueues the produced records with the offsets to commit and
  returns once they are handed to the producer: the caller (the decider) steps its next batch while the previous
  batch's commands travel. An acknowledged group that carries offsets goes to a second task, the committer, which
  commits offsets in queue order and merges several pending commits of one consumer into one request (the latest
  position; every record before it is acknowledged, so that is safe). At most ``commit_pipeline`` commits are
  unsettled when ``commit`` returns (it waits for the oldest otherwise) — that, and the producer's own
  backpressure on a partition with an unsent batch, bounds the memory and the re-processing after a crash.
* **A failed commit fails the queue for good.** A produce that cannot be acknowledged within ``append_timeout_s``
  cannot be skipped (the consumer's offsets would then jump past lost commands), so the queue refuses every later
  call with that error, and nothing after it is committed; the process restarts from the committed offsets. An
  awaited produce (no offsets) only fails its own caller. A refused offset commit (a rebalance: ``KafkaError``)
  is logged and dropped — the batch is delivered again, which at-least-once allows.
* **One record batch per partition.** aiokafka's per-message ``send`` allocates a future and a batch lookup per
  record, several times the CPU of building one record batch per partition with ``create_batch``/``send_batch``.
  The partition is the one aiokafka's default partitioner would pick (murmur2 of the key), memoised per key:
  the same key lands on the same partition whichever path produced it.

Offsets here are raw Kafka offsets: a group's ``done`` future resolves to the ``(partition, Kafka offset)`` of
each of its records; ``kafka_log.py`` adds the one that makes tether offsets start at 1.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import random
import struct
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, Protocol

import structlog
from aiokafka.errors import KafkaError, MessageSizeTooLargeError

from tether.adapters.log import Position

log = structlog.get_logger("tether.kafka")

ProduceItem = tuple[bytes | None, bytes, int | None, list[tuple[str, bytes]]]
"""One record to produce: key, value, timestamp (ms; None: the broker's time), headers (a list: aiokafka's C record
builder takes no other sequence; never mutated, so records without headers may share one empty list)."""

Acknowledged = Callable[[str, int, int, Sequence[ProduceItem], Sequence[Any], Sequence[int]], None]
"""Called when the broker acknowledged one record batch: ``(topic, partition, base Kafka offset, the group's items,
the records they were encoded from, the indexes of the batch's items in offset order)`` (see ``records`` of
:meth:`ProduceQueue.produce`)."""

_PARTITION_CACHE_LIMIT = 200_000  # keys; cleared wholesale when full (a miss only costs one murmur2)


def murmur2(data: bytes) -> int:
    """Kafka's murmur2 of ``data`` (what aiokafka's ``DefaultPartitioner`` and the Java client hash keys with), the
    same value as ``aiokafka.partitioner.murmur2`` at 2-2.5 times its speed: the words are unpacked at once and each is
    mixed in three masked multiplications."""
    length = len(data)
    h = 0x9747B28C ^ length
    words = length >> 2
    if words:
        for k in struct.unpack_from(f"<{words}I", data):
            k = (k * 0x5BD1E995) & 0xFFFFFFFF
            k = ((k ^ (k >> 24)) * 0x5BD1E995) & 0xFFFFFFFF
            h = ((h * 0x5BD1E995) & 0xFFFFFFFF) ^ k
    tail = length & 3
    if tail:
        base = length & ~3
        if tail >= 3:
            h ^= data[base + 2] << 16
        if tail >= 2:
            h ^= data[base + 1] << 8
        h = ((h ^ data[base]) * 0x5BD1E995) & 0xFFFFFFFF
    h = ((h ^ (h >> 13)) * 0x5BD1E995) & 0xFFFFFFFF
    return h ^ (h >> 15)


def default_partition(key: bytes, count: int) -> int:
    """The partition of ``key`` among ``count`` that aiokafka's default partitioner (and Java's) picks."""
    return (murmur2(key) & 0x7FFFFFFF) % count


class BatchProducer(Protocol):
    """What the queue needs of a producer (aiokafka's ``AIOKafkaProducer`` is one)."""

    def create_batch(self) -> Any: ...

    async def send_batch(self, batch: Any, topic: str, *, partition: int) -> asyncio.Future[Any]: ...


class OffsetCommitter(Protocol):
    """Commits ``position`` of ``topic`` for the consumer ``client`` (named ``consumer`` in logs). Raising
    ``KafkaError`` means "refused, the records will be delivered again"; any other exception fails the queue."""

    async def __call__(self, client: Any, topic: str, position: Position, consumer: str) -> None: ...


class PendingOffsets(NamedTuple):
    """The offsets a pipelined commit will commit once its records are acknowledged."""

    client: Any  # the consumer client, opaque here; commits of one client and topic merge
    topic: str
    position: Position
    consumer: str


class _Group:
    """One produce call: records for one topic, sent in order, and the offsets to commit once they are all
    acknowledged (a commit). ``done`` resolves to the ``(partition, Kafka offset)`` of every record — for a
    commit, once its offsets are committed too."""

    __slots__ = ("deadline", "done", "first", "items", "offsets", "records", "results", "sent", "topic")

    def __init__(self, topic: str, items: list[ProduceItem], offsets: PendingOffsets | None, deadline: float,
                 records: Sequence[Any] | None = None) -> None:
        self.topic = topic
        self.items = items
        self.records = records  # what the items were encoded from, when the caller wants to hear of their offsets
        self.offsets = offsets
        self.deadline = deadline
        # one (future, indexes of its items) per record batch handed to the producer; None: not sent yet (or to be
        # sent again from ``first`` on)
        self.sent: list[tuple[asyncio.Future[Any], list[int]]] | None = None
        self.results: list[tuple[int, int] | None] = [None] * len(items)
        self.first = 0  # items before this one are acknowledged
        self.done: asyncio.Future[list[Any]] = asyncio.get_running_loop().create_future()


class ProduceQueue:
    """The ordered produce queue of one log (see the module docstring). Attach a started producer with
    :meth:`attach` before producing; :meth:`stop` cancels the background tasks, :meth:`detach` forgets the producer
    (later produces raise "the log is closed")."""

    def __init__(self, *, append_timeout_s: float, commit_pipeline: int, commit_offsets: OffsetCommitter,
                 on_acknowledged: Acknowledged | None = None) -> None:
        self.append_timeout_s = append_timeout_s
        self.commit_pipeline = commit_pipeline
        self._commit_offsets = commit_offsets
        self._on_acknowledged = on_acknowledged
        self._producer: BatchProducer | None = None
        self._topic_partitions: dict[str, int] = {}
        self._partition_cache: dict[str, dict[bytes, int]] = {}  # topic → key → partition
        self._queue: deque[_Group] = deque()
        self._to_commit: list[_Group] = []
        self._unsettled: set[asyncio.Future[Any]] = set()
        self._commits_in_flight: deque[asyncio.Future[Any]] = deque()
        self._send_lock = asyncio.Lock()
        self._wake = asyncio.Event()
        self._commit_wake = asyncio.Event()
        self._acknowledger: asyncio.Task[None] | None = None
        self._committer: asyncio.Task[None] | None = None
        self._hold_until = 0.0
        self._backoff = 0.1
        self._last_error: Exception | None = None
        self.failure: Exception | None = None
        """Set when a pipelined commit failed for good: every later call raises it."""

    # -- lifecycle --------------------------------------------------------------------------------------------

    def attach(self, producer: BatchProducer, *, partitions: dict[str, int]) -> None:
        """Produce through ``producer``; ``partitions`` is each topic's partition count (for the partitioner)."""
        self._topic_partitions.update(partitions)
        self._producer = producer

    def detach(self) -> None:
        self._producer = None

    async def stop(self) -> None:
        """Cancel the acknowledger and committer tasks (what is unsettled stays so)."""
        for task in (self._acknowledger, self._committer):
            if task is not None:
                task.cancel()
                with contextlib.suppress(BaseException):  # cancelled, or failed: its failure is already recorded
                    await task
        self._acknowledger = self._committer = None

    async def settle(self) -> None:
        """Wait until every produce and commit pending now is settled (failures are not raised here)."""
        pending = list(self._unsettled)
        if pending:
            await asyncio.gather(*(asyncio.shield(f) for f in pending), return_exceptions=True)

    async def flush(self) -> None:
        """:meth:`settle`, then raise the failure of a pipelined commit, if any."""
        await self.settle()
        if self.failure is not None:
            raise self.failure

    # -- the two ways in --------------------------------------------------------------------------------------

    async def produce(self, topic: str, items: Sequence[ProduceItem],
                      records: Sequence[Any] | None = None) -> list[Any]:
        """Produce ``items`` with acks=all, in order after every earlier produce of this queue; retry unacknowledged
        ones from the first failure on, until ``append_timeout_s``. Returns each item's ``(partition, offset)``.
        With ``records`` (what ``items`` were encoded from, one each), ``on_acknowledged`` hears of every record
        batch the broker acknowledged, as soon as it did."""
        group = self._enqueue(topic, items, None, records)
        await self._send_unsent()
        return list(await asyncio.shield(group.done))

    async def commit(self, offsets: PendingOffsets, *, to: str, items: Sequence[ProduceItem],
                     records: Sequence[Any] | None = None) -> list[Any] | None:
        """Produce ``items`` to ``to`` and commit ``offsets`` once they are acknowledged. Waits for the whole of it
        when ``commit_pipeline`` is 0 (returns each item's ``(partition, Kafka offset)``), else only until at most
        ``commit_pipeline`` commits are unsettled (returns None). ``records``: as for :meth:`produce`."""
        in_flight = self._commits_in_flight
        while in_flight and in_flight[0].done():
            in_flight.popleft().result()  # raises the failure of an earlier pipelined commit
        group = self._enqueue(to, items, offsets, records)
        await self._send_unsent()
        if self.commit_pipeline <= 0:
            return list(await asyncio.shield(group.done))
        in_flight.append(group.done)
        while len(in_flight) > self.commit_pipeline:
            await asyncio.shield(in_flight[0])
            if in_flight and in_flight[0].done():
                in_flight.popleft().result()
        return None

    # -- the queue --------------------------------------------------------------------------------------------

    def _partition_for(self, topic: str, key: bytes | None) -> int | None:
        """The partition aiokafka's default partitioner picks for ``key`` (murmur2), memoised per key (one dict per
        topic, so a lookup hashes only the key). A one-partition topic (the events topic) needs no murmur2 at all."""
        if key is None:
            return None
        cache = self._partition_cache.get(topic)
        if cache is None:
            cache = self._partition_cache[topic] = {}
        cached = cache.get(key)
        if cached is None:
            count = self._topic_partitions[topic]
            cached = 0 if count == 1 else default_partition(key, count)
            if len(cache) >= _PARTITION_CACHE_LIMIT:
                cache.clear()
            cache[key] = cached
        return cached

    def _enqueue(self, topic: str, items: Sequence[ProduceItem], offsets: PendingOffsets | None = None,
                 records: Sequence[Any] | None = None) -> _Group:
        if self.failure is not None:
            raise self.failure
        if self._producer is None:
            raise KafkaError("the log is closed")
        if records is not None and (self._on_acknowledged is None or len(records) != len(items)):
            records = None
        group = _Group(topic, list(items), offsets, time.monotonic() + self.append_timeout_s, records)
        self._queue.append(group)
        self._unsettled.add(group.done)
        group.done.add_done_callback(self._settled)
        self._ensure_tasks()
        return group

    def _settled(self, done: asyncio.Future[Any]) -> None:
        self._unsettled.discard(done)
        if not done.cancelled():
            done.exception()  # retrieved: a failure of a pipelined commit surfaces through flush() and the next call

    def _ensure_tasks(self) -> None:
        if self._acknowledger is None or self._acknowledger.done():
            self._acknowledger = asyncio.create_task(self._acknowledge(), name="kafka-acknowledge")
        if self._committer is None or self._committer.done():
            self._committer = asyncio.create_task(self._commit_acknowledged(), name="kafka-commit-offsets")

    async def _send_unsent(self) -> None:
        """Send every group not sent yet, in queue order (nothing while a resend backoff is running)."""
        producer = self._producer
        async with self._send_lock:
            if producer is None or time.monotonic() < self._hold_until:
                return
            for group in list(self._queue):
                if group.sent is not None or group.done.done():
                    continue
                sent: list[tuple[asyncio.Future[Any], list[int]]] = []
                try:
                    await self._send_group(producer, group, sent)
                except KafkaError as error:
                    for future, _ in sent:
                        future.cancel()
                    self._last_error = error
                    self._hold_until = time.monotonic() + self._backoff
                    log.warning("produce failed, resending", topic=group.topic, error=repr(error))
                    self._wake.set()
                    return
                group.sent = sent
                self._wake.set()

    async def _send_group(self, producer: BatchProducer, group: _Group,
                          sent: list[tuple[asyncio.Future[Any], list[int]]]) -> None:
        """Hand ``group``'s unacknowledged items to the producer as one record batch per partition (a batch per
        message costs several times more CPU), in item order within each partition."""
        topic = group.topic
        count = self._topic_partitions[topic]
        open_batches: dict[int, tuple[Any, list[int]]] = {}
        items = group.items
        for index in range(group.first, len(items)):
            key, value, ts, headers = items[index]
            partition = self._partition_for(topic, key)
            if partition is None:
                partition = random.randrange(count)
            entry = open_batches.get(partition)
            if entry is None:
                entry = open_batches[partition] = (producer.create_batch(), [])
            if entry[0].append(timestamp=ts, key=key, value=value, headers=headers) is None:
                if not entry[1]:
                    raise MessageSizeTooLargeError(f"a record of {len(value)} bytes does not fit in a batch")
                sent.append((await producer.send_batch(entry[0], topic, partition=partition), entry[1]))
                entry = open_batches[partition] = (producer.create_batch(), [])
                if entry[0].append(timestamp=ts, key=key, value=value, headers=headers) is None:
                    raise MessageSizeTooLargeError(f"a record of {len(value)} bytes does not fit in a batch")
            entry[1].append(index)
        for partition, (batch, indexes) in open_batches.items():
            sent.append((await producer.send_batch(batch, topic, partition=partition), indexes))
        if group.records is not None:
            for future, indexes in sent:
                future.add_done_callback(functools.partial(self._batch_acknowledged, group, indexes))

    def _batch_acknowledged(self, group: _Group, indexes: list[int], future: asyncio.Future[Any]) -> None:
        """A record batch of ``group`` was acknowledged (or failed: nothing to tell)."""
        if future.cancelled() or future.exception() is not None or self._on_acknowledged is None:
            return
        metadata = future.result()
        assert group.records is not None
        try:
            self._on_acknowledged(group.topic, metadata.partition, metadata.offset, group.items, group.records,
                                  indexes)
        except Exception as error:  # a listener's bug must not break producing
            log.error("on_acknowledged raised", topic=group.topic, error=repr(error))

    async def _acknowledge(self) -> None:
        """Await the groups' acknowledgements in queue order; resend on failure; hand offsets to the committer."""
        queue = self._queue
        while True:
            if not queue:
                self._wake.clear()
                await self._wake.wait()
                continue
            group = queue[0]
            if group.done.done():  # failed meanwhile
                queue.popleft()
                continue
            if group.sent is None:
                if time.monotonic() > group.deadline:
                    self._fail(group, self._last_error or KafkaError("produce timed out"))
                    continue
                wait = self._hold_until - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                await self._send_unsent()
                continue
            sent = group.sent
            outcomes = await asyncio.gather(*(future for future, _ in sent), return_exceptions=True)
            failed: tuple[int, BaseException] | None = None
            for (_, indexes), outcome in zip(sent, outcomes, strict=True):
                if isinstance(outcome, BaseException):
                    if failed is None or indexes[0] < failed[0]:
                        failed = indexes[0], outcome
                    continue
                partition, base = outcome.partition, outcome.offset
                for relative, index in enumerate(indexes):
                    group.results[index] = (partition, base + relative)
            if failed is None:
                queue.popleft()
                self._backoff = 0.1
                if group.offsets is None:
                    if not group.done.done():
                        group.done.set_result(group.results)
                else:
                    self._to_commit.append(group)
                    self._commit_wake.set()
                continue
            index, error = failed
            retriable = isinstance(error, KafkaError | asyncio.TimeoutError | asyncio.CancelledError)
            if not retriable or time.monotonic() > group.deadline:
                self._fail(group, error)
                continue
            log.warning("produce failed, resending", topic=group.topic, resend_from=index, error=repr(error))
            self._last_error = error if isinstance(error, Exception) else None
            async with self._send_lock:
                group.first = index  # every item before it is acknowledged (it is the first of a failed batch)
                for later in queue:
                    later.sent = None
                self._hold_until = time.monotonic() + self._backoff
            self._backoff = min(self._backoff * 2, 2.0)

    def _fail(self, group: _Group, error: BaseException) -> None:
        """``group`` could not be acknowledged in time. An awaited produce (append, dead letter, snapshot) gets the
        error; a pipelined commit fails the queue for good: no later offset may be committed past it."""
        self._queue.popleft()
        failure = error if isinstance(error, Exception) else KafkaError(repr(error))
        if group.offsets is None:
            if not group.done.done():
                group.done.set_exception(failure)
            return
        log.error("produce of a pipelined commit failed; the log refuses every later call", topic=group.topic,
                  error=repr(failure))
        self.failure = failure
        for failed in (group, *self._queue):
            if not failed.done.done():
                failed.done.set_exception(failure)
        self._queue.clear()

    async def _commit_acknowledged(self) -> None:
        """Commit the offsets of acknowledged groups, in order; several of one consumer in one request."""
        while True:
            if not self._to_commit:
                self._commit_wake.clear()
                await self._commit_wake.wait()
                continue
            groups, self._to_commit = self._to_commit, []
            merged: dict[tuple[int, str], PendingOffsets] = {}
            for group in groups:
                assert group.offsets is not None
                client, topic, position, consumer = group.offsets
                entry = merged.setdefault((id(client), topic), PendingOffsets(client, topic, {}, consumer))
                entry.position.update(position)
            error: Exception | None = None
            for client, topic, position, consumer in merged.values():
                try:
                    await self._commit_offsets(client, topic, position, consumer)
                except KafkaError as failure:  # the records are delivered again: at-least-once still holds
                    log.warning("offset commit failed; the records will be delivered again", consumer=consumer,
                                topic=topic, error=repr(failure))
                except Exception as failure:
                    error = failure
                    log.error("offset commit raised; the log refuses every later call", consumer=consumer,
                              topic=topic, error=repr(failure))
                    self.failure = failure
            for group in groups:
                if group.done.done():
                    continue
                if error is None:
                    group.done.set_result(group.results)
                else:
                    group.done.set_exception(error)


__all__ = [
    "Acknowledged", "BatchProducer", "OffsetCommitter", "PendingOffsets", "ProduceItem", "ProduceQueue",
    "default_partition", "murmur2",
]
