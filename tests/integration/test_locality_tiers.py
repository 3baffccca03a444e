"""Locality tiers end to end (issue 36): the daemon writes a Preferred workload's binding as ordered cluster groups
and Karmada — the emulator's stand-in, or on a real control plane the karmada-scheduler v1.18.2 watching it
(``karmada_kube``) — places it by them.

The test brings Clusters of its own, each with the value of ``topology.karmada.io/region`` unique to the test (a
Cluster someone else keeps on a shared control plane cannot be near the test's data), and says the locality in the
plugin ConfigMap (the way that works with Volcano Global's CRD too, which prunes a claim's ``spec.locality``): the
system is Preferred with that topology key; tables under the prefix ``req<id>.`` are Required.

* the data's cluster with room: the binding lands there, in the ``data`` group;
* the data's cluster without room (its ``status.resourceSummary`` too small for 2 replicas of 1 CPU): it lands in
  the ``near-data`` group and never anywhere outside the groups; a Required workload in the same situation stays
  unscheduled, ``Scheduled=False`` with karmada-scheduler's reason, as before;
* a table move rewrites the groups (new names: karmada-scheduler starts from the first again); a user's own
  ``clusterAffinities`` are intersected with the groups, never overwritten;
* a topology key no Cluster carries is refused — ``tether_locality_config_valid`` 0, ``tether status``, a warning
  log — and nothing already placed changes.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
import structlog
from prometheus_client import generate_latest

from tether.adapters.cli.replay.diff import diff
from tether.adapters.cli.replay.trail import explain
from tether.adapters.daemon.status import daemon_status
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import BINDINGS, CLUSTERS, CONFIGMAPS, KubeClient
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.binding_history import BindingHistory
from tether.adapters.testing.tether_stack import Stack, delete_cluster_scoped, tether_stack
from tether.core.datadependency.tiers import tier_of
from tether.core.keys import KARMADA_REGION_LABEL, LOCALITY_TIERS_ANNOTATION, PLACEMENT_INJECTED_ANNOTATION

pytestmark = pytest.mark.cluster
KEY = KARMADA_REGION_LABEL


class Clusters:
    """The test's own Clusters: name → (region value, CPUs)."""

    def __init__(self, kube: KubeClient) -> None:
        self.kube = kube
        self.id = secrets.token_hex(3)
        self.names: dict[str, str] = {}

    def name(self, role: str) -> str:
        return self.names.setdefault(role, f"tier-{role}-{self.id}")

    def region(self, region: str) -> str:
        return f"{region}-{self.id}"

    async def create(self, role: str, region: str, cpu: str) -> str:
        name = self.name(role)
        raw = manifests.cluster(name, cpu=cpu, labels={KEY: self.region(region)})
        status = raw.pop("status")
        await self.kube.create(CLUSTERS, raw)
        await self.kube.patch(CLUSTERS, name, {"status": status}, subresource="status")
        return name

    async def delete(self) -> None:
        for name in self.names.values():
            with contextlib.suppress(Exception):
                await delete_cluster_scoped(self.kube, CLUSTERS, name)


@contextlib.asynccontextmanager
async def tiers_stack(env: KubeEnv) -> AsyncIterator[tuple[Stack, Clusters]]:
    kube = KubeClient(env.api_client)
    clusters = Clusters(kube)
    await env.register_crds("cluster.karmada.io_clusters")
    try:
        await clusters.create("data", "a", "1")  # too small for 2 replicas of 1 CPU
        await clusters.create("near", "a", "64")
        await clusters.create("far", "b", "64")
        await clusters.create("roomy", "c", "64")
        await clusters.create("roomy-near", "c", "64")
        plugin = {"locationMapping": {f"s3://wh-{clusters.id}-a/": [clusters.name("data")],
                                      f"s3://wh-{clusters.id}-c/": [clusters.name("roomy")]},
                  "locality": {"policy": "Preferred", "topologyKey": KEY,
                               "byTablePrefix": {f"req{clusters.id}.": {"policy": "Required"}}}}
        async with tether_stack(env, plugin_options=plugin) as stack:
            history = BindingHistory(stack.kube, stack.namespace)
            await history.start()
            stack.history = history  # type: ignore[attr-defined]
            try:
                yield stack, clusters
            finally:
                await history.stop()
    finally:
        await clusters.delete()


def table(stack: Stack, clusters: Clusters, name: str, region: str, *, required: bool = False) -> str:
    full = f"req{clusters.id}.db.{name}" if required else f"pref{clusters.id}.db.{name}"
    stack.catalog.add_table(full, f"s3://wh-{clusters.id}-{region}/{name}")
    return full


async def workload(stack: Stack, name: str, table_name: str, *,
                   affinity: dict[str, Any] | None = None) -> str:
    """A claim on ``table_name`` and its Deployment's binding: Divided (Aggregated), 2 replicas of 1 CPU. The
    binding is created suspended and let go once tether's placement is on it — what the binding webhook does
    (docs/admission.md), without which Karmada places a new binding anywhere before any controller sees it."""
    await stack.apply(manifests.claim(name, namespace=stack.namespace, table=table_name))
    await stack.wait_claim(name, phase="Bound", within=30)
    rb = manifests.resource_binding(name, namespace=stack.namespace, replicas=2, cpu="1", suspended=True)
    rb["spec"]["placement"] = {**(affinity or {"clusterAffinity": {}}),
                               "replicaScheduling": {"replicaSchedulingType": "Divided",
                                                     "replicaDivisionPreference": "Aggregated"}}
    binding = str((await stack.apply(rb))["metadata"]["name"])

    async def injected() -> bool:
        now = await stack.get("ResourceBinding", binding)
        return (now or {}).get("metadata", {}).get("annotations", {}).get(PLACEMENT_INJECTED_ANNOTATION) == "true"

    await stack.eventually(injected, within=30, what=f"tether's placement on {binding}")
    await stack.kube.patch(BINDINGS, binding, {"spec": {"suspension": None}}, namespace=stack.namespace)
    return binding


def groups(rb: dict[str, Any]) -> list[tuple[str, list[str]]]:
    return [(tier_of(t["affinityName"]), t.get("clusterNames") or [])
            for t in rb["spec"]["placement"].get("clusterAffinities") or []]


async def placed(stack: Stack, name: str, clusters: list[str], tier: str, *, within: float = 30) -> dict[str, Any]:
    """The binding once Karmada placed it on ``clusters`` by a group of ``tier``."""
    rb = await stack.wait_scheduled(name, clusters, within=within)
    observed = rb["status"].get("schedulerObservingAffinityName", "")
    assert tier_of(observed) == tier and observed in [t["affinityName"] for t in
                                                      rb["spec"]["placement"]["clusterAffinities"]], rb["status"]
    return rb


def tiered_clusters(rb: dict[str, Any]) -> set[str]:
    return {c for _, names in groups(rb) for c in names}


async def test_a_preferred_workload_lands_in_the_data_group_when_it_has_room(karmada_kube: KubeEnv) -> None:
    async with tiers_stack(karmada_kube) as (stack, clusters):
        name = await workload(stack, "fits", table(stack, clusters, "fits", "c"))
        rb = await placed(stack, name, [clusters.name("roomy")], "data")
        assert groups(rb) == [("data", [clusters.name("roomy")]), ("near-data", [clusters.name("roomy-near")])]
        assert rb["spec"]["clusters"] == [{"name": clusters.name("roomy"), "replicas": 2}]
        await stack.wait_idle()
        assert stack.log is not None
        trail = await explain(stack.log, f"ResourceBinding/{stack.namespace}/{name}")
        assert any(type(c.command).__name__ == "SetBindingTiers" for cs in trail.caused.values() for c in cs)


async def test_without_room_it_falls_over_to_near_data_and_required_stays_unscheduled(karmada_kube: KubeEnv) -> None:
    from click.testing import CliRunner

    from tether.adapters.cli import main

    async with tiers_stack(karmada_kube) as (stack, clusters):
        preferred = await workload(stack, "over", table(stack, clusters, "over", "a"))
        required = await workload(stack, "pinned", table(stack, clusters, "pinned", "a", required=True))
        rb = await placed(stack, preferred, [clusters.name("near")], "near-data")
        assert groups(rb) == [("data", [clusters.name("data")]), ("near-data", [clusters.name("near")])]

        async def unschedulable() -> dict[str, Any] | None:
            held = await stack.get("ResourceBinding", required)
            condition = next((c for c in ((held or {}).get("status") or {}).get("conditions") or []
                              if c["type"] == "Scheduled"), None)
            return held if condition is not None and condition["status"] == "False" else None

        held = await stack.eventually(unschedulable, within=30, what=f"{required} Scheduled=False")
        condition = next(c for c in held["status"]["conditions"] if c["type"] == "Scheduled")
        assert condition["reason"] == "Unschedulable" and "not enough" in condition["message"]
        assert not held["spec"].get("clusters") and "clusterAffinities" not in held["spec"]["placement"]
        assert clusters.name("data") not in held["spec"]["placement"]["clusterAffinity"].get("exclude", [])
        await stack.wait_idle()
        seen = stack.history.clusters  # type: ignore[attr-defined]
        assert all(set(names) <= tiered_clusters(rb) for names in seen[preferred]), seen[preferred]
        assert all(not names for names in seen[required]), seen[required]
        # explain and status say which tier it is in, and why
        assert stack.log is not None and stack.daemon is not None
        stack_db = stack.cfg.log_url.removeprefix("sqlite:///") if stack.cfg is not None else ""
        out = await asyncio.to_thread(CliRunner().invoke, main, [
            "replay", stack_db, "--explain", f"deploy/{stack.namespace}/over"], terminal_width=300)
        assert out.exit_code == 0, out.output
        assert f"in tier near-data ({clusters.name('near')})" in out.output
        assert f"karmada-scheduler fell over to it — data ({clusters.name('data')}) could not hold it" in out.output
        status = await daemon_status(stack.daemon, started_at=0)
        assert any(row.startswith(f"{stack.namespace}/{preferred}: tier near-data") for row in
                   status["locality"]["bindings"]), status["locality"]
        registry = stack.daemon.metrics.registry

        async def counted() -> bool:  # (the reporter sets the gauge once a second)
            await asyncio.sleep(0)
            return registry.get_sample_value("tether_bindings_by_tier", {"tier": "near-data"}) == 1.0

        await stack.eventually(counted, within=10, what="tether_bindings_by_tier{near-data} 1")
        _, differences = await diff(stack.log)
        assert [(d.kind, d.causation, d.detail) for d in differences] == []


async def test_a_table_move_rewrites_the_groups_and_a_users_affinities_are_intersected(
        karmada_kube: KubeEnv) -> None:
    async with tiers_stack(karmada_kube) as (stack, clusters):
        moving = table(stack, clusters, "moving", "c")
        name = await workload(stack, "moving", moving)
        before = await placed(stack, name, [clusters.name("roomy")], "data")
        mine = {"clusterAffinities": [{"affinityName": "mine", "clusterNames": [
            clusters.name("roomy-near"), clusters.name("far")]}]}
        own = await workload(stack, "own", table(stack, clusters, "own", "c"), affinity=mine)
        rb = await placed(stack, own, [clusters.name("roomy-near")], "near-data")
        assert groups(rb) == [("near-data", [clusters.name("roomy-near")])]  # data ∩ mine is empty: left out
        record = json.loads(rb["metadata"]["annotations"][LOCALITY_TIERS_ANNOTATION])
        assert record["user"] == mine and "left out data" in record["note"]

        stack.catalog.move_table(moving, f"s3://wh-{clusters.id}-a/moving")
        assert stack.daemon is not None and stack.daemon.endpoints is not None
        import aiohttp
        url = f"http://127.0.0.1:{stack.daemon.endpoints.port}/v1/notifications/table-moved"
        async with aiohttp.ClientSession() as http, http.post(
                url, json={"system": "amoro", "dataSourceName": moving},
                headers={"Authorization": "Bearer push-secret"}) as resp:
            assert resp.status == 202
        after = await placed(stack, name, [clusters.name("near")], "near-data")
        assert groups(after) == [("data", [clusters.name("data")]), ("near-data", [clusters.name("near")])]
        names_before = {t["affinityName"] for t in before["spec"]["placement"]["clusterAffinities"]}
        assert names_before.isdisjoint(t["affinityName"] for t in after["spec"]["placement"]["clusterAffinities"])


async def test_a_topology_key_no_cluster_carries_is_refused_and_nothing_placed_changes(
        karmada_kube: KubeEnv) -> None:
    async with tiers_stack(karmada_kube) as (stack, clusters):
        name = await workload(stack, "kept", table(stack, clusters, "kept", "c"))
        rb = await placed(stack, name, [clusters.name("roomy")], "data")
        await stack.wait_idle()
        assert stack.daemon is not None
        unknown = f"tether.test/nowhere-{clusters.id}"
        configmap = await stack.kube.get(CONFIGMAPS, "tether-plugins", namespace=stack.namespace)
        assert configmap is not None
        doc = json.loads(configmap["data"]["amoro"])
        doc["locality"]["topologyKey"] = unknown
        with structlog.testing.capture_logs() as logs:
            await stack.kube.patch(CONFIGMAPS, "tether-plugins", {"data": {"amoro": json.dumps(doc)}},
                                   namespace=stack.namespace)
            metrics = stack.daemon.metrics

            async def refused() -> bool:
                return b"tether_locality_config_valid 0.0" in generate_latest(metrics.registry)

            await stack.eventually(refused, within=15, what="tether_locality_config_valid 0")
        assert any(entry.get("log_level") == "warning" and unknown in json.dumps(entry.get("problems"))
                   for entry in logs), logs
        status = await daemon_status(stack.daemon, started_at=0)
        assert any(unknown in problem and "carried by no Karmada Cluster" in problem
                   for problem in status["locality"]["problems"])
        await stack.wait_idle()
        now = await stack.get("ResourceBinding", name)
        assert now is not None and now["spec"]["placement"] == rb["spec"]["placement"]
        assert now["spec"]["clusters"] == rb["spec"]["clusters"]
        # a new workload is placed on its data's clusters only (Required) meanwhile, and said why
        late = await workload(stack, "late", table(stack, clusters, "late", "c"))
        placed_late = await stack.wait_scheduled(late, [clusters.name("roomy")], within=30)
        assert "clusterAffinities" not in placed_late["spec"]["placement"]

        async def said() -> dict | None:  # (a claim's status is bookkeeping: written after the placement)
            claim = await stack.get("DataSourceClaim", "late")
            return next((c for c in (claim or {}).get("status", {}).get("conditions", [])
                         if c["type"] == "PlacementInjected" and c["reason"] == "LocalityRefused"), None)

        condition = await stack.eventually(said, what="the claim saying its locality was refused")
        assert unknown in condition["message"]
