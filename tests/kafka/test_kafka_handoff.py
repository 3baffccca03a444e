"""The in-process hand-off of ``KafkaLog``: a consumer takes the records this process produced (and the broker
acknowledged at a known offset) instead of decoding them again — exactly what decoding would give, and only when
the bytes at that offset are the ones produced."""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import Any

import msgspec
from aiokafka import AIOKafkaProducer

from tether.adapters.log import kafka_handoff
from tether.adapters.log.kafka import KafkaLog
from tether.adapters.log.kafka_config import parse_kafka_url
from tether.adapters.testing.synthetic_log import Simulation, scenario
from tether.core.commands import StartTimer, UpdateClaimStatus, command_id, command_target
from tether.core.envelope import CommandRecord, EventRecord, decode_command, decode_event, encode
from tether.core.events import ObjectDeleted, ObjectObserved, TimerFired
from tether.core.kube import Condition, KubeObject, ObjectMeta, ObjectRef
from tether.core.world import initial_world
from tether.projections.step import step

Record = EventRecord | CommandRecord


def as_decoded(record: Record) -> Record:
    """What a consumer decoding ``record``'s stored bytes gets: ``decode(encode(stored))``, stamped with the
    record's Kafka position (the stored value carries none)."""
    stored = msgspec.structs.replace(record, offset=0, partition=0)
    decode: Callable[[bytes], Any] = decode_event if isinstance(record, EventRecord) else decode_command
    decoded = decode(encode(stored))
    decoded.partition, decoded.offset = record.partition, record.offset
    return decoded  # type: ignore[no-any-return]


def observed(i: int) -> EventRecord:
    obj = KubeObject(
        api_version="tether.io/v1alpha1", kind="DataSourceClaim",
        metadata=ObjectMeta(name=f"c{i}", namespace="ns", uid=f"u{i}", resource_version=str(100 + i), generation=2,
                            labels={"app": "x"}, finalizers=["tether.io/f"]),
        # raw JSON, kept verbatim: spacing and key order are not normalised by either path
        spec=msgspec.Raw(b'{"dataSourceName": "prod.sales.orders",  "b": [1, 2.5, null]}'),
        status=msgspec.Raw(b'{"phase":"Pending","conditions":[{"type":"Bound","status":"False"}]}'),
    )
    return EventRecord(at_ms=1_700_000_000_000 + i, source="watch", key=obj.key, event=ObjectObserved(obj=obj))


def events() -> list[EventRecord]:
    out = [observed(i) for i in range(4)]
    gone = observed(9).event.obj  # type: ignore[attr-defined]
    out.append(EventRecord(at_ms=1_700_000_000_100, source="watch", key=gone.key, event=ObjectDeleted(obj=gone)))
    out.append(EventRecord(at_ms=0, source="timer", key="Obj/ns/t",  # at_ms 0: the log stamps the append time
                           event=TimerFired(timer_id="t1", purpose="retry-command", subject="Obj/ns/t")))
    out.append(msgspec.structs.replace(observed(5), offset=77, partition=3))  # a position is never stored
    return out


def commands(n: int) -> list[CommandRecord]:
    out = []
    for i in range(n):
        cmd: Any
        if i % 2:
            cmd = UpdateClaimStatus(
                claim=ObjectRef(api_version="tether.io/v1alpha1", kind="DataSourceClaim", name=f"c{i}",
                                namespace="ns"),
                phase="Bound", bound_data_source="ds-1",
                conditions=(Condition(type="Bound", status="True", reason="Bound", message="m",
                                      last_transition_time="2026-01-01T00:00:00Z", observed_generation=2),))
        else:
            cmd = StartTimer(timer_id=f"t{i}", fire_at_ms=i, purpose="test", subject=f"Obj/ns/o{i}")
        out.append(CommandRecord(id=command_id(cmd), at_ms=1_700_000_000_000 + i, key=command_target(cmd),
                                 command=cmd, causation=f"0:{i}", reason="because", decider="test"))
    return out


async def consume_until(log: KafkaLog, stream: str, consumer: str, count: int, out: list[Any]) -> None:
    async for batch in log.consume(stream, consumer=consumer):  # type: ignore[arg-type]
        out.extend(batch.records)
        await log.commit(batch, consumer=consumer)
        if len(out) >= count:
            return


async def assigned(log: KafkaLog, stream: str, consumer: str, task: asyncio.Task[Any]) -> None:
    for _ in range(3000):
        if log.assigned(stream, consumer=consumer):  # type: ignore[arg-type]
            return
        if task.done():
            task.result()
        await asyncio.sleep(0.01)
    raise AssertionError(f"{consumer} was never assigned a partition of {stream}")


def handoff(url: str, **overrides: Any) -> Any:
    config = parse_kafka_url(url, **overrides)
    return kafka_handoff._handoffs[(config.bootstrap, config.handoff_bytes)]


def test_every_record_the_simulation_and_the_deciders_produce_round_trips_exactly() -> None:
    """The premise of the hand-off: a record as built in memory equals the one decoded from its bytes (same types:
    tuples stay tuples, raw JSON stays the same bytes), for every event and command type a run produces."""
    sim = scenario(Simulation(seed=11), namespaces=3, jobs_per_namespace=8, tables=6, migrations=3, heartbeats=4,
                   deletions=0.1)
    world = initial_world()
    event_types, command_types = set(), set()
    raw_payloads = 0
    for offset, record in enumerate(sim.events, start=1):
        record = msgspec.structs.replace(record, offset=offset, partition=0)
        assert as_decoded(record) == record
        event_types.add(type(record.event).__name__)
        if isinstance(record.event, ObjectObserved) and record.event.obj.spec != msgspec.Raw(b"{}") \
                and record.event.obj.status != msgspec.Raw(b"{}"):
            raw_payloads += 1
        for produced in step(world, record):
            assert as_decoded(produced) == produced
            command_types.add(type(produced.command).__name__)
    assert raw_payloads > 0
    assert {"ObjectObserved", "DataLocationResolved", "CommandSucceeded"} <= event_types
    assert {"UpdateClaimStatus", "SetBindingPlacement", "CreateDataSource"} <= command_types


async def test_records_produced_here_are_handed_off_exactly(kafka_url: str) -> None:
    """A watch, a decider and an executor, each with its own log of the same brokers (as in the benchmark): the
    decider takes the events the watch appended, the executor the commands the decider committed — without
    decoding them (the payload is the very object produced) — and each equals what decoding gives."""
    source, decider, executor = KafkaLog(kafka_url), KafkaLog(kafka_url), KafkaLog(kafka_url)
    for log in (source, decider, executor):
        await log.start()
    sent = events()
    got_events: list[EventRecord] = []
    got_commands: list[CommandRecord] = []
    produced = commands(len(sent) * 2)

    async def decide() -> None:
        async for batch in decider.consume("events", consumer="decider"):
            got_events.extend(batch.records)  # type: ignore[arg-type]
            start = len(got_events) - len(batch.records)
            await decider.commit(batch, consumer="decider", produced=produced[2 * start:2 * len(got_events)])
            if len(got_events) >= len(sent):
                return

    try:
        deciding = asyncio.create_task(decide())
        executing = asyncio.create_task(consume_until(executor, "commands", "executor", len(produced), got_commands))
        await assigned(decider, "events", "decider", deciding)
        await assigned(executor, "commands", "executor", executing)
        appended = await source.append("events", sent)
        await asyncio.wait_for(deciding, 30)
        await asyncio.wait_for(executing, 30)
    finally:
        for log in (source, decider, executor):
            await log.close()

    assert got_events == appended
    for got, original in zip(got_events, sent, strict=True):
        assert got == as_decoded(got)
        assert got.event is original.event  # handed off, not decoded
        assert (got.partition, got.offset) != (0, 0)
    assert got_events[0].event.obj.spec == msgspec.Raw(  # type: ignore[attr-defined]
        b'{"dataSourceName": "prod.sales.orders",  "b": [1, 2.5, null]}')
    assert got_events[5].at_ms > 0
    assert sorted(c.id for c in got_commands) == sorted(c.id for c in produced)
    by_id = {c.id: c for c in produced}
    for got in got_commands:
        assert got == as_decoded(got)
        assert got.command is by_id[got.id].command
        assert got.offset >= 1
    state = handoff(kafka_url)
    assert not any(key[0].startswith(decider.config.prefix + ".") for key in state.memo)  # dropped when stopped


async def test_a_record_this_process_did_not_write_there_is_decoded(kafka_url: str) -> None:
    """The bytes at an offset decide: a record kept for offset 0 that another producer's record took (another
    replica, a topic created again) is not handed off; the consumer decodes what is there."""
    log = KafkaLog(kafka_url)
    await log.start()
    got: list[EventRecord] = []
    try:
        consuming = asyncio.create_task(consume_until(log, "events", "decider", 1, got))
        await assigned(log, "events", "decider", consuming)
        state = handoff(kafka_url)
        topic = log.config.topic("events")
        ours = observed(1)
        state.remember(topic, 0, 0, [(b"k", encode(ours), None, [])], [ours], [0])
        theirs = observed(2)
        foreign = AIOKafkaProducer(bootstrap_servers=log.config.bootstrap, acks="all")
        await foreign.start()
        try:
            await foreign.send_and_wait(topic, encode(theirs), key=theirs.key.encode(), partition=0)
        finally:
            await foreign.stop()
        await asyncio.wait_for(consuming, 30)
    finally:
        await log.close()
    assert got == [msgspec.structs.replace(theirs, offset=1, partition=0)]
    assert got[0].event is not theirs.event


async def test_the_hand_off_is_bounded_and_off_at_zero(kafka_url: str) -> None:
    """At most ``handoff_bytes`` of produced values are kept (the rest is decoded, equal all the same); with 0 nothing
    is kept."""
    one = len(encode(observed(0)))
    for budget, handed_at_most in ((3 * one, 3), (0, 0)):
        prefix = f"{parse_kafka_url(kafka_url).prefix}-{budget}"  # fresh topics
        source, consumer = (KafkaLog(kafka_url, handoff_bytes=budget, prefix=prefix) for _ in range(2))
        sent = [observed(i) for i in range(8)]
        got: list[EventRecord] = []
        name = "bounded"
        try:
            consuming = asyncio.create_task(consume_until(consumer, "events", name, len(sent), got))
            await assigned(consumer, "events", name, consuming)
            if budget:
                state = handoff(kafka_url, handoff_bytes=budget)
                assert state.size == 0
            await source.append("events", sent)
            if budget:
                assert 0 < state.size <= budget
            await asyncio.wait_for(consuming, 30)
        finally:
            await source.close()
            await consumer.close()
        assert [msgspec.structs.replace(r, offset=0, partition=0) for r in got] == sent
        handed = sum(1 for g, s in zip(got, sent, strict=True) if g.event is s.event)
        assert handed <= handed_at_most
        if budget:
            assert handed > 0
            assert state.size == 0 and not state.memo


def test_the_hand_off_keeps_only_what_it_may_and_frees_what_consumers_passed() -> None:
    """Without a broker: nothing is kept for a partition no consumer here is assigned; an entry is taken once; the
    entries a consumer fetched past are dropped, those kept out of offset order too once the budget is full; a
    revoke drops the partition's entries."""
    from types import SimpleNamespace

    records = [observed(i) for i in range(6)]
    values = [encode(r) for r in records]
    items = [(r.key.encode(), v, r.at_ms, []) for r, v in zip(records, values, strict=True)]
    assert 4 * min(map(len, values)) > 3 * max(map(len, values))
    state = kafka_handoff.HandOff(limit=3 * max(map(len, values)))  # room for three records, not four

    def message(offset: int, index: int) -> Any:
        return SimpleNamespace(topic="t.events", partition=0, offset=offset, value=values[index])

    state.remember("t.events", 0, 0, items, records, [0, 1])
    assert state.size == 0  # not assigned: nothing kept
    state.assign("t.events", 0)
    state.remember("t.events", 0, 10, items, records, [0, 1])  # offsets 10, 11
    state.remember("t.events", 0, 5, items, records, [2])  # offset 5: out of order (a resend)
    assert state.size == sum(len(v) for v in values[:3])
    taken = state.take("t.events", [message(10, 0)])
    assert taken == [msgspec.structs.replace(records[0], offset=11, partition=0)]
    assert state.take("t.events", [message(10, 0)]) == [None]  # taken once
    assert state.size == len(values[1]) + len(values[2])  # offset 5 is behind offset 11, kept out of order
    # the budget fills up at offset 13: a sweep drops offset 5, and offset 14 is not kept (nothing more to sweep)
    state.remember("t.events", 0, 12, items, records, [3, 4, 5])
    assert 5 not in state.memo[("t.events", 0)]
    assert sorted(state.memo[("t.events", 0)]) == [11, 12, 13]
    assert state.size <= state.limit
    assert state.take("t.events", [message(11, 2)]) == [None]  # not the bytes kept for offset 11: decode
    state.assign("t.events", 0)  # a second consumer of this process
    state.revoke("t.events", 0)
    assert sorted(state.memo[("t.events", 0)]) == [12, 13]
    state.revoke("t.events", 0)
    assert state.memo == {} and state.size == 0
