"""The test stack leaves nothing cluster-scoped behind on a shared cluster — not when the test fails either.

``tether_stack`` creates Karmada Clusters (``east1-…``, ``east2-…``, ``west1-…``) and, through the daemon, DataSources
named after its tables; a real cluster keeps whatever a test leaves, for everyone after it. Here the test body fails
on purpose once a claim is Bound (so a DataSource exists), and every one of those objects must be gone afterwards.
"""

from __future__ import annotations

import pytest

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import CLUSTERS, DATASOURCES, KubeClient
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import tether_stack

pytestmark = pytest.mark.cluster


class _Failed(Exception):
    pass


async def test_a_failing_test_leaves_no_cluster_or_data_source_behind(kube: KubeEnv) -> None:
    client = KubeClient(kube.api_client)
    clusters: list[str] = []
    sources: list[str] = []
    with pytest.raises(_Failed):
        async with tether_stack(kube) as stack:
            clusters = list(stack.clusters.values())
            table = stack.add_table("orders", "east")
            await stack.apply(manifests.claim("orders", namespace=stack.namespace, table=table, workload="etl"))
            await stack.wait_claim("orders", phase="Bound")
            listed, _ = await client.list(DATASOURCES)
            sources = [s["metadata"]["name"] for s in listed if f".{stack.suffix}." in s["spec"].get("name", "")]
            assert sources and all([await client.get(CLUSTERS, name) for name in clusters])
            raise _Failed("the test body failed")
    assert len(clusters) == 3
    assert [name for name in clusters if await client.get(CLUSTERS, name) is not None] == []
    assert [name for name in sources if await client.get(DATASOURCES, name) is not None] == []
