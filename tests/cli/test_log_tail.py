"""`tether log tail`: pretty lines, JSON lines, stream selection, --from, and --follow."""

from __future__ import annotations

import asyncio
import io
import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from rich.console import Console

from tether.adapters.cli import main
from tether.adapters.cli.log import tail
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.synthetic_log import Simulation, scenario


def build(path: Path) -> Simulation:
    sim = scenario(Simulation(seed=3), namespaces=1, jobs_per_namespace=2, tables=2)

    async def write() -> None:
        log = await SqliteLog.open(path)
        await sim.write(log)
        await log.close()

    asyncio.run(write())
    return sim


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Simulation]:
    path = tmp_path_factory.mktemp("tail") / "log.db"
    return path, build(path)


def test_tail_prints_one_line_per_record_merged_by_time(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    result = CliRunner().invoke(main, ["log", "tail", str(path)])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == len(sim.events) + len(sim.commands)
    assert lines[0].startswith("E1 ") and "ConfigMap/volcano-global/volcano-global-datasource-plugins" in lines[0]
    assert "ObjectObserved" in lines[0] and "watch" in lines[0] and "2026-01-01T00:00:00Z" in lines[0]
    first_command = next(i for i, text in enumerate(lines) if text.startswith("C1 "))
    cause = sim.commands[0].causation  # "0:<offset>": the event that caused it is printed before it
    assert f"← {cause}" in lines[first_command] and "because" in lines[first_command]
    assert any(text.startswith(f"E{cause.split(':')[1]} ") for text in lines[:first_command])


def test_tail_one_stream_from_an_offset(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    result = CliRunner().invoke(main, ["log", "tail", f"sqlite://{path}", "--stream", "commands", "--from", "3"])
    assert result.exit_code == 0, result.output
    lines = result.output.splitlines()
    assert len(lines) == len(sim.commands) - 2
    assert lines[0].startswith("C3 ") and all(text.startswith("C") for text in lines)


def test_tail_json_lines(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    result = CliRunner().invoke(main, ["log", "tail", str(path), "--stream", "events", "--json"])
    assert result.exit_code == 0, result.output
    records = [json.loads(text) for text in result.output.splitlines()]
    assert [r["offset"] for r in records] == list(range(1, len(sim.events) + 1))
    assert {r["stream"] for r in records} == {"events"}
    assert records[0]["event"]["type"] == "ObjectObserved"


async def test_tail_follow_prints_records_appended_later(built: tuple[Path, Simulation], tmp_path: Path) -> None:
    path = tmp_path / "live.db"
    log = await SqliteLog.open(path, poll_interval=0.05)  # the tail runs its own SqliteLog: another "process"
    src = built[1]
    await log.append("events", src.events[:3])
    buffer = io.StringIO()
    out = Console(file=buffer, soft_wrap=True, width=200)
    task = asyncio.create_task(tail(str(path), "events", True, 0, False, out))
    try:
        for _ in range(200):
            await asyncio.sleep(0.02)
            if buffer.getvalue().count("\n") >= 3:
                break
        await log.append("events", [src.events[10]])
        for _ in range(200):
            await asyncio.sleep(0.02)
            if buffer.getvalue().count("\n") >= 4:
                break
        lines = buffer.getvalue().splitlines()
        assert [text.split()[0] for text in lines] == ["E1", "E2", "E3", "E4"]
        assert src.events[10].key in lines[3]
    finally:
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await log.close()


def test_tail_of_a_missing_scheme_is_a_clear_error(tmp_path: Path) -> None:
    result = CliRunner().invoke(main, ["log", "tail", "nats://somewhere"])
    assert result.exit_code == 2
    assert "unknown log URL scheme" in result.output
