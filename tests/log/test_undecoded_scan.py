"""The events' ``version`` column and ``scan(undecoded=True)``: what lets ``tether replay`` keep an object's versions
undecoded and decode the latest alone (``projections.replay_fold``).

A record carries a version exactly when it carries an object under its own key (an observation, or a write whose
result is its target); a file written before the column existed gets it, empty, when opened, and its records are
decoded as before; a record handed over undecoded decodes to what the log stored, and one damaged behind its
columns is dead-lettered by the replay that meets it, its previous version kept.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

from tether.adapters.cli.replay.rebuild import replay
from tether.adapters.log.sqlite import SqliteLog
from tether.core.envelope import EventRecord, StoredEvent, object_version
from tether.core.events import CommandSucceeded, ObjectDeleted, ObjectObserved, member_key
from tether.core.kube import KubeObject, ObjectMeta, raw_object


def claim(name: str, rv: str) -> KubeObject:
    return KubeObject(api_version="datadependency.volcano.sh/v1alpha1", kind="DataSourceClaim",
                      metadata=ObjectMeta(name=name, namespace="ns1", uid=f"uid-{name}", resource_version=rv),
                      spec=raw_object({"system": "amoro", "dataSourceType": "table", "dataSourceName": "db.t"}),
                      status=raw_object({"phase": "Bound"}))


def pod(name: str, rv: str) -> KubeObject:
    return KubeObject(api_version="v1", kind="Pod",
                      metadata=ObjectMeta(name=name, namespace="ns1", uid=f"uid-{name}", resource_version=rv))


def observed(obj: KubeObject, cluster: str = "") -> EventRecord:
    return EventRecord(at_ms=1_700_000_000_000, source="watch",
                       key=member_key(cluster, obj.key) if cluster else obj.key,
                       event=ObjectObserved(obj=obj, cluster=cluster))


def written(obj: KubeObject, target: str) -> EventRecord:
    return EventRecord(at_ms=1_700_000_000_001, source="executor", key=target,
                       event=CommandSucceeded(command_id="c1", command="update_claim_status", target=target,
                                              result=obj))


def test_a_record_carries_a_version_when_it_carries_an_object_under_its_own_key() -> None:
    assert object_version(observed(claim("a", "7"))) == "7"
    assert object_version(observed(pod("p", "9"), cluster="m1")) == "9"  # under the member's key
    assert object_version(written(claim("a", "8"), "DataSourceClaim/ns1/a")) == "8"
    # a write's result under another key (a member's write: its target names the member) carries none, nor does a
    # record whose key is not its object's, nor a deletion
    assert object_version(written(pod("p", "10"), "m1:Pod/ns1/p")) == ""
    assert object_version(EventRecord(at_ms=1, source="watch", key="k", event=ObjectObserved(obj=claim("a", "7")))) \
        == ""
    assert object_version(EventRecord(at_ms=1, source="watch", key="DataSourceClaim/ns1/a",
                                      event=ObjectDeleted(obj=claim("a", "7")))) == ""


async def test_a_scan_hands_versions_over_undecoded_and_they_decode_to_what_was_stored(tmp_path: Path) -> None:
    log = await SqliteLog.open(tmp_path / "log.db")
    try:
        records = [observed(claim("a", "7")), written(claim("a", "8"), "DataSourceClaim/ns1/a"),
                   observed(pod("p", "9"), cluster="m1"),
                   EventRecord(at_ms=1, source="watch", key="DataSourceClaim/ns1/a",
                               event=ObjectDeleted(obj=claim("a", "9")))]
        stored = await log.append("events", records)
        got = [r async for chunk in log.scan("events", undecoded=True) for r in chunk]
        plain = [r async for chunk in log.scan("events") for r in chunk]
    finally:
        await log.close()
    assert plain == stored
    assert [type(r) for r in got] == [StoredEvent, StoredEvent, StoredEvent, EventRecord]
    first = got[0]
    assert isinstance(first, StoredEvent)
    assert (first.offset, first.type, first.key, first.version) == (1, "ObjectObserved", "DataSourceClaim/ns1/a", "7")
    written_back = got[1]
    assert isinstance(written_back, StoredEvent)
    assert (written_back.type, written_back.version) == ("CommandSucceeded", "8")
    for undecoded, record in zip(got[:3], stored[:3], strict=True):
        assert isinstance(undecoded, StoredEvent)
        assert undecoded.record() == record and undecoded.at_ms == record.at_ms
    assert got[3] == stored[3]


async def test_a_file_written_before_the_version_column_gets_it_and_is_decoded_as_before(tmp_path: Path) -> None:
    path = tmp_path / "old.db"
    log = await SqliteLog.open(path)
    try:
        stored = await log.append("events", [observed(claim("a", "7"))])
    finally:
        await log.close()
    with sqlite3.connect(path) as db:  # the file as an older tether left it
        db.execute("ALTER TABLE events DROP COLUMN version")
    log = await SqliteLog.open(path)
    try:
        with sqlite3.connect(path) as db:
            assert "version" in {row[1] for row in db.execute("PRAGMA table_info(events)")}
        more = await log.append("events", [observed(claim("a", "8"))])
        got = [r async for chunk in log.scan("events", undecoded=True) for r in chunk]
    finally:
        await log.close()
    assert got[0] == stored[0]  # no version stored: decoded
    assert isinstance(got[1], StoredEvent) and got[1].record() == more[0]


async def test_a_kept_version_damaged_behind_its_columns_is_dead_lettered_and_the_one_before_kept(
    tmp_path: Path,
) -> None:
    path = tmp_path / "log.db"
    log = await SqliteLog.open(path)
    try:
        await log.append("events", [observed(claim("a", "7")), observed(claim("a", "8"))])
    finally:
        await log.close()
    with sqlite3.connect(path) as db:
        db.execute("UPDATE events SET body = '{\"at_ms\": 1' WHERE offset = 2")
    log = await SqliteLog.open(path)
    try:
        result = await replay(log, use_snapshot=False)
        letters = await log.dead_letters()
    finally:
        await log.close()
    assert result.events == 1
    assert result.world.claims["DataSourceClaim/ns1/a"].resource_version == "7"  # (as evolve, skipping it)
    assert [(letter.stream, letter.offset) for letter in letters] == [("events", 2)]


async def test_an_observed_version_that_looks_like_the_scans_own_mark_is_decoded_whole(tmp_path: Path) -> None:
    # the scan marks a write's result's version with "=" instead of reading a type column; an observed version that
    # starts with it (no API server makes one) must not be read as a write's: its record comes decoded, as before the
    # column. A write's is marked all the same, and comes undecoded with its own version
    log = await SqliteLog.open(tmp_path / "log.db")
    try:
        stored = await log.append("events", [observed(claim("a", "=3")),
                                             written(claim("a", "=4"), "DataSourceClaim/ns1/a")])
        got = [r async for chunk in log.scan("events", undecoded=True) for r in chunk]
    finally:
        await log.close()
    assert got[0] == stored[0]
    written_back = got[1]
    assert isinstance(written_back, StoredEvent)
    assert (written_back.type, written_back.version) == ("CommandSucceeded", "=4")
    assert written_back.record() == stored[1]
