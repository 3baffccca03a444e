"""Compute follows data: a table moves, and the binding is rescheduled onto the new region's clusters by Karmada —
triggered by a pushed notification, and separately by the migration poller.

Karmada is the emulator's scheduler stand-in, or on a real cluster its karmada-scheduler (``karmada_kube``). Each
binding names the stack's own Clusters in ``clusterAffinity.clusterNames`` (a real scheduler also sees the shared
cluster's other Clusters), and a placement is taken as done only once the scheduler has settled (``Scheduled`` and
its observed generation), since a real one writes ``spec.clusters`` and its status in separate requests."""

from __future__ import annotations

import aiohttp

from tether.adapters.kubernetes import manifests
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, tether_stack


async def placed_in_east(stack: Stack, name: str) -> tuple[str, str]:
    """A claim on an east table and its workload's binding, scheduled by Karmada onto the east clusters."""
    table = stack.add_table(name, "east")
    await stack.apply(manifests.claim(name, namespace=stack.namespace, table=table, workload=f"{name}-app"))
    await stack.wait_claim(name, phase="Bound")
    rb = (await stack.apply(stack.binding(f"{name}-app")))["metadata"]["name"]
    await stack.wait_excluded(rb, [stack.clusters["west1"]])
    await stack.wait_scheduled(rb, [stack.clusters["east1"], stack.clusters["east2"]])
    return table, rb


async def push(stack: Stack, body: object, *, token: str | None = "push-secret") -> tuple[int, dict]:
    assert stack.daemon.endpoints is not None
    url = f"http://127.0.0.1:{stack.daemon.endpoints.port}/v1/notifications/table-moved"
    headers = {"Authorization": f"Bearer {token}"} if token is not None else {}
    async with aiohttp.ClientSession() as http, http.post(url, json=body, headers=headers) as resp:
        return resp.status, await resp.json()


async def test_migration_pushed(karmada_kube: KubeEnv) -> None:
    async with tether_stack(karmada_kube) as stack:
        table, rb = await placed_in_east(stack, "moving")
        stack.catalog.move_table(table, f"s3://warehouse-west/{stack.suffix}/moving")
        status, answer = await push(stack, {"system": "amoro", "dataSourceName": table})
        assert status == 202
        assert answer == {"outcome": "DataLocationResolved", "location": f"s3://warehouse-west/{stack.suffix}/moving"}
        await stack.wait_excluded(rb, [stack.clusters["east1"], stack.clusters["east2"]])
        await stack.wait_scheduled(rb, [stack.clusters["west1"]])
        claim = await stack.wait_claim("moving", phase="Bound")
        ds = await stack.get("DataSource", claim["status"]["boundDataSource"])
        assert ds is not None and ds["spec"]["locality"]["clusterNames"] == [stack.clusters["west1"]]
        assert stack.catalog.requests_for(table) == 2  # the first lookup, and the push's re-resolution


async def test_migration_polled(karmada_kube: KubeEnv) -> None:
    async with tether_stack(karmada_kube, refresh_interval=0.2) as stack:
        table, rb = await placed_in_east(stack, "drifting")
        stack.catalog.move_table(table, f"s3://warehouse-west/{stack.suffix}/drifting", via="write.data.path")
        await stack.wait_excluded(rb, [stack.clusters["east1"], stack.clusters["east2"]])
        await stack.wait_scheduled(rb, [stack.clusters["west1"]])
        assert stack.catalog.requests_for(table) >= 2


async def test_migration_within_region_keeps_placement(karmada_kube: KubeEnv) -> None:
    """A move to another location that maps to the same clusters changes nothing tether owns on the binding: its
    placement, its spec (the generation: no write to the spec, tether's or the scheduler's in answer to one) and
    tether's annotations. (Not the resourceVersion: a real karmada-scheduler writes the binding's status on its own
    schedule.)"""
    async with tether_stack(karmada_kube) as stack:
        table, rb = await placed_in_east(stack, "local")
        before = await stack.get("ResourceBinding", rb)
        stack.catalog.move_table(table, f"s3://warehouse-east/{stack.suffix}/local-v2")
        status, answer = await push(stack, {"system": "amoro", "dataSourceName": table})
        assert status == 202 and answer["location"] == f"s3://warehouse-east/{stack.suffix}/local-v2"
        await stack.daemon.loops.wait_idle()  # type: ignore[union-attr]
        after = await stack.get("ResourceBinding", rb)
        assert after["spec"]["placement"] == before["spec"]["placement"]
        assert after["metadata"]["generation"] == before["metadata"]["generation"]
        assert _tethers(after) == _tethers(before)


def _tethers(obj: dict) -> dict[str, str]:
    return {k: v for k, v in (obj["metadata"].get("annotations") or {}).items() if k.startswith("tether.dev/")}
