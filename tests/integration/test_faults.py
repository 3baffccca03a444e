"""Faults survived end to end: apiserver conflicts, 500s and dropped watches (emulator faults); catalog 503s and
timeouts (sandbox faults). Every test ends by checking that nothing was lost or done twice.

Retries of failed commands and lookups back off from ``tether.core.decision.RETRY_BASE_MS`` (5 s in
production); the ``fast_retries`` fixture monkeypatches it to 100 ms so that a test waits for a retry timer in
a fraction of a second. The decider reads the constant at every call of ``backoff_ms``, in-process.
"""

from __future__ import annotations

import asyncio
from collections import Counter
from collections.abc import AsyncIterator

import pytest

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import CLAIMS, DATASOURCES
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, claim_condition, tether_stack

from .test_migration import push


@pytest.fixture
async def stack(kube: KubeEnv, fast_retries: None) -> AsyncIterator[Stack]:
    async with tether_stack(kube) as s:
        yield s


async def converged(stack: Stack, claims: dict[str, str], tables: dict[str, str]) -> None:
    """Every claim Bound to the one DataSource of its table, every ref exactly once, one lookup per table, the
    workload's binding injected, and one Kubernetes Event per transition (none duplicated)."""
    for name, table in claims.items():
        claim = await stack.wait_claim(name, phase="Bound", reason="DataSourceBound", within=20)
        assert claim["status"]["boundDataSource"].endswith(table.split(".")[-1])
        assert not claim["metadata"].get("finalizers")  # none of tether's, whatever was retried (issue 35)
    sources, _ = await stack.kube.list(DATASOURCES)
    ours = {s["spec"]["name"]: s for s in sources if s["spec"]["name"] in tables.values()}
    assert len(ours) == len(set(claims.values()))

    async def refs_exact() -> bool:
        sources, _ = await stack.kube.list(DATASOURCES)
        for s in sources:
            table = s["spec"]["name"]
            if table not in tables.values():
                continue
            refs = [r["name"] for r in (s.get("status") or {}).get("claimRefs") or []]
            if refs != sorted(n for n, t in claims.items() if t == table) or s["status"]["boundClaims"] != len(refs):
                return False
        return True

    await stack.eventually(refs_exact, what="claimRefs exact")
    for table in set(claims.values()):
        assert stack.catalog.requests_for(table) == 1, f"{table} looked up more than once"
    for name in claims:
        await stack.wait_excluded(f"{name}-app-deployment", [stack.clusters["west1"]])
        await stack.eventually(lambda n=name: _placement_injected(stack, n), what=f"{name} PlacementInjected")
        reasons = Counter(e["reason"] for e in await stack.events_for(name))
        assert all(n == 1 for n in reasons.values()), reasons


async def _placement_injected(stack: Stack, name: str) -> bool:
    return claim_condition(await stack.get("DataSourceClaim", name), "PlacementInjected").get("status") == "True"


async def _workloads(stack: Stack, names: list[str], table: str) -> None:
    for name in names:
        await stack.apply(manifests.resource_binding(f"{name}-app", namespace=stack.namespace))
        await stack.apply(manifests.claim(name, namespace=stack.namespace, table=table, workload=f"{name}-app"))


# what these tests need that a real API server cannot be made to do on demand
INJECTS = "injects API faults on demand (the emulator's fault rules: {}); a real API server takes no such orders"


async def test_conflicts_on_every_patch(stack: Stack) -> None:
    emulator = stack.env.require_emulator(INJECTS.format("409 on every patch"))
    table = stack.add_table("contended", "east")
    # more conflicts than the executor's immediate re-read budget (5): some commands fail and are retried on a timer
    rule = emulator.faults.fail(code=409, verb="patch", times=30)
    await _workloads(stack, ["c1", "c2", "c3"], table)
    await converged(stack, {"c1": table, "c2": table, "c3": table}, {"t": table})
    assert rule.fired == 30


async def test_server_errors(stack: Stack) -> None:
    emulator = stack.env.require_emulator(INJECTS.format("500 and 429 answers"))
    table = stack.add_table("flaky", "east")
    emulator.faults.fail(code=500, verb="patch", times=12)
    emulator.faults.fail(code=500, verb="create", resource="datasources", times=3)  # within the executor's retries
    emulator.faults.fail(code=429, verb="patch", resource="datasourceclaims/status", times=3, retry_after=0)
    await _workloads(stack, ["f1", "f2"], table)
    await converged(stack, {"f1": table, "f2": table}, {"t": table})


async def test_dropped_watches(stack: Stack) -> None:
    emulator = stack.env.require_emulator(INJECTS.format("every watch dropped, counted in the emulator's hub"))
    table = stack.add_table("watched", "east")
    await _workloads(stack, ["w1"], table)
    await stack.wait_claim("w1", phase="Bound")
    hub = emulator.store.hub

    async def all_watching() -> bool:
        return sum(len(w) for w in hub.watchers.values()) >= len(stack.daemon.sources)

    for i in range(3):  # drop every watch while work is going on; each reconnect resumes from its resourceVersion
        await stack.eventually(all_watching, what="every watch re-established")
        assert emulator.faults.drop_watches() >= len(stack.daemon.sources)
        await _workloads(stack, [f"w{i + 2}"], table)
        await asyncio.sleep(0.05)
    await stack.eventually(all_watching, what="every watch re-established")
    emulator.faults.drop_watches()
    await stack.kube.delete(CLAIMS, "w1", namespace=stack.namespace)  # a deletion right after a drop is not missed
    await converged(stack, {f"w{i}": table for i in range(2, 5)}, {"t": table})
    assert await stack.get("DataSourceClaim", "w1") is None
    assert sum(s.errors for s in stack.daemon.sources) == 0  # a clean end of stream is not an error
    assert all(s.relists == 1 for s in stack.daemon.sources)  # resumed, never relisted


async def test_catalog_unavailable_then_recovers(stack: Stack) -> None:
    table = stack.add_table("offline", "east")
    stack.catalog.fail_next(10_000, status=503, table=table)
    await _workloads(stack, ["u1"], table)
    claim = await stack.wait_claim("u1", phase="Pending", reason="LookupFailed")
    assert "503" in claim_condition(claim)["message"] or "unavailable" in claim_condition(claim)["message"].lower()
    assert stack.catalog.stats()["max_in_flight"] <= 1  # retried on a timer, never two lookups at once

    async def warnings() -> list[dict]:
        return [e for e in await stack.events_for("u1") if e["reason"] == "LookupFailed"]

    # the Event is its own write, decided with the status: it may land a moment after it (on a loaded server)
    warning = await stack.eventually(warnings, what="the LookupFailed Event")
    assert len(warning) == 1 and warning[0]["type"] == "Warning"
    stack.catalog.clear_faults()
    await stack.wait_claim("u1", phase="Bound")  # the retry timer asks again
    await stack.wait_excluded("u1-app-deployment", [stack.clusters["west1"]])
    sources, _ = await stack.kube.list(DATASOURCES)
    assert len([s for s in sources if s["spec"]["name"] == table]) == 1


async def test_catalog_timeouts_then_recovers(kube: KubeEnv, fast_retries: None) -> None:
    fast = {"retryConfig": {"maxRetries": 0, "initialBackoff": "10ms", "maxBackoff": "50ms", "timeout": "200ms"}}
    async with tether_stack(kube, plugin_options=fast) as stack:
        table = stack.add_table("slow", "east")
        stack.catalog.delay_next(10_000, 1.0, table=table)
        await _workloads(stack, ["s1"], table)
        claim = await stack.wait_claim("s1", phase="Pending", reason="LookupFailed")
        assert "time" in claim_condition(claim)["message"].lower()
        stack.catalog.clear_faults()
        await stack.wait_claim("s1", phase="Bound")
        await stack.wait_excluded("s1-app-deployment", [stack.clusters["west1"]])


async def test_catalog_recovery_pushed(kube: KubeEnv) -> None:
    """Without fast retries (the next retry is 5 s away), a pushed notification resolves the claim at once."""
    async with tether_stack(kube) as stack:
        table = stack.add_table("pushed", "east")
        stack.catalog.fail_next(10_000, status=503, table=table)
        await _workloads(stack, ["p1"], table)
        await stack.wait_claim("p1", phase="Pending", reason="LookupFailed")
        stack.catalog.clear_faults()
        status, answer = await push(stack, {"system": "amoro", "dataSourceName": table})
        assert status == 202 and answer["outcome"] == "DataLocationResolved"
        await stack.wait_claim("p1", phase="Bound", within=3)


async def test_data_source_create_failing_beyond_executor_retries(stack: Stack) -> None:
    emulator = stack.env.require_emulator(INJECTS.format("500 on five DataSource creates"))
    table = stack.add_table("uncreatable", "east")
    emulator.faults.fail(code=500, verb="create", resource="datasources", times=5)  # executor gives up after 4
    await _workloads(stack, ["x1"], table)
    await stack.wait_claim("x1", phase="Bound", within=6)
