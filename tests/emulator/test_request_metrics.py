"""Conformance: ``apiserver_request_total`` on ``GET /metrics``, as kube-apiserver counts requests.

tether's writes are counted from the server's own counter (``ops/bench/e2e.py``, the write-economy tests), so
the emulator must count what a real server counts, with the same labels. On a shared real cluster other clients
write at the same time: there the deltas are at least this test's own requests."""

from __future__ import annotations

import collections

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from tether.adapters.testing.request_metrics import Request, request_totals, writes

GROUP, VERSION, DSC = "datadependency.volcano.sh", "v1alpha1", "datasourceclaims"
MERGE = "application/merge-patch+json"


def claim(name: str) -> dict:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DataSourceClaim", "metadata": {"name": name},
            "spec": {"system": "amoro", "dataSourceType": "table", "dataSourceName": "db.t",
                     "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"}}}


async def test_requests_are_counted_by_verb_resource_subresource_and_code(kube):
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
    ns = kube.namespace
    before = await request_totals(kube.api_client)
    await kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"k": "v"}})
    await kube.core.patch_namespaced_config_map("a", ns, {"data": {"k": "w"}})
    with pytest.raises(ApiException):
        await kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    with pytest.raises(ApiException):
        await kube.core.read_namespaced_config_map("missing", ns)
    await kube.core.list_namespaced_config_map(ns)
    await kube.custom.create_namespaced_custom_object(GROUP, VERSION, ns, DSC, claim("c"))
    await kube.custom.patch_namespaced_custom_object_status(GROUP, VERSION, ns, DSC, "c",
                                                           {"status": {"phase": "Pending"}},
                                                           _content_type=MERGE)
    after = await request_totals(kube.api_client)
    delta = after - before
    wanted = collections.Counter({
        Request("POST", "", "configmaps", "201"): 1,
        Request("PATCH", "", "configmaps", "200"): 1,
        Request("POST", "", "configmaps", "409"): 1,
        Request("GET", "", "configmaps", "404"): 1,
        Request("LIST", "", "configmaps", "200"): 1,
        Request("POST", GROUP, "datasourceclaims", "201"): 1,
        Request("PATCH", GROUP, "datasourceclaims/status", "200"): 1,
    })
    if kube.is_emulated:  # nobody else writes: exactly these (the CRD's registration aside)
        assert {k: v for k, v in delta.items() if k.resource != "customresourcedefinitions"} == wanted
    else:
        assert all(delta[k] >= v for k, v in wanted.items()), {k: delta[k] for k in wanted}
    written = writes(before, after)
    assert written["configmaps POST"] >= 1 and written["configmaps PATCH"] >= 1
    assert written[f"datasourceclaims/status.{GROUP} PATCH"] >= 1
    assert "configmaps GET" not in written and "configmaps LIST" not in written  # reads and failures are no write
