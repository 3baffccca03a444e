"""The Kafka backend of the event log (:class:`KafkaLog`), for running tether at scale.

URL: ``kafka://host:port[,host2:port]/<prefix>?events_partitions=1&commands_partitions=6&group=tether`` gives
four topics, created on start when absent:

* ``<prefix>.events`` — every event, keyed by the object (or data identity) it is about;
* ``<prefix>.commands`` — every command, keyed by its target object;
* ``<prefix>.dlq`` — records that could not be decoded or processed, unchanged, with the reason in headers
  (``tether-reason``, ``tether-stage``, ``tether-error``, ``tether-topic``, ``tether-partition``, ``tether-offset``);
* ``<prefix>.snapshots`` — projection snapshots keyed by snapshot name (``cleanup.policy=compact``); each
  record holds the state *and* the events position it covers, the latest record of a name wins.

Other query parameters (all optional): ``replication`` (replication factor of created topics, default 1),
``session_timeout_ms``, ``heartbeat_interval_ms``, ``client_id``, ``linger_ms``, ``max_batch_bytes`` (the largest
record batch the producer builds, default 256 KiB; at most the broker's ``message.max.bytes``),
``fetch_max_wait_ms`` (how long the broker may hold a fetch that finds no new record, default 500; brokers that
do not answer early, like tansu, hold it that long), ``append_timeout_s``, ``unordered_events`` (see below),
``commit_pipeline`` (default 4, see "Pipelined commits"; 0 turns it off), ``handoff_bytes`` (default 32 MiB, see
"In-process hand-off"; 0 turns it off). Every one of them is also a keyword
argument of :class:`KafkaLog`.

Design: one ordered events stream, partitioned commands
-------------------------------------------------------

The deciders are deterministic only over one total order of events: "the same log gives the same commands, byte
for byte, on every replay". So the events topic is consumed by the decider as **one ordered stream**: it has one
partition by default, and the decider loop runs in one replica at a time — the consumer-group assignment of that
partition *is* the leadership. The other replicas' decider consumers join the same group, get no partition and
stand by; when the leader dies (or leaves) the group rebalances and one of them takes over from the committed
offset. Cross-object decisions (a DataSource shared by claims in many namespaces) stay correct because the
decider's state is not partitioned.

The commands topic has N partitions (default 6) keyed by target object, so one object's commands stay in order,
and the executors of every replica share them through their consumer group. Outcome events go back to the
events topic.

An events topic with more than one partition has no total order. :meth:`KafkaLog.consume` on it raises
:class:`UnorderedStreamError` unless the log was opened with ``unordered_events=true`` (for consumers that only
need per-key order); :meth:`KafkaLog.read` (replay, tail, export) merges partitions deterministically by
``(at_ms, partition, offset)``, so a replay of a finished log is still reproducible.

Guarantees (no broker transactions, no idempotent producer — both optional in Kafka and absent in some brokers)
-------------------------------------------------------------------------------------------------------------

* **Durability**: ``append``, ``save_snapshot`` and ``dead_letter`` return only when every record is acknowledged
  by all in-sync replicas (``acks=all``); :meth:`KafkaLog.flush` returns when everything produced and committed
  before it is. ``commit`` is pipelined (below).
* **Order**: every produce of a :class:`KafkaLog` goes through one queue, in call order, and records with the same
  key are consumed in that order. When a produce has to be retried (the broker was unreachable) it resends from
  the first unacknowledged record onwards, *together with every later produce of the queue* (in queue order), so a
  key's records may be repeated, but the *last* occurrences are always in append order.
* **At-least-once**: a consumer's offsets are committed only after what it produced from the batch is
  acknowledged (produce, then commit). After a crash, a rebalance or a failed commit, the records after the last
  commit are delivered again, to this or another replica. Duplicates are harmless: command ids are derived from
  the command's content, executors are idempotent (they compare and write with a resourceVersion guard), and the
  deciders fold a repeated event to the same state.
* **No loss**: a record is never skipped without being either processed or written (and acknowledged) to the
  dead-letter topic first.
* **Snapshots** carry the events position they cover, and ``save_snapshot`` first waits for every earlier commit
  of the log to settle, so a snapshot never covers more than the committed offsets; a decider restoring one
  resumes after that position, so a snapshot older than the committed offset only causes re-processing, never a
  gap.
* **Not guaranteed**: exactly-once delivery, a global order of the commands topic, or that a command is not
  executed twice concurrently for a moment during a rebalance (idempotent executors make that harmless).

Pipelined commits
-----------------

(The ordered produce queue behind ``append``, ``commit``, ``dead_letter`` and ``save_snapshot`` lives in
:mod:`tether.adapters.log.kafka_produce`, with its design and trade-offs.)
``commit(batch, produced=…)`` hands the produced records to the producer and returns; it does not wait for their
acknowledgement. A background task awaits the acknowledgements in queue order and only then has the consumer's
offsets past ``batch`` committed, by a second task, in the order of the ``commit`` calls (pending commits of one
consumer are merged into one request: the latest position, every record before it acknowledged). So the decider
steps the next batch while the previous one's commands travel, and:

* an offset is never committed before everything this log produced up to that ``commit`` call is acknowledged
  (or, for an awaited ``append``, reported failed to its caller), and a later commit never overtakes an earlier
  one — a crash at any point (the broker cut
  between send and ack, the process killed) leaves the committed offset at or before the last batch whose
  commands are all acknowledged; the restarted consumer processes the rest again and re-emits its commands
  (identical ids), so nothing is lost (``tests/kafka/test_kafka_pipelined_commits.py``);
* at most ``commit_pipeline`` commits are unsettled when ``commit`` returns (it waits for the oldest otherwise);
  ``commit`` may also wait while the producer still holds an unsent batch for one of the partitions (a slow or
  unreachable broker): that is the backpressure;
* a produce that cannot be acknowledged within ``append_timeout_s`` fails the log: that commit's offsets and every
  later one are never committed, and the next ``commit``/``append``/``flush``/``close`` raises the error (the
  process should restart and resume from the committed offsets). A refused offset commit (rebalance) is logged and
  dropped, as before: the batch is delivered again;
* :meth:`~KafkaLog.position`, :meth:`~KafkaLog.save_snapshot`, :meth:`~KafkaLog.close` and the end of a
  ``consume`` iteration first settle what is pending (:meth:`~KafkaLog.flush`);
* a pipelined ``commit`` returns the produced records with ``offset=0`` (not known yet); with
  ``commit_pipeline=0`` it returns once the records are acknowledged and the offsets committed, with their offsets.

Producing costs little CPU per record: each produce hands the producer one record batch per partition (aiokafka's
per-message ``send`` costs several times more), with the partition aiokafka's default partitioner would pick
(murmur2 of the key, memoised per key).

In-process hand-off
-------------------

A consumer of this process that fetches a record this process produced takes the record it was encoded from
instead of decoding the fetched bytes again, if the bytes fetched are exactly those produced (``handoff_bytes``
bounds what is kept). How, and why it is exact: :mod:`tether.adapters.log.kafka_handoff`.

Offsets: a record's ``offset`` is its Kafka offset **plus one**, so that offsets start at 1 in both backends (the
SQLite log's rule, "0 = nothing yet"), and a :data:`~tether.adapters.log.Position` ``{partition: last processed
offset}`` is then *exactly* Kafka's committed offset (the next offset to read) — and ``end()`` is exactly the
high-water mark. Partitions without records are absent from ``end()``, as from an uncommitted position. The DLQ's
``tether-offset`` header is the raw Kafka offset (it names a Kafka record, next to ``tether-topic``).

Broker compatibility: only plain produce/fetch/consumer-group APIs are used. ``end_offsets``/``seek_to_end`` are
avoided (some brokers, like tansu, answer them wrongly); the end of a partition is the high-water mark of a fetch.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import AsyncIterator, Sequence
from dataclasses import replace
from typing import Any

import msgspec
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, ConsumerRebalanceListener, TopicPartition
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.errors import CommitFailedError, KafkaError, TopicAlreadyExistsError

from tether.adapters.log import Batch, Position, Record, Snapshot, Stream
from tether.adapters.log.kafka_config import KafkaConfig, parse_kafka_url
from tether.adapters.log.kafka_handoff import HandOff, handoff_for
from tether.adapters.log.kafka_produce import PendingOffsets, ProduceItem, ProduceQueue
from tether.adapters.log.kafka_start import start_client
from tether.adapters.log.kafka_stop import stop_consumer
from tether.core.envelope import (
    CommandRecord,
    EventRecord,
    decode_command,
    decode_event,
    encode,
)

log = structlog.get_logger("tether.kafka")

STREAMS: tuple[Stream, ...] = ("events", "commands")
_OTHER: dict[str, Stream] = {"events": "commands", "commands": "events"}
_snapshot_encoder = msgspec.json.Encoder()
_snapshot_decoder = msgspec.json.Decoder(Snapshot)


class UnorderedStreamError(ValueError):
    """The events topic has several partitions, so it has no total order for the decider."""


def _decoder(stream: str) -> Any:
    return decode_event if stream == "events" else decode_command


def _stamp(record: Any, partition: int, offset: int) -> Any:
    return msgspec.structs.replace(record, partition=partition, offset=offset)


# shared by every record without headers: aiokafka only reads it (and its C record builder wants a list)
_NO_HEADERS: list[tuple[str, bytes]] = []


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


class _Listener(ConsumerRebalanceListener):  # type: ignore[misc]
    def __init__(self, name: str, topic: str, handoff: HandOff | None) -> None:
        self.name = name
        self.topic = topic
        self.handoff = handoff
        self.assigned: set[int] = set()

    def release(self, partitions: set[int]) -> None:
        """Tell the hand-off these partitions are no longer this consumer's."""
        if self.handoff is not None:
            for partition in partitions & self.assigned:
                self.handoff.revoke(self.topic, partition)
        self.assigned -= partitions

    async def on_partitions_revoked(self, revoked: Any) -> None:
        if revoked:
            log.info("partitions revoked", consumer=self.name, partitions=sorted(tp.partition for tp in revoked))
            self.release({tp.partition for tp in revoked})

    async def on_partitions_assigned(self, assigned: Any) -> None:
        partitions = {tp.partition for tp in assigned}
        self.release(self.assigned - partitions)
        if self.handoff is not None:
            for partition in partitions - self.assigned:
                self.handoff.assign(self.topic, partition)
        self.assigned = partitions
        log.info("partitions assigned", consumer=self.name, partitions=sorted(self.assigned))


class KafkaLog:
    """The :class:`~tether.adapters.log.EventLog` on Kafka (aiokafka). See the module docstring for guarantees.

    ``KafkaLog("kafka://host:9092/tether?commands_partitions=12")`` or ``KafkaLog(KafkaConfig(...))``; keyword
    arguments override URL parameters. The log connects lazily on first use (or ``await log.start()``, or
    ``async with``); :meth:`close` stops every client.
    """

    def __init__(self, url: str | KafkaConfig, **overrides: Any) -> None:
        if isinstance(url, KafkaConfig):
            self.config = replace(url, **overrides)
        else:
            self.config = parse_kafka_url(url, **overrides)
        self._producer: AIOKafkaProducer | None = None
        self._start_lock = asyncio.Lock()
        self._partitions: dict[str, int] = {}
        self._consumers: dict[tuple[str, str], AIOKafkaConsumer] = {}
        self._clients: set[AIOKafkaConsumer] = set()
        self._listeners: set[_Listener] = set()  # of the running consume() calls
        self._hw_hint: dict[TopicPartition, int] = {}
        self._closed = False
        # records this process produced, for its own consumers instead of decoding them again
        self._handoff = handoff_for(bootstrap=self.config.bootstrap, limit=self.config.handoff_bytes)
        # every produce goes through one ordered queue; commits are pipelined (adapters/log/kafka_produce.py)
        self._produce_queue = ProduceQueue(append_timeout_s=self.config.append_timeout_s,
                                           commit_pipeline=self.config.commit_pipeline,
                                           commit_offsets=self._commit_offsets,
                                           on_acknowledged=None if self._handoff is None else self._handoff.remember)

    # -- lifecycle --------------------------------------------------------------------------------------------

    @classmethod
    def from_url(cls, url: str, **overrides: Any) -> KafkaLog:
        return cls(url, **overrides)

    @staticmethod
    def check_url(url: str) -> None:
        """Raise ``ValueError`` for a URL :meth:`from_url` would refuse (without connecting)."""
        parse_kafka_url(url)

    async def __aenter__(self) -> KafkaLog:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @property
    def _start_patience(self) -> float:
        """How long a client's start waits for the broker (kafka_start.py): not at all until this log has reached it
        (its producer started: a wrong address fails at once), then ``append_timeout_s``."""
        return 0.0 if self._producer is None else self.config.append_timeout_s

    def _common(self) -> dict[str, Any]:
        return {"bootstrap_servers": self.config.bootstrap.split(","), "client_id": self.config.client_id}

    async def start(self) -> None:
        """Create the topics when absent and start the producer (idempotent)."""
        if self._producer is not None:
            return
        async with self._start_lock:
            if self._producer is not None:
                return
            await self._create_topics()
            producer = AIOKafkaProducer(
                **self._common(),
                acks="all",
                enable_idempotence=False,
                linger_ms=self.config.linger_ms,
                max_batch_size=self.config.max_batch_bytes,
                request_timeout_ms=max(10_000, int(self.config.append_timeout_s * 1000 / 4)),
            )
            await start_client(producer, within=self._start_patience)
            try:
                for name in (*STREAMS, "dlq", "snapshots"):
                    parts = await producer.partitions_for(self.config.topic(name))
                    self._partitions[name] = len(parts)
            except BaseException:
                await producer.stop()
                raise
            self._produce_queue.attach(
                producer, partitions={self.config.topic(name): count for name, count in self._partitions.items()}
            )
            self._producer = producer
            if self._partitions["events"] > 1:
                log.warning(
                    "the events topic has several partitions: it has no total order, so the decider refuses to "
                    "consume it unless unordered_events=true; replays merge partitions by (at_ms, partition, "
                    "offset)",
                    topic=self.config.topic("events"),
                    partitions=self._partitions["events"],
                )
            wanted = {"events": self.config.events_partitions, "commands": self.config.commands_partitions}
            for stream, count in wanted.items():
                if self._partitions[stream] != count:
                    log.warning(
                        "existing topic has a different partition count than configured (kept as is)",
                        topic=self.config.topic(stream),
                        partitions=self._partitions[stream],
                        configured=count,
                    )

    async def _create_topics(self) -> None:
        config = self.config
        wanted = [
            NewTopic(config.topic("events"), config.events_partitions, config.replication),
            NewTopic(config.topic("commands"), config.commands_partitions, config.replication),
            NewTopic(config.topic("dlq"), 1, config.replication),
            NewTopic(
                config.topic("snapshots"), 1, config.replication, topic_configs={"cleanup.policy": "compact"}
            ),
        ]
        admin = AIOKafkaAdminClient(**self._common(), request_timeout_ms=30_000)
        await start_client(admin, within=self._start_patience)
        try:
            existing = set(await admin.list_topics())
            missing = [t for t in wanted if t.name not in existing]
            if missing:
                try:
                    response = await admin.create_topics(missing)
                except TopicAlreadyExistsError:  # a replica raced us
                    return
                for topic, code, message, *_ in getattr(response, "topic_errors", []):
                    if code not in (0, TopicAlreadyExistsError.errno):
                        raise KafkaError(f"cannot create topic {topic}: error {code} {message}")
                log.info("created topics", topics=[t.name for t in missing])
        finally:
            await admin.close()

    async def close(self) -> None:
        """Wait for what was produced and committed so far (:meth:`flush`), then stop every client. Raises the
        failure of a pipelined commit, if any, after stopping them."""
        failure: BaseException | None = None
        if self._producer is not None:
            try:
                await self.flush()
            except Exception as error:
                failure = error
        self._closed = True
        await self._produce_queue.stop()
        for consumer in list(self._clients):
            await stop_consumer(consumer)
        self._clients.clear()
        for listener in list(self._listeners):  # a consume() iteration left unfinished holds its partitions no more
            listener.release(set(listener.assigned))
        self._listeners.clear()
        self._consumers.clear()
        if self._producer is not None:
            producer, self._producer = self._producer, None
            self._produce_queue.detach()
            await producer.stop()
        if failure is not None:
            raise failure

    async def partitions(self, stream: str) -> int:
        """The partition count of a topic: ``events``, ``commands``, ``dlq`` or ``snapshots``."""
        await self.start()
        return self._partitions[stream]

    def _consumer(self, **kwargs: Any) -> AIOKafkaConsumer:
        consumer = AIOKafkaConsumer(
            **self._common(),
            enable_auto_commit=False,
            auto_offset_reset="earliest",
            session_timeout_ms=self.config.session_timeout_ms,
            heartbeat_interval_ms=self.config.heartbeat_interval_ms,
            **{"fetch_max_wait_ms": self.config.fetch_max_wait_ms, **kwargs},
        )
        self._clients.add(consumer)
        return consumer

    async def _stop(self, consumer: AIOKafkaConsumer) -> None:
        self._clients.discard(consumer)
        await stop_consumer(consumer)  # (not consumer.stop(): it can raise a stray CancelledError, kafka_stop.py)

    # -- producing (the ordered, pipelined queue: adapters/log/kafka_produce.py) ------------------------------------

    async def _produce(self, topic: str, items: Sequence[ProduceItem]) -> list[Any]:
        """Produce (key, value, timestamp, headers) items with acks=all, in order after every earlier produce of this
        log; retry unacknowledged ones from the first failure on, until ``append_timeout_s``. Returns the
        ``(partition, Kafka offset)`` of each item."""
        await self.start()
        return await self._produce_queue.produce(topic, items)

    async def flush(self) -> None:
        """Wait until everything produced so far is acknowledged and every pipelined commit's offsets are committed;
        raises the failure of a pipelined commit, if any."""
        await self._produce_queue.flush()

    def _prepare(self, stream: str, records: Sequence[Record]) -> tuple[list[ProduceItem], list[Record]]:
        """The produce items of ``records`` and the records as stored (append time set, no position)."""
        if stream not in STREAMS:
            raise ValueError(f"unknown stream {stream!r}")
        expected = EventRecord if stream == "events" else CommandRecord
        items: list[ProduceItem] = []
        clean_records: list[Record] = []
        add_item, add_record = items.append, clean_records.append
        now = 0
        for record in records:
            if type(record) is not expected and not isinstance(record, expected):
                raise TypeError(f"the {stream} stream takes {expected.__name__}, not {type(record).__name__}")
            if record.at_ms == 0 or record.offset or record.partition:  # rare: most sources stamp their records
                if record.at_ms == 0:  # the append time, when the source did not stamp it (as SqliteLog does)
                    now = now or _now_ms()
                    record = msgspec.structs.replace(record, at_ms=now)
                if record.offset or record.partition:  # the value never carries a position
                    record = _stamp(record, 0, 0)
            add_record(record)
            add_item((record.key.encode(), encode(record), record.at_ms, _NO_HEADERS))
        return items, clean_records

    async def append(self, stream: Stream, records: Sequence[Record]) -> list[Record]:
        if stream not in STREAMS:
            raise ValueError(f"unknown stream {stream!r}")
        if not records:
            return []
        items, clean_records = self._prepare(stream, records)
        await self.start()
        metadata = await self._produce_queue.produce(self.config.topic(stream), items, clean_records)
        return [_stamp(r, part, offset + 1) for r, (part, offset) in zip(clean_records, metadata, strict=True)]

    async def dead_letter(
        self,
        stream: str,
        value: bytes | None,
        *,
        reason: str,
        stage: str = "process",
        error: str = "",
        key: bytes | None = None,
        partition: int = -1,
        offset: int = -1,
    ) -> None:
        """Write a record that cannot be decoded (``stage="decode"``) or processed to ``<prefix>.dlq``, unchanged,
        with the reason in headers (``offset``: the raw Kafka offset). Returns once acknowledged."""
        headers = [
            ("tether-reason", reason.encode()[:4096]),
            ("tether-stage", stage.encode()),
            ("tether-error", error.encode()),
            ("tether-topic", self.config.topic(stream).encode()),
            ("tether-partition", str(partition).encode()),
            ("tether-offset", str(offset).encode()),
        ]
        await self._produce(self.config.topic("dlq"), [(key, value or b"", None, headers)])
        log.warning("record sent to the dead-letter topic", stream=stream, partition=partition, offset=offset,
                    reason=reason)

    async def dead_letter_record(self, stream: Stream, record: Record, *, reason: str, error: str = "") -> None:
        """A decoded record that cannot be processed → DLQ (stage ``process``)."""
        stored = _stamp(record, 0, 0)
        await self.dead_letter(stream, encode(stored), reason=reason, error=error, key=record.key.encode(),
                               partition=record.partition, offset=record.offset - 1)

    # -- consuming --------------------------------------------------------------------------------------------

    async def _decode_all(self, stream: str, messages: list[Any], decode: Any, out: list[Any]) -> None:
        """Decode ``messages`` (one partition's) into ``out``, stamped with their position; the undecodable ones go
        to the DLQ. Records this process produced are taken from the hand-off instead, when it kept them."""
        taken = None if self._handoff is None else self._handoff.take(messages[0].topic, messages)
        for index, message in enumerate(messages):
            if taken is not None:
                record = taken[index]
                if record is not None:
                    out.append(record)
                    continue
            try:
                record = decode(message.value)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError) as error:
                await self.dead_letter(stream, message.value, reason=str(error), stage="decode",
                                       error=type(error).__name__, key=message.key, partition=message.partition,
                                       offset=message.offset)
                continue
            record.partition = message.partition  # a fresh struct of ours: stamped in place
            record.offset = message.offset + 1
            out.append(record)

    async def consume(
        self, stream: Stream, *, consumer: str, batch_size: int = 512, follow: bool = True
    ) -> AsyncIterator[Batch]:
        """Batches after ``consumer``'s committed offsets, as a member of the consumer group
        ``<group>.<consumer>``: replicas consuming with the same name share the partitions.

        Records that cannot be decoded go to the DLQ and are skipped (a batch made only of such records is
        committed right away and not yielded). A batch's ``position`` covers the partitions it holds records
        of. Without ``follow``, stops once every assigned partition reached the end it had when called. When the
        iteration ends, the pending commits of this consumer are settled before its client stops.
        """
        await self.start()
        if stream not in STREAMS:
            raise ValueError(f"unknown stream {stream!r}")
        if stream == "events" and self._partitions["events"] > 1 and not self.config.unordered_events:
            raise UnorderedStreamError(
                f"{self.config.topic('events')} has {self._partitions['events']} partitions: the decider needs one "
                "total order of events (see tether.adapters.log.kafka); use one partition, or open the log with "
                "unordered_events=true if this consumer only needs per-key order"
            )
        topic = self.config.topic(stream)
        handoff = self._handoff
        listener = _Listener(f"{self.config.group}.{consumer}", topic, handoff)
        client = self._consumer(group_id=f"{self.config.group}.{consumer}", max_poll_records=batch_size)
        client.subscribe([topic], listener=listener)
        self._listeners.add(listener)
        ends = None if follow else await self.end(stream)
        self._consumers[(stream, consumer)] = client
        decode = _decoder(stream)
        try:
            await start_client(client, within=self._start_patience)
            while not self._closed:
                fetched = await client.getmany(timeout_ms=1000, max_records=batch_size)
                if fetched:
                    records: list[Any] = []
                    position: Position = {}
                    for tp in sorted(fetched, key=lambda tp: tp.partition):
                        messages = fetched[tp]
                        await self._decode_all(stream, messages, decode, records)
                        position[tp.partition] = messages[-1].offset + 1
                    batch = Batch(stream=stream, records=records, position=position)
                    if records:
                        yield batch
                    else:
                        await self._produce_queue.commit(PendingOffsets(client, topic, dict(position), consumer),
                                                         to=topic, items=())
                if ends is not None:
                    assignment = client.assignment()
                    positions = {tp.partition: await client.position(tp) for tp in assignment}
                    if assignment and all(pos >= ends.get(p, 0) for p, pos in positions.items()):
                        return
        finally:
            try:
                await self._produce_queue.settle()
            except Exception as error:
                log.warning("pending commits failed while the consumer stopped", consumer=consumer, error=repr(error))
            finally:
                if self._consumers.get((stream, consumer)) is client:
                    del self._consumers[(stream, consumer)]
                await self._stop(client)
                listener.release(set(listener.assigned))
                self._listeners.discard(listener)

    def assigned(self, stream: Stream, *, consumer: str) -> set[int]:
        """The partitions of ``stream`` assigned to this log's running ``consume(stream, consumer=...)`` (empty when
        none runs, or before the group assigned it any): for readiness checks."""
        client = self._consumers.get((stream, consumer))
        return set() if client is None else {tp.partition for tp in client.assignment()}

    async def _commit_offsets(self, client: AIOKafkaConsumer, topic: str, position: Position, consumer: str) -> None:
        assigned = client.assignment()
        offsets = {}
        for partition, offset in position.items():
            tp = TopicPartition(topic, partition)
            if tp in assigned:
                offsets[tp] = offset
            else:
                log.warning("not committing a partition no longer assigned (it will be re-delivered)",
                            consumer=consumer, topic=topic, partition=partition, offset=offset)
        if not offsets:
            return
        try:
            await client.commit(offsets)
        except CommitFailedError as error:
            log.warning("commit failed after a rebalance; the batch will be re-delivered", consumer=consumer,
                        topic=topic, error=str(error))

    async def commit(
        self, batch: Batch, *, consumer: str, produced: Sequence[Record] = (), to: Stream | None = None
    ) -> list[Record]:
        """Produce ``produced`` to ``to`` (default: the other stream) with acks=all, *then* commit ``consumer``'s
        offsets past ``batch`` — pipelined (module docstring, "Pipelined commits"): the offsets are committed by a
        background task once the records are acknowledged, in the order of the calls, and this returns as soon as
        the records are handed to the producer (and fewer than ``commit_pipeline`` earlier commits are pending).
        The returned records then carry ``offset=0`` (not known yet); with ``commit_pipeline=0`` this returns
        once everything is done, with the offsets. A commit refused because the group rebalanced is logged and
        dropped: the new owner of those partitions processes the batch again (at-least-once). A produce that
        failed for good makes this and every later call raise."""
        if self._produce_queue.failure is not None:
            raise self._produce_queue.failure
        client = self._consumers.get((batch.stream, consumer))
        if client is None:
            raise RuntimeError(f"no active consume({batch.stream!r}, consumer={consumer!r}) to commit for")
        stream = to or _OTHER[batch.stream]
        items: list[ProduceItem] = []
        clean_records: list[Record] = []
        if produced:
            items, clean_records = self._prepare(stream, produced)
        offsets = PendingOffsets(client, self.config.topic(batch.stream), dict(batch.position), consumer)
        metadata = await self._produce_queue.commit(offsets, to=self.config.topic(stream), items=items,
                                                    records=clean_records)
        if metadata is None:
            return clean_records
        return [_stamp(r, part, offset + 1) for r, (part, offset) in zip(clean_records, metadata, strict=True)]

    async def position(self, stream: Stream, *, consumer: str) -> Position:
        """The consumer's committed offsets, after this log's pending commits are settled (:meth:`flush`)."""
        await self.start()
        await self.flush()
        topic = self.config.topic(stream)
        tps = [TopicPartition(topic, p) for p in range(self._partitions[stream])]
        client = self._consumers.get((stream, consumer))
        own = client is None
        if client is None:
            client = self._consumer(group_id=f"{self.config.group}.{consumer}")
            await start_client(client, within=self._start_patience)
        try:
            result: Position = {}
            for tp in tps:
                committed = await client.committed(tp)
                if committed is not None and committed > 0:
                    result[tp.partition] = committed
            return result
        finally:
            if own:
                await self._stop(client)

    # -- reading (replay, tail, export) -----------------------------------------------------------------------

    async def _highwater(self, topic: str, partitions: int) -> dict[int, int]:
        """The high-water mark of every partition, from a fetch (``end_offsets`` is unreliable on some brokers)."""
        tps = [TopicPartition(topic, p) for p in range(partitions)]
        probe = self._consumer(max_partition_fetch_bytes=1024, fetch_max_wait_ms=50)
        try:
            await start_client(probe, within=self._start_patience)
            probe.assign(tps)
            for tp in tps:
                probe.seek(tp, self._hw_hint.get(tp, 0))
            deadline = time.monotonic() + 30
            while any(probe.highwater(tp) is None for tp in tps):
                if time.monotonic() > deadline:
                    raise KafkaError(f"no fetch answer for {topic} within 30 s")
                await probe.getmany(timeout_ms=100)
            marks = {tp.partition: probe.highwater(tp) for tp in tps}
            for tp in tps:
                self._hw_hint[tp] = max(self._hw_hint.get(tp, 0), marks[tp.partition] - 1, 0)
            return marks
        finally:
            await self._stop(probe)

    async def end(self, stream: Stream) -> Position:
        """``{partition: offset of the last record}`` (the high-water mark); empty partitions are absent."""
        await self.start()
        marks = await self._highwater(self.config.topic(stream), self._partitions[stream])
        return {p: hw for p, hw in marks.items() if hw > 0}

    async def _read_topic(
        self, topic: str, partitions: int, decode: Any, after: Position | None, until_offset: int | None
    ) -> AsyncIterator[tuple[int, list[tuple[int, Any]], bool]]:
        """``(partition, [(offset, decode(message))…], finished)`` chunks up to the end as of the call (and
        ``until_offset``), partitions interleaved as fetched. Used by :meth:`read` and :meth:`load_snapshot`."""
        marks = await self._highwater(topic, partitions)
        after = after or {}
        # tether offsets are Kafka offsets + 1: "after n" starts at Kafka offset n, "until n" stops before it
        stops = {p: hw if until_offset is None else min(hw, until_offset) for p, hw in marks.items()}
        starts = {p: after.get(p, 0) for p in marks}
        todo = [TopicPartition(topic, p) for p in marks if starts[p] < stops[p]]
        for p in marks:
            if starts[p] >= stops[p]:
                yield p, [], True
        if not todo:
            return
        reader = self._consumer()
        try:
            await start_client(reader, within=self._start_patience)
            reader.assign(todo)
            for tp in todo:
                reader.seek(tp, starts[tp.partition])
            remaining = set(todo)
            while remaining:
                fetched = await reader.getmany(*remaining, timeout_ms=500, max_records=4096)
                for tp, messages in fetched.items():
                    stop = stops[tp.partition]
                    chunk = [(m.offset, decode(m)) for m in messages if m.offset < stop]
                    finished = await reader.position(tp) >= stop
                    if finished:
                        remaining.discard(tp)
                        reader.pause(tp)
                    yield tp.partition, chunk, finished
        finally:
            await self._stop(reader)

    async def read(
        self,
        stream: Stream,
        *,
        after: Position | None = None,
        until_offset: int | None = None,
        until_ms: int | None = None,
        batch_size: int = 4096,
    ) -> AsyncIterator[list[Record]]:
        """Every record after ``after`` up to the end as of the call (and ``until_offset`` per partition), stopping
        at the first record later than ``until_ms``. One partition: log order. Several: a deterministic merge by
        ``(at_ms, partition, offset)``. Undecodable records are skipped (consumers dead-letter them)."""
        await self.start()
        topic = self.config.topic(stream)
        decode_value = _decoder(stream)

        def decode(message: Any) -> Any:
            try:
                return _stamp(decode_value(message.value), message.partition, message.offset + 1)
            except (msgspec.DecodeError, msgspec.ValidationError, ValueError, TypeError):
                log.warning("skipping an undecodable record", topic=topic, partition=message.partition,
                            offset=message.offset)
                return None

        out: list[Record] = []
        async for record in self._merged(topic, self._partitions[stream], decode, after, until_offset):
            if until_ms is not None and record.at_ms > until_ms:
                break
            out.append(record)
            if len(out) >= batch_size:
                yield out
                out = []
        if out:
            yield out

    async def _merged(
        self, topic: str, count: int, decode: Any, after: Position | None, until_offset: int | None
    ) -> AsyncIterator[Any]:
        """Records of every partition merged by ``(at_ms, partition, offset)``: a record is released only when every
        unfinished partition has a buffered record to compare it with. One partition: plain log order."""
        reader = self._read_topic(topic, count, decode, after, until_offset)
        try:
            if count == 1:
                async for _, chunk, _ in reader:
                    for _, record in chunk:
                        if record is not None:
                            yield record
                return
            buffers: dict[int, deque[Any]] = {p: deque() for p in range(count)}
            unfinished = set(range(count))
            async for partition, chunk, finished in reader:
                buffers[partition].extend(r for _, r in chunk if r is not None)
                if finished:
                    unfinished.discard(partition)
                while all(buffers[p] for p in unfinished):
                    heads = [(b[0].at_ms, p, b[0].offset) for p, b in buffers.items() if b]
                    if not heads:
                        break
                    yield buffers[min(heads)[1]].popleft()
            while any(buffers.values()):
                heads = [(b[0].at_ms, p, b[0].offset) for p, b in buffers.items() if b]
                yield buffers[min(heads)[1]].popleft()
        finally:
            await reader.aclose()

    # -- snapshots --------------------------------------------------------------------------------------------

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        """Written once every earlier commit of this log is settled (:meth:`flush`): a snapshot never covers a
        position beyond the committed offsets, so the commands it implies are acknowledged."""
        await self.flush()
        await self._produce(
            self.config.topic("snapshots"),
            [(snapshot.name.encode(), _snapshot_encoder.encode(snapshot), snapshot.at_ms or None, [])],
        )

    async def load_snapshot(self, name: str) -> Snapshot | None:
        """The latest snapshot saved under ``name`` (the snapshots topic is read to its end)."""
        await self.start()
        wanted = name.encode()
        latest: bytes | None = None

        def keep(message: Any) -> Any:
            return message.value if message.key == wanted else None

        async for _, chunk, _ in self._read_topic(
            self.config.topic("snapshots"), self._partitions["snapshots"], keep, None, None
        ):
            for _, value in chunk:
                if value is not None:
                    latest = value
        return None if latest is None else _snapshot_decoder.decode(latest)


__all__ = ["KafkaLog", "UnorderedStreamError"]
