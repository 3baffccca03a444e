"""Seed 000's lifecycle scenarios end to end through the real adapters (emulator, or a real cluster with
``TETHER_TEST_KUBECONFIG``): claim before/after the binding, cache hit and miss, one lookup for many claims, claim
deletion under both reclaim policies, a DataSource deleted by an operator, a placement reverted by Karmada's
detector, unmapped locations, malformed claims, and the Kubernetes Events that mark transitions."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import BINDINGS, CLAIMS, CLUSTERS, DATASOURCES
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, claim_condition, excluded, tether_stack
from tether.core.keys import EXCLUDED_CLUSTERS_ANNOTATION, PLACEMENT_INJECTED_ANNOTATION

pytestmark = pytest.mark.cluster

CLAIM_FINALIZER = "datadependency.volcano.sh/finalizer"
DS_FINALIZER = "datadependency.volcano.sh/datasource-finalizer"


@pytest.fixture
async def stack(kube: KubeEnv) -> AsyncIterator[Stack]:
    async with tether_stack(kube) as s:
        yield s


async def _claim(stack: Stack, name: str, table: str, workload: str | None = None) -> None:
    await stack.apply(manifests.claim(name, namespace=stack.namespace, table=table, workload=workload or name))


async def _binding(stack: Stack, workload: str) -> str:
    rb = await stack.apply(manifests.resource_binding(workload, namespace=stack.namespace))
    return str(rb["metadata"]["name"])


async def test_claim_after_binding_injects(stack: Stack) -> None:
    table = stack.add_table("late", "west")
    rb = await _binding(stack, "late-app")
    await _claim(stack, "late", table, workload="late-app")
    got = await stack.wait_excluded(rb, [stack.clusters["east1"], stack.clusters["east2"]])
    annotations = got["metadata"]["annotations"]
    assert annotations[PLACEMENT_INJECTED_ANNOTATION] == "true"
    # the annotation lists every exclusion tether added, sorted: of ours, exactly the clusters without the data
    added = annotations[EXCLUDED_CLUSTERS_ANNOTATION].split(",")
    assert added == sorted(added) and set(added) == set(excluded(got))
    assert set(added) & set(stack.clusters.values()) == {stack.clusters["east1"], stack.clusters["east2"]}
    claim = await stack.wait_claim("late", phase="Bound")
    assert claim_condition(claim, "PlacementInjected").get("status") == "True" or (
        await stack.eventually(lambda: _placement_injected(stack, "late"), what="PlacementInjected=True"))
    assert stack.catalog.requests_for(table) == 1


async def _placement_injected(stack: Stack, name: str) -> bool:
    return claim_condition(await stack.get("DataSourceClaim", name), "PlacementInjected").get("status") == "True"


async def test_cache_miss_then_hit(stack: Stack) -> None:
    shared = stack.add_table("shared", "east")
    other = stack.add_table("other", "west")
    await _claim(stack, "first", shared)
    first = await stack.wait_claim("first", phase="Bound", reason="DataSourceBound")
    assert stack.catalog.requests_for(shared) == 1  # miss: one lookup
    await _claim(stack, "second", shared)
    second = await stack.wait_claim("second", phase="Bound")
    assert second["status"]["boundDataSource"] == first["status"]["boundDataSource"]
    assert stack.catalog.requests_for(shared) == 1  # hit: the DataSource is the cache
    await _claim(stack, "third", other)
    third = await stack.wait_claim("third", phase="Bound")
    assert third["status"]["boundDataSource"] != first["status"]["boundDataSource"]
    assert stack.catalog.requests_for(other) == 1

    async def both_refs() -> dict | None:
        ds = await stack.get("DataSource", first["status"]["boundDataSource"])
        refs = sorted(r["name"] for r in ((ds or {}).get("status") or {}).get("claimRefs") or [])
        return ds if refs == ["first", "second"] else None

    ds = await stack.eventually(both_refs, what="two claim refs")
    assert ds["status"]["boundClaims"] == 2
    assert ds["metadata"]["finalizers"] == [DS_FINALIZER]
    assert ds["spec"]["reclaimPolicy"] == "Retain"


async def test_fifty_claims_one_lookup(stack: Stack) -> None:
    table = stack.add_table("hot", "east")
    await asyncio.gather(*(_claim(stack, f"hot-{i}", table, workload=f"hot-app-{i}") for i in range(50)))

    async def all_bound() -> bool:
        items, _ = await stack.kube.list(CLAIMS, namespace=stack.namespace)
        return sum(1 for c in items if (c.get("status") or {}).get("phase") == "Bound") == 50

    await stack.eventually(all_bound, within=30, what="50 claims Bound")
    assert stack.catalog.requests_for(table) == 1
    sources, _ = await stack.kube.list(DATASOURCES)
    ours = [s for s in sources if s["spec"]["name"] == table]
    assert len(ours) == 1

    async def fifty_refs() -> bool:
        ds = await stack.get("DataSource", ours[0]["metadata"]["name"])
        return ((ds or {}).get("status") or {}).get("boundClaims") == 50

    await stack.eventually(fifty_refs, what="boundClaims 50")


async def test_claim_deletion_retain_keeps_the_cache(stack: Stack) -> None:
    table = stack.add_table("retained", "east")
    rb = await _binding(stack, "ret-app")
    await _claim(stack, "ret", table, workload="ret-app")
    claim = await stack.wait_claim("ret", phase="Bound")
    await stack.wait_excluded(rb, [stack.clusters["west1"]])
    ds_name = claim["status"]["boundDataSource"]
    await stack.kube.delete(CLAIMS, "ret", namespace=stack.namespace)

    async def gone() -> bool:
        return await stack.get("DataSourceClaim", "ret") is None

    await stack.eventually(gone, what="claim deleted (finalizer released)")
    stripped = await stack.wait_excluded(rb, [])
    assert EXCLUDED_CLUSTERS_ANNOTATION not in (stripped["metadata"].get("annotations") or {})

    async def unreferenced() -> dict | None:
        ds = await stack.get("DataSource", ds_name)
        return ds if ds is not None and not (ds.get("status") or {}).get("claimRefs") else None

    ds = await stack.eventually(unreferenced, what="claim ref removed")
    assert ds["metadata"].get("deletionTimestamp") is None
    assert (ds.get("status") or {}).get("boundClaims", 0) == 0
    # the cache is reused by the next claim: no new lookup
    await _claim(stack, "ret-again", table)
    again = await stack.wait_claim("ret-again", phase="Bound")
    assert again["status"]["boundDataSource"] == ds_name
    assert stack.catalog.requests_for(table) == 1


async def test_claim_deletion_with_delete_policy_deletes_the_data_source(kube: KubeEnv) -> None:
    async with tether_stack(kube, plugin_options={"reclaimPolicy": "Delete"}) as stack:
        table = stack.add_table("transient", "east")
        await _claim(stack, "tr", table)
        claim = await stack.wait_claim("tr", phase="Bound")
        ds_name = claim["status"]["boundDataSource"]
        ds = await stack.get("DataSource", ds_name)
        assert ds is not None and ds["spec"]["reclaimPolicy"] == "Delete"
        await stack.kube.delete(CLAIMS, "tr", namespace=stack.namespace)

        async def both_gone() -> bool:
            return await stack.get("DataSourceClaim", "tr") is None and await stack.get("DataSource", ds_name) is None

        await stack.eventually(both_gone, what="claim and DataSource deleted")


async def test_data_source_deleted_by_operator_is_re_resolved(stack: Stack) -> None:
    table = stack.add_table("fragile", "east")
    rb = await _binding(stack, "fr-app")
    await _claim(stack, "fr", table, workload="fr-app")
    claim = await stack.wait_claim("fr", phase="Bound")
    await stack.wait_excluded(rb, [stack.clusters["west1"]])
    ds_name = claim["status"]["boundDataSource"]
    old_uid = (await stack.get("DataSource", ds_name))["metadata"]["uid"]
    await stack.kube.delete(DATASOURCES, ds_name)  # kubectl delete ds: the finalizer holds it while claims use it

    async def recreated() -> dict | None:
        ds = await stack.get("DataSource", ds_name)
        if ds is None or ds["metadata"]["uid"] == old_uid or ds["metadata"].get("deletionTimestamp"):
            return None
        refs = [r["name"] for r in (ds.get("status") or {}).get("claimRefs") or []]
        return ds if refs == ["fr"] else None

    await stack.eventually(recreated, what="a new DataSource with the claim's ref")
    await stack.wait_claim("fr", phase="Bound", reason="DataSourceBound")
    await stack.wait_excluded(rb, [stack.clusters["west1"]])
    assert stack.catalog.requests_for(table) == 2  # the cache was gone: one new lookup
    # the claim went Pending/BindingInvalid in between (VG's unbinding); its Warning is bookkeeping, deferred like
    # the status (which went straight back to Bound): it may land after the claim is Bound again

    async def warned() -> dict | None:
        return next((e for e in await stack.events_for("fr") if e["reason"] == "BindingInvalid"), None)

    warning = await stack.eventually(warned, what="the BindingInvalid Warning")
    assert warning["type"] == "Warning"


async def test_placement_reverted_by_detector_is_reinjected(stack: Stack) -> None:
    table = stack.add_table("sticky", "west")
    rb = await _binding(stack, "st-app")
    await _claim(stack, "st", table, workload="st-app")
    want = [stack.clusters["east1"], stack.clusters["east2"]]
    await stack.wait_excluded(rb, want)
    # Karmada's detector re-applies the PropagationPolicy: placement overwritten, annotations kept
    policy = manifests.resource_binding("st-app", namespace=stack.namespace)["spec"]["placement"]
    await stack.kube.patch(BINDINGS, rb, {"spec": {"placement": policy}}, namespace=stack.namespace)
    await stack.wait_excluded(rb, want)
    assert stack.catalog.requests_for(table) == 1


async def test_clusters_the_test_does_not_own_are_excluded_and_left_alone(stack: Stack) -> None:
    """On a shared cluster (and on the emulator's foreign objects) tether excludes every Cluster that lacks the
    data, not only the test's, and never writes to a binding outside its namespace."""
    listed, _ = await stack.kube.list(CLUSTERS)
    foreign = {c["metadata"]["name"] for c in listed} - set(stack.clusters.values())
    if stack.env.foreign is not None:
        assert set(stack.env.foreign.clusters) <= foreign
    table = stack.add_table("everywhere", "east")
    rb = await _binding(stack, "ev-app")
    await _claim(stack, "ev", table, workload="ev-app")
    await stack.wait_excluded(rb, [stack.clusters["west1"]])

    async def foreign_excluded() -> dict | None:
        current = await stack.get("ResourceBinding", rb)
        return current if foreign <= set(excluded(current)) else None

    got = await stack.eventually(foreign_excluded, what="the foreign clusters excluded")
    assert not set(excluded(got)) & {stack.clusters["east1"], stack.clusters["east2"]}


async def test_user_exclusions_are_kept(stack: Stack) -> None:
    table = stack.add_table("mine", "east")
    raw = manifests.resource_binding("mine-app", namespace=stack.namespace, exclude=["user-excluded"])
    rb = (await stack.apply(raw))["metadata"]["name"]
    await _claim(stack, "mine", table, workload="mine-app")
    await stack.wait_excluded(rb, ["user-excluded", stack.clusters["west1"]])
    await stack.kube.delete(CLAIMS, "mine", namespace=stack.namespace)

    async def only_users() -> bool:
        got = await stack.get("ResourceBinding", rb)
        annotations = got["metadata"].get("annotations") or {}
        return excluded(got) == ["user-excluded"] and PLACEMENT_INJECTED_ANNOTATION not in annotations

    await stack.eventually(only_users, what="only the user's exclusion left")


async def test_unmapped_location(stack: Stack) -> None:
    table = stack.table("nowhere")
    stack.catalog.add_table(table, f"s3://warehouse-north/{stack.suffix}/nowhere")
    await _claim(stack, "nw", table)
    claim = await stack.wait_claim("nw", phase="Pending", reason="LocationUnmapped")
    assert "warehouse-north" in claim_condition(claim)["message"]
    assert CLAIM_FINALIZER not in (claim["metadata"].get("finalizers") or [])
    sources, _ = await stack.kube.list(DATASOURCES)
    assert not [s for s in sources if s["spec"]["name"] == table]


async def test_malformed_claim_does_not_stop_the_others(stack: Stack) -> None:
    bad = manifests.claim("bad", namespace=stack.namespace, table="")  # the CRD accepts it; tether cannot serve it
    await stack.apply(bad)
    blank = manifests.claim("blank", namespace=stack.namespace, table=stack.table("x"), system=" ")
    await stack.apply(blank)
    claim = await stack.wait_claim("bad", phase="Pending", reason="InvalidSpec")
    assert "dataSourceName" in claim_condition(claim)["message"]
    await stack.wait_claim("blank", phase="Pending", reason="InvalidSpec")
    table = stack.add_table("fine", "east")
    await _claim(stack, "good", table)
    await stack.wait_claim("good", phase="Bound")
    # fixing the spec is picked up
    await stack.kube.patch(CLAIMS, "bad", {"spec": {"dataSourceName": table}}, namespace=stack.namespace)
    await stack.wait_claim("bad", phase="Bound")
    assert stack.catalog.requests_for(table) == 1


async def test_unknown_system(stack: Stack) -> None:
    await stack.apply(manifests.claim("hive", namespace=stack.namespace, table=stack.table("h"), system="hive"))
    await stack.wait_claim("hive", phase="Pending", reason="UnknownSystem")


async def test_events_mark_transitions_that_need_attention(stack: Stack) -> None:
    """A claim that cannot be bound gets a Warning saying why, once; a claim bound gets none (its status says it:
    issue 35)."""
    table = stack.add_table("evented", "east")
    await _claim(stack, "ev", table)
    await _claim(stack, "missing", stack.table("not-in-the-catalog"))
    await stack.wait_claim("ev", phase="Bound")
    await stack.wait_claim("missing", phase="Pending", reason="DataSourceNotFound")

    async def warned() -> list[dict] | None:
        events = await stack.events_for("missing")
        return events if any(e["reason"] == "DataSourceNotFound" for e in events) else None

    events = await stack.eventually(warned, what="a DataSourceNotFound event")
    by_reason = {e["reason"]: e for e in events}
    assert by_reason["DataSourceNotFound"]["type"] == "Warning"
    assert by_reason["DataSourceNotFound"]["involvedObject"]["kind"] == "DataSourceClaim"
    assert by_reason["DataSourceNotFound"]["involvedObject"]["uid"]
    assert len(events) == len(by_reason)  # one Event per transition, none repeated
    await stack.wait_idle()
    assert await stack.events_for("ev") == []
