"""Pod placement end to end: tether's daemon on the Karmada API, member clusters, pods gated then placed.

Each emulated member is its own emulator with the pod binder on (ungated pods are bound by node affinity and
allocatable), the Godel PodGroup and Fluid CRDs. The pods are created with tether's scheduling gate, as the pod
webhook adds it.

What runs where:

* ``test_a_group_lands_on_one_node_of_a_real_member`` runs on both: on the emulator against an emulated member, and
  with ``TETHER_TEST_KUBECONFIG`` with **one member, the real cluster itself**, its own kube-scheduler binding the
  pods once tether has removed the gate. It only reads Nodes (a group whose required topology key is
  ``kubernetes.io/hostname``, restricted by the PodGroup's ``nodeSelector`` to Ready, schedulable nodes, so every
  node is a domain already and none needs a label), creates small pods in its own namespace and leaves with it.
* The other tests need members whose nodes they create and label (racks of nodes, a node chosen for a finished
  pod, a member that goes away): a shared real cluster's nodes are not the test's to create or label, and the
  suite has one real cluster, not two, so they skip there with that reason.
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest

from tether.adapters.kubernetes.client import KubeClient, Resource
from tether.adapters.kubernetes.members import EVENTS, FLUID, JOBS, NODES, POD_GROUPS, PODS
from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.testing import KUBECONFIG_ENV, KubeEnv
from tether.adapters.testing.daemon import eventually, tether_stack
from tether.adapters.testing.reference import require_reference
from tether.core.placement.decider import GATE

GODEL_CRDS = ("scheduling.godel.kubewharf.io_podgroups",)
FLUID_CRDS = ("data.fluid.io_dataloads", "data.fluid.io_dataprocesses", "data.fluid.io_datamigrates",
              "data.fluid.io_databackups")
CRDS = GODEL_CRDS + FLUID_CRDS
HOST = "kubernetes.io/hostname"
SERVICE_ACCOUNTS = Resource("", "v1", "serviceaccounts", "ServiceAccount", True)
NS = "ml"


@contextlib.asynccontextmanager
async def member(name: str, tmp: str, *, racks: int = 4, per_rack: int = 4,
                 crds: tuple[str | Path, ...] = CRDS) -> AsyncIterator[tuple[KubeEmulator, KubeClient, str]]:
    """An emulated member: racks of nodes, the binder on, and the optional APIs of ``crds`` (Godel's and Fluid's:
    a member may lack either, tests/integration/test_optional_sources.py)."""
    async with KubeEmulator(binder=True, crds=crds) as emulator:
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
        pytest.skip("needs member clusters whose nodes the test creates and labels (racks, a chosen node, a second "
                    "member that goes away): a shared real cluster's nodes are not the test's to label, and there is "
                    "one real cluster, not two — the emulator only")


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


async def test_a_member_without_fluid_still_places_groups(kube: KubeEnv, emulator_only: None) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with member("m1", tmp, crds=GODEL_CRDS) as (_, m1, config1), \
                tether_stack(kube, daemon_options={"members": {"m1": config1}, "absent_retry": 0.2}):
            await create_group(m1, "gang", 4)
            done = await eventually(lambda: _all_bound(m1, "gang-"), "the group bound", within=20)
            assert len(await racks_of(m1, done)) == 1


@pytest.mark.parametrize(("policy", "crds"), [("Require", CRDS), ("Prefer", CRDS), ("Require", FLUID_CRDS)],
                         ids=["Require", "Prefer", "Require-member-without-Godel"])
async def test_a_data_process_follows_its_data_load(kube: KubeEnv, emulator_only: None, policy: str,
                                                    crds: tuple[str, ...]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with member("m1", tmp, crds=crds) as (_, m1, config1), \
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
            # Fluid's controller has reconciled it (its status, which tether's condition needs: operation_status)
            await m1.patch(process_res, "proc", {"status": {"phase": "Pending", "duration": "Unfinished",
                                                            "conditions": []}}, namespace=NS, subresource="status")
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



async def test_fluids_own_schema_gets_the_outcome_as_an_event_then_the_condition_once_fluid_wrote_its_status(
        kube: KubeEnv, emulator_only: None) -> None:
    """Fluid's real CRDs (``../shared/reference/fluid``) in the member: their status schema refuses a status without
    ``phase`` and ``duration`` (``422``, as a real server with Fluid's CRDs did). A DataProcess no Fluid controller
    has reconciled gets the inheritance as an Event, and the condition once Fluid writes its status — next to
    Fluid's conditions, its phase and duration untouched — and again after Fluid rebuilds its conditions; the
    API refuses nothing tether writes."""
    from tether.adapters.cli.replay.trail import explain
    from tether.core.events import CommandFailed

    fluid = require_reference("fluid")
    crds = ("scheduling.godel.kubewharf.io_podgroups", *sorted(fluid.glob("data.fluid.io_*.yaml")))
    with tempfile.TemporaryDirectory() as tmp:
        async with member("m1", tmp, crds=crds) as (_, m1, config1), \
                tether_stack(kube, daemon_options={"members": {"m1": config1}}) as stack:
            load_res, process_res = FLUID[0], FLUID[2]
            load = await m1.create(load_res, {"apiVersion": load_res.api_version, "kind": "DataLoad", "metadata": {
                "name": "load", "namespace": NS}, "spec": {"dataset": {"name": "d", "namespace": NS}}}, namespace=NS)
            await m1.create(JOBS, _job("load-job", "DataLoad", "load", load["metadata"]["uid"]), namespace=NS)
            target = "m1-r2-n1"
            await m1.create(PODS, {**gated_pod("load-pod", owner_job="load-job"), "spec": {
                "nodeName": target, "containers": [{"name": "c", "image": "x"}]}}, namespace=NS)
            await m1.patch(PODS, "load-pod", {"status": {"phase": "Succeeded"}}, namespace=NS, subresource="status")
            process = await m1.create(process_res, {
                "apiVersion": process_res.api_version, "kind": "DataProcess",
                "metadata": {"name": "proc", "namespace": NS},
                "spec": {"dataset": {"name": "d", "namespace": NS, "mountPath": "/data"},
                         "processor": {"script": {"image": "x", "source": "true"}},
                         "runAfter": {"kind": "DataLoad", "name": "load", "affinityStrategy": {"policy": "Require"}}}},
                namespace=NS)
            await m1.create(JOBS, _job("proc-job", "DataProcess", "proc", process["metadata"]["uid"]), namespace=NS)
            await m1.create(PODS, gated_pod("proc-pod", owner_job="proc-job"), namespace=NS)
            await m1.patch(load_res, "load", {"status": {"phase": "Complete", "duration": "5s", "conditions": []}},
                           namespace=NS, subresource="status")
            assert await eventually(lambda: _all_bound(m1, "proc-pod"), "proc-pod bound", within=20) == {
                "proc-pod": target}

            async def reported() -> list[dict[str, Any]] | None:
                events, _ = await m1.list(EVENTS, namespace=NS)
                found = [e for e in events if (e.get("involvedObject") or {}).get("name") == "proc"
                         and e.get("reason") == "AffinityInherited"]
                return found or None

            assert "inherited from DataLoad/ml/load" in (await eventually(reported, "the Event", within=20))[0][
                "message"]
            await stack.wait_idle()
            assert "status" not in await m1.get(process_res, "proc", namespace=NS)  # nothing Fluid would refuse

            async def conditions(*types: str) -> dict[str, Any] | None:
                op = await m1.get(process_res, "proc", namespace=NS)
                held = {c["type"]: c for c in (op.get("status") or {}).get("conditions") or []}
                return op if all(t in held for t in types) else None

            fluids = {"type": "Processing", "status": "True", "reason": "Fluid", "message": "Fluid's own",
                      "lastTransitionTime": "2026-01-01T00:00:00Z"}
            await m1.patch(process_res, "proc", {"status": {"phase": "Executing", "duration": "Unfinished",
                                                            "conditions": [fluids]}}, namespace=NS,
                           subresource="status")  # Fluid's controller reconciles it
            op = await eventually(lambda: conditions("Processing", "AffinityInherited"), "the condition", within=20)
            assert (op["status"]["phase"], op["status"]["duration"]) == ("Executing", "Unfinished")
            assert [c["status"] for c in op["status"]["conditions"]] == ["True", "True"]
            complete = {**fluids, "type": "Complete", "reason": "Done"}
            await m1.patch(process_res, "proc", {"status": {"phase": "Complete", "duration": "12s",
                                                            "conditions": [complete]}}, namespace=NS,
                           subresource="status")  # Fluid rebuilds its conditions without tether's
            op = await eventually(lambda: conditions("Complete", "AffinityInherited"), "the condition again",
                                  within=20)
            assert (op["status"]["phase"], op["status"]["duration"]) == ("Complete", "12s")
            await stack.wait_idle()
            assert stack.log is not None
            trail = await explain(stack.log, f"m1:DataProcess/{NS}/proc")
            assert [e.event for e in trail.events if isinstance(e.event, CommandFailed)] == []


async def test_explain_shows_why_a_pod_went_where_it_did(kube: KubeEnv, emulator_only: None) -> None:
    from tether.adapters.cli.replay.trail import explain

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


def _ready_schedulable(node: dict[str, Any]) -> bool:
    conditions = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    return conditions.get("Ready") == "True" and not (node.get("spec") or {}).get("unschedulable")


async def test_a_group_lands_on_one_node_of_a_real_member(kube: KubeEnv) -> None:
    """A 3-pod PodGroup, required topology ``kubernetes.io/hostname``: tether pins every pod to one node (a required
    ``hostname In [node]`` term) and removes the gate; the member's scheduler (the emulator's binder, or the real
    kube-scheduler) binds them there. The pods tolerate every taint and ask for 10m CPU, so that any Ready,
    schedulable node of a real cluster can take them (a control-plane node included)."""
    size, group = 3, f"host-{kube.namespace[-8:]}"
    with tempfile.TemporaryDirectory() as tmp:
        async with contextlib.AsyncExitStack() as stack:
            if kube.is_emulated:
                _, target, config = await stack.enter_async_context(member("m1", tmp, racks=2, per_rack=2))
                namespace = NS
            else:  # the real cluster is the member: its nodes (read only), the test's namespace
                await kube.register_crds(*CRDS)  # the member's watch sources list these kinds (once per run, kept)
                target, config, namespace = KubeClient(kube.api_client), os.environ[KUBECONFIG_ENV], kube.namespace
                # a pod is refused until kube-controller-manager has made the namespace's default ServiceAccount
                await eventually(lambda: target.get(SERVICE_ACCOUNTS, "default", namespace=namespace),
                                 "the namespace's default ServiceAccount", within=30)
            nodes, _ = await target.list(NODES)
            candidates = sorted(n["metadata"]["name"] for n in nodes if _ready_schedulable(n)
                                and (n["metadata"].get("labels") or {}).get(HOST) == n["metadata"]["name"])
            if not candidates:
                pytest.skip(f"no Ready, schedulable node labelled {HOST} with its name in the member")
            await stack.enter_async_context(tether_stack(kube, daemon_options={"members": {"m1": config}}))
            await target.create(POD_GROUPS, {
                "apiVersion": POD_GROUPS.api_version, "kind": "PodGroup",
                "metadata": {"name": group, "namespace": namespace},
                "spec": {"minMember": size, "affinity": {"podGroupAffinity": {
                    "required": [{"topologyKey": HOST}],
                    "nodeSelector": {"nodeSelectorTerms": [{"matchExpressions": [
                        {"key": HOST, "operator": "In", "values": candidates}]}]}}}}}, namespace=namespace)
            for i in range(size):
                pod = gated_pod(f"{group}-{i}", cpu="10m", annotations={"godel.bytedance.com/pod-group-name": group})
                pod["metadata"]["namespace"] = namespace
                pod["spec"]["tolerations"] = [{"operator": "Exists"}]
                pod["spec"]["terminationGracePeriodSeconds"] = 0
                await target.create(PODS, pod, namespace=namespace)

            async def bound() -> dict[str, str] | None:
                pods, _ = await target.list(PODS, namespace=namespace)
                found = {p["metadata"]["name"]: (p.get("spec") or {}).get("nodeName", "") for p in pods
                         if p["metadata"]["name"].startswith(f"{group}-")}
                return found if len(found) == size and all(found.values()) else None

            placed = await eventually(bound, "the group bound by the member's scheduler", within=60)
            [node] = set(placed.values())
            assert node in candidates
            for name in placed:
                pod = await target.get(PODS, name, namespace=namespace)
                assert not pod["spec"].get("schedulingGates")
                terms = pod["spec"]["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
                    "nodeSelectorTerms"]
                # tether's decision, not the scheduler's whim: every term pins the pod to that one node
                assert terms and all({"key": HOST, "operator": "In", "values": [node]} in t.get("matchExpressions", [])
                                     for t in terms), terms
