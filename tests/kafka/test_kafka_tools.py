"""Log tooling on Kafka: export to SQLite and import back, tail, replay through open_log."""

from __future__ import annotations

import asyncio
from pathlib import Path

from click.testing import CliRunner

from tether.adapters.cli import main
from tether.adapters.log import Snapshot
from tether.adapters.log.kafka import KafkaLog
from tether.adapters.log.url import open_log
from tether.adapters.testing.kafka_broker import ProxiedBroker, kafka_test_url
from tether.core.commands import StartTimer, command_id, command_target
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import TimerFired


def event(i: int) -> EventRecord:
    return EventRecord(at_ms=1_700_000_000_000 + i, source="test", key=f"Obj/ns/o{i % 3}",
                       event=TimerFired(timer_id=f"t{i}", purpose="test", subject=f"Obj/ns/o{i % 3}"))


def command(i: int) -> CommandRecord:
    cmd = StartTimer(timer_id=f"t{i}", fire_at_ms=i, purpose="test", subject=f"Obj/ns/o{i % 11}")
    return CommandRecord(id=command_id(cmd), at_ms=1_700_000_000_000 + 2 * i, key=command_target(cmd), command=cmd,
                         causation=f"0:{i}")


async def everything(url: str) -> dict[str, list]:
    log = await open_log(url)
    try:
        return {s: [r async for chunk in log.read(s) for r in chunk] for s in ("events", "commands")}  # type: ignore[arg-type]
    finally:
        await log.close()


def test_open_log_gives_a_kafka_log(kafka_url: str) -> None:
    async def check() -> None:
        log = await open_log(kafka_url)
        assert isinstance(log, KafkaLog)
        await log.close()

    asyncio.run(check())


def test_export_import_round_trip(kafka_broker: ProxiedBroker, kafka_url: str, tmp_path: Path) -> None:
    async def seed() -> None:
        async with KafkaLog(kafka_url) as log:
            await log.append("events", [event(i) for i in range(120)])
            await log.append("commands", [command(i) for i in range(90)])
            await log.save_snapshot(Snapshot(name="world", position={0: 100}, state=b"state", at_ms=5))

    asyncio.run(seed())
    runner = CliRunner()
    db = tmp_path / "out.db"
    result = runner.invoke(main, ["log", "export", kafka_url, str(db)], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    assert "copied 120 events and 90 commands" in result.output

    original = asyncio.run(everything(kafka_url))
    exported = asyncio.run(everything(str(db)))
    assert [r.offset for r in exported["events"]] == [r.offset for r in original["events"]] == list(range(1, 121))
    strip = lambda rs: [(r.key, r.at_ms, getattr(r, "event", None) or r.command) for r in rs]  # noqa: E731
    assert strip(exported["events"]) == strip(original["events"])
    assert strip(exported["commands"]) == strip(original["commands"])

    again = kafka_test_url(kafka_broker.bootstrap, kafka_url.rsplit("/", 1)[1].split("?")[0] + "-again")
    result = runner.invoke(main, ["log", "import", str(db), again], catch_exceptions=False)
    assert result.exit_code == 0, result.output
    reimported = asyncio.run(everything(again))
    assert reimported == original  # same records, same partitions, same offsets

    # the destination must be empty
    result = runner.invoke(main, ["log", "import", str(db), again])
    assert result.exit_code != 0 and "not empty" in result.output

    async def snapshot() -> Snapshot | None:
        log = await open_log(again)
        try:
            return await log.load_snapshot("world")
        finally:
            await log.close()

    assert asyncio.run(snapshot()) == Snapshot(name="world", position={0: 100}, state=b"state", at_ms=5)


def test_tail_prints_kafka_events(kafka_url: str) -> None:
    async def seed() -> None:
        async with KafkaLog(kafka_url) as log:
            await log.append("events", [event(i) for i in range(4)])

    asyncio.run(seed())
    result = CliRunner().invoke(main, ["log", "tail", kafka_url, "--stream", "events", "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 0, result.output
    lines = result.output.strip().splitlines()
    assert len(lines) == 4 and all('"TimerFired"' in line for line in lines)
