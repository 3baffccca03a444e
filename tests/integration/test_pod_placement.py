"""Pod placement end to end: tether's daemon on the Karmada API, two member clusters, pods gated then placed.

Each member is its own emulator with the pod binder on (ungated pods are bound by node affinity and allocatable),
the Godel PodGroup and Fluid CRDs. The pods are created with tether's scheduling gate, as the pod webhook adds it.
These tests need member clusters whose nodes they create and label, so with ``TETHER_TEST_KUBECONFIG`` they skip
(a shared real cluster's nodes are not the test's to label); see the README's "Pod placement" for what is missing
for a real-cluster run.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tether.adapters.kubernetes.client import KubeClient
from tether.adapters.kubernetes.members import FLUID, JOBS, NODES, POD_GROUPS, PODS
from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.testing import KUBECONFIG_ENV, KubeEnv
from tether.adapters.testing.daemon import eventually, tether_stack
from tether.core.podplacement import GATE

CRDS = ("scheduling.godel.kubewharf.io_podgroups", "data.fluid.io_dataloads", "data.fluid.io_dataprocesses",
        "data.fluid.io_datamigrates", "data.fluid.io_databackups")
HOST = "kubernetes.io/hostname"
NS = "ml"


@contextlib.asynccontextmanager
async def member(name: str, tmp: str, *, racks: int = 4, per_rack: int = 4) -> AsyncIterator[tuple[KubeEmulator,
                                                                                                      KubeClient, str]]:
    async with KubeEmulator(binder=True, crds=CRDS) as emulator:
        api = _api(emulator)
        kube = KubeClient(api)
        for r in range(racks):
            for n in range(per_rack):
                node = f"{name}-r{r}-n{n}"
                await emulator.apply({"apiVersion": "v1", "kind": "Node", "metadata": {
                    "name": node, "labels": {HOST: node, "rack": f"rack{r}", "zone": "z1"}},
                    "status": {"allocatable": {"cpu": "8", "memory": "32Gi", "pods": "110"},
                               "conditions": [{"type": "Ready", "status": "True"}]}})
        await emulator.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}})
        directory = Path(tmp) / name
        directory.mkdir()
        try:
            yield emulator, kube, str(emulator.kubeconfig_path(directory))
        finally:
            await api.close()


def _api(emulator: KubeEmulator) -> Any:
    from kubernetes_asyncio import client

    return client.ApiClient(emulator.configuration())


def gated_pod(name: str, *, cpu: str = "1", annotations: dict[str, str] | None = None,
              owner_job: str = "") -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, "namespace": NS, "annotations": annotations or {}}
    if owner_job:
        meta["ownerReferences"] = [{"apiVersion": "batch/v1", "kind": "Job", "name": owner_job, "uid": "job-uid"}]
    return {"apiVersion": "v1", "kind": "Pod", "metadata": meta, "spec": {
        "schedulingGates": [{"name": GATE}],
        "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9",
                        "resources": {"requests": {"cpu": cpu}}}]}}


async def create_group(kube: KubeClient, name: str, size: int, *, cpu: str = "1") -> None:
    await kube.create(POD_GROUPS, {"apiVersion": POD_GROUPS.api_version, "kind": "PodGroup",
                                   "metadata": {"name": name, "namespace": NS}, "spec": {
                                       "minMember": size, "affinity": {"podGroupAffinity": {
                                           "required": [{"topologyKey": "rack"}]}}}}, namespace=NS)
    for i in range(size):
        await kube.create(PODS, gated_pod(f"{name}-{i}", cpu=cpu,
                                          annotations={"godel.bytedance.com/pod-group-name": name}), namespace=NS)


async def placements(kube: KubeClient, prefix: str) -> dict[str, str]:
    pods, _ = await kube.list(PODS, namespace=NS)
    return {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName", "") for p in pods
            if p["metadata"]["name"].startswith(prefix)}


async def racks_of(kube: KubeClient, nodes: dict[str, str]) -> set[str]:
    listed, _ = await kube.list(NODES)
    rack = {n["metadata"]["name"]: n["metadata"]["labels"]["rack"] for n in listed}
    return {rack[node] for node in nodes.values()}


@pytest.fixture
def emulator_only() -> None:
    if os.environ.get(KUBECONFIG_ENV):
        pytest.skip("needs two member clusters: the emulator only")


async def test_gated_groups_land_in_one_domain_and_a_lost_member_leaves_the_other_alone(
        kube: KubeEnv, emulator_only: None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with member("m1", tmp) as (_, m1, config1), member("m2", tmp) as (emulator2, m2, config2), \
                tether_stack(kube, daemon_options={"members": {"m1": config1, "m2": config2}}) as stack:
            # 16 pods of 1 CPU fit in one rack (4 nodes x 8 CPU); the binder alone would spread them over every
            # rack (it prefers the least-loaded node), so one rack means tether's affinity decided it
            await create_group(m1, "gang", 16)
            await create_group(m2, "gang", 16)
            done1 = await eventually(lambda: _all_bound(m1, "gang-"), "m1 group bound", within=20)
            done2 = await eventually(lambda: _all_bound(m2, "gang-"), "m2 group bound", within=20)
            assert len(await racks_of(m1, done1)) == 1 and len(await racks_of(m2, done2)) == 1

            # m2 goes away: m1 keeps deciding, and nothing of m1's is touched
            await emulator2.stop()
            await create_group(m1, "late", 4)
            late = await eventually(lambda: _all_bound(m1, "late-"), "m1 second group bound", within=20)
            assert len(await racks_of(m1, late)) == 1
            assert await placements(m1, "gang-") == done1
            await stack.wait_idle()


async def _all_bound(kube: KubeClient, prefix: str) -> dict[str, str] | None:
    found = await placements(kube, prefix)
    return found if found and all(found.values()) else None


@pytest.mark.parametrize("policy", ["Require", "Prefer"])
async def test_a_data_process_follows_its_data_load(kube: KubeEnv, emulator_only: None, policy: str) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with member("m1", tmp) as (_, m1, config1), \
                tether_stack(kube, daemon_options={"members": {"m1": config1}}):
            load_res, process_res = FLUID[0], FLUID[2]
            load = await m1.create(load_res, {"apiVersion": load_res.api_version, "kind": "DataLoad", "metadata": {
                "name": "load", "namespace": NS}, "spec": {"dataset": {"name": "d", "namespace": NS}}}, namespace=NS)
            await m1.create(JOBS, _job("load-job", "DataLoad", "load", load["metadata"]["uid"]), namespace=NS)
            # the loader pod ran on a node far from where the binder would put a fresh pod
            target = "m1-r3-n3"
            await m1.create(PODS, {**gated_pod("load-pod", owner_job="load-job"), "spec": {
                "nodeName": target, "containers": [{"name": "c", "image": "x"}]}}, namespace=NS)
            await m1.patch(PODS, "load-pod", {"status": {"phase": "Succeeded"}}, namespace=NS, subresource="status")
            process = await m1.create(process_res, {
                "apiVersion": process_res.api_version, "kind": "DataProcess",
                "metadata": {"name": "proc", "namespace": NS},
                "spec": {"dataset": {"name": "d", "namespace": NS}, "processor": {"script": {"image": "x"}},
                         "runAfter": {"kind": "DataLoad", "name": "load", "affinityStrategy": {"policy": policy}}}},
                namespace=NS)
            await m1.create(JOBS, _job("proc-job", "DataProcess", "proc", process["metadata"]["uid"]), namespace=NS)
            await m1.create(PODS, gated_pod("proc-pod", owner_job="proc-job"), namespace=NS)
            await m1.patch(load_res, "load", {"status": {"phase": "Complete"}}, namespace=NS, subresource="status")
            bound = await eventually(lambda: _all_bound(m1, "proc-pod"), "proc-pod bound", within=20)
            assert bound == {"proc-pod": target}
            pod = await m1.get(PODS, "proc-pod", namespace=NS)
            affinity = pod["spec"]["affinity"]["nodeAffinity"]
            key = ("requiredDuringSchedulingIgnoredDuringExecution" if policy == "Require"
                   else "preferredDuringSchedulingIgnoredDuringExecution")
            assert key in affinity and len(affinity) == 1
            op = await m1.get(process_res, "proc", namespace=NS)
            conditions = {c["type"]: c for c in (op.get("status") or {}).get("conditions") or []}
            assert conditions["AffinityInherited"]["status"] == "True"


def _job(name: str, kind: str, owner: str, uid: str) -> dict[str, Any]:
    return {"apiVersion": "batch/v1", "kind": "Job", "metadata": {
        "name": name, "namespace": NS, "ownerReferences": [
            {"apiVersion": "data.fluid.io/v1alpha1", "kind": kind, "name": owner, "uid": uid}]},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "image": "x"}]}}}}



async def test_explain_shows_why_a_pod_went_where_it_did(kube: KubeEnv, emulator_only: None) -> None:
    from tether.adapters.cli.replay import explain

    with tempfile.TemporaryDirectory() as tmp:
        async with member("m1", tmp) as (_, m1, config1), \
                tether_stack(kube, daemon_options={"members": {"m1": config1}}) as stack:
            await create_group(m1, "solo", 2)
            bound = await eventually(lambda: _all_bound(m1, "solo-"), "group bound", within=20)
            await stack.wait_idle()
            assert stack.log is not None
            trail = await explain(stack.log, f"m1:Pod/{NS}/solo-0")  # = --explain Pod/ml/solo-0 --cluster m1
            commands = [c for cs in trail.caused.values() for c in cs if c.key == f"m1:Pod/{NS}/solo-0"]
            assert [type(c.command).__name__ for c in commands] == ["ReleasePod"]
            rack = next(iter(await racks_of(m1, bound)))
            assert f"PodGroup {NS}/solo" in commands[0].reason and f"rack={rack}" in commands[0].reason
            assert any(r.key == f"m1:Pod/{NS}/solo-0" for r in trail.events)  # the pod's own observations
