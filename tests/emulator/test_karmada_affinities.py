"""Ordered cluster groups (``placement.clusterAffinities``) as karmada-scheduler v1.18.2 schedules them — the
conformance of the emulator's stand-in, on the emulator and on a real control plane (``TETHER_TEST_KUBECONFIG``),
where a real karmada-scheduler watches.

Locality tiers (docs/locality-tiers.md) rely on exactly this: the groups are tried in order, the next one only when
one cannot hold the binding (a Divided binding's replicas against the Clusters' ``status.resourceSummary``); the
group used is in ``status.schedulerObservingAffinityName``; a later scheduling starts from that group (a reschedule
does not go back), and from the first again when the names change; when no group can hold it, it stays unscheduled
with the first group's reason.

The test owns its Clusters (unique names, deleted at the end) and its namespace; its bindings name only its own
Clusters, so the Clusters others keep on a shared control plane cannot satisfy a group.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import datetime
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from tether.adapters.kubernetes import manifests
from tether.adapters.sandbox.kube_emulator.testing import RUN_ID, KubeEnv, kube_environment
from tether.adapters.testing.tether_stack import eventually
from tether.core.keys import PERMANENT_ID_LABEL

pytestmark = pytest.mark.cluster
W, V, RBS = "work.karmada.io", "v1alpha2", "resourcebindings"
C, CV, CLUSTERS = "cluster.karmada.io", "v1alpha1", "clusters"
MERGE = "application/merge-patch+json"


class Env:
    def __init__(self, kube: KubeEnv) -> None:
        self.kube = kube
        self.suffix = f"{RUN_ID}{secrets.token_hex(2)}"

    async def cluster(self, role: str, cpu: str) -> str:
        name = f"aff-{role}-{self.suffix}"
        raw = manifests.cluster(name, cpu=cpu)
        status = raw.pop("status")
        self.kube.defer(lambda: self._delete_cluster(name))
        await self.kube.custom.create_cluster_custom_object(C, CV, CLUSTERS, raw)
        await self.set_cpu(name, cpu, status)
        return name

    async def set_cpu(self, name: str, cpu: str, status: dict[str, Any] | None = None) -> None:
        status = copy.deepcopy(status) if status is not None else manifests.cluster(name, cpu=cpu)["status"]
        status["resourceSummary"]["allocatable"]["cpu"] = cpu
        await self.kube.custom.patch_cluster_custom_object_status(C, CV, CLUSTERS, name, {"status": status},
                                                                 _content_type=MERGE)

    async def _delete_cluster(self, name: str) -> None:
        with contextlib.suppress(ApiException):
            await self.kube.custom.delete_cluster_custom_object(C, CV, CLUSTERS, name)

    async def binding(self, name: str, groups: list[tuple[str, list[str]]], *, replicas: int = 2) -> None:
        """A Divided (Aggregated) binding of ``replicas`` of 1 CPU over the ordered ``groups``."""
        doc = manifests.resource_binding(name, namespace=self.kube.namespace, replicas=replicas, cpu="1")
        doc["metadata"]["labels"] = {PERMANENT_ID_LABEL: f"{self.suffix}-{name}"}
        doc["spec"]["placement"] = {
            "clusterAffinities": [{"affinityName": n, "clusterNames": c} for n, c in groups],
            "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Aggregated"}}
        await self.kube.custom.create_namespaced_custom_object(W, V, self.kube.namespace, RBS, doc)

    async def get(self, name: str) -> dict[str, Any]:
        return await self.kube.custom.get_namespaced_custom_object(W, V, self.kube.namespace, RBS,  # type: ignore
                                                                   f"{name}-deployment")

    async def patch(self, name: str, body: Any, *, json_patch: bool = False) -> None:
        await self.kube.custom.patch_namespaced_custom_object(
            W, V, self.kube.namespace, RBS, f"{name}-deployment", body,
            _content_type="application/json-patch+json" if json_patch else MERGE)

    async def settled(self, name: str, *, since_generation: int = 0, within: float = 20.0) -> dict[str, Any]:
        """The binding once karmada-scheduler has written a Scheduled condition for a generation past
        ``since_generation`` (success: observed that generation; failure: the condition's message changed)."""
        async with asyncio.timeout(within):
            while True:
                rb = await self.get(name)
                status = rb.get("status") or {}
                condition = scheduled(rb)
                generation = rb["metadata"]["generation"]
                if condition is not None and generation > since_generation and (
                        status.get("schedulerObservedGeneration") == generation or condition["status"] == "False"):
                    return rb
                await asyncio.sleep(0.05)


async def _rescheduled(karmada: Env, before: str) -> dict[str, Any] | None:
    rb = await karmada.get("w")
    return rb if rb["status"]["lastScheduledTime"] != before else None


def scheduled(rb: dict[str, Any]) -> dict[str, Any] | None:
    return next((c for c in (rb.get("status") or {}).get("conditions") or [] if c["type"] == "Scheduled"), None)


def placed(rb: dict[str, Any]) -> tuple[list[str], str]:
    return ([c["name"] for c in rb["spec"].get("clusters") or []],
            (rb.get("status") or {}).get("schedulerObservingAffinityName", ""))


@pytest.fixture
async def karmada() -> AsyncIterator[Env]:
    async with kube_environment(emulator_options={"karmada_scheduler": True}) as kube:
        kube.require_karmada_scheduler()
        await kube.register_crds("work.karmada.io_resourcebindings", "cluster.karmada.io_clusters")
        yield Env(kube)


async def test_the_first_group_with_room_holds_the_binding(karmada: Env) -> None:
    a, b = await karmada.cluster("a", "4"), await karmada.cluster("b", "4")
    await karmada.binding("w", [("data", [a]), ("near", [b])])
    rb = await karmada.settled("w")
    assert placed(rb) == ([a], "data") and scheduled(rb)["reason"] == "Success"


async def test_a_group_without_room_falls_over_to_the_next(karmada: Env) -> None:
    a, b = await karmada.cluster("a", "1"), await karmada.cluster("b", "4")
    await karmada.binding("w", [("data", [a]), ("near", [b])])
    rb = await karmada.settled("w")
    assert placed(rb) == ([b], "near") and rb["spec"]["clusters"] == [{"name": b, "replicas": 2}]


async def test_a_reschedule_starts_from_the_observed_group_and_renamed_groups_from_the_first(karmada: Env) -> None:
    a, b = await karmada.cluster("a", "1"), await karmada.cluster("b", "4")
    await karmada.binding("w", [("data", [a]), ("near", [b])])
    rb = await karmada.settled("w")
    assert placed(rb) == ([b], "near")
    await karmada.set_cpu(a, "4")  # room in the first group now
    before = rb["status"]["lastScheduledTime"]
    await asyncio.sleep(1.1)  # (lastScheduledTime has a second's resolution: the reschedule must show in it)
    now = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    await karmada.patch("w", {"spec": {"rescheduleTriggeredAt": now}})
    rb = await eventually(lambda: _rescheduled(karmada, before), "scheduled again", within=20)
    assert placed(rb) == ([b], "near")  # … and it did not go back by itself
    await karmada.patch("w", [{"op": "replace", "path": "/spec/placement/clusterAffinities", "value": [
        {"affinityName": "data-2", "clusterNames": [a]}, {"affinityName": "near-2", "clusterNames": [b]}]}],
        json_patch=True)
    rb = await karmada.settled("w", since_generation=rb["metadata"]["generation"])
    assert placed(rb) == ([a], "data-2")


async def test_no_group_with_room_leaves_it_unscheduled_with_the_first_groups_reason(karmada: Env) -> None:
    a, b = await karmada.cluster("a", "1"), await karmada.cluster("b", "1")
    await karmada.binding("w", [("data", [a]), ("near", [b])])
    rb = await karmada.settled("w")
    condition = scheduled(rb)
    assert placed(rb) == ([], "")
    assert (condition["status"], condition["reason"]) == ("False", "Unschedulable")
    assert "available replicas 1 are not enough" in condition["message"]


async def test_groups_that_select_no_cluster_are_no_cluster_fit(karmada: Env) -> None:
    await karmada.cluster("a", "4")  # (a cluster exists: no group names it)
    missing = f"aff-missing-{karmada.suffix}"
    await karmada.binding("w", [("data", [missing]), ("near", [missing + "-2"])])
    rb = await karmada.settled("w")
    condition = scheduled(rb)
    assert placed(rb) == ([], "")
    assert (condition["status"], condition["reason"]) == ("False", "NoClusterFit")
    assert "did not match the placement cluster affinity constraint" in condition["message"]
