"""Kafka benchmark: events/s through tether's full path vs raw aiokafka, on a tansu broker started here.

Full path (tether): append the events with ``KafkaLog.append`` → the decider consumes them (group consumer,
decode, ``tether.core.pipeline.step`` on a world) and commits each batch with its commands produced to the commands
topic (produce acks=all, then commit) → an executor consumes the commands (decode, commit). The three run
concurrently, as in ``tether run``; the clock stops when the executor has consumed every command.

Baseline (raw aiokafka, same broker, same run): the *same broker traffic* without tether — produce the same
encoded event bytes (acks=all) → a group consumer reads them and, per batch, produces the commands the real
decider derived from those events (pre-encoded bytes, same keys) → a consumer reads those commands; commits as
in the full path. So the ratio measures tether's own overhead (envelope decoding, the deciders, bookkeeping).

The workload is a realistic synthetic log (``tether.adapters.synthetic_log``: claims, bindings, lookups,
migrations). ``--decider identity`` replaces ``step`` by a placeholder that emits one command per event.

    python ops/bench/kafka.py [--namespaces 24] [--repeat 3] [--decider real|identity]

Each path runs ``--repeat`` times, interleaved (raw, full, raw, full, …), each on fresh topics of the same broker;
the clocks start once the consumer groups have formed (their partitions are assigned), and the figures reported
are the medians.

Last line: one JSON object ``{"bench": "kafka", "value": <events/s full path>, "unit": "events/s",
"baseline": <raw events/s>, "ratio": ..., ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import statistics
import sys
import time
import uuid
from collections.abc import Callable
from typing import Any

import msgspec
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic

from tether.adapters.kafka_log import KafkaLog
from tether.adapters.kafka_testing import TansuBroker
from tether.adapters.synthetic_log import Simulation, scenario
from tether.core.commands import StartTimer, command_id, command_target
from tether.core.envelope import CommandRecord, EventRecord, encode

COMMANDS_PARTITIONS = 6
BATCH = 512


def identity_decider() -> Callable[[EventRecord], list[CommandRecord]]:
    """Placeholder decider: one deterministic command per event (used before the real deciders existed)."""

    def decide(record: EventRecord) -> list[CommandRecord]:
        cmd = StartTimer(timer_id=f"bench-{record.offset}", fire_at_ms=record.at_ms, purpose="bench",
                         subject=record.key)
        return [CommandRecord(id=command_id(cmd), at_ms=record.at_ms, key=command_target(cmd), command=cmd,
                              causation=f"{record.partition}:{record.offset}")]

    return decide


def real_decider() -> Callable[[EventRecord], list[CommandRecord]]:
    from tether.core.pipeline import step
    from tether.projections.world import initial_world

    world = initial_world()
    return lambda record: step(world, record)


def make_decider(kind: str) -> Callable[[EventRecord], list[CommandRecord]]:
    return real_decider() if kind == "real" else identity_decider()


async def full_path(url: str, events: list[EventRecord], decider_kind: str) -> tuple[float, int]:
    """Seconds from the first append until the executor consumed the last command; commands count."""
    decide = make_decider(decider_kind)
    producer_log, decider_log, executor_log = KafkaLog(url), KafkaLog(url), KafkaLog(url)
    for log in (producer_log, decider_log, executor_log):
        await log.start()
    decided = asyncio.Event()
    produced_commands = 0
    consumed_commands = 0

    async def produce() -> None:
        for i in range(0, len(events), 2000):
            await producer_log.append("events", events[i : i + 2000])

    async def decider() -> None:
        nonlocal produced_commands
        seen = 0
        async for batch in decider_log.consume("events", consumer="decider", batch_size=BATCH):
            commands: list[CommandRecord] = []
            for record in batch.records:
                commands.extend(decide(record))  # type: ignore[arg-type]
            await decider_log.commit(batch, consumer="decider", produced=commands, to="commands")
            produced_commands += len(commands)
            seen += len(batch.records)
            if seen >= len(events):
                decided.set()
                return

    async def executor() -> None:
        nonlocal consumed_commands
        async for batch in executor_log.consume("commands", consumer="executor", batch_size=BATCH):
            consumed_commands += len(batch.records)
            await executor_log.commit(batch, consumer="executor")
            if decided.is_set() and consumed_commands >= produced_commands:
                return

    # both groups formed before the clock starts (a join takes half the session timeout on tansu)
    decider_task = asyncio.create_task(decider())
    executor_task = asyncio.create_task(executor())
    await wait_until(lambda: bool(decider_log.assigned("events", consumer="decider"))
                     and bool(executor_log.assigned("commands", consumer="executor")))
    start = time.perf_counter()
    await produce()
    await asyncio.wait_for(decider_task, 600)
    await asyncio.wait_for(executor_task, 600)
    elapsed = time.perf_counter() - start
    for log in (producer_log, decider_log, executor_log):
        await log.close()
    return elapsed, produced_commands


async def wait_until(ready: Callable[[], bool], within: float = 60.0) -> None:
    """Poll ``ready`` (the consumer groups formed) before a clock starts."""
    deadline = time.monotonic() + within
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError("the consumer groups did not form")
        await asyncio.sleep(0.05)


async def raw_path(bootstrap: str, prefix: str, event_items: list[tuple[bytes, bytes]],
                   commands_by_event: list[list[tuple[bytes, bytes]]]) -> float:
    """The same broker traffic with plain aiokafka (see the module docstring)."""
    events_topic, commands_topic = f"{prefix}.events", f"{prefix}.commands"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(events_topic, 1, 1), NewTopic(commands_topic, COMMANDS_PARTITIONS, 1)])
    await admin.close()
    common: dict[str, Any] = {"bootstrap_servers": bootstrap, "enable_auto_commit": False,
                              "auto_offset_reset": "earliest", "session_timeout_ms": 2000,
                              "heartbeat_interval_ms": 500}
    producer = AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False, linger_ms=5,
                                max_batch_size=256 * 1024)
    await producer.start()
    total_commands = sum(len(c) for c in commands_by_event)
    consumers: dict[str, AIOKafkaConsumer] = {}

    async def decider() -> None:
        consumer = AIOKafkaConsumer(events_topic, group_id=f"{prefix}.decider", max_poll_records=BATCH, **common)
        consumers["decider"] = consumer
        await consumer.start()
        seen = 0
        try:
            while seen < len(event_items):
                fetched = await consumer.getmany(timeout_ms=1000, max_records=BATCH)
                futures = []
                for messages in fetched.values():
                    for message in messages:
                        for key, value in commands_by_event[message.offset]:
                            futures.append(await producer.send(commands_topic, value, key=key))
                        seen += 1
                await asyncio.gather(*futures)
                if fetched:
                    await consumer.commit()
        finally:
            await consumer.stop()

    async def executor() -> None:
        consumer = AIOKafkaConsumer(commands_topic, group_id=f"{prefix}.executor", max_poll_records=BATCH, **common)
        consumers["executor"] = consumer
        await consumer.start()
        seen = 0
        try:
            while seen < total_commands:
                fetched = await consumer.getmany(timeout_ms=1000, max_records=BATCH)
                seen += sum(len(m) for m in fetched.values())
                if fetched:
                    await consumer.commit()
        finally:
            await consumer.stop()

    decider_task = asyncio.create_task(decider())
    executor_task = asyncio.create_task(executor())
    await wait_until(lambda: len(consumers) == 2 and all(c.assignment() for c in consumers.values()))
    start = time.perf_counter()
    for i in range(0, len(event_items), 2000):
        futures = [await producer.send(events_topic, value, key=key) for key, value in event_items[i : i + 2000]]
        await asyncio.gather(*futures)
    await asyncio.wait_for(decider_task, 600)
    await asyncio.wait_for(executor_task, 600)
    elapsed = time.perf_counter() - start
    await producer.stop()
    return elapsed


def workload(namespaces: int, decider_kind: str) -> tuple[list[EventRecord], list[list[CommandRecord]], float]:
    """The events, the commands the decider derives from each, and the decider's in-memory rate (events/s)."""
    sim = scenario(Simulation(seed=2026), namespaces=namespaces, jobs_per_namespace=25, tables=40, migrations=20,
                   heartbeats=50, deletions=0.05)
    events = [msgspec.structs.replace(e, offset=0) for e in sim.events]
    decide = make_decider(decider_kind)
    per_event = []
    numbered = [msgspec.structs.replace(record, offset=i + 1) for i, record in enumerate(events)]
    start = time.perf_counter()
    for record in numbered:  # what the decider derives, event by event (for the raw baseline)
        per_event.append(decide(record))
    step_rate = len(events) / (time.perf_counter() - start)
    return events, per_event, step_rate


async def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--namespaces", type=int, default=24, help="workload size (25 jobs per namespace)")
    parser.add_argument("--repeat", type=int, default=3,
                        help="runs of each path (raw, full, raw, full, …, fresh topics each); medians reported")
    parser.add_argument("--decider", choices=["real", "identity"], default="real",
                        help="real: tether.core.pipeline.step; identity: one command per event (placeholder)")
    args = parser.parse_args()
    logging.basicConfig(level=logging.WARNING)
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(logging.WARNING))

    events, per_event, step_rate = workload(args.namespaces, args.decider)
    event_items = [(e.key.encode(), encode(e)) for e in events]
    command_items = [[(c.key.encode(), encode(c)) for c in cs] for cs in per_event]
    n_commands = sum(len(c) for c in per_event)
    avg_bytes = sum(len(v) for _, v in event_items) / len(event_items)
    print(f"workload: {len(events)} events ({avg_bytes:.0f} B avg), {n_commands} commands", file=sys.stderr)

    broker = TansuBroker().start()
    raw_runs: list[float] = []
    full_runs: list[float] = []
    try:
        for _ in range(args.repeat):  # interleaved, so a slow spell of the machine hits both paths alike
            run = uuid.uuid4().hex[:6]
            raw_runs.append(await raw_path(broker.bootstrap, f"raw-{run}", event_items, command_items))
            # the decider's CPU work runs on the event loop between polls: a session timeout roomier than the tests'
            url = (f"kafka://{broker.bootstrap}/tether-{run}?commands_partitions={COMMANDS_PARTITIONS}"
                   "&session_timeout_ms=6000&heartbeat_interval_ms=1000")
            full_s, produced = await full_path(url, events, args.decider)
            full_runs.append(full_s)
            print(f"full path {full_s:.2f} s, raw {raw_runs[-1]:.2f} s", file=sys.stderr)
    finally:
        broker.stop()
    value = len(events) / statistics.median(full_runs)
    baseline = len(events) / statistics.median(raw_runs)
    result = {
        "bench": "kafka",
        "value": round(value),
        "unit": "events/s",
        "baseline": round(baseline),
        "ratio": round(value / baseline, 3),
        "events": len(events),
        "commands": produced,
        "commands_expected": n_commands,
        "avg_event_bytes": round(avg_bytes),
        "decider": args.decider,
        "runs": args.repeat,  # value and baseline: medians of the runs below
        "full_s": [round(t, 3) for t in full_runs],
        "raw_s": [round(t, 3) for t in raw_runs],
        # the deciders alone, in memory, on the same events: the full path cannot beat this
        "step_only_events_per_s": round(step_rate),
        "ratio_to_min_of_raw_and_step": round(value / min(baseline, step_rate), 3),
        "broker": "tansu (memory)",
        "commands_partitions": COMMANDS_PARTITIONS,
        "target_met": value / baseline >= 0.8,
    }
    print(json.dumps(result))


if __name__ == "__main__":
    asyncio.run(main())
