"""Seed 000 end to end through the real adapters: emulator (or a real cluster), sandbox catalog, daemon."""

from __future__ import annotations

import os
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.adapters.kubernetes import manifests
from tether.adapters.sandbox.kube_emulator.testing import KUBECONFIG_ENV, KubeEnv
from tether.adapters.testing.kubectl import kubectl, kubectl_binary
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


async def test_kubectl_get_and_describe_show_a_claim_bound_and_why(stack: Stack, tmp_path: Path) -> None:
    """Volcano Global's users read their claims with kubectl: ``get dsc`` shows Bound with its DataSource, and
    ``describe dsc`` why — the Bound condition's reason and message (being bound is status, not an Event), and a
    Warning Event for a claim that needs attention. On the emulator and on a real API server alike."""
    kubectl_binary()
    table = stack.add_table("orders", "east")
    await stack.apply(manifests.claim("orders", namespace=stack.namespace, table=table, workload="app"))
    await stack.apply(manifests.claim("lost", namespace=stack.namespace, table="prod.nowhere.lost", workload="lost"))

    async def bound() -> dict | None:
        claim = await stack.get("DataSourceClaim", "orders")
        return claim if (claim or {}).get("status", {}).get("phase") == "Bound" else None

    source = (await stack.eventually(bound, what="claim Bound"))["status"]["boundDataSource"]

    async def warned() -> list | None:
        events = await stack.events_for("lost")
        return events or None

    await stack.eventually(warned, what="the lost claim's Warning Event")
    emulator = stack.env.emulator
    kubeconfig = (emulator.kubeconfig_path(tmp_path / "kube") if emulator is not None
                  else Path(os.environ[KUBECONFIG_ENV]))
    args = {"kubeconfig": kubeconfig, "cache": tmp_path / "cache"}
    code, out = await kubectl("get", "dsc", "orders", "-n", stack.namespace, **args)
    assert code == 0 and len(out.splitlines()) >= 2, out
    header, row = out.splitlines()[:2]
    assert code == 0 and header.split() == ["NAME", "PHASE", "DATASOURCE", "SYSTEM", "TABLE", "AGE"], out
    assert row.split()[:5] == ["orders", "Bound", source, "amoro", table], out
    code, out = await kubectl("describe", "dsc", "orders", "-n", stack.namespace, **args)
    assert code == 0 and "DataSourceBound" in out and f"bound to DataSource {source}" in out, out
    code, out = await kubectl("describe", "dsc", "lost", "-n", stack.namespace, **args)
    assert code == 0 and "Warning" in out and "DataSourceNotFound" in out, out
