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

from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from typing import Literal, Protocol, TypeVar

import msgspec

from tether.core.envelope import CommandHead, CommandRecord, EventRecord, decode_command_head

T = TypeVar("T")
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
        pipelined (``adapters.log.kafka``): the call hands the records to the producer and returns with their
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


class Chunk(Protocol):
    """Records of one stream for a bulk reader that uses each once (a replay, a bench): see :func:`scan`.

    Iterate it once. ``rows`` counts the stored records it covers and ``last_offset`` is the offset of the last of
    them (0 for an empty chunk), corrupt ones included; ``decoded``, once iterated, how many records it yielded."""

    rows: int
    last_offset: int

    @property
    def decoded(self) -> int: ...

    def __iter__(self) -> Iterator[Record]: ...


class RecordList:
    """A :class:`Chunk` over records already decoded (a backend without a native scan)."""

    __slots__ = ("last_offset", "records", "rows")

    def __init__(self, records: Sequence[Record]) -> None:
        self.records = records
        self.rows = len(records)
        self.last_offset = records[-1].offset if records else 0

    @property
    def decoded(self) -> int:
        return self.rows

    def __iter__(self) -> Iterator[Record]:
        return iter(self.records)


class Scannable(Protocol):
    def scan(
        self, stream: Stream, *, after: Position | None = None, until_offset: int | None = None,
        until_ms: int | None = None, decode: Callable[[bytes], Record | CommandHead] | None = None,
        undecoded: bool = False,
    ) -> AsyncIterator[Chunk]: ...


async def scan(
    log: EventLog, stream: Stream, *, after: Position | None = None, until_offset: int | None = None,
    until_ms: int | None = None, heads: bool = False, undecoded: bool = False,
) -> AsyncIterator[Chunk]:
    """The records :meth:`EventLog.read` gives, for a reader that uses each record once, in order.

    A backend that can (``SqliteLog.scan``) hands out small chunks of stored rows and decodes each record only
    when the iteration reaches it, so a replay folds a record while it is still in the CPU's cache instead of
    decoding thousands first (measured on the replay bench: decode + fold of a whole log ~1.5x faster). Others
    fall back to ``read``'s decoded batches.

    ``heads`` (commands only): each command as its :class:`~tether.core.envelope.CommandHead` — type, target and
    id, the body decoded only when asked — which is what noting recorded commands needs (``tether replay``).

    ``undecoded`` (events only): a record that carries an object's version may come undecoded, as a
    :class:`~tether.core.envelope.StoredEvent` (a replay's fold keeps the latest version of most objects:
    ``projections.replay_fold``). Only a backend that stores those columns does so; others decode every record,
    which the same fold takes too."""
    if heads and stream != "commands":
        raise ValueError("heads are read of the commands stream only")
    native: Scannable | None = log if hasattr(log, "scan") else None  # type: ignore[assignment]
    if native is not None:
        chunks = native.scan(stream, after=after, until_offset=until_offset, until_ms=until_ms,
                             decode=decode_command_head if heads else None, undecoded=undecoded)
        async with aclosing_iter(chunks):
            async for chunk in chunks:
                yield chunk
        return
    async with aclosing_iter(log.read(stream, after=after, until_offset=until_offset, until_ms=until_ms)) as batches:
        async for batch in batches:
            if heads:
                yield RecordList([CommandHead.of(record) for record in batch])  # type: ignore[arg-type]
            else:
                yield RecordList(batch)


@asynccontextmanager
async def aclosing_iter(iterator: AsyncIterator[T]) -> AsyncIterator[AsyncIterator[T]]:
    """``contextlib.aclosing`` for the Protocol's ``AsyncIterator`` results (closed if they are generators):
    breaking out of ``read``/``consume`` early releases the backend's connection at once, not at GC."""
    try:
        yield iterator
    finally:
        close = getattr(iterator, "aclose", None)
        if close is not None:
            await close()
