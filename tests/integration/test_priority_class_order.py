"""PriorityClass-driven admission order, end to end on the emulator: two suspended bindings in one queue, their
Deployments carrying different PriorityClasses; the queue has room for one. The higher PriorityClass is resumed
— although the lower one's binding is older and would go first by creation time — and the other stays held with
capacity's reason.
Equal PriorityClasses would resume the older one: the test fails without PriorityClass ordering.

Both bindings wait for their queue to exist (held: "queue … not found") before it is created, so that the first
cycle that may admit sees them both, whatever the timing of their creation.
"""

from __future__ import annotations

import contextlib
from datetime import UTC, datetime
from functools import partial
from typing import Any

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import (
    BINDINGS,
    CONFIGMAPS,
    DEPLOYMENTS,
    PRIORITY_CLASSES,
    QUEUES,
    KubeClient,
    KubeError,
)
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import delete_cluster_scoped, tether_stack
from tether.core.keys import ADMISSION_ANNOTATION


def suspended(rb: dict[str, Any] | None) -> bool:
    return bool(((rb or {}).get("spec") or {}).get("suspension", {}).get("scheduling"))


def hold(rb: dict[str, Any] | None) -> str:
    return str((((rb or {}).get("metadata") or {}).get("annotations") or {}).get(ADMISSION_ANNOTATION) or "")


async def test_the_higher_priority_class_is_resumed_first(kube: KubeEnv) -> None:
    await kube.register_crds("scheduling.volcano.sh_queues")
    client = KubeClient(kube.api_client)
    ns = kube.namespace
    await client.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": "tether-admission", "namespace": ns},
                                     "data": {"queue-managed": f"kinds: [apps/Deployment]\nnamespaces: [{ns}]\n"}},
                        namespace=ns)
    options = {"admission": True, "admission_configmap": f"{ns}/tether-admission"}
    async with tether_stack(kube, daemon_options=options) as stack:
        queue, low, high = f"q-{stack.suffix}", f"low-{stack.suffix}", f"high-{stack.suffix}"
        try:
            for name, value in ((low, 100), (high, 10_000)):
                await client.create(PRIORITY_CLASSES, {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass",
                                                       "metadata": {"name": name}, "value": value})
            for workload, priority_class in (("batch", low), ("urgent", high)):  # the low one first: older
                deployment = manifests.deployment(workload, namespace=ns)
                template = deployment["spec"]["template"]
                template.setdefault("metadata", {})["annotations"] = {"scheduling.volcano.sh/queue-name": queue}
                template["spec"]["priorityClassName"] = priority_class
                await client.create(DEPLOYMENTS, deployment, namespace=ns)
            await stack.wait_idle()  # the PriorityClasses and Deployments are in the world
            for workload in ("batch", "urgent"):
                rb = manifests.resource_binding(workload, namespace=ns, cpu="1", suspended=True)
                # Divided: the whole request is one cpu (Duplicated would be one per ready cluster)
                rb["spec"]["placement"]["replicaScheduling"] = {"replicaSchedulingType": "Divided"}
                created = await stack.apply(rb)
                # creationTimestamp has one-second resolution: let the low one be strictly older, so that only the
                # PriorityClass can put the urgent one first (a tie would fall to the UIDs, at random)
                await stack.eventually(partial(_past, created["metadata"]["creationTimestamp"]), what="the next second")

            async def both_wait_for_the_queue() -> bool:
                holds = [hold(await stack.get("ResourceBinding", f"{w}-deployment")) for w in ("batch", "urgent")]
                return all(f"queue {queue} not found" in h for h in holds)

            await stack.eventually(both_wait_for_the_queue, what="both held: their queue does not exist yet")
            await client.create(QUEUES, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                         "metadata": {"name": queue},
                                         "spec": {"weight": 1, "capability": {"cpu": "1"}}})

            async def one_resumed() -> list[dict[str, Any]] | None:
                items, _ = await client.list(BINDINGS, namespace=ns)
                mine = [b for b in items if b["metadata"]["name"] in ("batch-deployment", "urgent-deployment")]
                return mine if sum(not suspended(b) for b in mine) == 1 else None

            bindings = {b["metadata"]["name"]: b for b in await stack.eventually(one_resumed, what="one resumed")}
            assert not suspended(bindings["urgent-deployment"])  # the higher PriorityClass went first
            assert suspended(bindings["batch-deployment"])
            await stack.eventually(lambda: _held_by_capacity(stack, queue), what="the other held by capacity")
        finally:
            for resource, name in ((QUEUES, queue), (PRIORITY_CLASSES, low), (PRIORITY_CLASSES, high)):
                with contextlib.suppress(KubeError):
                    await delete_cluster_scoped(client, resource, name)


async def _held_by_capacity(stack: Any, queue: str) -> bool:
    return hold(await stack.get("ResourceBinding", "batch-deployment")) == f"queue {queue}: cpu 2/1"


async def _past(stamp: str) -> bool:
    """Whether the wall clock's second is past ``stamp`` (an RFC 3339 creationTimestamp)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ") > stamp
