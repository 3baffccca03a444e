"""Hostile log records: bodies that are not records, records bent out of shape, truncated, nested beyond any
decoder's recursion — decoded by ``core.envelope`` and read by ``SqliteLog``.

A body either decodes into a record that the pipeline folds and the encoder writes again, or it fails with one
of the errors every reader turns into a dead letter (``msgspec`` errors, ``ValueError``, ``TypeError``) — never
another exception, which would stop the daemon at every start. In the SQLite log the corrupt row is skipped and
dead-lettered with its reason, and the rows around it are read.
"""

from __future__ import annotations

import functools
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import msgspec
import pytest
from hypothesis import event, given
from hypothesis import strategies as st

from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.hostile import bent, fuzz_settings, json_values, nested
from tether.core.envelope import CommandRecord, EventRecord, decode_command, decode_event, encode
from tether.projections.step import step

from .worlds import world

DECODE_ERRORS = (msgspec.MsgspecError, ValueError, TypeError)  # what SqliteLog and KafkaLog dead-letter


@functools.cache
def samples() -> tuple[list[Any], list[Any]]:
    """Every event and command of the small world, as JSON values (one of each record type it has)."""
    h = world()
    return ([msgspec.json.decode(encode(r)) for r in h.events], [msgspec.json.decode(encode(r)) for r in h.commands])


@st.composite
def bent_object(draw: st.DrawFn, record: Any) -> Any:
    """``record`` with its event's object bent inside its spec, status or data (the envelope intact): a record
    that decodes, with an object in it that the fold must survive."""
    obj = (record.get("event") or {}).get("obj")
    if not isinstance(obj, dict):
        return record
    part = draw(st.sampled_from(["spec", "status", "data"]))
    return {**record, "event": {**record["event"], "obj": {**obj, part: draw(bent(obj.get(part) or {}))}}}


def bodies(stream: int) -> st.SearchStrategy[bytes]:
    records = st.integers(0, 10_000).map(lambda i: samples()[stream][i % len(samples()[stream])])
    return st.one_of(
        records.flatmap(lambda r: bent(r, max_changes=3)).map(msgspec.json.encode),
        records.flatmap(bent_object).map(msgspec.json.encode),
        records.map(msgspec.json.encode).flatmap(lambda raw: st.integers(0, len(raw)).map(lambda n: raw[:n])),
        records.map(lambda r: {**r, "schema": 2}).map(msgspec.json.encode),
        json_values().map(msgspec.json.encode),
        st.binary(max_size=40),
        st.sampled_from([nested(100_000), b'{"at_ms": 1, "event": ' + nested(5_000) + b"}", b"\xff", b""]),
    )


@fuzz_settings()
@given(body=bodies(0))
def test_a_hostile_event_record_decodes_and_folds_or_is_a_decode_error(body: bytes) -> None:
    try:
        record = decode_event(body)
    except DECODE_ERRORS:
        event("refused")
        return
    event("decoded")
    assert decode_event(encode(record)) == record
    step(world().world, record)


@fuzz_settings()
@given(body=bodies(1))
def test_a_hostile_command_record_decodes_or_is_a_decode_error(body: bytes) -> None:
    try:
        record = decode_command(body)
    except DECODE_ERRORS:
        event("refused")
        return
    event("decoded")
    assert decode_command(encode(record)) == record


@pytest.fixture
async def log(tmp_path: Path) -> AsyncIterator[SqliteLog]:
    opened = await SqliteLog.open(tmp_path / "tether.db")
    yield opened
    await opened.close()


@fuzz_settings(examples=30)
@given(body=bodies(0))
async def test_a_corrupt_row_is_dead_lettered_and_the_rows_around_it_are_read(log: SqliteLog, body: bytes) -> None:
    before = (await log.end("events")).get(0, 0)
    h = world()
    appended = await log.append("events", h.events[:3])
    middle = appended[1].offset
    with sqlite3.connect(log.path) as db:
        db.execute("UPDATE events SET body = ? WHERE offset = ?", (body, middle))
    try:
        decode_event(body)
        corrupt = False
    except DECODE_ERRORS:
        corrupt = True
    read: list[EventRecord | CommandRecord] = []
    async for batch in log.read("events", after={0: before}):
        read += batch
    offsets = [r.offset for r in read]
    assert offsets == ([middle - 1, middle + 1] if corrupt else [middle - 1, middle, middle + 1])
    dead = [d for d in await log.dead_letters() if d.offset == middle]
    assert len(dead) == corrupt and all(d.reason and d.body == body.decode("utf-8", "replace") for d in dead)
