"""KafkaLog under failures: broker unreachable mid-stream, a replica dying, poison records."""

from __future__ import annotations

import asyncio
import contextlib

from aiokafka import AIOKafkaConsumer, AIOKafkaProducer

from tether.adapters.log.kafka import KafkaLog
from tether.adapters.testing.kafka_broker import ProxiedBroker
from tether.core.commands import StartTimer, command_id, command_target
from tether.core.envelope import CommandRecord, EventRecord, encode
from tether.core.events import TimerFired


def command(i: int) -> CommandRecord:
    cmd = StartTimer(timer_id=f"t{i}", fire_at_ms=i, purpose="test", subject=f"Obj/ns/o{i % 11}")
    return CommandRecord(id=command_id(cmd), at_ms=1_700_000_000_000 + i, key=command_target(cmd), command=cmd,
                         causation=f"0:{i}")


def event(i: int) -> EventRecord:
    return EventRecord(at_ms=1_700_000_000_000 + i, source="test", key=f"Obj/ns/o{i % 3}",
                       event=TimerFired(timer_id=f"t{i}", purpose="test", subject=f"Obj/ns/o{i % 3}"))


class IdempotentExecutor:
    """Applies commands by id: a duplicate delivery changes nothing (what the real executors guarantee)."""

    def __init__(self) -> None:
        self.effects: dict[str, int] = {}
        self.deliveries = 0

    def apply(self, record: CommandRecord) -> None:
        self.deliveries += 1
        self.effects.setdefault(record.id, record.command.fire_at_ms)  # type: ignore[union-attr]


async def test_broker_unreachable_mid_stream(kafka_broker: ProxiedBroker, kafka_url: str) -> None:
    total = 300
    expected = {command(i).id: i for i in range(total)}
    executor = IdempotentExecutor()
    async with KafkaLog(kafka_url, append_timeout_s=60) as producer_log, KafkaLog(kafka_url) as consumer_log:

        cut = asyncio.Event()
        a_third_applied = asyncio.Event()

        async def produce() -> None:
            for start in range(0, total, 10):
                if start == total // 3:
                    await cut.wait()  # the rest is appended while the broker is unreachable, and after
                await producer_log.append("commands", [command(i) for i in range(start, start + 10)])
                await asyncio.sleep(0.01)

        async def consume() -> None:
            async for batch in consumer_log.consume("commands", consumer="executor", batch_size=25):
                for record in batch.records:
                    executor.apply(record)  # type: ignore[arg-type]
                if len(executor.effects) >= total // 3:
                    a_third_applied.set()
                await consumer_log.commit(batch, consumer="executor")
                if len(executor.effects) == total:
                    return

        producing = asyncio.create_task(produce())
        consuming = asyncio.create_task(consume())
        await asyncio.wait_for(a_third_applied.wait(), 30)
        kafka_broker.proxy.cut()  # every connection dropped, new ones refused
        cut.set()
        await asyncio.sleep(3.0)  # longer than the session timeout: the group forgets the consumer
        assert not producing.done()
        kafka_broker.proxy.restore()
        await asyncio.wait_for(producing, 60)
        await asyncio.wait_for(consuming, 60)
    assert executor.effects == expected  # nothing lost, every effect exactly once
    assert executor.deliveries >= total  # (records may have been delivered more than once)


async def test_replica_dies_and_the_other_takes_over(kafka_url: str) -> None:
    total = 240
    async with KafkaLog(kafka_url) as seed:
        await seed.append("commands", [command(i) for i in range(total)])
    applied: dict[str, list[str]] = {"a": [], "b": []}
    committed_by_a: set[str] = set()
    b_has_work = asyncio.Event()
    a_is_gone = asyncio.Event()

    async def replica(name: str, log: KafkaLog, *, die_after: int | None = None) -> None:
        async for batch in log.consume("commands", consumer="executor", batch_size=10):
            applied[name].extend(r.id for r in batch.records)  # type: ignore[union-attr]
            if name == "b" and not a_is_gone.is_set():
                # b works slowly until a has died, so that work is left for a however fast the broker is (b
                # alone would otherwise finish all of it before the group rebalances for a, and a would get none)
                b_has_work.set()
                await asyncio.sleep(0.3)
            if die_after is not None and len(applied[name]) >= die_after:
                # crash: this batch was applied but never committed
                raise asyncio.CancelledError
            await log.commit(batch, consumer="executor")
            if name == "a":
                committed_by_a.update(r.id for r in batch.records)  # type: ignore[union-attr]
            if len(set(applied["a"]) | set(applied["b"])) == total and name == "b":
                return

    log_a, log_b = KafkaLog(kafka_url), KafkaLog(kafka_url)
    try:
        task_b = asyncio.create_task(replica("b", log_b))
        await asyncio.wait_for(b_has_work.wait(), 30)  # b joins first and owns every partition …
        task_a = asyncio.create_task(replica("a", log_a, die_after=30))
        # … then a joins: the group rebalances and a gets half of the partitions; a dies after 30 records
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.wait_for(task_a, 30)
        await log_a.close()
        a_is_gone.set()
        assert applied["a"], "replica a never got a partition"
        b_before_death = len(applied["b"])
        await asyncio.wait_for(task_b, 30)
    finally:
        await log_a.close()
        await log_b.close()
    everything = set(applied["a"]) | set(applied["b"])
    assert everything == {command(i).id for i in range(total)}
    taken_over = applied["b"][b_before_death:]
    # b continued from a's committed offsets: it re-did what a applied without committing …
    uncommitted = set(applied["a"]) - committed_by_a
    assert uncommitted and uncommitted <= set(taken_over)
    # … and nothing that a had committed
    assert committed_by_a.isdisjoint(taken_over)


async def test_poison_record_goes_to_the_dlq(kafka_broker: ProxiedBroker, kafka_url: str, kafka_prefix: str) -> None:
    async with KafkaLog(kafka_url) as log:
        await log.append("events", [event(0), event(1)])
        raw = AIOKafkaProducer(bootstrap_servers=kafka_broker.bootstrap, acks="all", enable_idempotence=False)
        await raw.start()
        try:
            await raw.send_and_wait(f"{kafka_prefix}.events", b"\xffnot json", key=b"Obj/ns/bad")
            await raw.send_and_wait(f"{kafka_prefix}.events", b'{"at_ms": 1, "source": "x"}', key=b"Obj/ns/bad")
        finally:
            await raw.stop()
        await log.append("events", [event(2)])
        seen = []
        async for batch in log.consume("events", consumer="decider", follow=False):
            seen.extend(r.offset for r in batch.records)
            await log.commit(batch, consumer="decider")
        assert seen == [1, 2, 5]
        assert await log.position("events", consumer="decider") == {0: 5}

    dlq = AIOKafkaConsumer(f"{kafka_prefix}.dlq", bootstrap_servers=kafka_broker.bootstrap,
                           auto_offset_reset="earliest", enable_auto_commit=False)
    await dlq.start()
    try:
        messages = []
        while len(messages) < 2:
            for batch in (await dlq.getmany(timeout_ms=1000)).values():
                messages.extend(batch)
    finally:
        await dlq.stop()
    assert [m.value for m in messages] == [b"\xffnot json", b'{"at_ms": 1, "source": "x"}']
    headers = [dict(m.headers) for m in messages]
    assert headers[0]["tether-stage"] == b"decode"
    assert headers[0]["tether-topic"] == f"{kafka_prefix}.events".encode()
    assert (headers[0]["tether-partition"], headers[0]["tether-offset"]) == (b"0", b"2")
    assert headers[1]["tether-offset"] == b"3"
    assert b"Object missing required field" in headers[1]["tether-reason"]
    assert all(m.key == b"Obj/ns/bad" for m in messages)


async def test_processing_failure_to_dlq(kafka_broker: ProxiedBroker, kafka_url: str, kafka_prefix: str) -> None:
    async with KafkaLog(kafka_url) as log:
        [record] = await log.append("commands", [command(7)])
        await log.dead_letter_record("commands", record, reason="executor gave up: Invalid", error="Invalid")
    dlq = AIOKafkaConsumer(f"{kafka_prefix}.dlq", bootstrap_servers=kafka_broker.bootstrap,
                           auto_offset_reset="earliest", enable_auto_commit=False)
    await dlq.start()
    try:
        messages = []
        while not messages:
            for batch in (await dlq.getmany(timeout_ms=1000)).values():
                messages.extend(batch)
    finally:
        await dlq.stop()
    headers = dict(messages[0].headers)
    assert headers["tether-stage"] == b"process"
    assert headers["tether-reason"] == b"executor gave up: Invalid"
    assert messages[0].value == encode(command(7))
