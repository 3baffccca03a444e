"""tether replay --what-if: re-deciding recorded history under another location mapping or other queues, and
following the change through to the bindings: which workloads would move, from where to where."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from tether.adapters.cli.replay.whatif import load_candidate, what_if
from tether.adapters.kubernetes import manifests as m
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.fake_cluster import Harness
from tether.core import api
from tether.core.commands import CreateDataSource, SetBindingPlacement, UpdateDataSourceLocality
from tether.core.world import initial_world

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
        answer = await what_if(log, {"amoro": m.plugin_entry(mapping=MAPPING)})
        assert answer.differences == [] and answer.moves == []
    finally:
        await log.close()


async def test_moving_east_to_another_cluster_shows_the_decisions_that_change(tmp_path: Path) -> None:
    h = recorded_history()
    log = await write_log(h, tmp_path / "t.db")
    candidate = {"amoro": m.plugin_entry(mapping={"s3://east/": ["c3"], "s3://west/": ["c1"]})}
    try:
        answer = await what_if(log, candidate)
    finally:
        await log.close()
    differences = answer.differences
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
    candidate = load_candidate(path)
    assert candidate.plugins is not None and set(candidate.plugins) == {"amoro"} and candidate.queues == {}
    bad = tmp_path / "bad.yaml"
    bad.write_text("- just\n- a list\n")
    with pytest.raises(ValueError, match="ConfigMap"):
        load_candidate(bad)


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


def scheduled_history() -> Harness:
    """``recorded_history``, with the binding scheduled by "Karmada" where tether allowed it (c1, c2), and a
    second workload on a western table, scheduled on c3."""
    h = recorded_history()
    h.cluster.catalog["amoro/table/db.events"] = "s3://west/db/events"
    h.apply(m.resource_binding("etl"))
    h.apply(m.claim("events", table="db.events", workload="etl"))
    for name, clusters in (("app", ["c1", "c2"]), ("etl", ["c3"])):
        rb = h.obj("ResourceBinding", "default", f"{name}-deployment")
        assert rb is not None
        rb["spec"]["clusters"] = [{"name": c, "replicas": 1} for c in clusters]
        h.apply(rb)
    return h


async def test_a_mapping_change_lists_the_workloads_that_would_move_from_where_to_where(tmp_path: Path) -> None:
    log = await write_log(scheduled_history(), tmp_path / "t.db")
    try:
        same = await what_if(log, {"amoro": m.plugin_entry(mapping=MAPPING)})
        moved = await what_if(log, {"amoro": m.plugin_entry(mapping={"s3://east/": ["c2"], "s3://west/": ["c3"]})})
    finally:
        await log.close()
    assert same.moves == []
    [move] = moved.moves  # east narrows to c2: app leaves c1; etl's west is unchanged
    assert (move.workload, move.binding, move.before, move.after) == (
        "Deployment/default/app", "ResourceBinding/default/app-deployment", ("c1", "c2"), ("c2",))
    assert move.why == ["amoro/table/db.orders at s3://east/db/orders → prefix s3://east/ → c2"]


def queue_history(capability: str) -> Harness:
    """Queue q1 with ``capability`` CPUs; three queue-managed 2-CPU bindings a, b, c waiting; one cycle."""
    h = Harness()
    for name in ("c1", "c2"):
        h.apply(m.cluster(name, cpu="64"))
    h.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tether-admission",
                                                                  "namespace": "tether-system"},
             "data": {"queue-managed": "kinds: [apps/Deployment]\n"}})
    h.apply(queue("q1", capability))
    for i, name in enumerate("abc"):
        deployment = m.deployment(name)
        deployment["spec"]["template"]["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": "q1"}
        h.apply(deployment)
        h.apply({"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
                 "metadata": {"name": name, "namespace": "default", "creationTimestamp": f"2026-01-01T00:00:0{i}Z",
                              "annotations": {"tether.dev/admission": "queue-managed: waiting for admission"}},
                 "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": name,
                                       "namespace": "default"},
                          "replicas": 1, "replicaRequirements": {"resourceRequest": {"cpu": "2"}},
                          "placement": {"clusterAffinity": {"clusterNames": ["c1"]},
                                        "replicaScheduling": {"replicaSchedulingType": "Divided"}},
                          "suspension": {"scheduling": True}}})
    h.advance(1_000)
    return h


def queue(name: str, cpu: str) -> dict[str, Any]:
    return {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": name},
            "spec": {"weight": 1, "capability": {"cpu": cpu}}}


async def test_changed_queues_list_the_bindings_admission_would_hold_or_admit(tmp_path: Path) -> None:
    h = queue_history("5")
    assert [key.rsplit("/", 1)[1] for key in h.cluster.resumed] == ["a", "b"]  # c held: cpu 6/5
    log = await write_log(h, tmp_path / "t.db")
    smaller = tmp_path / "smaller.yaml"
    smaller.write_text(yaml.safe_dump(queue("q1", "3")))
    larger = tmp_path / "larger.yaml"
    larger.write_text(yaml.safe_dump_all([queue("q1", "6"), queue("q2", "1")]))
    try:
        held = await what_if(log, load_candidate(smaller))
        admitted = await what_if(log, load_candidate(larger))
    finally:
        await log.close()
    [move] = held.moves
    assert (move.binding, move.held, move.after) == ("ResourceBinding/default/b", True, ())
    assert move.why == ["held: queue q1: cpu 4/3"]
    [move] = admitted.moves
    assert (move.binding, move.admitted, move.before, move.after) == ("ResourceBinding/default/c", True, (), ("c1",))
    assert set(load_candidate(larger).queues) == {"q1", "q2"}


def test_tether_replay_what_if_prints_the_workloads_that_would_move(tmp_path: Path) -> None:
    import asyncio

    from click.testing import CliRunner

    from tether.adapters.cli import main

    async def record() -> None:
        log = await write_log(queue_history("5"), tmp_path / "t.db")
        await log.close()

    asyncio.run(record())
    candidate = tmp_path / "queues.yaml"
    candidate.write_text(yaml.safe_dump(queue("q1", "3")))
    result = CliRunner().invoke(main, ["replay", str(tmp_path / "t.db"), "--what-if", str(candidate)],
                                terminal_width=300)
    assert result.exit_code == 0, result.output
    assert "Workloads that would move under Queue q1 of" in result.output
    assert "  Deployment/default/b (ResourceBinding/default/b): nowhere → held" in result.output.splitlines()
    assert "      held: queue q1: cpu 4/3" in result.output.splitlines()
    assert "1 workload(s) would move" in result.output
    unreadable = tmp_path / "bad.yaml"
    unreadable.write_text("kind: Deployment\n")
    bad = CliRunner().invoke(main, ["replay", str(tmp_path / "t.db"), "--what-if", str(unreadable)])
    assert bad.exit_code == 2 and "expected a ConfigMap manifest, Queues" in bad.output


def test_a_log_written_under_another_plugin_configmap_is_read_under_it(tmp_path: Path) -> None:
    """``tether run --plugin-configmap tenant/plugins``: the log says so through what it observed
    (``replay/installation.py``); ``--plugin-configmap`` on the replay says it outright."""
    import asyncio

    from click.testing import CliRunner

    from tether.adapters.cli import main
    from tether.core.world import Settings

    h = Harness(world=initial_world(Settings(plugin_configmap="tenant/plugins")))
    for c in ("c1", "c2", "c3"):
        h.apply(m.cluster(c))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping=MAPPING)}, namespace="tenant", name="plugins"))
    h.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "unrelated", "namespace": "tenant"},
             "data": {"colour": "blue"}})
    h.cluster.catalog["amoro/table/db.orders"] = "s3://east/db/orders"
    h.apply(m.resource_binding("app"))
    h.apply(m.claim("orders", table="db.orders", workload="app"))
    assert h.obj("DataSource", "", "amoro-table-db.orders") is not None  # the daemon read tenant/plugins

    async def record() -> None:
        log = await write_log(h, tmp_path / "t.db")
        await log.close()

    asyncio.run(record())
    explained = CliRunner().invoke(main, ["replay", str(tmp_path / "t.db"), "--explain", "deploy/default/app"],
                                   terminal_width=300)
    assert explained.exit_code == 0, explained.output
    assert "s3://east/ → c1, c2 (plugin amoro of ConfigMap/tenant/plugins)" in explained.output
    wrong = CliRunner().invoke(main, ["replay", str(tmp_path / "t.db"), "--explain", "deploy/default/app",
                                      "--plugin-configmap", "tenant/unrelated"], terminal_width=300)
    assert "no plugin for system 'amoro' in ConfigMap/tenant/unrelated" in wrong.output
    candidate = tmp_path / "cm.yaml"
    candidate.write_text(yaml.safe_dump(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c3"]})})))
    moved = CliRunner().invoke(main, ["replay", str(tmp_path / "t.db"), "--what-if", str(candidate)],
                               terminal_width=300)
    assert "1 workload(s) would move" in moved.output, moved.output


def tier_history() -> Harness:
    """Clusters c1 and c2 in region east (c1 with 1 CPU, c2 with 64), c3 in the west; the table in the east maps to
    c1 alone; a Divided workload of 2 replicas of 1 CPU on it, Required: it cannot run (c1 is too small)."""
    h = Harness()
    for name, region, cpu in (("c1", "east", "1"), ("c2", "east", "64"), ("c3", "west", "64")):
        h.apply(m.cluster(name, cpu=cpu, labels={"topology.karmada.io/region": region}))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1"]})}))
    h.cluster.catalog["amoro/table/db.orders"] = "s3://east/db/orders"
    rb = m.resource_binding("app", replicas=2, cpu="1")
    rb["spec"]["placement"]["replicaScheduling"] = {"replicaSchedulingType": "Divided",
                                                    "replicaDivisionPreference": "Aggregated"}
    h.apply(rb)
    h.apply(m.claim("orders", table="db.orders", workload="app"))
    return h


async def test_preferred_locality_shows_the_tier_each_workload_would_land_in(tmp_path: Path) -> None:
    log = await write_log(tier_history(), tmp_path / "t.db")
    preferred = {"policy": "Preferred", "topologyKey": "topology.karmada.io/region"}
    try:
        answer = await what_if(log, {"amoro": m.plugin_entry(mapping={"s3://east/": ["c1"]}, locality=preferred)})
        same = await what_if(log, {"amoro": m.plugin_entry(mapping={"s3://east/": ["c1"]})})
    finally:
        await log.close()
    assert same.moves == []
    [move] = answer.moves
    assert (move.binding, move.before, move.after) == ("ResourceBinding/default/app-deployment", (), ("c2",))
    assert move.why == ["tier near-data (c2) would hold it; data (c1) could not"]
    assert any(type(c.command).__name__ == "SetBindingTiers" for d in answer.differences
               for c in d.only_candidate_config)


def checks_history() -> Harness:
    """A queue-managed binding of queue q1 whose claim names Fluid Dataset ds1 (loaded nowhere), admitted: the
    queue names no admission check."""
    h = Harness()
    for name in ("c1", "c2"):
        h.apply(m.cluster(name))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1", "c2"]})}))
    h.cluster.catalog["amoro/table/db.orders"] = "s3://east/db/orders"
    h.apply({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "tether-admission",
                                                                  "namespace": "tether-system"},
             "data": {"queue-managed": "kinds: [apps/Deployment]\n"}})
    h.apply(queue("q1", "64"))
    h.apply(m.claim("a", table="db.orders", dataset=api.DatasetReference(name="ds1")))
    deployment = m.deployment("a")
    deployment["spec"]["template"]["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": "q1"}
    h.apply(deployment)
    rb = m.resource_binding("a", suspended=True)
    rb["metadata"]["annotations"] = {"tether.dev/admission": "queue-managed: waiting for admission"}
    h.apply(rb)
    h.advance(1_000)
    return h


async def test_an_admission_check_shows_the_bindings_it_would_hold(tmp_path: Path) -> None:
    h = checks_history()
    assert [key.rsplit("/", 1)[1] for key in h.cluster.resumed] == ["a-deployment"]
    log = await write_log(h, tmp_path / "t.db")
    candidate = tmp_path / "checks.yaml"
    candidate.write_text(yaml.safe_dump({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {
        "name": "tether-admission", "namespace": "tether-system"}, "data": {
        "queue-managed": "kinds: [apps/Deployment]\n",
        "admission-checks": "queues: {q1: [data-bound, data-loaded]}\n"}}))
    try:
        loaded = load_candidate(candidate)
        assert loaded.admission is not None and loaded.plugins is None
        answer = await what_if(log, loaded)
    finally:
        await log.close()
    [move] = answer.moves
    assert (move.binding, move.held, move.after) == ("ResourceBinding/default/a-deployment", True, ())
    assert move.why == ["held: admission checks: data-loaded Pending: no DataLoad of Dataset default/ds1 in the "
                        "workload's clusters (c1, c2)"]
