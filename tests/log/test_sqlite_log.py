"""SqliteLog: append/read/scan/consume/commit, atomicity, resume, wake-ups, bounds, corrupt records, snapshots."""

from __future__ import annotations

import asyncio
import contextlib
import sqlite3
from contextlib import aclosing
from pathlib import Path

import pytest

from tether.adapters.log import Batch, Snapshot, scan
from tether.adapters.log.sqlite import CorruptRecord, SqliteLog
from tether.adapters.log.url import open_log, sqlite_path
from tether.core.commands import AddFinalizer, command_id
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import ObjectObserved
from tether.core.kube import KubeObject, ObjectMeta, ObjectRef, raw_object


def event(name: str, at_ms: int = 1_700_000_000_000, ns: str = "ns1") -> EventRecord:
    obj = KubeObject(
        api_version="datadependency.volcano.sh/v1alpha1", kind="DataSourceClaim",
        metadata=ObjectMeta(name=name, namespace=ns, uid=f"uid-{name}", resource_version="1"),
        spec=raw_object({"system": "amoro", "dataSourceType": "table", "dataSourceName": f"db.{name}"}),
    )
    return EventRecord(at_ms=at_ms, source="watch", key=obj.key, event=ObjectObserved(obj=obj))


def command(name: str, causation: str) -> CommandRecord:
    cmd = AddFinalizer(
        target=ObjectRef(api_version="datadependency.volcano.sh/v1alpha1", kind="DataSourceClaim", name=name,
                         namespace="ns1"),
        finalizer="datadependency.volcano.sh/finalizer",
    )
    return CommandRecord(id=command_id(cmd), at_ms=1_700_000_000_000, key=f"DataSourceClaim/ns1/{name}",
                         command=cmd, causation=causation, reason="claims carry the finalizer", decider="claims")


async def collect(log: SqliteLog, stream: str = "events", *, via: str = "read", **kw: object
                  ) -> list[EventRecord | CommandRecord]:
    """The records ``read`` returns, or (``via="scan"``) those ``scan`` yields, which must be the same."""
    out: list[EventRecord | CommandRecord] = []
    if via == "scan":
        kw.pop("batch_size", None)
        async for chunk in log.scan(stream, **kw):  # type: ignore[arg-type]
            out += chunk
        return out
    async for batch in log.read(stream, **kw):  # type: ignore[arg-type]
        out += batch
    return out


@pytest.fixture(params=["read", "scan"])
def via(request: pytest.FixtureRequest) -> str:
    return str(request.param)


@pytest.fixture
async def log(tmp_path: Path):  # type: ignore[no-untyped-def]
    opened = await SqliteLog.open(tmp_path / "log.db", poll_interval=30.0)
    yield opened
    await opened.close()


async def test_append_assigns_offsets_and_read_returns_records_in_order(log: SqliteLog) -> None:
    stored = await log.append("events", [event("a"), event("b")])
    assert [r.offset for r in stored] == [1, 2]
    stored += await log.append("events", [event("c")])
    got = await collect(log)
    assert got == stored
    assert [r.key for r in got] == ["DataSourceClaim/ns1/a", "DataSourceClaim/ns1/b", "DataSourceClaim/ns1/c"]
    assert await log.end("events") == {0: 3}
    assert await log.end("commands") == {}


async def test_append_rejects_wrong_record_type_and_writes_nothing(log: SqliteLog) -> None:
    with pytest.raises(TypeError):
        await log.append("events", [event("a"), command("a", "0:1")])  # type: ignore[list-item]
    assert await collect(log) == []


async def test_append_stamps_missing_time_and_drops_foreign_offsets(log: SqliteLog) -> None:
    copied = event("a")
    copied.offset, copied.at_ms = 99, 0
    [stored] = await log.append("events", [copied])
    assert stored.offset == 1 and stored.at_ms > 0
    [read] = await collect(log)
    assert read.offset == 1 and read.at_ms == stored.at_ms


async def test_read_bounds_after_until_offset_and_until_ms(log: SqliteLog, via: str) -> None:
    await log.append("events", [event(f"e{i}", at_ms=1000 * i) for i in range(1, 11)])
    assert [r.offset for r in await collect(log, via=via, after={0: 3}, until_offset=6)] == [4, 5, 6]
    assert [r.offset for r in await collect(log, via=via, until_ms=4500)] == [1, 2, 3, 4]
    assert [r.offset for r in await collect(log, via=via, until_ms=4500, until_offset=2)] == [1, 2]
    # a prefix of the log: a later record with an earlier clock is not pulled in
    await log.append("events", [event("late", at_ms=500)])
    assert [r.offset for r in await collect(log, via=via, until_ms=4500)] == [1, 2, 3, 4]
    assert len(await collect(log, via=via, batch_size=3)) == 11
    assert await collect(log, via=via) == await collect(log)


async def test_scan_decodes_each_chunk_while_it_is_iterated_and_lets_the_event_loop_run(log: SqliteLog) -> None:
    await log.append("events", [event(f"e{i}") for i in range(10)])
    log.yield_every = 1
    ticks = 0

    async def ticker() -> None:
        nonlocal ticks
        while True:
            ticks += 1
            await asyncio.sleep(0)

    task = asyncio.create_task(ticker())
    seen, sizes = [], []
    async with aclosing(log.scan("events", chunk=4)) as chunks:
        async for chunk in chunks:
            assert chunk.decoded == chunk.rows  # nothing corrupt: the count is the rows' before iterating, too
            sizes.append((chunk.rows, chunk.last_offset))
            seen += [r.offset for r in chunk]
    task.cancel()
    assert seen == list(range(1, 11)) and sizes == [(4, 4), (4, 8), (2, 10)]
    assert ticks >= 2  # the other task ran between chunks


async def test_scan_through_a_log_without_it_falls_back_to_read(log: SqliteLog) -> None:
    class ReadOnly:  # an EventLog that only reads (a Kafka log has no scan)
        def read(self, stream, **kw):  # type: ignore[no-untyped-def]
            return log.read(stream, **kw)

    await log.append("events", [event(f"e{i}") for i in range(3)])
    chunks = [chunk async for chunk in scan(ReadOnly(), "events", after={0: 1})]  # type: ignore[arg-type]
    assert [(c.rows, c.decoded, c.last_offset) for c in chunks] == [(2, 2, 3)]
    assert [r.offset for r in chunks[0]] == [2, 3]


async def test_consume_then_commit_is_atomic_and_resumes_after_reopen(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log = await SqliteLog.open(path)
    await log.append("events", [event(f"e{i}") for i in range(5)])
    async with aclosing(log.consume("events", consumer="decider", batch_size=2, follow=False)) as batches:
        first = await anext(batches)
    assert [r.offset for r in first.records] == [1, 2]
    produced = await log.commit(first, consumer="decider", produced=[command("e0", "0:1")], to="commands")
    assert [r.offset for r in produced] == [1]
    assert await log.position("events", consumer="decider") == {0: 2}
    await log.close()

    reopened = await SqliteLog.open(path)
    seen = [b async for b in reopened.consume("events", consumer="decider", follow=False)]
    assert [r.offset for b in seen for r in b.records] == [3, 4, 5]
    assert [r.causation for r in await collect(reopened, "commands")] == ["0:1"]
    await reopened.close()


async def test_a_failure_inside_commit_leaves_neither_records_nor_position(
    log: SqliteLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    await log.append("events", [event("a"), event("b")])
    batch = Batch(stream="events", records=await collect(log), position={0: 2})  # type: ignore[arg-type]

    def crash(*args: object) -> None:  # runs inside the write transaction, on the writer's thread
        raise RuntimeError("crash between the append and the position")

    monkeypatch.setattr(log, "_set_position", crash)
    with pytest.raises(RuntimeError):
        await log.commit(batch, consumer="decider", produced=[command("a", "0:1")], to="commands")
    monkeypatch.undo()
    assert await collect(log, "commands") == []
    assert await log.position("events", consumer="decider") == {}
    # and the log still works afterwards (the transaction was rolled back, not left open)
    await log.commit(batch, consumer="decider", produced=[command("a", "0:1")], to="commands")
    assert len(await collect(log, "commands")) == 1
    assert await log.position("events", consumer="decider") == {0: 2}


async def test_commit_without_produced_only_moves_the_position(log: SqliteLog) -> None:
    await log.append("events", [event("a")])
    await log.commit(Batch(stream="events", records=[], position={0: 1}), consumer="c")
    assert await log.position("events", consumer="c") == {0: 1}
    assert await log.position("commands", consumer="c") == {}
    with pytest.raises(ValueError):
        await log.commit(Batch(stream="events", records=[], position={0: 1}), consumer="c",
                         produced=[command("a", "0:1")])


async def test_follow_wakes_up_on_an_append_from_another_task_without_polling(log: SqliteLog) -> None:
    # poll_interval is 30 s: only the in-process notification can deliver the record in time
    await log.append("events", [event("a")])
    received: list[int] = []
    got_second = asyncio.Event()

    async def consumer() -> None:
        async for batch in log.consume("events", consumer="c"):
            received.extend(r.offset for r in batch.records)
            await log.commit(batch, consumer="c")
            if 2 in received:
                got_second.set()
                return

    task = asyncio.create_task(consumer())
    for _ in range(50):  # let it catch up and start waiting
        await asyncio.sleep(0.01)
        if received:
            break
    assert received == [1]
    await log.append("events", [event("b")])
    await asyncio.wait_for(got_second.wait(), timeout=5)
    await asyncio.wait_for(task, timeout=5)
    assert received == [1, 2]


async def test_follow_sees_appends_from_another_process_by_slow_poll(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    reader = await SqliteLog.open(path, poll_interval=0.05)
    writer = await SqliteLog.open(path)  # another SqliteLog on the same file: no shared notification
    try:
        async def first_batch() -> list[int]:
            async for batch in reader.follow("events"):
                return [r.offset for r in batch.records]
            return []

        task = asyncio.create_task(first_batch())
        await asyncio.sleep(0.1)
        await writer.append("events", [event("x")])
        assert await asyncio.wait_for(task, timeout=5) == [1]
    finally:
        await writer.close()
        await reader.close()


def corrupt(path: Path, offset: int, body: str) -> None:
    with sqlite3.connect(path) as db:
        db.execute("UPDATE events SET body = ? WHERE offset = ?", (body, offset))


async def test_corrupt_records_are_dead_lettered_and_skipped(tmp_path: Path, via: str) -> None:
    path = tmp_path / "log.db"
    log = await SqliteLog.open(path)
    await log.append("events", [event("a"), event("b"), event("c")])
    corrupt(path, 2, '{"at_ms": 1, "source": "watch"')
    assert [r.offset for r in await collect(log, via=via)] == [1, 3]
    [chunk] = [c async for c in log.scan("events")]
    assert [r.offset for r in chunk] == [1, 3] and (chunk.rows, chunk.decoded, chunk.last_offset) == (3, 2, 3)
    batches = [b async for b in log.consume("events", consumer="c", follow=False)]
    assert [r.offset for b in batches for r in b.records] == [1, 3]
    [dead] = await log.dead_letters()  # recorded once, however often it is read
    assert (dead.stream, dead.offset) == ("events", 2)
    assert "DecodeError" in dead.reason and dead.body.startswith('{"at_ms"')
    await log.close()


async def test_corrupt_records_raise_when_configured(tmp_path: Path, via: str) -> None:
    path = tmp_path / "log.db"
    log = await SqliteLog.open(path, on_corrupt="raise")
    await log.append("events", [event("a"), event("b")])
    corrupt(path, 2, '{"at_ms": 1, "source": "watch", "key": "k", "event": {"type": "NoSuchEvent"}}')
    with pytest.raises(CorruptRecord) as err:
        await collect(log, via=via)
    assert (err.value.stream, err.value.offset) == ("events", 2)
    assert await log.dead_letters() == []
    await log.close()


async def test_newer_schema_is_a_corrupt_record_not_a_crash(tmp_path: Path, via: str) -> None:
    path = tmp_path / "log.db"
    log = await SqliteLog.open(path)
    await log.append("events", [event("a")])
    with sqlite3.connect(path) as db:
        db.execute("UPDATE events SET body = json_set(body, '$.schema', 99) WHERE offset = 1")
    assert await collect(log, via=via) == []
    [dead] = await log.dead_letters()
    assert "newer than this tether" in dead.reason
    await log.close()


async def test_snapshots_save_and_load(log: SqliteLog) -> None:
    assert await log.load_snapshot("world") is None
    await log.save_snapshot(Snapshot(name="world", position={0: 7}, state=b"\x00state", at_ms=5))
    await log.save_snapshot(Snapshot(name="world", position={0: 9}, state=b"newer", at_ms=6))
    await log.save_snapshot(Snapshot(name="other", position={}, state=b"", at_ms=1))
    assert await log.load_snapshot("world") == Snapshot(name="world", position={0: 9}, state=b"newer", at_ms=6)
    assert await log.load_snapshot("other") == Snapshot(name="other", position={}, state=b"", at_ms=1)


async def test_explain_queries_by_key_and_causation(log: SqliteLog) -> None:
    await log.append("events", [event("a"), event("b"), event("a")])
    await log.append("commands", [command("a", "0:1"), command("b", "0:2"), command("a", "0:3")])
    assert [r.offset for r in await log.records_by_key("events", "DataSourceClaim/ns1/a")] == [1, 3]
    assert [r.offset for r in await log.records_by_key("events", "DataSourceClaim/ns1/a", until_offset=2)] == [1]
    assert [r.offset for r in await log.commands_caused_by(["0:2", "0:3"])] == [2, 3]
    assert [r.offset for r in await log.records_at("events", [3, 1])] == [1, 3]


async def test_open_log_urls(tmp_path: Path) -> None:
    assert sqlite_path(f"sqlite://{tmp_path}/x.db") == (f"{tmp_path}/x.db", {})
    assert sqlite_path("sqlite:rel/x.db?poll_interval=2") == ("rel/x.db", {"poll_interval": "2"})
    assert sqlite_path("sqlite://./x.db") == ("./x.db", {})
    opened = await open_log(f"sqlite://{tmp_path}/x.db?poll_interval=0.2&on_corrupt=raise")
    assert isinstance(opened, SqliteLog)
    assert (opened.poll_interval, opened.on_corrupt) == (0.2, "raise")
    await opened.close()
    bare = await open_log(str(tmp_path / "y.db"))
    assert isinstance(bare, SqliteLog)
    await bare.close()
    with pytest.raises(ValueError, match="unknown log URL scheme"):
        await open_log("nats://x")
    with pytest.raises(ValueError, match="unknown sqlite log option"):
        await open_log(f"sqlite://{tmp_path}/x.db?bogus=1")


async def test_open_log_resolves_kafka_lazily_by_name() -> None:
    opened = await open_log("kafka://127.0.0.1:1")  # constructed only: nothing connects before first use
    assert type(opened).__name__ == "KafkaLog" and type(opened).__module__ == "tether.adapters.log.kafka"
    await opened.close()


async def test_a_write_cancelled_while_beginning_leaves_the_log_writable(tmp_path) -> None:
    """A task cancelled while its BEGIN runs must not leave the transaction open for every later write."""
    import asyncio

    from tether.adapters.log.sqlite import SqliteLog
    from tether.core.envelope import EventRecord
    from tether.core.events import TimerFired

    def record(i: int) -> EventRecord:
        return EventRecord(at_ms=1, source="t", key="k", event=TimerFired(timer_id=str(i), purpose="p", subject="s"))

    log = await SqliteLog.open(str(tmp_path / "t.db"))
    try:
        for i in range(20):  # cancel at various points of the append
            task = asyncio.create_task(log.append("events", [record(i)]))
            for _ in range(i % 4):
                await asyncio.sleep(0)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
        appended = await log.append("events", [record(99)])
        assert appended[0].offset >= 1
        offsets = [r.offset async for batch in log.read("events") for r in batch]
        assert offsets == sorted(set(offsets)) and offsets[-1] == appended[0].offset
    finally:
        await log.close()


# --- in-process hand-off (module doc of adapters/log/sqlite.py) ---------------------------------------------------


class FileReads:
    """Counts the queries followers send to their reader connections (each one a read of the file)."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        import aiosqlite

        self.count = 0
        original = aiosqlite.Connection._execute_fetchall

        def counting(conn: aiosqlite.Connection, sql: str, parameters: object) -> object:
            self.count += 1
            return original(conn, sql, parameters)

        monkeypatch.setattr(aiosqlite.Connection, "_execute_fetchall", counting)


async def _next(it: object) -> Batch:
    return await asyncio.wait_for(it.__anext__(), timeout=5)  # type: ignore[attr-defined]


async def test_a_live_follower_gets_this_process_appends_without_reading_them_back(
    log: SqliteLog, monkeypatch: pytest.MonkeyPatch
) -> None:
    reads = FileReads(monkeypatch)
    await log.append("events", [event("a")])
    async with aclosing(log.consume("events", consumer="c")) as batches:
        first = await _next(batches)  # a consumer that starts reads the file
        assert [r.offset for r in first.records] == [1] and reads.count == 1
        handed: list[EventRecord | CommandRecord] = []
        for name in ("b", "c"):
            stored = await log.append("events", [event(name, at_ms=0), event(name + "2")])
            batch = await _next(batches)
            assert [r.offset for r in batch.records] == [r.offset for r in stored]
            assert batch.position == {0: stored[-1].offset}
            handed += batch.records
        # ... and commits' records too, in another stream
        await log.commit(first, consumer="c", produced=[command("a", "0:1")], to="commands")
        async with aclosing(log.follow("commands")) as commands:
            assert [r.offset for r in (await _next(commands)).records] == [1]  # started: the file
            await log.commit(first, consumer="c", produced=[command("b", "0:1")], to="commands")
            [handed_command] = (await _next(commands)).records
        assert reads.count == 2  # the two starts, nothing else
    # exactly what a read of the file returns: same records, same offsets, same stamped time
    assert handed == (await collect(log))[1:]
    assert handed_command == (await collect(log, "commands"))[1]


async def test_a_follower_behind_the_tail_reads_the_file_in_order(tmp_path: Path) -> None:
    log = await SqliteLog.open(tmp_path / "log.db", poll_interval=30.0, tail_size=2)
    try:
        await log.append("events", [event("a")])
        async with aclosing(log.follow("events", batch_size=3)) as batches:
            assert [r.offset for r in (await _next(batches)).records] == [1]
            for i in range(8):  # the follower does not read meanwhile: the tail keeps only the last rows
                await log.append("events", [event(f"x{i}")])
            got: list[int] = []
            while len(got) < 8:
                got += [r.offset for r in (await _next(batches)).records]
            assert got == list(range(2, 10))
    finally:
        await log.close()


async def test_the_tail_never_holds_more_than_its_size(tmp_path: Path) -> None:
    """The in-process tail keeps the last ``tail_size`` rows of each stream and no more, whatever the batch sizes:
    it used to grow to twice its size before trimming, and in the soak held up to 6.4 MB of bodies, not 3.8, and freed
    half of them at once (docs/performance.md, "Soak")."""
    log = await SqliteLog.open(tmp_path / "log.db", poll_interval=30.0, tail_size=5)
    try:
        tail = log._tails["events"]
        offset = 0
        for size in (1, 3, 7, 2, 5, 1, 1, 9, 4):  # single rows, batches past the size, batches that straddle it
            await log.append("events", [event(f"e{offset + i}") for i in range(size)])
            offset += size
            assert len(tail.rows) == min(offset, 5)
            assert [o for o, _ in tail.rows] == list(range(offset - len(tail.rows) + 1, offset + 1))  # the last
            assert tail.start == tail.rows[0][0]
        await log.commit(Batch(stream="events", records=[], position={0: offset}), consumer="c",
                         produced=[command(f"c{i}", f"0:{i}") for i in range(12)], to="commands")
        assert len(log._tails["commands"].rows) == 5
        # and a follower still gets every record, from the file and then from the tail
        assert [r.offset for r in await collect(log)] == list(range(1, offset + 1))
    finally:
        await log.close()


async def test_a_gap_from_another_process_in_the_tail_is_read_from_the_file(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log = await SqliteLog.open(path, poll_interval=30.0)
    other = await SqliteLog.open(path)  # another process on the same file: no shared tail, no notification
    try:
        await log.append("events", [event("a")])
        async with aclosing(log.follow("events")) as batches:
            assert [r.offset for r in (await _next(batches)).records] == [1]
            await other.append("events", [event("from-other")])
            await log.append("events", [event("b")])  # offset 3: the tail restarts after the gap
            got: list[str] = []
            while len(got) < 2:
                got += [r.key for r in (await _next(batches)).records]
            assert got == ["DataSourceClaim/ns1/from-other", "DataSourceClaim/ns1/b"]
    finally:
        await other.close()
        await log.close()


async def test_a_follower_woken_by_the_poll_reads_what_another_process_appended_after_this_ones(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    log = await SqliteLog.open(path, poll_interval=0.05)
    other = await SqliteLog.open(path)
    try:
        async with aclosing(log.follow("events")) as batches:
            await log.append("events", [event("a")])
            assert [r.offset for r in (await _next(batches)).records] == [1]
            await log.append("events", [event("b")])  # the follower is at the end of this process's tail...
            assert [r.offset for r in (await _next(batches)).records] == [2]
            await other.append("events", [event("from-other")])  # ... which does not have this one
            assert [r.key for r in (await _next(batches)).records] == ["DataSourceClaim/ns1/from-other"]
    finally:
        await other.close()
        await log.close()


async def test_a_consumer_stopping_at_the_end_does_not_take_the_tail_for_the_end(tmp_path: Path) -> None:
    path = tmp_path / "log.db"
    log = await SqliteLog.open(path, poll_interval=30.0)
    other = await SqliteLog.open(path)
    try:
        await log.append("events", [event("a")])
        async with aclosing(log.follow("events", follow=False)) as batches:
            assert [r.offset for r in (await _next(batches)).records] == [1]
            await other.append("events", [event("from-other")])  # after this process's tail
            assert [r.offset for r in (await _next(batches)).records] == [2]
            with pytest.raises(StopAsyncIteration):
                await _next(batches)
    finally:
        await other.close()
        await log.close()


# --- where writes run (module doc, "Connections") ------------------------------------------------------------------


def run_without_suspending(coro: object) -> object:
    """Run a coroutine that must finish without ever waiting (for a thread, a lock, the event loop)."""
    try:
        coro.send(None)  # type: ignore[attr-defined]
    except StopIteration as done:
        return done.value
    coro.close()  # type: ignore[attr-defined]
    raise AssertionError("the coroutine suspended: it waited for something")


async def test_appends_and_commits_run_on_the_event_loop_without_waiting(log: SqliteLog) -> None:
    stored = run_without_suspending(log.append("events", [event("a"), event("b")]))
    assert [r.offset for r in stored] == [1, 2]  # type: ignore[union-attr]
    batch = Batch(stream="events", records=stored, position={0: 2})  # type: ignore[arg-type]
    produced = run_without_suspending(log.commit(batch, consumer="c", produced=[command("a", "0:1")], to="commands"))
    assert [r.offset for r in produced] == [1]  # type: ignore[union-attr]
    assert await log.position("events", consumer="c") == {0: 2}
    assert await collect(log) == stored


async def test_a_write_while_the_file_is_locked_waits_on_the_writers_thread_not_on_the_event_loop(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    log = await SqliteLog.open(path, poll_interval=30.0)
    other = sqlite3.connect(path, isolation_level=None, check_same_thread=False)  # another process, say
    try:
        await log.append("events", [event("a")])
        other.execute("BEGIN IMMEDIATE")  # holds the write lock
        other.execute("INSERT INTO events (offset, at_ms, key, type, body) VALUES (2, 1, 'k', 'T', '{}')")
        append = asyncio.create_task(log.append("events", [event("b")]))
        for _ in range(20):  # the event loop keeps running meanwhile
            await asyncio.sleep(0)
        assert not append.done()
        other.execute("COMMIT")
        stored = await asyncio.wait_for(append, timeout=10)
        assert [r.offset for r in stored] == [3]  # after the other writer's row, not over it
        assert [r.offset for r in await collect(log)] == [1, 3]  # (row 2 is not a record: dead-lettered)
    finally:
        other.close()
        await log.close()


async def test_rows_written_on_the_event_loop_reach_the_database_file_by_checkpoints(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tether.adapters.log.sqlite as sqlite_log

    monkeypatch.setattr(sqlite_log, "CHECKPOINT_BYTES", 1)  # a checkpoint after every write
    path = tmp_path / "log.db"
    log = await SqliteLog.open(path)
    try:
        await log.append("events", [event("a"), event("b")])
        assert log._checkpoint is not None
        await log._checkpoint
        # the database file alone (its WAL ignored) holds the rows: they were copied back by the checkpoint
        with contextlib.closing(sqlite3.connect(f"file:{path}?immutable=1", uri=True)) as db:
            assert db.execute("SELECT count(*) FROM events").fetchone() == (2,)
    finally:
        await log.close()


async def test_the_wal_grown_behind_a_long_read_is_truncated_once_checkpoints_catch_up(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A read that holds one snapshot (a replay's scan) keeps checkpoints from restarting the WAL, so appends grow
    it; once the read ends and a checkpoint completes, the next append starts the WAL over and truncates the file
    to ``WAL_SIZE_LIMIT`` instead of keeping its largest size for ever."""
    import tether.adapters.log.sqlite as sqlite_log

    monkeypatch.setattr(sqlite_log, "CHECKPOINT_BYTES", 1)  # a checkpoint after every write
    monkeypatch.setattr(sqlite_log, "WAL_SIZE_LIMIT", 64 << 10)
    path, wal = tmp_path / "log.db", tmp_path / "log.db-wal"
    log = await SqliteLog.open(path)
    try:
        await log.append("events", [event("first")])
        reader = sqlite3.connect(path)
        reader.execute("BEGIN")
        reader.execute("SELECT count(*) FROM events").fetchone()  # a snapshot held, as a scan holds one
        for i in range(40):
            await log.append("events", [event(f"k{i}-{j}") for j in range(20)])
            await log._checkpoint
        grown = wal.stat().st_size
        assert grown > 4 * (64 << 10)  # the WAL grew behind the reader
        reader.execute("COMMIT")
        reader.close()
        await log.append("events", [event("after")])
        await log._checkpoint  # copies everything back: the WAL may start over
        await log.append("events", [event("again")])  # ... which this append does, truncating the file
        await log._checkpoint
        assert wal.stat().st_size <= 64 << 10 < grown
        assert (await log.end("events")).get(0) == 1 + 40 * 20 + 2
    finally:
        await log.close()


async def test_reads_interleaved_with_writer_thread_transactions_never_lock_the_database(log: SqliteLog) -> None:
    """``position``/``end``/``load_snapshot`` share the writer's thread with the transactions queued there
    (snapshots, and appends when the loop's connection is busy). A read left half-done between two jobs on that
    thread kept a stale snapshot open, and the next ``BEGIN IMMEDIATE`` failed at once with "database is locked"
    (the daemon's decider died of it). Reads and writes interleaved freely must all succeed."""
    await log.append("events", [event(f"c{i}") for i in range(20)])

    async def reads() -> None:
        for _ in range(300):
            await asyncio.gather(log.end("events"), log.position("events", consumer="decider"),
                                 log.load_snapshot("world"))

    async def writes() -> None:
        for i in range(150):  # appends on the loop's connection commit while the reads hold their snapshots
            await log.append("events", [event(f"w{i}")])
            await log.save_snapshot(Snapshot(name="world", position={0: i + 1}, state=b"x" * 64, at_ms=i))

    await asyncio.gather(reads(), writes())
    assert (await log.end("events")) == {0: 170}
    snapshot = await log.load_snapshot("world")
    assert snapshot is not None and snapshot.position == {0: 150}
