"""The seam between tether's pipeline and its event log: one Protocol, two backends (SQLite, Kafka).

The pipeline has three kinds of participants, and the log is all they share:

* **sources** (watches, the catalog poller, the push endpoint) ``append`` events;
* the **decider loop** consumes events and, for each batch, appends the commands it derived *and* moves its
  position past the batch in one step (:meth:`EventLog.commit`) — the eventsourcing rule "a processed position
  is stored atomically with what it produced";
* **executors** consume commands and commit the outcome events they produced the same way.

Positions are opaque to the pipeline (:data:`Position`): the SQLite backend has a single partition, Kafka has
one offset per partition. Both are ``dict[int, int]`` (partition → last processed offset) so that they can be
stored in a snapshot next to the state they cover.

Guarantees, common to both backends: appends are durable when ``append``/``commit`` return; a consumer sees
records of one key in append order; after a crash a consumer resumes after its last commit, so records
between that commit and the crash are processed again (at-least-once) — which is harmless because commands
are content-addressed and executors idempotent. The SQLite backend makes ``commit`` truly atomic (one
transaction); Kafka produces first (acks=all) and commits offsets second, and never needs transactions.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Sequence
from typing import Literal, Protocol

import msgspec

from tether.core.envelope import CommandRecord, EventRecord

Stream = Literal["events", "commands"]
Position = dict[int, int]
Record = EventRecord | CommandRecord


class Batch(msgspec.Struct):
    """Records handed to a consumer, and the position just after them."""

    stream: str
    records: list[EventRecord] | list[CommandRecord]
    position: Position


class Snapshot(msgspec.Struct):
    """A projection's encoded state and the position (of the events stream) it covers."""

    name: str
    position: Position
    state: bytes
    at_ms: int = 0


class EventLog(Protocol):
    """What every log backend provides. Implementations: ``SqliteLog``, ``KafkaLog``."""

    async def append(self, stream: Stream, records: Sequence[Record]) -> list[Record]:
        """Append records durably; returns them with their offsets (and partitions) filled in."""
        ...

    def consume(
        self, stream: Stream, *, consumer: str, batch_size: int = 512, follow: bool = True
    ) -> AsyncIterator[Batch]:
        """Batches after the consumer's committed position; with ``follow`` waits for new records (no busy
        polling), otherwise stops at the end of the stream."""
        ...

    async def commit(
        self, batch: Batch, *, consumer: str, produced: Sequence[Record] = (), to: Stream | None = None
    ) -> list[Record]:
        """Append ``produced`` to ``to`` and store ``consumer``'s position past ``batch``, atomically where the
        backend can (SQLite), or produce-then-commit (Kafka).

        Returns the produced records. SQLite returns them with their offsets, committed. Kafka's commits are
        pipelined (``adapters.kafka_log``): the call hands the records to the producer and returns with their
        offsets still 0; the position is committed later, in call order, once they are acknowledged — a failure
        surfaces on the next call. Nobody may rely on those offsets; ``position`` settles what is pending."""
        ...

    async def position(self, stream: Stream, *, consumer: str) -> Position:
        """The consumer's committed position ({} when it never committed)."""
        ...

    def read(
        self, stream: Stream, *, after: Position | None = None, until_offset: int | None = None,
        until_ms: int | None = None, batch_size: int = 4096
    ) -> AsyncIterator[list[Record]]:
        """Every record after ``after`` (or from the start) up to the bounds, in order, in batches (replay)."""
        ...

    async def end(self, stream: Stream) -> Position:
        """The position after the last record currently in the stream (for progress bars and lag)."""
        ...

    async def save_snapshot(self, snapshot: Snapshot) -> None: ...

    async def load_snapshot(self, name: str) -> Snapshot | None: ...

    async def close(self) -> None: ...
