"""Conformance: pod scheduling gates, affinity tightening while gated, binding subresource, the binder."""

from __future__ import annotations

import asyncio
import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

MERGE = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
GATE = "tether.io/data-placement"


def pod(name: str, *, gates: bool = True, **spec: object) -> dict:
    body = {"metadata": {"name": name},
            "spec": {"containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}], **spec}}
    if gates:
        body["spec"]["schedulingGates"] = [{"name": GATE}]
    return body


def req_affinity(*exprs: dict) -> dict:
    return {"nodeAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {
        "nodeSelectorTerms": [{"matchExpressions": list(exprs)}]}}}


ZONE_A = {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["a"]}
HOST = {"key": "kubernetes.io/hostname", "operator": "In", "values": ["n1"]}


async def test_gates_only_at_creation_and_removable(kube):
    core, ns = kube.core, kube.namespace
    p = await core.create_namespaced_pod(ns, pod("g"))
    assert p.status.phase == "Pending" and [g.name for g in p.spec.scheduling_gates] == [GATE]
    await core.create_namespaced_pod(ns, pod("plain", gates=False, schedulerName="none-such"))
    with pytest.raises(ApiException) as ei:
        await core.patch_namespaced_pod("plain", ns, {"spec": {"schedulingGates": [{"name": GATE}]}},
                                        _content_type=MERGE)
    assert ei.value.status == 422
    out = await core.patch_namespaced_pod("g", ns, [{"op": "remove", "path": "/spec/schedulingGates"}],
                                          _content_type=JSON_PATCH)
    assert not out.spec.scheduling_gates


@pytest.mark.parametrize("index", ["²", "\u0665", "1_0"])
async def test_a_json_patch_index_that_is_not_ascii_digits_is_unprocessable(kube, index):
    """A real server reads a JSON patch's array index as Go's Atoi does: '²' and an Arabic-Indic five are no index
    (the emulator raised on '²', which ``str.isdigit`` passes and ``int`` refuses) and nor is '1_0'."""
    core, ns = kube.core, kube.namespace
    name = f"index-{ord(index[0])}"
    await core.create_namespaced_pod(ns, pod(name, gates=False, schedulerName="none-such"))
    for op in ("replace", "add", "remove"):
        patch = [{"op": op, "path": f"/spec/containers/{index}/image", "value": "registry.k8s.io/pause:3.9"}]
        with pytest.raises(ApiException) as ei:
            await core.patch_namespaced_pod(name, ns, patch, _content_type=JSON_PATCH)
        assert ei.value.status == 422, (op, ei.value.status, ei.value.body)


async def test_gated_pod_affinity_may_only_tighten(kube):
    core, ns = kube.core, kube.namespace
    await core.create_namespaced_pod(ns, pod("g"))
    # no required affinity yet: adding a required term is allowed, so is a nodeSelector addition
    await core.patch_namespaced_pod("g", ns, {"spec": {"affinity": req_affinity(ZONE_A),
                                                       "nodeSelector": {"disk": "ssd"}}}, _content_type=MERGE)
    # adding a match expression to the existing term is allowed
    await core.patch_namespaced_pod("g", ns, {"spec": {"affinity": req_affinity(ZONE_A, HOST)}},
                                    _content_type=MERGE)
    # dropping one is not
    with pytest.raises(ApiException) as ei:
        await core.patch_namespaced_pod("g", ns, {"spec": {"affinity": req_affinity(HOST)}}, _content_type=MERGE)
    assert ei.value.status == 422
    # changing an existing nodeSelector value is not
    with pytest.raises(ApiException) as ei:
        await core.patch_namespaced_pod("g", ns, {"spec": {"nodeSelector": {"disk": "hdd"}}}, _content_type=MERGE)
    assert ei.value.status == 422
    # preferred terms are free
    pref = {"nodeAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
        {"weight": 10, "preference": {"matchExpressions": [ZONE_A]}}]}}
    await core.patch_namespaced_pod("g", ns, {"spec": {"affinity": pref}}, _content_type=MERGE)


async def test_ungated_pod_scheduling_fields_are_immutable(kube):
    core, ns = kube.core, kube.namespace
    await core.create_namespaced_pod(ns, pod("u", gates=False, schedulerName="none-such"))
    for patch in ({"spec": {"nodeSelector": {"disk": "ssd"}}}, {"spec": {"affinity": req_affinity(ZONE_A)}},
                  {"spec": {"nodeName": "n1"}}):
        with pytest.raises(ApiException) as ei:
            await core.patch_namespaced_pod("u", ns, patch, _content_type=MERGE)
        assert ei.value.status == 422
        assert "Forbidden" in json.loads(ei.value.body)["message"]
    # the image may change
    await core.patch_namespaced_pod("u", ns, {"spec": {"containers": [{"name": "c", "image": "busybox"}]}})


async def test_binding_subresource(kube):
    core, ns = kube.core, kube.namespace
    await core.create_namespaced_pod(ns, pod("g"))
    binding = {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "g"},
               "target": {"apiVersion": "v1", "kind": "Node", "name": "n1"}}
    # (the typed client cannot deserialize the Status a binding returns, hence raw responses)
    resp = await core.create_namespaced_pod_binding("g", ns, binding, _preload_content=False)
    assert resp.status == 409  # still gated
    await core.create_namespaced_pod(ns, pod("b", gates=False, schedulerName="none-such"))
    binding["metadata"]["name"] = "b"
    resp = await core.create_namespaced_pod_binding("b", ns, binding, _preload_content=False)
    assert resp.status == 201
    p = await core.read_namespaced_pod("b", ns)
    assert p.spec.node_name == "n1"
    assert any(c.type == "PodScheduled" and c.status == "True" for c in p.status.conditions)
    resp = await core.create_namespaced_pod_binding("b", ns, binding, _preload_content=False)
    assert resp.status == 409
    assert "is already assigned to node" in json.loads(await resp.read())["message"]


async def test_binder_assigns_ungated_pods_to_matching_nodes(kube):
    """The emulator's binder, or a real cluster's kube-scheduler, on Nodes of the test's own (tainted with its key,
    which its pods tolerate; ``KubeEnv.create_node``): a gated pod waits, an ungated one goes to a node its
    required affinity and resources allow, one that fits nowhere is marked Unschedulable."""
    if kube.emulator is not None:
        kube.emulator.enable_binder()
    core, ns = kube.core, kube.namespace
    zone = f"test.tether.io/zone-{kube.taint_key[-8:]}"  # a key of the test's own: only its nodes have it
    nodes = {z: await kube.create_node(f"n-{z}", labels={zone: z}) for z in ("a", "b")}
    await _default_service_account(kube)
    tolerate = {"tolerations": [kube.toleration()], "terminationGracePeriodSeconds": 0}
    await core.create_namespaced_pod(ns, pod("p", affinity=req_affinity({"key": zone, "operator": "In",
                                                                         "values": ["b"]}), **tolerate))
    # a pod created after it, ungated, bound: the scheduler is at work, and the gated one still waits
    await core.create_namespaced_pod(ns, pod("sentinel", gates=False, nodeSelector={zone: "a"}, **tolerate))
    assert await _bound(core, ns, "sentinel") == nodes["a"]
    assert (await core.read_namespaced_pod("p", ns)).spec.node_name is None  # gated: not scheduled
    gated = await _pod_scheduled(core, ns, "p")  # and marked so (kubectl get pods: SchedulingGated)
    assert (gated.status, gated.reason, gated.message) == (
        "False", "SchedulingGated", "Scheduling is blocked due to non-empty scheduling gates")
    await core.patch_namespaced_pod("p", ns, {"spec": {"schedulingGates": None}}, _content_type=MERGE)
    assert await _bound(core, ns, "p") == nodes["b"]
    assert (await _pod_scheduled(core, ns, "p")).status == "True"
    await core.create_namespaced_pod(ns, pod("nowhere", gates=False, nodeSelector={zone: "z"}, **tolerate))
    unschedulable = await _pod_scheduled(core, ns, "nowhere")
    assert unschedulable.status == "False" and unschedulable.reason == "Unschedulable"
    assert client.V1Pod  # the typed model round-trips emulator output


async def _pod_scheduled(core, ns: str, name: str):
    """The pod's PodScheduled condition, once it has one."""
    async with asyncio.timeout(30):
        while True:  # through the API, as against a real cluster
            found = [c for c in (await core.read_namespaced_pod(name, ns)).status.conditions or []
                     if c.type == "PodScheduled"]
            if found:
                return found[0]
            await asyncio.sleep(0.02)


async def _bound(core, ns: str, name: str) -> str:
    async with asyncio.timeout(30):
        while True:  # poll through the API, as a test against a real cluster would
            node = (await core.read_namespaced_pod(name, ns)).spec.node_name
            if node is not None:
                return node
            await asyncio.sleep(0.02)


async def _default_service_account(kube) -> None:
    """A real API server refuses pods until kube-controller-manager has made the namespace's default
    ServiceAccount (the emulator has no such admission)."""
    if kube.emulator is not None:
        return
    async with asyncio.timeout(30):
        while True:
            try:
                await kube.core.read_namespaced_service_account("default", kube.namespace)
                return
            except ApiException as e:
                if e.status != 404:
                    raise
            await asyncio.sleep(0.1)
