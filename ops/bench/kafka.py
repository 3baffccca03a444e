"""Kafka benchmark: events/s through tether's full path vs raw aiokafka, on a tansu broker started here.

Full path (tether): append the events with ``KafkaLog.append`` → the decider consumes them (group consumer,
decode, ``tether.projections.step.step`` on a world) and commits each batch with its commands produced to the commands
topic (produce acks=all, then commit) → an executor consumes the commands (decode, commit). The three run
concurrently, as in ``tether run``; the clock stops when the executor has consumed every command.

Baseline (raw aiokafka, same broker, same run): the *same broker traffic* without tether — produce the same
encoded event bytes (acks=all) → a group consumer reads them and, per batch, produces the commands the real
decider derived from those events (pre-encoded bytes, same keys) → a consumer reads those commands; commits as
in the full path, and, as there, the source of events and the decider have a producer each. So the ratio
measures tether's own overhead (envelope decoding, the deciders, bookkeeping). The baseline produces with
aiokafka's per-message ``send``; a second baseline (``baseline_batch_api``, skip it with
``--no-batch-api-baseline``) produces one record batch per partition with ``create_batch``/``send_batch``, which is
what tether's produce queue does — it is the stricter comparison (``ratio_to_batch_api``), since tether's own
producing costs less CPU than ``send``. Client settings (``--linger-ms``, ``--max-batch-bytes``,
``--fetch-max-wait-ms``) are given alike to both paths; their defaults are KafkaLog's.

The workload is a realistic synthetic log (``tether.adapters.testing.synthetic_log``: claims, bindings, lookups,
migrations). ``--decider identity`` replaces ``step`` by a placeholder that emits one command per event.

    python ops/bench/kafka.py [--namespaces 24] [--repeat 3] [--decider real|identity] [--no-batch-api-baseline]

Each path runs ``--repeat`` times, interleaved (raw, full, raw batch API, raw, …), each on fresh topics of the same
broker; the clocks start once the consumer groups have formed (their partitions are assigned), and the figures
reported are the medians. The machine the figures come from is shared and the full path is CPU-bound: run it
several times and read the spread of ``full_s``/``raw_s``, not one ratio.

Last line: one JSON object ``{"bench": "kafka", "value": <events/s full path>, "unit": "events/s",
"baseline": <raw events/s>, "ratio": ..., "baseline_batch_api": ..., "ratio_to_batch_api": ..., ...}``.
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
from dataclasses import dataclass, fields
from typing import Any

import msgspec
import structlog
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from aiokafka.partitioner import DefaultPartitioner

from tether.adapters.log.kafka import KafkaLog
from tether.adapters.testing.kafka_broker import TansuBroker
from tether.adapters.testing.synthetic_log import Simulation, scenario
from tether.core.commands import StartTimer, command_id, command_target
from tether.core.envelope import CommandRecord, EventRecord, encode

COMMANDS_PARTITIONS = 6
BATCH = 512


@dataclass(frozen=True)
class Tuning:
    """Client settings given alike to both paths (KafkaLog URL parameters on the full path)."""

    linger_ms: int = 5
    max_batch_bytes: int = 256 * 1024
    fetch_max_wait_ms: int = 500

    def query(self) -> str:
        return "".join(f"&{f.name}={getattr(self, f.name)}" for f in fields(self))


def identity_decider() -> Callable[[EventRecord], list[CommandRecord]]:
    """Placeholder decider: one deterministic command per event (used before the real deciders existed)."""

    def decide(record: EventRecord) -> list[CommandRecord]:
        cmd = StartTimer(timer_id=f"bench-{record.offset}", fire_at_ms=record.at_ms, purpose="bench",
                         subject=record.key)
        return [CommandRecord(id=command_id(cmd), at_ms=record.at_ms, key=command_target(cmd), command=cmd,
                              causation=f"{record.partition}:{record.offset}")]

    return decide


def real_decider() -> Callable[[EventRecord], list[CommandRecord]]:
    from tether.core.world import initial_world
    from tether.projections.step import step

    world = initial_world()
    return lambda record: step(world, record)


def make_decider(kind: str) -> Callable[[EventRecord], list[CommandRecord]]:
    return real_decider() if kind == "real" else identity_decider()


async def full_path(url: str, events: list[EventRecord], decider_kind: str) -> tuple[float, float, int]:
    """Seconds from the first append until the executor consumed the last command, the CPU seconds this process
    spent meanwhile, and the commands count."""
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
    start, cpu = time.perf_counter(), time.process_time()
    await produce()
    await asyncio.wait_for(decider_task, 600)
    await asyncio.wait_for(executor_task, 600)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    for log in (producer_log, decider_log, executor_log):
        await log.close()
    return elapsed, cpu, produced_commands


async def wait_until(ready: Callable[[], bool], within: float = 60.0) -> None:
    """Poll ``ready`` (the consumer groups formed) before a clock starts."""
    deadline = time.monotonic() + within
    while not ready():
        if time.monotonic() > deadline:
            raise TimeoutError("the consumer groups did not form")
        await asyncio.sleep(0.05)


_partitioner = DefaultPartitioner()


async def send_batches(producer: AIOKafkaProducer, topic: str, items: list[tuple[bytes, bytes]],
                       partitions: int) -> list[asyncio.Future[Any]]:
    """``items`` as one record batch per partition (aiokafka's ``create_batch``/``send_batch``), each on the partition
    aiokafka's default partitioner picks for its key: what tether's produce queue does, minus tether."""
    ids = list(range(partitions))
    open_batches: dict[int, Any] = {}
    futures = []
    for key, value in items:
        partition = _partitioner(key, ids, ids) if partitions > 1 else 0
        batch = open_batches.get(partition)
        if batch is None:
            batch = open_batches[partition] = producer.create_batch()
        if batch.append(timestamp=None, key=key, value=value, headers=[]) is None:
            futures.append(await producer.send_batch(batch, topic, partition=partition))
            batch = open_batches[partition] = producer.create_batch()
            batch.append(timestamp=None, key=key, value=value, headers=[])
    for partition, batch in open_batches.items():
        futures.append(await producer.send_batch(batch, topic, partition=partition))
    return futures


async def raw_path(bootstrap: str, prefix: str, event_items: list[tuple[bytes, bytes]],
                   commands_by_event: list[list[tuple[bytes, bytes]]], *, tuning: Tuning,
                   batch_api: bool = False) -> tuple[float, float]:
    """The same broker traffic with plain aiokafka (see the module docstring): per-message ``send``, or with
    ``batch_api`` one record batch per partition per produce, as tether's produce queue builds them. Returns the
    seconds and the CPU seconds of this process."""
    events_topic, commands_topic = f"{prefix}.events", f"{prefix}.commands"
    admin = AIOKafkaAdminClient(bootstrap_servers=bootstrap)
    await admin.start()
    await admin.create_topics([NewTopic(events_topic, 1, 1), NewTopic(commands_topic, COMMANDS_PARTITIONS, 1)])
    await admin.close()
    common: dict[str, Any] = {"bootstrap_servers": bootstrap, "enable_auto_commit": False,
                              "auto_offset_reset": "earliest", "session_timeout_ms": 2000,
                              "heartbeat_interval_ms": 500, "fetch_max_wait_ms": tuning.fetch_max_wait_ms}
    # one producer for the source of events and one for the decider, as in the full path (each KafkaLog has its own)
    source, producer = (AIOKafkaProducer(bootstrap_servers=bootstrap, acks="all", enable_idempotence=False,
                                         linger_ms=tuning.linger_ms, max_batch_size=tuning.max_batch_bytes)
                        for _ in range(2))
    await source.start()
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
                if batch_api:
                    out = [item for messages in fetched.values() for message in messages
                           for item in commands_by_event[message.offset]]
                    seen += sum(len(messages) for messages in fetched.values())
                    futures = await send_batches(producer, commands_topic, out, COMMANDS_PARTITIONS)
                else:
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
    start, cpu = time.perf_counter(), time.process_time()
    for i in range(0, len(event_items), 2000):
        chunk = event_items[i : i + 2000]
        if batch_api:
            futures = await send_batches(source, events_topic, chunk, 1)
        else:
            futures = [await source.send(events_topic, value, key=key) for key, value in chunk]
        await asyncio.gather(*futures)
    await asyncio.wait_for(decider_task, 600)
    await asyncio.wait_for(executor_task, 600)
    elapsed, cpu = time.perf_counter() - start, time.process_time() - cpu
    await source.stop()
    await producer.stop()
    return elapsed, cpu


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
                        help="real: tether.projections.step.step; identity: one command per event (placeholder)")
    defaults = Tuning()
    parser.add_argument("--linger-ms", type=int, default=defaults.linger_ms, help="both paths' producers")
    parser.add_argument("--max-batch-bytes", type=int, default=defaults.max_batch_bytes,
                        help="both paths' producers: the largest record batch")
    parser.add_argument("--fetch-max-wait-ms", type=int, default=defaults.fetch_max_wait_ms,
                        help="both paths' consumers: tansu holds a fetch that finds nothing new this long")
    parser.add_argument("--no-batch-api-baseline", dest="batch_api_baseline", action="store_false",
                        help="skip the second baseline (raw aiokafka producing with create_batch/send_batch)")
    args = parser.parse_args()
    tuning = Tuning(linger_ms=args.linger_ms, max_batch_bytes=args.max_batch_bytes,
                    fetch_max_wait_ms=args.fetch_max_wait_ms)
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
    batch_runs: list[float] = []
    full_runs: list[float] = []
    cpu: dict[str, list[float]] = {"full": [], "raw": [], "raw_batch_api": []}
    try:
        for _ in range(args.repeat):  # interleaved, so a slow spell of the machine hits every path alike
            run = uuid.uuid4().hex[:6]
            raw_s, raw_cpu = await raw_path(broker.bootstrap, f"raw-{run}", event_items, command_items, tuning=tuning)
            raw_runs.append(raw_s)
            cpu["raw"].append(raw_cpu)
            # the decider's CPU work runs on the event loop between polls: a session timeout roomier than the tests'
            url = (f"kafka://{broker.bootstrap}/tether-{run}?commands_partitions={COMMANDS_PARTITIONS}"
                   "&session_timeout_ms=6000&heartbeat_interval_ms=1000" + tuning.query())
            full_s, full_cpu, produced = await full_path(url, events, args.decider)
            full_runs.append(full_s)
            cpu["full"].append(full_cpu)
            line = f"full path {full_s:.2f} s, raw {raw_runs[-1]:.2f} s"
            if args.batch_api_baseline:
                batch_s, batch_cpu = await raw_path(broker.bootstrap, f"rawb-{run}", event_items, command_items,
                                                    tuning=tuning, batch_api=True)
                batch_runs.append(batch_s)
                cpu["raw_batch_api"].append(batch_cpu)
                line += f", raw with the batch API {batch_runs[-1]:.2f} s"
            print(line, file=sys.stderr)
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
        # CPU seconds of this process (the broker is another) while each path ran: less noisy than the clock
        **{f"{name}_cpu_s": [round(t, 3) for t in times] for name, times in cpu.items() if times},
        **({} if not batch_runs else {
            # raw aiokafka producing one record batch per partition (create_batch/send_batch), as tether does
            "baseline_batch_api": round(len(events) / statistics.median(batch_runs)),
            "ratio_to_batch_api": round(value / (len(events) / statistics.median(batch_runs)), 3),
            "raw_batch_api_s": [round(t, 3) for t in batch_runs],
        }),
        **{f.name: getattr(tuning, f.name) for f in fields(tuning)},
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
