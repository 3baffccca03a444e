"""tether replay --what-if: re-deciding recorded history under another location mapping."""

from __future__ import annotations

from pathlib import Path

import yaml

from tether.adapters.cli.replay.whatif import load_candidate, what_if
from tether.adapters.kubernetes import manifests as m
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.fake_cluster import Harness
from tether.core.commands import CreateDataSource, SetBindingPlacement, UpdateDataSourceLocality

MAPPING = {"s3://east/": ["c1", "c2"], "s3://west/": ["c3"]}


def recorded_history() -> Harness:
    h = Harness()
    for c in ("c1", "c2", "c3"):
        h.apply(m.cluster(c))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping=MAPPING)}))
    h.cluster.catalog["amoro/table/db.orders"] = "s3://east/db/orders"
    h.apply(m.resource_binding("app"))
    h.apply(m.claim("orders", table="db.orders", workload="app"))
    return h


async def write_log(h: Harness, path: Path) -> SqliteLog:
    log = await SqliteLog.open(str(path))
    await log.append("events", [_fresh(r) for r in h.events])
    return log


def _fresh(record):  # the log assigns offsets itself
    record.offset = 0
    return record


async def test_same_config_changes_nothing(tmp_path: Path) -> None:
    h = recorded_history()
    log = await write_log(h, tmp_path / "t.db")
    try:
        assert await what_if(log, {"amoro": m.plugin_entry(mapping=MAPPING)}) == []
    finally:
        await log.close()


async def test_moving_east_to_another_cluster_shows_the_decisions_that_change(tmp_path: Path) -> None:
    h = recorded_history()
    log = await write_log(h, tmp_path / "t.db")
    candidate = {"amoro": m.plugin_entry(mapping={"s3://east/": ["c3"], "s3://west/": ["c1"]})}
    try:
        differences = await what_if(log, candidate)
    finally:
        await log.close()
    created = [c.command for d in differences for c in d.only_candidate_config
               if isinstance(c.command, CreateDataSource)]
    assert created and created[0].cluster_names == ("c3",)
    recorded = [c.command for d in differences for c in d.only_recorded_config
                if isinstance(c.command, CreateDataSource)]
    assert recorded and recorded[0].cluster_names == ("c1", "c2")
    # first-order: the candidate run still sees the DataSource as recorded (c1,c2), so it asks to move it
    moves = [c.command for d in differences for c in d.only_candidate_config
             if isinstance(c.command, UpdateDataSourceLocality)]
    assert moves and moves[0].cluster_names == ("c3",)
    # the lookup's answer places the binding together with the DataSource's creation, from the same mapping: there
    # the recorded run excluded c3 and the candidate excludes c1,c2; every other recorded placement is reproduced
    recorded_placements = [c.command.excluded_clusters for d in differences for c in d.only_recorded_config
                           if isinstance(c.command, SetBindingPlacement)]
    assert recorded_placements == [("c3",)]
    candidate_placements = [c.command.excluded_clusters for d in differences for c in d.only_candidate_config
                            if isinstance(c.command, SetBindingPlacement)]
    assert candidate_placements[0] == ("c1", "c2")


def test_candidate_is_read_from_a_configmap_manifest(tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text(yaml.safe_dump(m.plugin_configmap({"amoro": m.plugin_entry(mapping=MAPPING)})))
    assert set(load_candidate(path)) == {"amoro"}
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    try:
        load_candidate(bad)
    except ValueError as exc:
        assert "ConfigMap" in str(exc)
    else:
        raise AssertionError("a list is not a configuration")


def test_tether_replay_what_if_prints_the_changed_decisions(tmp_path: Path) -> None:
    import asyncio

    from click.testing import CliRunner

    from tether.adapters.cli import main

    async def record() -> None:
        log = await write_log(recorded_history(), tmp_path / "t.db")
        await log.close()

    asyncio.run(record())
    config = tmp_path / "candidate.yaml"
    config.write_text(yaml.safe_dump(m.plugin_configmap(
        {"amoro": m.plugin_entry(mapping={"s3://east/": ["c3"], "s3://west/": ["c1"]})})))
    result = CliRunner().invoke(main, ["replay", str(tmp_path / "t.db"), "--what-if", str(config)])
    assert result.exit_code == 0, result.output
    assert "+ CreateDataSource DataSource//amoro-table-db.orders" in result.output
    assert "decision(s) differ" in result.output
