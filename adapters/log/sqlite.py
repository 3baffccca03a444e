"""The embedded event log: one SQLite file in WAL mode, the default backend of :class:`~tether.adapters.log.EventLog`.

Schema (one file, readable with the ``sqlite3`` shell)::

    events / commands  (offset INTEGER PRIMARY KEY, at_ms, key, type, causation, body TEXT, version)
    positions          (consumer, stream, partition, offset)      -- committed consumer positions
    snapshots          (name PRIMARY KEY, position TEXT, state BLOB, at_ms)
    dead_letters       (stream, offset, reason, body, at_ms)       -- records that failed to decode

``body`` is the JSON of :func:`tether.core.envelope.encode`, stored as TEXT so the ``sqlite3`` shell shows it, and
read back ``CAST(body AS BLOB)``: bytes go straight to msgspec, without a UTF-8 decode into a ``str`` first (a
third of a record's read cost on a replay). The other columns are copies for SQL queries
(``key`` and ``causation`` are indexed so ``tether replay --explain`` finds one object's trail without a scan).
``version`` (events) is the resourceVersion of the object a record carries under its key
(``core.envelope.object_version``; ``''`` for other records, and for rows written before the column existed, which
opening the file adds): with ``type`` and ``key`` it lets a replay hold an object's versions undecoded and decode the
latest alone (:meth:`SqliteLog.scan`'s ``undecoded``).
Offsets start at 1 and have no gaps; the single partition is 0. A :data:`Position` is ``{0: last processed
offset}`` (``{}`` before the first record), and ``end()`` is the position of the last record.

Connections. Writes (``append``, ``commit``) run on the event loop's own sqlite3 connection, each one explicit
``BEGIN IMMEDIATE`` … ``COMMIT`` transaction, so ``commit`` (produced records + the consumer position) is one
atomic transaction. A transaction is a few tens of microseconds of SQLite work (``synchronous=NORMAL`` in WAL
mode: no fsync per commit), far less than the two thread round trips it would otherwise cost — one to a writer
thread and one back, each waiting for its turn on a busy event loop (measured: 0.3 ms at the median, 2 ms at
p90, on the path of every decision). Nothing on that connection ever waits: its ``busy_timeout`` is 0, so when
the database is locked (another process writing the file, a snapshot being saved) the transaction goes instead,
whole, to the **writer's thread** (aiosqlite, ``busy_timeout`` 10 s), where waiting for the lock blocks nothing;
snapshots (megabytes) are always written there, and so are the WAL checkpoints (PASSIVE, every few megabytes
written: the event loop's connection never checkpoints, so neither the copy nor its fsync runs on the loop). On
the writer's thread a transaction is **one job** (BEGIN, the offset query, the inserts, the position, COMMIT),
jobs run one at a time in the order they were queued, and a job runs to its end even if its caller is cancelled
meanwhile — never half a transaction: then the write happened although the caller did not see it return, which
at-least-once processing already allows for.
Every ``read``/``consume``/``follow`` iterator opens its own reader connection, so a long replay sees one
consistent WAL snapshot and never observes a half-done transaction of the writer.

Waiting for new records (``consume``/``follow`` when caught up) is event driven: every append in this process
wakes the waiters of its stream (an :class:`asyncio.Event` swapped on each append). Appends made by *another*
process (``tether log tail --follow`` on a live daemon's file) are noticed by a slow poll of ``max(offset)``
every ``poll_interval`` seconds (0.5 s by default) — a cheap indexed query, not a busy loop.

In-process hand-off. The file is the source of truth, but a follower in the same process need not read back
what this process has just written: once a write transaction committed, the rows it inserted (offset and the
very bytes stored as ``body``) are kept in a short per-stream **tail** (the last ``tail_size`` rows this process
appended, contiguous offsets). A follower that has already read from the file once in its iteration and whose
next offset is in the tail takes its records from there — decoded from the same bytes by the same code as a
read, so it gets exactly what a read would return — without a round trip to its reader thread; and when its
cursor is at the end of the tail it waits without querying. Anything else reads the file: the first read of
every ``follow``/``consume`` (a consumer that starts or restarts), a follower that fell behind the tail, a gap
in the tail (another process appended in between: the tail restarts after it), and every wake-up by the poll.

Corrupt records. A row whose body does not decode (hand-edited file, schema newer than this tether, a bug)
never crashes a reader. With ``on_corrupt="dead_letter"`` (the default) the reader skips it and records it once
in ``dead_letters`` with the reason (``tether`` prints them; a corrupt record means someone must look, but one
bad row must not stop the control plane). With ``on_corrupt="raise"`` the reader raises :class:`CorruptRecord`
— what ``tether replay --strict`` uses when an exact reconstruction matters more than progress.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import os
import sqlite3
import time
from collections.abc import AsyncIterator, Callable, Iterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Literal, TypeVar

import aiosqlite
import msgspec

from tether.adapters.log import Batch, EventLog, Position, Record, Snapshot, Stream
from tether.core.envelope import (
    CommandRecord,
    EventRecord,
    StoredEvent,
    decode_command,
    decode_event,
    encode,
    object_version,
)
from tether.core.events import CommandSucceeded, ObjectObserved

log = logging.getLogger(__name__)

OnCorrupt = Literal["dead_letter", "raise"]
_T = TypeVar("_T")
STREAMS: tuple[Stream, ...] = ("events", "commands")
CHECKPOINT_BYTES = 4 << 20  # written on the event loop's connection between two checkpoints
#: The WAL file is truncated to this size when a checkpoint lets it start over. Without a limit it keeps the largest
#: size it ever reached: a long read (a replay at start-up holds one snapshot for its whole scan) keeps checkpoints
#: from resetting the WAL while appends go on — in the full-size crash run (ops/chaos) it reached 776 MB beside a
#: 297 MB database, and stayed that size.
WAL_SIZE_LIMIT = 64 << 20

_SCHEMA = """
CREATE TABLE IF NOT EXISTS events (
    offset INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, key TEXT NOT NULL, type TEXT NOT NULL,
    causation TEXT NOT NULL DEFAULT '', body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS events_key ON events (key);
CREATE TABLE IF NOT EXISTS commands (
    offset INTEGER PRIMARY KEY, at_ms INTEGER NOT NULL, key TEXT NOT NULL, type TEXT NOT NULL,
    causation TEXT NOT NULL DEFAULT '', body TEXT NOT NULL);
CREATE INDEX IF NOT EXISTS commands_key ON commands (key);
CREATE INDEX IF NOT EXISTS commands_causation ON commands (causation);
CREATE TABLE IF NOT EXISTS positions (
    consumer TEXT NOT NULL, stream TEXT NOT NULL, partition INTEGER NOT NULL, offset INTEGER NOT NULL,
    PRIMARY KEY (consumer, stream, partition));
CREATE TABLE IF NOT EXISTS snapshots (
    name TEXT PRIMARY KEY, position TEXT NOT NULL, state BLOB NOT NULL, at_ms INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS dead_letters (
    stream TEXT NOT NULL, offset INTEGER NOT NULL, reason TEXT NOT NULL, body TEXT, at_ms INTEGER NOT NULL,
    PRIMARY KEY (stream, offset));
"""


class CorruptRecord(Exception):
    """A stored record could not be decoded."""

    def __init__(self, stream: str, offset: int, reason: str) -> None:
        super().__init__(f"corrupt record at {stream}:{offset}: {reason}")
        self.stream = stream
        self.offset = offset
        self.reason = reason


class DeadLetter(msgspec.Struct, frozen=True):
    stream: str
    offset: int
    reason: str
    body: str
    at_ms: int


async def _add_version_column(conn: aiosqlite.Connection) -> None:
    """Add the events' ``version`` column to a file written before it existed (its rows get ``''``: decoded whole
    by a replay, as before). Older tethers still write such a file: they name their columns, so theirs get ``''``."""
    async with conn.execute("PRAGMA table_info(events)") as cur:
        columns = {row[1] for row in await cur.fetchall()}
    if "version" not in columns:
        await conn.execute("ALTER TABLE events ADD COLUMN version TEXT NOT NULL DEFAULT ''")


def _check_stream(stream: str) -> Stream:
    if stream not in STREAMS:
        raise ValueError(f"unknown stream {stream!r} (events or commands)")
    return stream


def _now_ms() -> int:
    return time.time_ns() // 1_000_000


def _type_name(record: Record) -> str:
    return type(record.event).__name__ if isinstance(record, EventRecord) else type(record.command).__name__


def _submit(conn: aiosqlite.Connection, fn: Callable[..., _T], *args: Any) -> asyncio.Future[_T]:
    """Queue ``fn(*args)`` on ``conn``'s thread at once (what ``aiosqlite.Connection._execute`` does, without a task
    that would first wait for its turn on the event loop); the future gets its result."""
    if not conn._running or conn._connection is None:
        raise ValueError("Connection closed")
    future: asyncio.Future[_T] = asyncio.get_running_loop().create_future()
    conn._tx.put_nowait((future, functools.partial(fn, *args)))
    return future


class _Tail:
    """The last rows this process appended to one stream: ``(offset, body)``, contiguous offsets (module doc)."""

    __slots__ = ("rows", "size", "start")

    def __init__(self, size: int) -> None:
        self.size = size
        self.rows: list[tuple[int, bytes]] = []
        self.start = 0  # the offset of rows[0]

    def add(self, first: int, bodies: Sequence[bytes]) -> None:
        if self.size <= 0:
            return
        rows = self.rows
        if rows and first != self.start + len(rows):
            rows.clear()
            if first < self.start:  # out of order: the tail restarts with the next rows (a read fills the hole)
                return
            # else a gap: another process (or a write whose rows are not handed here yet) appended in between
        if not rows:
            self.start = first
        rows.extend(zip(range(first, first + len(bodies)), bodies, strict=True))
        # trimmed to ``size`` at every add (a memmove of ``size`` pointers). Trimmed only past twice the size, it
        # held up to twice as many bodies (6.4 MB in the soak, not 3.8) and freed half of them at once, and the C
        # heap's free space grew faster (RssAnon +0.6 MB/min for 20 minutes: docs/performance.md, "Soak")
        if len(rows) > self.size:
            drop = len(rows) - self.size
            del rows[:drop]
            self.start += drop

    def after(self, cursor: int, limit: int) -> list[tuple[int, bytes]] | None:
        """The rows after ``cursor`` (``[]``: at the end of the tail), or None when the tail does not hold the row
        after ``cursor``."""
        rows = self.rows
        i = cursor + 1 - self.start
        if not rows or i < 0 or i > len(rows):
            return None
        return rows[i : i + limit]


def _decoder(stream: Stream) -> Callable[[bytes], Record]:
    return decode_event if stream == "events" else decode_command


def _reason(exc: Exception) -> str:
    """Why a stored record is corrupt, as dead letters and :class:`CorruptRecord` say it."""
    return f"{type(exc).__name__}: {exc}"


#: The first offset appended after a time (``.format(stream=...)``); a time bound is the offset just before it.
_FIRST_AFTER_MS = "SELECT min(offset) FROM {stream} WHERE at_ms > ?"


def _bound_before(row: Any) -> int | None:
    """The offset bound of a time from the ``_FIRST_AFTER_MS`` row (None: every record is old enough)."""
    return None if row is None or row[0] is None else int(row[0]) - 1


def _range_query(stream: Stream, start: int, until_offset: int | None, by_time: int | None
                 ) -> tuple[str, tuple[int, ...]]:
    """The query (and parameters) of the rows after ``start`` up to both bounds, in order (``read`` and ``scan``)."""
    bounds = [b for b in (until_offset, by_time) if b is not None]
    sql = f"SELECT offset, CAST(body AS BLOB) FROM {stream} WHERE offset > ?"
    if not bounds:
        return sql + " ORDER BY offset", (start,)
    return sql + " AND offset <= ? ORDER BY offset", (start, min(bounds))


class _Decoding:
    """A chunk of stored rows, decoded one at a time as it is iterated (:meth:`SqliteLog.scan`): an
    ``adapters.log.Chunk``. Corrupt rows are skipped and kept in ``corrupt`` (or raise :class:`CorruptRecord`
    when ``strict``)."""

    __slots__ = ("corrupt", "decode", "last_offset", "rows", "stored", "stream", "strict")

    def __init__(self, stream: Stream, rows: list[tuple[int, bytes]], decode: Callable[[bytes], Record], *,
                 strict: bool) -> None:
        self.stream = stream
        self.stored = rows
        self.decode = decode
        self.strict = strict
        self.rows = len(rows)
        self.last_offset = rows[-1][0] if rows else 0
        self.corrupt: list[tuple[int, bytes, Exception]] = []

    def __iter__(self) -> Iterator[Record]:
        for offset, body in self.stored:
            if (record := self.decoded_row(offset, body)) is not None:
                yield record

    def decoded_row(self, offset: int, body: bytes) -> Record | None:
        """The record of one row; None for a corrupt one (kept in ``corrupt``, or raised when ``strict``)."""
        try:
            record = self.decode(body)
        except (msgspec.MsgspecError, ValueError, TypeError) as exc:
            if self.strict:
                raise CorruptRecord(self.stream, offset, _reason(exc)) from exc
            self.corrupt.append((offset, body, exc))
            return None
        record.offset = offset
        return record

    @property
    def decoded(self) -> int:
        return self.rows - len(self.corrupt)


#: The undecoded scan's version column (:data:`_UNDECODED_COLUMNS`): a write's result's version is marked with
#: this first character. Only an observation or a write's result carries a version (``object_version``), so the
#: mark says which of the two a row is without a ``type`` column: each column of a row costs as much as a few
#: Python operations (``sqlite3_column_*`` under the connection's mutex, and a ``str``), and a replay reads
#: hundreds of thousands of rows. (An observed version that itself starts with the mark — no API server makes one:
#: etcd's revisions are digits — comes as none: its record is decoded whole. A written one is marked all the same.)
_WRITTEN = "="
_UNDECODED_COLUMNS = ("AS body, CASE WHEN version = '' THEN '' "
                      f"WHEN type != '{ObjectObserved.__name__}' THEN '{_WRITTEN}' || version "
                      f"WHEN version >= '{_WRITTEN}' AND version < '{chr(ord(_WRITTEN) + 1)}' THEN '' "
                      "ELSE version END, CASE WHEN version != '' THEN key END FROM events")
_OBSERVED, _SUCCEEDED = ObjectObserved.__name__, CommandSucceeded.__name__


class _Undecoded(_Decoding):
    """A chunk of events rows (``offset, body, version, key``: :data:`_UNDECODED_COLUMNS`) where each row with a
    version (it carries an object under its key) is handed over undecoded, as a :class:`StoredEvent`; the others as
    :class:`_Decoding` does. A held row's body is decoded only by whoever keeps it (a damaged one is not noticed
    before)."""

    __slots__ = ("versioned",)

    def __init__(self, rows: list[tuple[int, bytes, str, str | None]],
                 decode: Callable[[bytes], Record], *, strict: bool) -> None:
        super().__init__("events", [], decode, strict=strict)
        self.versioned = rows
        self.rows = len(rows)
        self.last_offset = rows[-1][0] if rows else 0

    def __iter__(self) -> Iterator[Record]:
        for offset, body, version, key in self.versioned:
            if version:
                if version[0] == _WRITTEN:
                    yield StoredEvent(offset, _SUCCEEDED, key, version[1:], body)  # type: ignore[misc]
                else:
                    yield StoredEvent(offset, _OBSERVED, key, version, body)  # type: ignore[misc]
            elif (record := self.decoded_row(offset, body)) is not None:
                yield record


class LogUnusable(Exception):
    """The file named as the log cannot be a log: a directory, in a directory that does not exist, not a SQLite
    database, or not readable and writable. The message names the file and what to do; the command line shows it
    as one line (exit code 2)."""


def _check_usable(file: Path) -> None:
    """What SQLite would only say as "unable to open database file" — or, for a missing directory, what opening
    used to hide by creating it (a mistyped ``--log`` path left a new directory tree behind)."""
    if file.is_dir():
        raise LogUnusable(f"{file} is a directory: name the log's file (e.g. {file / 'tether.db'})")
    if not file.parent.is_dir():
        raise LogUnusable(f"the directory {file.parent} does not exist: create it first, or name a file in an "
                          "existing directory (tether creates the log's file, not its directory)")


def _unusable(file: Path, exc: sqlite3.Error) -> LogUnusable:
    if type(exc) is sqlite3.DatabaseError:  # (not one of its subclasses: "file is not a database", "malformed")
        return LogUnusable(f"{file} is not a tether log: SQLite cannot read it ({exc}); name the log's file, or move "
                           "this one away")
    return LogUnusable(f"cannot open the log {file} ({exc}): check the path and its permissions")


class SqliteLog:
    """:class:`~tether.adapters.log.EventLog` on one SQLite file. Open with :meth:`open` (or ``open_log``)."""

    def __init__(
        self, path: Path, writer: aiosqlite.Connection, *, poll_interval: float, on_corrupt: OnCorrupt,
        synchronous: str, tail_size: int = 2048,
    ) -> None:
        self.path = path
        self.poll_interval = poll_interval
        self.on_corrupt: OnCorrupt = on_corrupt
        self._synchronous = synchronous
        self._writer = writer
        self._inline: sqlite3.Connection | None = None  # the event loop's own connection for writes (module doc)
        self._unchecked = 0  # bytes written on it since the last checkpoint
        self._checkpoint: asyncio.Future[Any] | None = None
        self._appended = {stream: asyncio.Event() for stream in STREAMS}
        self._tails = {stream: _Tail(tail_size) for stream in STREAMS}
        self._readers: set[aiosqlite.Connection] = set()
        self._closed = False
        self.yield_every = 16  # scan: chunks between two turns of the event loop

    # -- lifecycle -------------------------------------------------------------------------------------------

    @classmethod
    async def open(
        cls, path: str | os.PathLike[str], *, poll_interval: float = 0.5, on_corrupt: OnCorrupt = "dead_letter",
        synchronous: str = "NORMAL", tail_size: int = 2048, inline_writes: bool = True,
    ) -> SqliteLog:
        """Open (creating if needed) the log at ``path``.

        ``synchronous`` defaults to NORMAL, SQLite's recommendation in WAL mode: a commit survives a crash of the
        process, and a power loss can only drop the last commits, never corrupt the file. That tail is rebuilt from
        the API (the watches relist), and a fsync per commit would otherwise be most of a decision's latency. Use
        FULL to fsync every commit. ``tail_size``: how many of its last appended rows per stream this process
        hands to its followers without a read (module doc, "In-process hand-off"; 0 turns it off)."""
        if on_corrupt not in ("dead_letter", "raise"):
            raise ValueError(f"on_corrupt must be 'dead_letter' or 'raise', not {on_corrupt!r}")
        if synchronous.upper() not in ("FULL", "NORMAL", "OFF", "EXTRA"):
            raise ValueError(f"bad synchronous mode {synchronous!r}")
        file = Path(path)
        _check_usable(file)
        try:
            writer = await aiosqlite.connect(file, isolation_level=None)
        except sqlite3.Error as exc:
            raise _unusable(file, exc) from exc
        try:
            await writer.execute("PRAGMA busy_timeout = 10000")
            await writer.execute("PRAGMA journal_mode = WAL")
            await writer.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            await writer.execute(f"PRAGMA journal_size_limit = {int(WAL_SIZE_LIMIT)}")
            await writer.executescript(_SCHEMA)
            await _add_version_column(writer)
        except BaseException as exc:
            await writer.close()
            if isinstance(exc, sqlite3.Error):
                raise _unusable(file, exc) from exc
            raise
        log_ = cls(file, writer, poll_interval=poll_interval, on_corrupt=on_corrupt, synchronous=synchronous,
                   tail_size=tail_size)
        if inline_writes:
            inline = sqlite3.connect(file, isolation_level=None, check_same_thread=False)
            inline.execute("PRAGMA busy_timeout = 0")  # never wait on the event loop: busy → the writer's thread
            inline.execute("PRAGMA wal_autocheckpoint = 0")  # checkpoints run on the writer's thread
            inline.execute(f"PRAGMA synchronous = {synchronous.upper()}")
            inline.execute(f"PRAGMA journal_size_limit = {int(WAL_SIZE_LIMIT)}")
            log_._inline = inline
        return log_

    async def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for reader in list(self._readers):
            await reader.close()
        self._readers.clear()
        if self._checkpoint is not None:
            with contextlib.suppress(Exception):
                await self._checkpoint
        if self._inline is not None:
            self._inline.close()
            self._inline = None
        await self._writer.close()

    async def __aenter__(self) -> SqliteLog:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    @asynccontextmanager
    async def _reader(self) -> AsyncIterator[aiosqlite.Connection]:
        conn = await aiosqlite.connect(self.path, isolation_level=None)
        self._readers.add(conn)
        try:
            await conn.execute("PRAGMA busy_timeout = 10000")
            # reads of the main file come straight from the page cache through a mapping instead of one pread()
            # per page (a replay reads hundreds of MB: ~5-10 % faster); the WAL is read as before
            await conn.execute("PRAGMA mmap_size = 1073741824")
            conn.text_factory = bytes  # bodies go to msgspec as bytes: no str round trip
            yield conn
        finally:
            if conn in self._readers:
                self._readers.discard(conn)
                await conn.close()

    async def _write(
        self, work: Callable[[sqlite3.Connection], _T], *, notify: Stream | None = None,
        bodies: Sequence[bytes] = (), inline: bool = True,
    ) -> _T:
        """Run ``work`` in one write transaction (module doc, "Connections"): on the event loop's connection when
        ``inline`` and the database is not locked, else as one job on the writer's thread. Once it committed — even
        if the caller was cancelled meanwhile — the rows ``bodies`` it inserted in ``notify`` (``work`` returns the
        offset of the first) go to that stream's tail and its followers are woken."""

        def transaction(conn: sqlite3.Connection) -> _T:
            conn.execute("BEGIN IMMEDIATE")
            try:
                result = work(conn)
                conn.execute("COMMIT")
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            return result

        def committed(first: _T) -> None:
            if notify is not None:
                if bodies and isinstance(first, int):
                    self._tails[notify].add(first, bodies)
                self._notify(notify)

        conn = self._inline
        if inline and conn is not None:
            try:
                result = transaction(conn)
            except sqlite3.OperationalError as exc:
                if "locked" not in str(exc) and "busy" not in str(exc):
                    raise
                # another connection (a snapshot being written, another process) holds the write lock: queue the
                # transaction on the writer's thread, which waits for the lock (busy_timeout) off the event loop
            else:
                committed(result)
                self._unchecked += sum(len(b) for b in bodies) + 512
                if self._unchecked >= CHECKPOINT_BYTES:
                    self._start_checkpoint()
                return result

        writer = self._writer
        done: asyncio.Future[_T] = _submit(writer, lambda: transaction(writer._conn))

        def finished(future: asyncio.Future[_T]) -> None:
            if future.cancelled() or future.exception() is not None:  # retrieved: never "exception never retrieved"
                return
            committed(future.result())

        done.add_done_callback(finished)
        return await asyncio.shield(done)

    def _start_checkpoint(self) -> None:
        """Copy the WAL back into the database (PASSIVE: never blocks a writer) on the writer's thread, so that the
        WAL does not grow without bound and its fsync does not run on the event loop."""
        if self._checkpoint is not None and not self._checkpoint.done():
            return
        self._unchecked = 0
        writer = self._writer
        self._checkpoint = _submit(writer, lambda: writer._conn.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall())

        def retrieved(future: asyncio.Future[Any]) -> None:
            if not future.cancelled() and future.exception() is not None:
                log.warning("WAL checkpoint failed: %s", future.exception())

        self._checkpoint.add_done_callback(retrieved)

    def _notify(self, stream: Stream) -> None:
        event = self._appended[stream]
        self._appended[stream] = asyncio.Event()
        event.set()

    # -- writing ---------------------------------------------------------------------------------------------

    @staticmethod
    def _prepare(stream: Stream, records: Sequence[Record]
                 ) -> list[tuple[Record, tuple[int, str, str, str, bytes, str]]]:
        """Each record as stored (stamped, without position) with its row but the offset (on the event loop)."""
        out: list[tuple[Record, tuple[int, str, str, str, bytes, str]]] = []
        now = 0
        for record in records:
            if stream == "events" and not isinstance(record, EventRecord):
                raise TypeError(f"the events stream takes EventRecord, not {type(record).__name__}")
            if stream == "commands" and not isinstance(record, CommandRecord):
                raise TypeError(f"the commands stream takes CommandRecord, not {type(record).__name__}")
            clean = record
            if record.at_ms == 0:  # the append time, when the source did not stamp it
                now = now or _now_ms()
                clean = msgspec.structs.replace(clean, at_ms=now)
            if record.offset or record.partition:  # the body never carries a position: the offset column does
                clean = msgspec.structs.replace(clean, offset=0, partition=0)
            version = object_version(clean) if isinstance(clean, EventRecord) else ""
            out.append((clean, (clean.at_ms, clean.key, _type_name(clean), clean.causation, encode(clean), version)))
        return out

    @staticmethod
    def _insert(conn: sqlite3.Connection, stream: Stream, rows: list[tuple[int, str, str, str, bytes, str]]) -> int:
        """Insert ``rows`` after the last offset (inside a write job); returns the offset of the first."""
        (last,) = conn.execute(f"SELECT coalesce(max(offset), 0) FROM {stream}").fetchone()
        first = int(last) + 1
        if stream == "events":
            conn.executemany(
                "INSERT INTO events (offset, at_ms, key, type, causation, body, version) "
                "VALUES (?, ?, ?, ?, ?, CAST(? AS TEXT), ?)",
                [(first + i, *row) for i, row in enumerate(rows)],
            )
        else:
            conn.executemany(
                f"INSERT INTO {stream} (offset, at_ms, key, type, causation, body) "
                "VALUES (?, ?, ?, ?, ?, CAST(? AS TEXT))",
                [(first + i, *row[:5]) for i, row in enumerate(rows)],
            )
        return first

    @staticmethod
    def _set_position(conn: sqlite3.Connection, consumer: str, stream: Stream, position: Position) -> None:
        conn.executemany(
            "INSERT INTO positions (consumer, stream, partition, offset) VALUES (?, ?, ?, ?) "
            "ON CONFLICT (consumer, stream, partition) DO UPDATE SET offset = excluded.offset",
            [(consumer, stream, partition, offset) for partition, offset in position.items()],
        )

    @staticmethod
    def _stored(prepared: list[tuple[Record, Any]], first: int) -> list[Record]:
        return [msgspec.structs.replace(clean, offset=first + i) for i, (clean, _) in enumerate(prepared)]

    async def append(self, stream: Stream, records: Sequence[Record]) -> list[Record]:
        """Append ``records`` in one transaction; returns them with offsets (and ``at_ms`` if it was 0)."""
        stream = _check_stream(stream)
        if not records:
            return []
        prepared = self._prepare(stream, records)
        rows = [row for _, row in prepared]
        first = await self._write(lambda conn: self._insert(conn, stream, rows), notify=stream,
                                  bodies=[row[4] for row in rows])
        return self._stored(prepared, first)

    async def commit(
        self, batch: Batch, *, consumer: str, produced: Sequence[Record] = (), to: Stream | None = None
    ) -> list[Record]:
        """Append ``produced`` to ``to`` and move ``consumer`` past ``batch`` in ONE transaction."""
        source = _check_stream(batch.stream)
        if produced and to is None:
            raise ValueError("commit: produced records need a target stream (to=...)")
        target = _check_stream(to) if to is not None and produced else None
        prepared = self._prepare(target, produced) if target is not None else []
        rows = [row for _, row in prepared]
        position = dict(batch.position)

        def work(conn: sqlite3.Connection) -> int:
            first = self._insert(conn, target, rows) if target is not None else 0
            self._set_position(conn, consumer, source, position)
            return first

        first = await self._write(work, notify=target, bodies=[row[4] for row in rows])
        return self._stored(prepared, first) if target is not None else []

    async def save_snapshot(self, snapshot: Snapshot) -> None:
        row = (snapshot.name, json.dumps(snapshot.position), snapshot.state, snapshot.at_ms or _now_ms())
        await self._write(lambda conn: conn.execute(
            "INSERT INTO snapshots (name, position, state, at_ms) VALUES (?, ?, ?, ?) ON CONFLICT (name) "
            "DO UPDATE SET position = excluded.position, state = excluded.state, at_ms = excluded.at_ms", row),
            inline=False)  # megabytes: not on the event loop

    async def _dead_letter(self, stream: Stream, offset: int, reason: str, body: bytes) -> None:
        row = (stream, offset, reason, body, _now_ms())
        await self._write(lambda conn: conn.execute(
            "INSERT OR IGNORE INTO dead_letters (stream, offset, reason, body, at_ms) "
            "VALUES (?, ?, ?, CAST(? AS TEXT), ?)", row))

    # -- reading ---------------------------------------------------------------------------------------------

    async def _query(self, sql: str, params: Sequence[Any] = ()) -> list[Any]:
        """Every row of one query, as **one job** on the writer's thread (the statement runs to its end there).

        Run as aiosqlite's separate execute/fetch/close jobs, a write transaction queued meanwhile on the same
        thread would start while the query's read snapshot is still open; if the event loop's connection
        committed since, SQLite cannot upgrade that stale snapshot and ``BEGIN IMMEDIATE`` fails at once with
        "database is locked", without waiting (the busy timeout does not apply to it)."""
        writer = self._writer
        return await _submit(writer, lambda: writer._conn.execute(sql, params).fetchall())

    async def position(self, stream: Stream, *, consumer: str) -> Position:
        rows = await self._query("SELECT partition, offset FROM positions WHERE consumer = ? AND stream = ?",
                                 (consumer, stream))
        return {int(p): int(o) for p, o in rows}

    async def end(self, stream: Stream) -> Position:
        rows = await self._query(f"SELECT max(offset) FROM {_check_stream(stream)}")
        return {0: int(rows[0][0])} if rows and rows[0][0] is not None else {}

    async def load_snapshot(self, name: str) -> Snapshot | None:
        rows = await self._query("SELECT position, state, at_ms FROM snapshots WHERE name = ?", (name,))
        row = rows[0] if rows else None
        if row is None:
            return None
        position = {int(p): int(o) for p, o in json.loads(row[0]).items()}
        return Snapshot(name=name, position=position, state=bytes(row[1]), at_ms=int(row[2]))

    async def dead_letters(self) -> list[DeadLetter]:
        rows = await self._query(  # (the body as bytes: a corrupt record need not even be UTF-8)
            "SELECT stream, offset, reason, CAST(coalesce(body, '') AS BLOB), at_ms FROM dead_letters "
            "ORDER BY stream, offset")
        return [DeadLetter(s, int(o), r, bytes(b).decode("utf-8", "replace"), int(t)) for s, o, r, b, t in rows]

    async def _decode_rows(self, stream: Stream, rows: list[Any]) -> list[Record]:
        """Decode ``(offset, body)`` rows; corrupt ones are dead-lettered or raise (``on_corrupt``)."""
        decoding = _Decoding(stream, rows, _decoder(stream), strict=False)
        out = list(decoding)
        for offset, body, exc in decoding.corrupt:
            await self._corrupt(stream, offset, body, exc)
        return out

    async def _corrupt(self, stream: Stream, offset: int, body: bytes | str, exc: Exception) -> None:
        reason = _reason(exc)
        if self.on_corrupt == "raise":
            raise CorruptRecord(stream, offset, reason) from exc
        log.warning("skipping corrupt record %s:%s (%s); see the dead_letters table", stream, offset, reason)
        raw = body if isinstance(body, bytes) else body.encode()
        await self._dead_letter(stream, offset, reason, raw)

    async def _bound_for_ms(self, conn: aiosqlite.Connection, stream: Stream, until_ms: int) -> int | None:
        """The last offset of the prefix of the stream appended at or before ``until_ms`` (None: no bound)."""
        async with conn.execute(_FIRST_AFTER_MS.format(stream=stream), (until_ms,)) as cur:
            return _bound_before(await cur.fetchone())

    async def read(
        self, stream: Stream, *, after: Position | None = None, until_offset: int | None = None,
        until_ms: int | None = None, batch_size: int = 4096,
    ) -> AsyncIterator[list[Record]]:
        """Records after ``after`` up to ``until_offset`` (inclusive) and up to the first record appended after
        ``until_ms`` (a prefix of the log, even if clocks went backwards), in order, in batches.

        The whole read is one SQLite read transaction: records appended meanwhile are not included."""
        stream = _check_stream(stream)
        start = (after or {}).get(0, 0)
        async with self._reader() as conn:
            await conn.execute("BEGIN")  # one snapshot for the bound query and the scan
            by_time = await self._bound_for_ms(conn, stream, until_ms) if until_ms is not None else None
            async with conn.execute(*_range_query(stream, start, until_offset, by_time)) as cur:
                # read ahead: SQLite fetches the next batch on aiosqlite's thread (releasing the GIL while it
                # reads pages) while this one is decoded and used
                ahead = asyncio.ensure_future(cur.fetchmany(batch_size))
                try:
                    while rows := await ahead:
                        ahead = asyncio.ensure_future(cur.fetchmany(batch_size))
                        records = await self._decode_rows(stream, list(rows))
                        if records:
                            yield records
                finally:
                    if not ahead.done():  # the reader stopped early: let the fetch finish before the cursor closes
                        with contextlib.suppress(Exception):
                            await ahead
            await conn.execute("COMMIT")

    async def scan(
        self, stream: Stream, *, after: Position | None = None, until_offset: int | None = None,
        until_ms: int | None = None, chunk: int = 256, decode: Callable[[bytes], Any] | None = None,
        undecoded: bool = False,
    ) -> AsyncIterator[_Decoding]:
        """What :meth:`read` returns, as chunks of ``chunk`` stored rows decoded one by one while iterated
        (``adapters.log.scan``): for a bulk reader that uses each record once, right away (a replay).

        Two differences from ``read`` make a replay ~1.5x faster (ops/bench/replay.py):

        * *Locality.* ``read`` decodes a whole batch before its caller sees the first record, so a fold meets
          records long evicted from the CPU's caches; here a record is decoded just before it is used, and a chunk
          of rows (~350 kB) stays in the cache.
        * *No reader thread.* The rows are fetched on the calling thread, with its own connection, in one read
          transaction. ``read``'s read-ahead on aiosqlite's thread does not overlap with the caller's work as
          one would hope: the thread needs the GIL for every row it builds, and waits up to the interpreter's
          switch interval for it while the caller computes. A chunk is fetched in well under a millisecond,
          and the event loop runs between every ``yield_every`` chunks, so its other tasks are not starved.

        Corrupt records are handled as by ``read`` (dead-lettered once the chunk was iterated, or raised).
        ``decode`` replaces the stream's decoder (``adapters.log.scan``'s command heads). ``undecoded`` (events
        only): each record that carries an object's version comes undecoded, as a
        :class:`~tether.core.envelope.StoredEvent` (``projections.replay_fold``: versions most of which are
        superseded)."""
        stream = _check_stream(stream)
        if undecoded and stream != "events":
            raise ValueError("only events come undecoded")
        start = (after or {}).get(0, 0)
        decode = decode or _decoder(stream)
        conn = sqlite3.connect(self.path, isolation_level=None, check_same_thread=False)
        try:
            conn.execute("PRAGMA busy_timeout = 10000")
            conn.execute("PRAGMA mmap_size = 1073741824")  # as _reader
            conn.execute("BEGIN")  # one snapshot for the bound query and the scan
            by_time = None if until_ms is None else \
                _bound_before(conn.execute(_FIRST_AFTER_MS.format(stream=stream), (until_ms,)).fetchone())
            sql, params = _range_query(stream, start, until_offset, by_time)
            if undecoded:  # (the key only where there is a version: None costs nothing to build)
                sql = sql.replace("FROM events", _UNDECODED_COLUMNS, 1)
            cursor = conn.execute(sql, params)
            strict = self.on_corrupt == "raise"
            served = 0
            while rows := cursor.fetchmany(chunk):
                decoding = _Undecoded(rows, decode, strict=strict) if undecoded else \
                    _Decoding(stream, rows, decode, strict=strict)
                yield decoding
                for offset, body, exc in decoding.corrupt:
                    await self._corrupt(stream, offset, body, exc)
                served += 1
                if served % self.yield_every == 0:
                    await asyncio.sleep(0)
            conn.execute("COMMIT")
        finally:
            conn.close()

    async def follow(
        self, stream: Stream, *, after: Position | None = None, batch_size: int = 512, follow: bool = True
    ) -> AsyncIterator[Batch]:
        """Batches of records after ``after``; when caught up, waits for appends (``follow``) or stops.

        Each batch's ``position`` is the offset of its last record, including corrupt records skipped at its
        end, so a consumer committing it never sees them again."""
        stream = _check_stream(stream)
        cursor = (after or {}).get(0, 0)
        tail = self._tails[stream]
        async with self._reader() as conn:
            from_file = True  # the first read of an iteration, and every wake-up by the poll, read the file
            while True:
                signal = self._appended[stream]  # taken before the query: an append after it sets this one
                rows = None if from_file else tail.after(cursor, batch_size)
                if rows is None or (not rows and not follow):  # "caught up" is only ever final from the file
                    # one job on the reader's thread (execute + fetch + close), not three
                    rows = list(await _submit(conn, conn._execute_fetchall,
                        f"SELECT offset, CAST(body AS BLOB) FROM {stream} WHERE offset > ? ORDER BY offset LIMIT ?",
                        (cursor, batch_size),
                    ))
                    from_file = False
                if rows:
                    cursor = int(rows[-1][0])
                    records = await self._decode_rows(stream, rows)
                    if records:
                        yield Batch(stream=stream, records=records, position={0: cursor})  # type: ignore[arg-type]
                    continue
                if not follow:
                    return
                from_file = await self._wait(conn, stream, signal, cursor)

    async def _wait(self, conn: aiosqlite.Connection, stream: Stream, signal: asyncio.Event, cursor: int) -> bool:
        """Until an in-process append signals (False), or (other processes) ``max(offset)`` moved past ``cursor``
        (True: read the file)."""
        while True:
            try:
                await asyncio.wait_for(signal.wait(), self.poll_interval)
                return False
            except TimeoutError:
                pass
            async with conn.execute(f"SELECT coalesce(max(offset), 0) FROM {stream}") as cur:
                row = await cur.fetchone()
            if row is not None and int(row[0]) > cursor:
                return True

    async def consume(
        self, stream: Stream, *, consumer: str, batch_size: int = 512, follow: bool = True
    ) -> AsyncIterator[Batch]:
        """Batches after ``consumer``'s committed position (see :meth:`follow`). The iterator keeps its own
        cursor, so batches are not repeated within one iteration even if the consumer does not commit."""
        after = await self.position(stream, consumer=consumer)
        async for batch in self.follow(stream, after=after, batch_size=batch_size, follow=follow):
            yield batch

    # -- explain support (not in the Protocol: the Kafka backend answers these by scanning) ------------------

    async def records_by_key(self, stream: Stream, key: str, *, until_offset: int | None = None) -> list[Record]:
        return await self._select(stream, "key = ?", (key,), until_offset)

    async def commands_caused_by(self, causations: Sequence[str]) -> list[Record]:
        out: list[Record] = []
        for i in range(0, len(causations), 500):
            chunk = list(causations[i : i + 500])
            out += await self._select("commands", f"causation IN ({','.join('?' * len(chunk))})", tuple(chunk), None)
        return sorted(out, key=lambda r: r.offset)

    async def keys(self, stream: Stream, *, until_offset: int | None = None) -> list[str]:
        """Every distinct key of ``stream`` (up to ``until_offset``), sorted: what ``--explain`` can name."""
        stream = _check_stream(stream)
        where, params = ("WHERE offset <= ?", (until_offset,)) if until_offset is not None else ("", ())
        async with self._reader() as conn, conn.execute(
            f"SELECT DISTINCT key FROM {stream} {where}", params
        ) as cur:  # (the readers' text_factory is bytes: rows are decoded by msgspec, not by sqlite3)
            return sorted(k.decode() if isinstance(k, bytes) else str(k) for (k,) in await cur.fetchall())

    async def records_at(self, stream: Stream, offsets: Sequence[int]) -> list[Record]:
        out: list[Record] = []
        for i in range(0, len(offsets), 500):
            chunk = list(offsets[i : i + 500])
            out += await self._select(stream, f"offset IN ({','.join('?' * len(chunk))})", tuple(chunk), None)
        return sorted(out, key=lambda r: r.offset)

    async def _select(
        self, stream: Stream, where: str, params: tuple[Any, ...], until_offset: int | None
    ) -> list[Record]:
        stream = _check_stream(stream)
        if until_offset is not None:
            where += " AND offset <= ?"
            params += (until_offset,)
        async with self._reader() as conn, conn.execute(
            f"SELECT offset, CAST(body AS BLOB) FROM {stream} WHERE {where} ORDER BY offset", params
        ) as cur:
            rows = list(await cur.fetchall())
        return await self._decode_rows(stream, rows)


def _conforms(log: SqliteLog) -> EventLog:
    """Static check (mypy): SqliteLog implements the EventLog Protocol."""
    return log
