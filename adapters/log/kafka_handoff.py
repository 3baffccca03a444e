"""In-process hand-off: the records a process produced to Kafka, handed to its own consumers without decoding.

A consumer of this process that fetches a record this process produced takes the record it was encoded from
instead of decoding the fetched bytes again (decoding is most of a consumer's own CPU: ~5 µs per record). Once the
broker acknowledged a record batch (acks=all) at a known base offset, its records are kept by (topic, partition,
Kafka offset), with the bytes produced; a consumer that fetches that offset takes the kept record only if the
fetched bytes are *byte for byte* those — so what it takes is exactly what the log holds there, and a record
written there by anyone else (another replica, a re-created topic, a broker that lost data) is decoded as usual.
The record handed over is a copy stamped with the position exactly as decoding stamps it, so it equals
``decode(encode(record))`` (``tests/kafka/test_kafka_handoff.py``, for every record type the simulation and the
deciders produce; a record of another schema version, which decoding would upcast, is never kept). Nothing that
was not acknowledged at a known offset is ever handed over, so a decider still folds only what the log holds, and
a replay reads the same records.

Records are kept only for partitions a consumer of this process is assigned (dropped when it is revoked or the
consumer stops: after a rebalance the new owner decodes), each is taken once, the entries a consumer has fetched
past are dropped, and the bytes kept add up to at most ``handoff_bytes`` (default 32 MiB; the records themselves
take about as much again; 0 turns the hand-off off): beyond that, records are decoded. The logs of one process
with the same brokers and ``handoff_bytes`` share it (a daemon, or a benchmark with a log per role).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import msgspec

from tether.adapters.log.kafka_produce import ProduceItem
from tether.core.envelope import COMMAND_SCHEMA_VERSION, CommandRecord, EventRecord
from tether.core.events import EVENT_SCHEMA_VERSION

#: the schema version a decoded record of each type has (a record of another version is upcast when decoded, so it
#: is never handed off); other types (subclasses) are never handed off either: decoding gives the base type
_KEPT_SCHEMA: dict[type, int] = {EventRecord: EVENT_SCHEMA_VERSION, CommandRecord: COMMAND_SCHEMA_VERSION}


class HandOff:
    """Records this process produced, by (topic, partition) and the Kafka offset the broker acknowledged them at,
    kept for this process's consumers of those partitions (see the module docstring). Shared by
    the logs of this process with the same brokers and ``handoff_bytes`` (:func:`handoff_for`).

    ``memo[(topic, partition)]`` exists while a consumer of this process is assigned the partition, and maps a
    Kafka offset to ``(the value produced, the record it was encoded from)``; the values held add up to at most
    ``limit`` bytes (further records are not kept until consumers take some). A consumer takes an entry only if
    the value it fetched at that offset is byte for byte the one kept, so a record at that offset that is not
    this process's (another replica's, or a re-created topic's) is decoded as usual."""

    __slots__ = ("assigned", "limit", "memo", "positions", "size", "swept")

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.size = 0
        self.swept = False  # a sweep freed nothing, and no consumer took anything since
        self.assigned: dict[tuple[str, int], int] = {}  # → how many consumers of this process are assigned it
        self.memo: dict[tuple[str, int], dict[int, tuple[bytes, Any]]] = {}
        self.positions: dict[tuple[str, int], int] = {}  # → the next Kafka offset its consumer fetches

    def assign(self, topic: str, partition: int) -> None:
        key = (topic, partition)
        self.assigned[key] = self.assigned.get(key, 0) + 1
        self.memo.setdefault(key, {})

    def revoke(self, topic: str, partition: int) -> None:
        """A consumer lost the partition (or stopped): the last one to do so drops what is kept for it."""
        key = (topic, partition)
        count = self.assigned.get(key, 0) - 1
        if count > 0:
            self.assigned[key] = count
            return
        self.assigned.pop(key, None)
        self.positions.pop(key, None)
        dropped = self.memo.pop(key, None)
        if dropped:
            self.size -= sum(len(value) for value, _ in dropped.values())
            self.swept = False

    def remember(self, topic: str, partition: int, base: int, items: Sequence[ProduceItem], records: Sequence[Any],
                 indexes: Sequence[int]) -> None:
        """The broker acknowledged ``items[indexes]`` at ``base``, ``base + 1``, … (the produce queue's
        ``on_acknowledged``)."""
        memo = self.memo.get((topic, partition))
        if memo is None:
            return
        size, limit = self.size, self.limit
        for relative, index in enumerate(indexes):
            record = records[index]
            if _KEPT_SCHEMA.get(type(record)) != record.schema:
                continue
            value = items[index][1]
            if size + len(value) > limit:
                self.size = size
                if not self._sweep() or self.size + len(value) > limit:
                    return
                size = self.size
            memo[base + relative] = (value, record)
            size += len(value)
        self.size = size

    def _sweep(self) -> bool:
        """The budget is full: drop every entry before its partition's consumer position (normally
        :meth:`take` did already; entries kept out of offset order may remain). False when that freed nothing
        since the last sweep (then no sweep until a consumer takes something)."""
        if self.swept:
            return False
        before = self.size
        for key, memo in self.memo.items():
            position = self.positions.get(key, 0)
            for offset in [offset for offset in memo if offset < position]:
                self.size -= len(memo.pop(offset)[0])
        self.swept = self.size == before
        return not self.swept

    def take(self, topic: str, messages: list[Any]) -> list[Any] | None:
        """For each of ``messages`` (one partition's, in offset order, as fetched), the record kept for it, stamped
        with the message's position as decoding stamps it, or None: decode it. None when nothing is kept for that
        partition. The entries taken, and those before the first message, are dropped."""
        first = messages[0]
        key = (topic, first.partition)
        memo = self.memo.get(key)
        if memo is None:
            return None
        self.positions[key] = messages[-1].offset + 1
        if not memo:
            return None
        freed = 0
        while memo:  # entries the consumer fetched past (kept in offset order, mostly; _sweep drops the others)
            offset = next(iter(memo))
            if offset >= first.offset:
                break
            freed += len(memo.pop(offset)[0])
        pop, stamp = memo.pop, msgspec.structs.replace
        taken: list[Any] = []
        for message in messages:
            entry = pop(message.offset, None)
            if entry is None:
                taken.append(None)
                continue
            value = entry[0]
            freed += len(value)
            # not the bytes this process produced at that offset (another producer's record): decode it
            taken.append(stamp(entry[1], partition=message.partition, offset=message.offset + 1)
                         if value == message.value else None)
        if freed:
            self.size -= freed
            self.swept = False
        return taken


_handoffs: dict[tuple[str, int], HandOff] = {}


def handoff_for(*, bootstrap: str, limit: int) -> HandOff | None:
    """The hand-off the logs of this process with the same brokers and ``handoff_bytes`` share (None: 0, off)."""
    if limit <= 0:
        return None
    key = (bootstrap, limit)
    handoff = _handoffs.get(key)
    if handoff is None:
        handoff = _handoffs[key] = HandOff(limit)
    return handoff
