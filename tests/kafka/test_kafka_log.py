"""KafkaLog against a real Kafka-protocol broker (tansu): round trips, resume, snapshots, partitions."""

from __future__ import annotations

import asyncio

import pytest
from aiokafka.partitioner import DefaultPartitioner

from tether.adapters.log import Batch, Snapshot
from tether.adapters.log.kafka import KafkaLog, UnorderedStreamError
from tether.adapters.log.kafka_config import parse_kafka_url
from tether.core.commands import StartTimer, command_id, command_target
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import TimerFired


def event(i: int, key: str = "", at_ms: int | None = None) -> EventRecord:
    subject = key or f"Obj/ns/o{i % 5}"
    return EventRecord(
        at_ms=1_700_000_000_000 + i if at_ms is None else at_ms,
        source="test",
        key=subject,
        event=TimerFired(timer_id=f"t{i}", purpose="test", subject=subject),
    )


def command(i: int, key: str = "") -> CommandRecord:
    subject = key or f"Obj/ns/o{i % 7}"
    cmd = StartTimer(timer_id=f"t{i}", fire_at_ms=i, purpose="test", subject=subject)
    return CommandRecord(id=command_id(cmd), at_ms=1_700_000_000_000 + i, key=command_target(cmd), command=cmd,
                         causation=f"0:{i}")


async def drain(log: KafkaLog, stream: str, consumer: str, *, commit: bool = True) -> list:
    out = []
    async for batch in log.consume(stream, consumer=consumer, follow=False):
        out.extend(batch.records)
        if commit:
            await log.commit(batch, consumer=consumer)
    return out


def test_parse_url() -> None:
    config = parse_kafka_url("kafka://a:9092,b:9093/prod?events_partitions=1&commands_partitions=12&group=g"
                             "&session_timeout_ms=2000&unordered_events=true")
    assert config.bootstrap == "a:9092,b:9093"
    assert config.topic("events") == "prod.events"
    assert config.topic("snapshots") == "prod.snapshots"
    assert (config.commands_partitions, config.group, config.session_timeout_ms) == (12, "g", 2000)
    assert config.unordered_events is True
    tuned = parse_kafka_url("kafka://a:1/p?max_batch_bytes=1000000&fetch_max_wait_ms=20&linger_ms=0")
    assert (tuned.max_batch_bytes, tuned.fetch_max_wait_ms, tuned.linger_ms) == (1_000_000, 20, 0)
    assert parse_kafka_url("kafka://a:1").prefix == "tether"
    with pytest.raises(ValueError, match="unknown kafka URL parameter"):
        parse_kafka_url("kafka://a:1/p?partitions=3")
    with pytest.raises(ValueError):
        parse_kafka_url("sqlite:///x.db")


async def test_append_consume_commit_round_trip(kafka_url: str) -> None:
    async with KafkaLog(kafka_url) as log:
        assert await log.partitions("events") == 1
        assert await log.partitions("commands") == 6
        assert await log.end("events") == {}
        events = await log.append("events", [event(i) for i in range(20)])
        assert [e.offset for e in events] == list(range(1, 21))
        assert {e.partition for e in events} == {0}
        commands = await log.append("commands", [command(i) for i in range(30)])
        # keyed: every record of one key is in one partition, in append order
        by_key: dict[str, set[int]] = {}
        for c in commands:
            by_key.setdefault(c.key, set()).add(c.partition)
        assert all(len(parts) == 1 for parts in by_key.values())
        assert len({c.partition for c in commands}) > 1

        got = await drain(log, "events", "decider")
        assert got == events
        assert await log.position("events", consumer="decider") == {0: 20}
        assert await log.end("events") == {0: 20}

        got_commands = await drain(log, "commands", "executor")
        assert sorted(got_commands, key=lambda c: (c.partition, c.offset)) == sorted(
            commands, key=lambda c: (c.partition, c.offset)
        )
        for key in by_key:
            assert [c.id for c in got_commands if c.key == key] == [c.id for c in commands if c.key == key]
        end = await log.end("commands")
        assert await log.position("commands", consumer="executor") == end
        assert sum(end.values()) == 30


async def test_small_record_batches_keep_partitions_and_order(kafka_url: str) -> None:
    """A produce larger than ``max_batch_bytes`` is split into several record batches per partition: every record still
    lands on the partition aiokafka's default partitioner picks for its key, in append order."""
    async with KafkaLog(kafka_url, max_batch_bytes=2048) as log:
        commands = await log.append("commands", [command(i, key=f"Obj/ns/k{i % 13}") for i in range(200)])
        ids = list(range(await log.partitions("commands")))
        for c in commands:
            assert c.partition == DefaultPartitioner()(c.key.encode(), ids, ids)
        got = [c async for chunk in log.read("commands") for c in chunk]
        assert sorted((c.partition, c.offset) for c in got) == sorted((c.partition, c.offset) for c in commands)
        for key in {c.key for c in commands}:
            assert [c.id for c in got if c.key == key] == [c.id for c in commands if c.key == key]


async def test_commit_produces_before_committing(kafka_url: str) -> None:
    async with KafkaLog(kafka_url, commit_pipeline=0) as log:  # commit returns once everything is done
        await log.append("events", [event(i) for i in range(5)])
        async for batch in log.consume("events", consumer="decider", follow=False):
            out = await log.commit(batch, consumer="decider", produced=[command(r.offset) for r in batch.records])
            assert all(o.offset >= 1 for o in out)
        assert len([c async for chunk in log.read("commands") for c in chunk]) == 5
        assert await log.position("events", consumer="decider") == {0: 5}


async def test_pipelined_commit_returns_before_the_acknowledgement(kafka_url: str) -> None:
    async with KafkaLog(kafka_url) as log:
        assert log.config.commit_pipeline > 0
        await log.append("events", [event(i) for i in range(5)])
        async for batch in log.consume("events", consumer="decider", follow=False):
            out = await log.commit(batch, consumer="decider", produced=[command(r.offset) for r in batch.records])
            assert [o.offset for o in out] == [0] * len(batch.records)  # not known yet
        await log.flush()
        assert len([c async for chunk in log.read("commands") for c in chunk]) == 5
        assert await log.position("events", consumer="decider") == {0: 5}


async def test_resume_from_committed_offsets(kafka_url: str) -> None:
    async with KafkaLog(kafka_url) as log:
        await log.append("events", [event(i) for i in range(10)])
        seen = []
        async for batch in log.consume("events", consumer="decider", batch_size=4):
            seen.extend(batch.records)
            await log.commit(batch, consumer="decider")
            if len(seen) >= 4:
                break
        committed = await log.position("events", consumer="decider")
        assert committed == {0: seen[-1].offset}
    # a new process: the consumer resumes after its commit
    async with KafkaLog(kafka_url) as log:
        await log.append("events", [event(i) for i in range(10, 12)])
        rest = await drain(log, "events", "decider")
        assert [r.offset for r in rest] == list(range(committed[0] + 1, 13))
        # another consumer name is another group: it starts from the beginning
        assert len(await drain(log, "events", "other")) == 12


async def test_read_bounds_and_after(kafka_url: str) -> None:
    async with KafkaLog(kafka_url) as log:
        await log.append("events", [event(i, at_ms=1000 + i) for i in range(50)])
        everything = [r async for chunk in log.read("events", batch_size=7) for r in chunk]
        assert [r.offset for r in everything] == list(range(1, 51))
        after = [r.offset async for chunk in log.read("events", after={0: 9}) for r in chunk]
        assert after == list(range(10, 51))
        until = [r.offset async for chunk in log.read("events", until_offset=4) for r in chunk]
        assert until == [1, 2, 3, 4]
        until_ms = [r.offset async for chunk in log.read("events", until_ms=1009) for r in chunk]
        assert until_ms == list(range(1, 11))
        assert [r async for r in log.read("events", after={0: 50})] == []


async def test_read_merges_partitions_deterministically(kafka_url: str) -> None:
    async with KafkaLog(kafka_url) as log:
        records = [command(i) for i in range(60)]
        await log.append("commands", records)
        first = [r async for chunk in log.read("commands", batch_size=5) for r in chunk]
        second = [r async for chunk in log.read("commands") for r in chunk]
        assert first == second
        assert [r.at_ms for r in first] == sorted(r.at_ms for r in records)


async def test_events_with_several_partitions_are_refused_to_the_decider(kafka_url: str) -> None:
    async with KafkaLog(kafka_url, events_partitions=3) as log:
        assert await log.partitions("events") == 3
        with pytest.raises(UnorderedStreamError, match="total order"):
            async for _ in log.consume("events", consumer="decider"):
                pass
        await log.append("events", [event(i, key=f"k{i}", at_ms=5000 + (i * 7) % 12) for i in range(12)])
        merged = [r async for chunk in log.read("events") for r in chunk]
        assert merged == [r async for chunk in log.read("events", batch_size=1) for r in chunk]
        assert len(merged) == 12
        for p in range(3):  # each partition in log order…
            offsets = [r.offset for r in merged if r.partition == p]
            assert offsets == sorted(offsets)
        # …and heads released by (at_ms, partition, offset): globally sorted when each partition is
        if all(
            [r.at_ms for r in merged if r.partition == p] == sorted(r.at_ms for r in merged if r.partition == p)
            for p in range(3)
        ):
            assert [(r.at_ms, r.partition) for r in merged] == sorted((r.at_ms, r.partition) for r in merged)


async def test_snapshots_latest_wins(kafka_url: str) -> None:
    async with KafkaLog(kafka_url) as log:
        assert await log.load_snapshot("world") is None
        await log.save_snapshot(Snapshot(name="world", position={0: 3}, state=b"\x00one", at_ms=1))
        await log.save_snapshot(Snapshot(name="other", position={0: 9}, state=b"x", at_ms=2))
        await log.save_snapshot(Snapshot(name="world", position={0: 7}, state=b"\x01two", at_ms=3))
    async with KafkaLog(kafka_url) as log:
        snap = await log.load_snapshot("world")
        assert snap == Snapshot(name="world", position={0: 7}, state=b"\x01two", at_ms=3)


async def test_consume_follow_waits_for_new_records(kafka_url: str) -> None:
    async with KafkaLog(kafka_url) as log:
        got: list[Batch] = []

        async def follow() -> None:
            async for batch in log.consume("events", consumer="decider"):
                got.append(batch)
                await log.commit(batch, consumer="decider")
                if sum(len(b.records) for b in got) >= 3:
                    return

        task = asyncio.create_task(follow())
        await asyncio.sleep(0.5)
        await log.append("events", [event(i) for i in range(3)])
        await asyncio.wait_for(task, 15)
        assert [r.offset for b in got for r in b.records] == [1, 2, 3]
