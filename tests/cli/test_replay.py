"""`tether replay`: summary, --until, --explain, --diff (clean, tampered, missing, extra), snapshots."""

from __future__ import annotations

import asyncio
import io
import shutil
import sqlite3
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner, Result
from rich.console import Console

from tether.adapters.cli import main
from tether.adapters.cli.record_lines import type_name
from tether.adapters.cli.replay.command import explain_command
from tether.adapters.cli.replay.diff import diff
from tether.adapters.cli.replay.rebuild import replay
from tether.adapters.cli.replay.trail import Bounds, ScanningIndex, explain, index_of
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.synthetic_log import Simulation, scenario
from tether.core.commands import UpdateClaimStatus
from tether.core.envelope import rfc3339
from tether.projections.fold import evolve


@pytest.fixture(scope="module")
def pristine(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Simulation]:
    path = tmp_path_factory.mktemp("replay") / "pristine.db"
    sim = scenario(Simulation(seed=11), namespaces=2, jobs_per_namespace=3, tables=3, migrations=2, deletions=0.2)

    async def write() -> None:
        log = await SqliteLog.open(path)
        await sim.write(log)
        await log.close()

    asyncio.run(write())
    return path, sim


@pytest.fixture
def built(pristine: tuple[Path, Simulation], tmp_path: Path) -> tuple[Path, Simulation]:
    """A private copy of the log (tests tamper with it)."""
    path = tmp_path / "log.db"
    shutil.copy(pristine[0], path)
    return path, pristine[1]


def flat(text: str) -> str:
    return " ".join(text.split())


def run(*args: str) -> Result:
    return CliRunner().invoke(main, ["replay", *args])


def test_replay_summarises_the_world(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    result = run(str(path))
    assert result.exit_code == 0, result.output
    summary = sim.world.summary()
    for name in ("claims bound", "data sources", "bindings injected", "clusters"):
        value = summary[name.replace(" ", "_")]
        assert any(text.split() == [*name.split(), str(value)] for text in result.output.splitlines()), name
    assert f"offset {len(sim.events)} of {len(sim.events)}" in result.output


async def test_replay_folds_to_the_same_world_as_the_live_pipeline(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    log = await SqliteLog.open(path)
    try:
        result = await replay(log)
        assert result.events == len(sim.events)
        # the same world, in-flight state included; a replay parses each object once, for its last version, so the
        # order of the maps and sets may differ (nothing reads it: the deciders sort), but not the tombstones'
        assert msgspec.json.encode(result.world, order="deterministic") == \
            msgspec.json.encode(sim.world, order="deterministic")
        assert list(result.world.tombstones) == list(sim.world.tombstones)  # the oldest is forgotten first
        events_only = await replay(log, fold=evolve)
        assert events_only.world.summary()["claims_bound"] == sim.world.summary()["claims_bound"]
        partial = await replay(log, until_offset=40)
        assert partial.events == 40 and partial.world.events == 40
    finally:
        await log.close()


def test_until_accepts_an_offset_or_a_time(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    by_offset = run(str(path), "--until", "25")
    assert by_offset.exit_code == 0, by_offset.output
    assert "offset 25 of" in by_offset.output
    at = sim.events[29].at_ms  # the prefix appended until event 30's time (later events have later times)
    assert sim.events[30].at_ms > at
    by_time = run(str(path), "--until", f"{rfc3339(at)[:-1]}.{at % 1000:03d}Z")
    assert by_time.exit_code == 0, by_time.output
    assert "offset 30 of" in by_time.output
    bad = run(str(path), "--until", "yesterday")
    assert bad.exit_code == 2 and "neither an offset nor an RFC3339 time" in bad.output
    superscript = run(str(path), "--until", "²")  # str.isdigit() says yes, int() raised
    assert superscript.exit_code == 2 and "neither an offset nor an RFC3339 time" in superscript.output


def test_explain_prints_the_decision_trail_of_a_claim(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    key = "DataSourceClaim/team-000/etl-0000-input-0"
    result = run(str(path), "--explain", key)
    assert result.exit_code == 0, result.output
    out = result.output
    assert out.splitlines()[0] == f"Decision trail of {key}"
    assert "ObjectObserved" in out and "UpdateClaimStatus" in out
    assert "because claim DataSourceClaim/team-000/etl-0000-input-0: DataSourceBound: bound to DataSource" in out
    own = {f"0:{e.offset}" for e in sim.events if e.key == key}
    for command in sim.commands:  # what its own events caused elsewhere (a lookup…) is shown with its key
        if command.causation in own and command.key != key:
            assert f"C{command.offset} " in out and command.key in out
    assert "phase=Bound" in out
    # every command of the log targeting the claim is in the trail, each under the event that caused it
    targeting = [c for c in sim.commands if c.key == key]
    lines = out.splitlines()
    for command in targeting:
        at = next(i for i, text in enumerate(lines) if text.lstrip("└─ ").startswith(f"C{command.offset} "))
        cause = "E" + command.causation.split(":")[1] + " "
        assert any(text.startswith(cause) for text in lines[:at]), command.causation


async def test_explain_trail_is_in_log_order_and_bounded_by_until(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    log = await SqliteLog.open(path)
    try:
        key = "DataSourceClaim/team-000/etl-0000-input-0"
        trail = await explain(log, key)
        offsets = [e.offset for e in trail.events]
        assert offsets == sorted(offsets) and offsets
        assert {e.offset for e in sim.events if e.key == key} <= set(offsets)
        early = await explain(log, key, until_offset=offsets[1])
        assert [e.offset for e in early.events] == offsets[:2]
        cluster_scoped = await explain(log, "Cluster/member1")
        assert cluster_scoped.key == "Cluster//member1" and cluster_scoped.events
    finally:
        await log.close()


async def test_the_sqlite_index_and_the_scanning_stand_in_answer_alike(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    log = await SqliteLog.open(path)
    try:
        scanning = ScanningIndex(log)
        assert index_of(log) is log  # SqliteLog answers from its indexes
        for until in (None, 40):
            keys = await log.keys("events", until_offset=until)
            assert keys == await scanning.keys("events", until_offset=until)
            assert set(keys) == {e.key for e in sim.events if until is None or e.offset <= until}
        assert await log.keys("commands") == sorted({c.key for c in sim.commands})
    finally:
        await log.close()


class Unindexed:
    """A log with the Protocol's reads only (as Kafka): ``--explain`` scans it instead of asking an index."""

    def __init__(self, log: SqliteLog) -> None:
        self._log = log

    def read(self, *args: Any, **kwargs: Any) -> Any:
        return self._log.read(*args, **kwargs)

    async def end(self, stream: Any) -> Any:
        return await self._log.end(stream)

    async def load_snapshot(self, name: str) -> Any:
        return await self._log.load_snapshot(name)


async def test_a_volcano_jobs_chain_is_the_same_from_an_index_or_a_scan(built: tuple[Path, Simulation]) -> None:
    path, _ = built
    log = await SqliteLog.open(path)
    try:
        answers = []
        for source in (log, Unindexed(log)):
            out = io.StringIO()
            code = await explain_command(source, "vcjob/team-000/etl-0000", bounds=Bounds(),  # type: ignore[arg-type]
                                         out=Console(file=out, width=300), where="log")
            answers.append((code, out.getvalue()))
    finally:
        await log.close()
    assert answers[0] == answers[1] and answers[0][0] == 0
    text = answers[0][1]
    assert text.startswith("Why Job/team-000/etl-0000 is where it is")
    assert "  workload batch.volcano.sh/Job/team-000/etl-0000" in text
    assert "Job/team-000/etl-0000 ← ResourceBinding/team-000/etl-0000-job ← DataSourceClaim/team-000/etl-0000-input-0" \
        in text


def test_explain_of_an_unknown_object(built: tuple[Path, Simulation]) -> None:
    path, _ = built
    result = run(str(path), "--explain", "DataSourceClaim/nowhere/nothing")
    assert result.exit_code == 1
    assert "no record about DataSourceClaim/nowhere/nothing" in result.output


@pytest.mark.parametrize("command", [["replay"], ["replay", "--diff"], ["log", "tail"]])
def test_a_missing_log_file_is_a_usage_error_and_is_not_created(tmp_path: Path, command: list[str]) -> None:
    missing = tmp_path / "typo.db"
    for url in (str(missing), f"sqlite://{missing}"):
        result = CliRunner().invoke(main, [*command, url])
        assert result.exit_code == 2, result.output
        assert "no log at" in result.output and "typo.db" in result.output
    assert list(tmp_path.iterdir()) == []


def test_diff_of_an_untouched_log_finds_nothing(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    result = run(str(path), "--diff")
    assert result.exit_code == 0, result.output
    assert f"no difference: the deciders re-derive the recorded commands of {len(sim.events)} events" in result.output


def tamper(path: Path, sql: str, *params: object) -> None:
    with sqlite3.connect(path) as db:
        db.execute(sql, params)


def test_diff_reports_a_tampered_command_and_exits_1(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    victim = next(c for c in sim.commands if isinstance(c.command, UpdateClaimStatus)
                  and c.command.phase == "Bound")
    tamper(path, "UPDATE commands SET body = json_set(body, '$.command.phase', 'Pending') WHERE offset = ?",
           victim.offset)
    result = run(str(path), "--diff")
    assert result.exit_code == 1, result.output
    assert f"changed event {victim.causation}: C{victim.offset} " in flat(result.output)
    assert 'phase: "Pending" → "Bound"' in result.output
    assert "commands differ: 0 missing, 0 extra, 1 changed" in result.output


def test_diff_reports_missing_and_extra_commands(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    dropped = sim.commands[5]
    tamper(path, "DELETE FROM commands WHERE offset = ?", dropped.offset)
    moved = sim.commands[8]  # recorded as caused by another event than the one that caused it
    tamper(path, "UPDATE commands SET causation = '0:1', body = json_set(body, '$.causation', '0:1') "
                 "WHERE offset = ?", moved.offset)
    result = run(str(path), "--diff")
    assert result.exit_code == 1, result.output
    out = flat(result.output)
    assert f"missing event {dropped.causation}: C- " in out and type_name(dropped) in out
    assert f"missing event {moved.causation}: C- " in out
    assert f"extra event 0:1: C{moved.offset} " in out
    assert "commands differ: 2 missing, 1 extra, 0 changed" in result.output


async def test_diff_api_and_snapshots(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    log = await SqliteLog.open(path)
    try:
        result, differences = await diff(log)
        assert differences == [] and result.events == len(sim.events)
    finally:
        await log.close()


def test_snapshot_is_saved_used_and_can_be_ignored(built: tuple[Path, Simulation]) -> None:
    path, sim = built
    saved = run(str(path), "--save-snapshot")
    assert saved.exit_code == 0 and f"saved snapshot at offset {len(sim.events)}" in saved.output
    again = run(str(path))
    assert again.exit_code == 0 and f"from snapshot offset {len(sim.events)}" in flat(again.output)
    assert "replayed 0 events" in flat(again.output)
    assert f"claims bound {sim.world.summary()['claims_bound']}" in flat(again.output)
    ignored = run(str(path), "--no-snapshot")
    assert "from snapshot" not in ignored.output and f"replayed {len(sim.events)} events" in flat(ignored.output)
    before = run(str(path), "--until", "10")  # the snapshot covers more than asked: not used
    assert "from snapshot" not in before.output and "offset 10 of" in before.output
    assert run(str(path), "--diff").exit_code == 0  # diff from the snapshot: nothing left to compare, no error


def test_replay_reports_skipped_corrupt_records(built: tuple[Path, Simulation]) -> None:
    path, _ = built
    tamper(path, "UPDATE events SET body = '{' WHERE offset = 3")
    result = run(str(path))
    assert result.exit_code == 0, result.output
    assert "1 corrupt record(s) were skipped" in result.output
