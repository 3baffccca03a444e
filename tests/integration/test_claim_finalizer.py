"""What Volcano Global's claim finalizer was for, done by a level-triggered start (issue 35).

Volcano Global's controller puts a finalizer on every claim, so that it can take the claim out of its DataSource's
``claimRefs`` (and strip the workload's exclusions) before the claim is gone. That costs a write per claim on the
shared API server, paid again by every watcher of claims. tether adds none: a claim deleted while tether runs is
seen deleted by the watch, and one deleted while tether is down is missing from the next list of claims — the fold
forgets it either way, and the same decisions follow (the DataSource's refs, the binding's exclusions). These tests
prove it on whichever API server the suite runs against (the real control plane with ``TETHER_TEST_KUBECONFIG``).

A claim that still carries the finalizer (written by Volcano Global, or by an earlier tether) is released as
before when it is deleted, at once if tether is running, at the next start otherwise.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

import pytest

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import CLAIMS
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, tether_stack
from tether.core.keys import CLAIM_FINALIZER, EXCLUDED_CLUSTERS_ANNOTATION

pytestmark = pytest.mark.cluster


@pytest.fixture
async def stack(kube: KubeEnv) -> AsyncIterator[Stack]:
    async with tether_stack(kube) as s:
        yield s


async def _bound_pair(stack: Stack, *, finalizer_on_first: bool = False) -> tuple[str, str]:
    """Two claims on one table (``gone``, ``kept``), each with its workload's binding, Bound and listed; returns the
    DataSource's name and the first claim's binding."""
    table = stack.add_table("orders", "east")
    for name in ("gone", "kept"):
        await stack.apply(stack.binding(f"{name}-app"))
        raw = manifests.claim(name, namespace=stack.namespace, table=table, workload=f"{name}-app")
        if finalizer_on_first and name == "gone":
            raw["metadata"]["finalizers"] = [CLAIM_FINALIZER]  # as Volcano Global's controller leaves it
        await stack.apply(raw)
    claim = await stack.wait_claim("gone", phase="Bound")
    await stack.wait_claim("kept", phase="Bound")
    source = claim["status"]["boundDataSource"]
    await stack.eventually(lambda: _refs_are(stack, source, ["gone", "kept"]), what="both claims listed")
    binding = "gone-app-deployment"
    await stack.wait_excluded(binding, [stack.clusters["west1"]])
    return source, binding


async def _refs_are(stack: Stack, source: str, names: list[str]) -> dict[str, Any] | None:
    ds = await stack.get("DataSource", source)
    refs = sorted(r["name"] for r in ((ds or {}).get("status") or {}).get("claimRefs") or [])
    return ds if ds is not None and refs == names else None


async def test_tether_puts_no_finalizer_on_a_claim(stack: Stack) -> None:
    await _bound_pair(stack)
    for name in ("gone", "kept"):
        claim = await stack.get("DataSourceClaim", name)
        assert claim is not None and CLAIM_FINALIZER not in (claim["metadata"].get("finalizers") or [])


async def test_a_claim_deleted_while_tether_is_down_is_forgotten_at_the_next_start(stack: Stack) -> None:
    source, binding = await _bound_pair(stack)
    await stack.stop_daemon()
    await stack.kube.delete(CLAIMS, "gone", namespace=stack.namespace)
    assert await stack.get("DataSourceClaim", "gone") is None  # no finalizer holds it: gone at once
    await stack.start_daemon()
    ds = await stack.eventually(lambda: _refs_are(stack, source, ["kept"]), what="the deleted claim unlisted")
    assert ds["status"].get("boundClaims") == 1
    stripped = await stack.wait_excluded(binding, [])
    assert EXCLUDED_CLUSTERS_ANNOTATION not in (stripped["metadata"].get("annotations") or {})


async def test_a_claim_with_volcano_globals_finalizer_deleted_while_tether_is_down_is_released_at_start(
        stack: Stack) -> None:
    source, binding = await _bound_pair(stack, finalizer_on_first=True)
    await stack.stop_daemon()
    await stack.kube.delete(CLAIMS, "gone", namespace=stack.namespace)
    held = await stack.get("DataSourceClaim", "gone")
    assert held is not None and held["metadata"].get("deletionTimestamp")  # the finalizer holds it
    await stack.start_daemon()

    async def released() -> bool:
        return await stack.get("DataSourceClaim", "gone") is None

    await stack.eventually(released, what="the finalizer released and the claim gone")
    await stack.eventually(lambda: _refs_are(stack, source, ["kept"]), what="the deleted claim unlisted")
    await stack.wait_excluded(binding, [])
