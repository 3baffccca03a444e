"""A daemon on an empty log against a settled cluster writes nothing: a first install, a standby taking over, a
switch from Volcano Global — and the same after a forced relist of every source (issue 16, part 1).

The cluster is settled by a first daemon (claims Bound, bindings carrying tether's exclusions); a second daemon
then starts on a **new, empty** log. Its lists arrive in dependency order (ConfigMap, Clusters, DataSources,
bindings, claims): decided one by one, the bindings would be stripped before their claims arrive and injected
again a moment later. Writes are counted two ways that hold on a real cluster shared with others: tether's own
record of its commands (the new log holds no command to a claim or a binding) and the objects themselves (a
claim's resourceVersion — nobody else writes claims — and a binding's spec, but for the scheduler's
``spec.clusters``, and tether annotations are unchanged).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import BINDINGS, CLAIMS
from tether.adapters.log import aclosing_iter
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, tether_stack
from tether.core.envelope import CommandRecord
from tether.core.keys import EXCLUDED_CLUSTERS_ANNOTATION, PLACEMENT_INJECTED_ANNOTATION

pytestmark = pytest.mark.cluster

WORKLOADS = {"orders": "east", "clicks": "west", "clicks2": "west"}


@pytest.fixture
async def stack(kube: KubeEnv) -> AsyncIterator[Stack]:
    async with tether_stack(kube) as s:
        yield s


async def settle(stack: Stack) -> None:
    tables = {region: stack.add_table(f"t-{region}", region) for region in ("east", "west")}
    for name, region in WORKLOADS.items():
        await stack.apply(manifests.claim(name, namespace=stack.namespace, table=tables[region], workload=name))
        await stack.apply(manifests.resource_binding(name, namespace=stack.namespace))
    for name, region in WORKLOADS.items():
        await stack.wait_claim(name, phase="Bound")
        mine = stack.clusters
        other = [mine["west1"]] if region == "east" else [mine["east1"], mine["east2"]]
        await stack.wait_excluded(f"{name}-deployment", other)
    await stack.wait_idle()


async def observed(stack: Stack) -> dict[str, Any]:
    """What a write by tether would change: claims whole (resourceVersion), bindings' spec and annotations."""
    seen: dict[str, Any] = {}
    claims, _ = await stack.kube.list(CLAIMS, namespace=stack.namespace)
    for c in claims:
        seen[f"claim/{c['metadata']['name']}"] = c["metadata"]["resourceVersion"]
    bindings, _ = await stack.kube.list(BINDINGS, namespace=stack.namespace)
    for b in bindings:
        annotations = b["metadata"].get("annotations") or {}
        # the whole spec but ``clusters``, not the generation: a real karmada-scheduler watching the cluster writes
        # spec.clusters (a new generation) on its own schedule; anything tether writes is elsewhere in the spec
        spec = {k: v for k, v in b["spec"].items() if k != "clusters"}
        seen[f"binding/{b['metadata']['name']}"] = (
            annotations.get(PLACEMENT_INJECTED_ANNOTATION), annotations.get(EXCLUDED_CLUSTERS_ANNOTATION), spec)
    return seen


async def writes_in(log: SqliteLog) -> list[str]:
    found: list[str] = []
    async with aclosing_iter(log.read("commands")) as batches:
        async for batch in batches:
            for record in batch:
                assert isinstance(record, CommandRecord)
                if record.key.startswith(("DataSourceClaim/", "ResourceBinding/")):
                    found.append(f"{type(record.command).__name__} {record.key}: {record.reason}")
    return found


async def restart_on_an_empty_log(stack: Stack) -> SqliteLog:
    await stack.stop_daemon()
    assert stack.log is not None
    await stack.log.close()
    path = Path(stack.tmp) / "fresh.db"
    stack.log = fresh = await SqliteLog.open(str(path))
    await stack.start_daemon(log_url=f"sqlite:///{path}")
    await stack.wait_idle()
    return fresh


async def test_a_daemon_on_an_empty_log_writes_nothing_to_a_settled_cluster(stack: Stack) -> None:
    await settle(stack)
    before = await observed(stack)
    fresh = await restart_on_an_empty_log(stack)
    assert await writes_in(fresh) == []
    assert await observed(stack) == before
    daemon = stack.daemon
    assert daemon is not None and daemon.world.lists_pending == set()
    assert {c.phase for c in daemon.world.claims.values()} == {"Bound"}


async def test_a_forced_relist_of_every_source_writes_nothing(stack: Stack) -> None:
    await settle(stack)
    fresh = await restart_on_an_empty_log(stack)
    before = await observed(stack)
    daemon = stack.daemon
    assert daemon is not None
    for source in reversed(daemon.sources):  # claims first: the order that would strand bindings the other way
        await source.relist()
    await stack.wait_idle()
    assert await writes_in(fresh) == []
    assert await observed(stack) == before
    assert daemon.world.lists_pending == set()
