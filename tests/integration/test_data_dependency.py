"""Seed 000 end to end through the real adapters: emulator (or a real cluster), sandbox catalog, daemon."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tether.adapters.kubernetes import manifests
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, tether_stack


@pytest.fixture
async def stack(kube: KubeEnv) -> AsyncIterator[Stack]:
    async with tether_stack(kube) as s:
        yield s


def excluded(rb: dict | None) -> list[str]:
    return ((((rb or {}).get("spec") or {}).get("placement") or {}).get("clusterAffinity") or {}).get("exclude") or []


async def test_claim_before_workload_binds_and_injects(stack: Stack) -> None:
    table = stack.add_table("orders", "east")
    await stack.apply(manifests.claim("orders", namespace=stack.namespace, table=table, workload="app"))

    async def bound() -> dict | None:
        claim = await stack.get("DataSourceClaim", "orders")
        return claim if (claim or {}).get("status", {}).get("phase") == "Bound" else None

    claim = await stack.eventually(bound, what="claim Bound")
    assert "finalizers" not in claim["metadata"]  # tether adds none (tests/integration/test_claim_finalizer.py)

    async def listed() -> dict | None:  # (the claimRefs write is bookkeeping: deferred, maybe after the claim's)
        ds = await stack.get("DataSource", claim["status"]["boundDataSource"])
        return ds if [r["name"] for r in ((ds or {}).get("status") or {}).get("claimRefs") or []] == ["orders"] \
            else None

    ds = await stack.eventually(listed, what="the claim listed in its DataSource")
    assert ds["spec"]["locality"]["clusterNames"] == sorted([stack.clusters["east1"], stack.clusters["east2"]])
    await stack.apply(manifests.resource_binding("app", namespace=stack.namespace))

    async def injected() -> dict | None:
        rb = await stack.get("ResourceBinding", "app-deployment")
        # of the test's own clusters, exactly the one without the data (a shared cluster has others)
        return rb if set(excluded(rb)) & set(stack.clusters.values()) == {stack.clusters["west1"]} else None

    rb = await stack.eventually(injected, what="exclusions injected")
    assert rb["metadata"]["annotations"]["datadependency.volcano.sh/placement-injected"] == "true"
    assert stack.catalog.requests_for(table) == 1
