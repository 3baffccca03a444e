"""Pipelined commits (KafkaLog.commit returns before the acknowledgement) keep at-least-once: the broker cut between
send and ack, a decider killed there, a produce that fails for good."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

import pytest
from aiokafka.errors import KafkaError

from tether.adapters.log.kafka import KafkaLog
from tether.adapters.testing.kafka_broker import ProxiedBroker
from tether.core.commands import StartTimer, command_id, command_target
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import TimerFired


def event(i: int) -> EventRecord:
    return EventRecord(at_ms=1_700_000_000_000 + i, source="test", key=f"Obj/ns/o{i % 3}",
                       event=TimerFired(timer_id=f"t{i}", purpose="test", subject=f"Obj/ns/o{i % 3}"))


def command_for(offset: int) -> CommandRecord:
    """The command a (deterministic) decider derives from the event at ``offset``."""
    cmd = StartTimer(timer_id=f"t{offset}", fire_at_ms=offset, purpose="test", subject=f"Obj/ns/o{offset % 11}")
    return CommandRecord(id=command_id(cmd), at_ms=1_700_000_000_000 + offset, key=command_target(cmd), command=cmd,
                         causation=f"0:{offset}")


# A decider in a process of its own, so that it can be killed (SIGKILL: no flush, no close) at any point. It prints
# "returned <offset>" each time a pipelined commit() returned for a batch ending at that offset. Past offset 30 it
# takes one more batch, waits for a line on stdin (the test cuts the broker off meanwhile), then commits it.
DECIDER = """
import asyncio, sys
sys.path[:0] = [{tests!r}]
from test_kafka_pipelined_commits import command_for
from tether.adapters.log.kafka import KafkaLog

async def main():
    log = KafkaLog({url!r}, commit_pipeline=4)
    held = []
    async for batch in log.consume("events", consumer="decider", batch_size=5):
        if batch.position[0] > 30:
            held.append(batch)
            await asyncio.to_thread(sys.stdin.readline)
        for batch in held or [batch]:
            produced = [command_for(r.offset) for r in batch.records]
            await log.commit(batch, consumer="decider", produced=produced)
            print("returned", batch.position[0], flush=True)
        if held:
            await asyncio.sleep(3600)
        await asyncio.sleep(0.02)

asyncio.run(main())
"""


async def returned(process: asyncio.subprocess.Process) -> int:
    """The offset of the next "returned" line of the decider process (its log lines are skipped)."""
    assert process.stdout is not None
    while True:
        line = await asyncio.wait_for(process.stdout.readline(), 30)
        assert line, "the decider process ended"
        if line.startswith(b"returned "):
            return int(line.split()[1])


async def test_decider_killed_between_send_and_ack(kafka_broker: ProxiedBroker, kafka_url: str,
                                                   tmp_path: Path) -> None:
    total = 200
    async with KafkaLog(kafka_url) as log:
        await log.append("events", [event(i) for i in range(total)])
    script = tmp_path / "decider.py"
    script.write_text(DECIDER.format(tests=str(Path(__file__).parent), url=kafka_url))
    pipe = asyncio.subprocess.PIPE
    process = await asyncio.create_subprocess_exec(sys.executable, str(script), stdin=pipe, stdout=pipe,
                                                   env={**os.environ, "PYTHONUNBUFFERED": "1"})
    cut_at = 0
    returned_after_cut: list[int] = []
    try:
        while cut_at < 30:  # a few acknowledged and committed batches first
            cut_at = await returned(process)
        kafka_broker.proxy.cut()  # every connection dropped, new ones refused: nothing sent from now on is acked
        assert process.stdin is not None
        process.stdin.write(b"go\n")
        while not returned_after_cut:  # commit() returned although its commands cannot be acknowledged
            returned_after_cut.append(await returned(process))
        process.send_signal(signal.SIGKILL)  # crash: no flush, no close
        await asyncio.wait_for(process.wait(), 10)
    finally:
        if process.returncode is None:
            process.kill()
            await asyncio.wait_for(process.wait(), 10)
        kafka_broker.proxy.restore()

    async with KafkaLog(kafka_url) as log:
        committed = (await log.position("events", consumer="decider")).get(0, 0)
        present = {c.causation async for chunk in log.read("commands") for c in chunk}
        # no offset committed past a command that was not acknowledged …
        assert 0 < committed <= cut_at < returned_after_cut[0]
        assert f"0:{returned_after_cut[0]}" not in present  # commit() had returned; its commands were lost
        assert {f"0:{o}" for o in range(1, committed + 1)} <= present
        # … and a restarted decider resumes there, re-emitting what was lost: nothing is missing in the end
        resumed_at = []
        async for batch in log.consume("events", consumer="decider", batch_size=50, follow=False):
            resumed_at.append(batch.records[0].offset)
            await log.commit(batch, consumer="decider", produced=[command_for(r.offset) for r in batch.records])
        await log.flush()
        assert resumed_at[0] == committed + 1
        assert await log.position("events", consumer="decider") == {0: total}
        commands = [c async for chunk in log.read("commands") for c in chunk]
    assert {c.causation for c in commands} == {f"0:{o}" for o in range(1, total + 1)}
    assert {c.id for c in commands} == {command_for(o).id for o in range(1, total + 1)}  # duplicates are identical


async def test_a_produce_failing_for_good_surfaces_and_commits_nothing_after(kafka_broker: ProxiedBroker,
                                                                             kafka_url: str) -> None:
    async with KafkaLog(kafka_url) as seed:
        await seed.append("events", [event(i) for i in range(20)])
    log = KafkaLog(kafka_url, append_timeout_s=1, commit_pipeline=8)
    try:
        batches = log.consume("events", consumer="decider", batch_size=5)
        first = await anext(batches)
        await log.commit(first, consumer="decider", produced=[command_for(r.offset) for r in first.records])
        await log.flush()
        second = await anext(batches)
        kafka_broker.proxy.cut()
        try:
            # returns at once (pipelined); the commands are never acknowledged (the producer times out)
            await log.commit(second, consumer="decider", produced=[command_for(r.offset) for r in second.records])
            with pytest.raises(KafkaError):
                await log.flush()
            with pytest.raises(KafkaError):  # every later call refuses
                await log.commit(second, consumer="decider")
        finally:
            kafka_broker.proxy.restore()
        await batches.aclose()
    finally:
        with pytest.raises(KafkaError):
            await log.close()  # close reports it too
    async with KafkaLog(kafka_url) as fresh:
        assert await fresh.position("events", consumer="decider") == {0: 5}  # nothing past the lost commands
