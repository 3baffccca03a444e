"""Logs and snapshots written by earlier versions of tether still decode, fold and replay (``tests/data/old_logs``).

A log outlives the code that wrote it: an upgrade restarts the daemon on last week's SQLite file or Kafka topics,
and ``tether replay`` is pointed at logs kept for audit. So the suite keeps small logs written by earlier versions
— generated with that version's own code (``generate.py``, run on the tree of its commit) — and one record of every
event and command type per record version (``records.py``), and checks with the current code that:

* every record decodes (none lands in ``dead_letters``), and the records of the current version re-encode to the
  very bytes stored (the writer and the reader agree on the format);
* a log folds to the world its version folded (the summary it recorded when it wrote the log);
* a snapshot of another version is ignored and the log replayed from its start, one of the current version is used
  and gives the same world as the full fold;
* ``tether replay --diff`` runs over every log. On a log written by the current code it finds no difference; on
  older ones the deciders have changed since, so differences are expected — what is checked is that the diff
  completes and reports them, not that there are none;
* records of shapes that changed over time (commands before they encoded every field, a record naming its schema,
  one from a newer tether) decode as the current shape or fail with a clear message.

Adding a log: ``git archive <commit> | tar -x -C DIR && PYTHONPATH=DIR python tests/data/old_logs/generate.py
tests/data/old_logs/v<schema>-<commit>.db <commit>``. When a record type is added or changes, bump the schema version
in ``core/events.py`` / ``core/envelope.py`` as the change requires and write a new ``records-v<E>.<C>.jsonl``
(``python tests/data/old_logs/records.py``), keeping the old ones.
"""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import msgspec
import pytest
from click.testing import CliRunner

from tether.adapters.cli import main
from tether.adapters.cli.replay.rebuild import replay
from tether.adapters.log.sqlite import SqliteLog
from tether.core.commands import COMMAND_TYPES, command_target
from tether.core.envelope import (
    COMMAND_SCHEMA_VERSION,
    UPCASTERS,
    decode_command,
    decode_command_head,
    decode_event,
    encode,
    upcast,
)
from tether.core.events import EVENT_SCHEMA_VERSION, EVENT_TYPES
from tether.core.world import initial_world
from tether.projections.fold import note_issued, note_recorded
from tether.projections.snapshot import SNAPSHOT_VERSION, decode_world

DATA = Path(__file__).resolve().parents[1] / "data" / "old_logs"
LOGS = sorted(DATA.glob("*.db"))
RECORD_FILES = sorted(DATA.glob("records-v*.jsonl"))
CURRENT_RECORDS = DATA / f"records-v{EVENT_SCHEMA_VERSION}.{COMMAND_SCHEMA_VERSION}.jsonl"


def test_there_are_old_logs_and_records_of_the_current_version() -> None:
    assert len(LOGS) >= 3 and all(p.with_suffix(".json").exists() for p in LOGS)
    assert any(json.loads(p.with_suffix(".json").read_text())["snapshot_version"] == SNAPSHOT_VERSION for p in LOGS)
    assert any(json.loads(p.with_suffix(".json").read_text())["snapshot_version"] < SNAPSHOT_VERSION for p in LOGS)
    assert CURRENT_RECORDS.exists(), f"no records of this version: run python {DATA / 'records.py'}"


@pytest.fixture(params=LOGS, ids=lambda p: p.stem)
def old_log(request: pytest.FixtureRequest, tmp_path: Path) -> tuple[Path, dict[str, Any]]:
    """A copy of the log (opening it writes: WAL files, the schema's IF NOT EXISTS) and what its version recorded."""
    source: Path = request.param
    path = tmp_path / source.name
    shutil.copy(source, path)
    return path, json.loads(source.with_suffix(".json").read_text())


async def test_every_record_decodes(old_log: tuple[Path, dict[str, Any]]) -> None:
    path, meta = old_log
    log = await SqliteLog.open(path, on_corrupt="raise")
    try:
        counts = {}
        for stream in ("events", "commands"):
            counts[stream] = sum([len(batch) async for batch in log.read(stream)])
        assert counts == {"events": meta["events"], "commands": meta["commands"]}
        assert await log.dead_letters() == []
    finally:
        await log.close()


async def test_a_log_folds_to_the_world_its_version_folded(old_log: tuple[Path, dict[str, Any]]) -> None:
    path, meta = old_log
    log = await SqliteLog.open(path)
    try:
        result = await replay(log, use_snapshot=False)
    finally:
        await log.close()
    summary = result.world.summary()
    shared = summary.keys() & meta["summary"].keys()
    assert {"claims", "claims_bound", "data_sources", "bindings", "bindings_injected", "clusters"} <= shared
    assert {k: summary[k] for k in shared} == {k: meta["summary"][k] for k in shared}


async def test_a_snapshot_is_used_only_at_its_own_version(old_log: tuple[Path, dict[str, Any]]) -> None:
    path, meta = old_log
    log = await SqliteLog.open(path)
    try:
        snapshot = await log.load_snapshot("world")
        assert snapshot is not None
        full = await replay(log, use_snapshot=False)
        resumed = await replay(log)
    finally:
        await log.close()
    if meta["snapshot_version"] == SNAPSHOT_VERSION:
        assert decode_world(snapshot.state) is not None
        assert resumed.from_snapshot == meta["events"] and resumed.events == 0
        assert resumed.world.summary() == full.world.summary()
    else:  # another version's world: unreadable by design; the log is the truth, replayed from its start
        assert decode_world(snapshot.state) is None
        assert resumed.from_snapshot is None and resumed.events == meta["events"]


def test_replay_diff_runs_over_the_log(old_log: tuple[Path, dict[str, Any]]) -> None:
    path, meta = old_log
    result = CliRunner().invoke(main, ["replay", "--diff", str(path)])
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    if meta["snapshot_version"] == SNAPSHOT_VERSION:  # written by the deciders of this very version
        assert result.exit_code == 0, result.output
        assert f"no difference: the deciders re-derive the recorded commands of {meta['events']} events" in \
            " ".join(result.output.split())
    else:
        assert result.exit_code in (0, 1), result.output
        assert "no difference" in result.output or "commands differ" in result.output
    assert "corrupt record" not in result.output


def _lines(path: Path) -> list[dict[str, str]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


@pytest.mark.parametrize("path", RECORD_FILES, ids=lambda p: p.stem)
def test_records_of_every_version_decode(path: Path) -> None:
    for line in _lines(path):
        decode = decode_event if line["stream"] == "events" else decode_command
        record = decode(line["body"])
        if path == CURRENT_RECORDS:  # what this version writes, it reads back to the same bytes
            assert encode(record).decode() == line["body"]


@pytest.mark.parametrize("path", RECORD_FILES, ids=lambda p: p.stem)
def test_a_command_read_by_its_head_is_noted_as_the_whole_record(path: Path) -> None:
    """``tether replay`` reads commands as heads (type, key, id) and notes most from the head alone: the key must be
    the command's target, and the world noted from heads the world noted from whole records."""
    from_heads, from_records = initial_world(), initial_world()
    bodies = [line["body"] for line in _lines(path) if line["stream"] == "commands"]
    old_shapes = [old for stream, old, _ in (p.values for p in OLD_SHAPES) if stream == "commands"]
    for body in bodies + old_shapes:
        record, head = decode_command(body), decode_command_head(body)
        assert (head.id, head.at_ms, head.causation, head.command.type) == \
            (record.id, record.at_ms, record.causation, type(record.command).__name__)
        assert head.key == command_target(record.command)
        assert head.record() == record
        note_recorded(from_heads, head)
        note_issued(from_records, record.command, record.id, at_ms=record.at_ms)
    assert bodies
    assert msgspec.json.encode(from_heads, order="deterministic") == \
        msgspec.json.encode(from_records, order="deterministic")


def test_the_commands_noted_from_their_head_change_nothing_but_the_in_flight_slots() -> None:
    """``note_recorded`` notes a command from its head alone unless its type is in ``_NOTED_FROM_BODY``: every other
    type must change nothing of the world but ``inflight`` — checked on a world that holds the members the commands
    name, so a note added to ``note_issued`` for a new type fails here until the type is listed."""
    from tether.projections.fold import _NOTED_FROM_BODY

    records = [decode_command(line["body"]) for line in _lines(CURRENT_RECORDS) if line["stream"] == "commands"]
    base = initial_world()
    for record in records:
        cluster = getattr(record.command, "cluster", "")
        if cluster:
            base.members.state(cluster)
    for record in records:
        noted = msgspec.json.decode(msgspec.json.encode(base), type=type(base))
        note_issued(noted, record.command, record.id, at_ms=record.at_ms)
        noted.inflight.clear()
        if type(record.command).__name__ not in _NOTED_FROM_BODY:
            assert msgspec.json.encode(noted, order="deterministic") == \
                msgspec.json.encode(base, order="deterministic"), type(record.command).__name__


def test_a_command_head_of_a_record_no_tether_writes_fails_as_the_whole_record() -> None:
    for body in ('{"id":"a","at_ms":1,"key":"k","command":{"type":"NoSuchCommand"},"causation":"0:1"}',
                 '{"id":"a","at_ms":1,"key":"k","command":{"type":"AddFinalizer"},"causation":"0:1","schema":99}',
                 '{"id":"a","key":"k","command":{"type":"AddFinalizer"},"causation":"0:1"}'):
        with pytest.raises((msgspec.ValidationError, ValueError)) as whole:
            decode_command(body)
        with pytest.raises(type(whole.value)):
            decode_command_head(body)


def test_the_current_records_cover_every_type() -> None:
    lines = _lines(CURRENT_RECORDS)
    events = {decode_event(line["body"]).event.__class__.__name__ for line in lines if line["stream"] == "events"}
    commands = {decode_command(line["body"]).command.__class__.__name__ for line in lines
                if line["stream"] == "commands"}
    missing = ({t.__name__ for t in EVENT_TYPES} - events) | ({t.__name__ for t in COMMAND_TYPES} - commands)
    assert not missing, (f"{CURRENT_RECORDS.name} has no record of {sorted(missing)}: a type was added — bump the "
                         f"schema version if old records change meaning, and write the records of the new version")


# Shapes records had before: each decodes to the record of the current shape next to it.
OLD_SHAPES = [
    pytest.param(  # commands encoded with omit_defaults until 2496eef: defaulted fields absent
        "commands",
        '{"id":"a","at_ms":1,"key":"Data/amoro/table/db.t","command":{"type":"LookupDataLocation","identity":'
        '{"system":"amoro","type":"table","name":"db.t","attributes":[]}},"causation":"0:1"}',
        '{"id":"a","at_ms":1,"key":"Data/amoro/table/db.t","command":{"type":"LookupDataLocation","identity":'
        '{"system":"amoro","type":"table","name":"db.t","attributes":[]},"trigger":"miss","attempt":1},'
        '"causation":"0:1"}', id="LookupDataLocation without trigger and attempt"),
    pytest.param(
        "commands",
        '{"id":"b","at_ms":1,"key":"DataSource//ds","command":{"type":"CreateDataSource","name":"ds","identity":'
        '{"system":"amoro","type":"table","name":"db.t","attributes":[]},"cluster_names":["east"],'
        '"location":"s3://east/t"},"causation":"0:1"}',
        '{"id":"b","at_ms":1,"key":"DataSource//ds","command":{"type":"CreateDataSource","name":"ds","identity":'
        '{"system":"amoro","type":"table","name":"db.t","attributes":[]},"cluster_names":["east"],'
        '"location":"s3://east/t","reclaim_policy":"Retain"},"causation":"0:1"}',
        id="CreateDataSource without reclaim_policy"),
    pytest.param(
        "commands",
        '{"id":"c","at_ms":1,"key":"ResourceBinding/ns/rb","command":{"type":"SetBindingPlacement","binding":'
        '{"apiVersion":"work.karmada.io/v1alpha2","kind":"ResourceBinding","name":"rb","namespace":"ns"},'
        '"excluded_clusters":["west"]},"causation":"0:1"}',
        '{"id":"c","at_ms":1,"key":"ResourceBinding/ns/rb","command":{"type":"SetBindingPlacement","binding":'
        '{"apiVersion":"work.karmada.io/v1alpha2","kind":"ResourceBinding","name":"rb","namespace":"ns"},'
        '"excluded_clusters":["west"],"injected":true,"reschedule_at":""},"causation":"0:1"}',
        id="SetBindingPlacement without injected and reschedule_at"),
    pytest.param(  # before f420278 observations had no cluster (omitted when empty: still the same bytes)
        "events",
        '{"at_ms":1,"source":"watch","key":"DataSourceClaim/*","event":{"type":"ObjectsListed",'
        '"kind":"DataSourceClaim","keys":[]},"schema":1}',
        '{"at_ms":1,"source":"watch","key":"DataSourceClaim/*","event":{"type":"ObjectsListed",'
        '"kind":"DataSourceClaim","keys":[],"namespace":"","cluster":""}}',
        id="a record naming its schema, an ObjectsListed without cluster"),
]


@pytest.mark.parametrize(("stream", "old", "current"), OLD_SHAPES)
def test_an_old_shape_decodes_as_the_current_one(stream: str, old: str, current: str) -> None:
    decode = decode_event if stream == "events" else decode_command
    assert msgspec.json.encode(decode(old)) == msgspec.json.encode(decode(current))


def test_a_record_from_a_newer_tether_is_refused_with_a_clear_message() -> None:
    future = ('{"at_ms":1,"source":"watch","key":"k","event":{"type":"ObjectsListed","kind":"X","keys":[]},'
              f'"schema":{EVENT_SCHEMA_VERSION + 1}}}')
    with pytest.raises(ValueError, match="newer than this tether understands"):
        decode_event(future)


def test_an_older_schema_goes_through_each_upcaster_once_in_order(monkeypatch: pytest.MonkeyPatch) -> None:
    """No payload has changed incompatibly yet, so no upcaster is registered: stand-ins check the chain the first
    real one will rely on — each step once, in order, each seeing the version it upcasts from — and that a record
    with no step for its version is refused with a clear message."""
    seen: list[int] = []

    def upcaster(version: int) -> Callable[[dict[str, Any]], dict[str, Any]]:
        def step(raw: dict[str, Any]) -> dict[str, Any]:
            assert raw["schema"] == version and len(seen) < 2, f"step {version} called on {raw} after {seen}"
            seen.append(version)
            return {**raw, "steps": [*raw.get("steps", []), version]}
        return step

    monkeypatch.setitem(UPCASTERS, ("events", 1), upcaster(1))
    monkeypatch.setitem(UPCASTERS, ("events", 2), upcaster(2))
    assert upcast("events", {"schema": 1}, current=3) == {"schema": 3, "steps": [1, 2]}
    assert seen == [1, 2]
    with pytest.raises(ValueError, match="no upcaster for commands schema 1"):
        upcast("commands", {"schema": 1}, current=2)


async def test_a_snapshot_of_another_version_is_ignored_even_when_it_still_decodes(tmp_path: Path) -> None:
    """A snapshot version is bumped when the world's meaning changes, not only its shape: one written by the
    previous version whose bytes still fit today's World must be ignored all the same."""
    current = next(p for p in LOGS
                   if json.loads(p.with_suffix(".json").read_text())["snapshot_version"] == SNAPSHOT_VERSION)
    path = tmp_path / current.name
    shutil.copy(current, path)
    log = await SqliteLog.open(path)
    try:
        snapshot = await log.load_snapshot("world")
        assert snapshot is not None
        world = decode_world(snapshot.state)
        assert world is not None
        older = msgspec.msgpack.encode({"version": SNAPSHOT_VERSION - 1, "world": world})
        await log.save_snapshot(msgspec.structs.replace(snapshot, state=older))
        assert decode_world(older) is None
        resumed = await replay(log)
        assert resumed.from_snapshot is None and resumed.events == snapshot.position[0]
    finally:
        await log.close()
