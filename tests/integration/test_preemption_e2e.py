"""Admission that holds its promises after admission, end to end: tether's binding webhook on the API server's
admission chain, Karmada scheduling (the emulator's stand-in, or with ``TETHER_TEST_KUBECONFIG`` the real
karmada-scheduler of the shared control plane), the daemon deciding.

* preemption within a queue: a 1-CPU queue full with two 400m low-priority bindings, scheduled; a 600m
  high-priority one arrives: exactly one low binding — the most recently admitted — loses its clusters and is held
  with the reason (an Event, a metric), the high one is admitted and scheduled, and the evicted one is admitted
  again when room frees, never before;
* reclaim: queue A borrowed queue B's idle share; B's own binding arrives, and A's borrowed binding is evicted, not
  the one within A's deserved share;
* growth: a scaled-up binding over its queue has Karmada's dispatching suspended, with the reason, until room frees;
  a scale-down frees room for a held binding at the next cycle (waited for within a generous bound);
* a binding of three pod templates is charged their sum, in ``tether status`` and on the Queue;
* an unknown policy value is refused with a reason (``tether_admission_config_valid``, ``tether status``) and the
  queue keeps its last valid policy;
* with the default policy (Never) nothing is evicted.

Work withdrawal after an eviction is Karmada's binding controller's doing (karmada-controller-manager), which the
shared control plane does not run — no Work exists there: these tests assert what tether and karmada-scheduler do,
a binding that lost its clusters and stays unscheduled while held. Each test owns its namespace, its Queues (unique
names) and its Clusters, and asserts only about them.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Any

import pytest

from tether.adapters.cli.replay.diff import diff
from tether.adapters.daemon.status import daemon_status
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import BINDINGS, CONFIGMAPS, DEPLOYMENTS, QUEUES, KubeError
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, delete_cluster_scoped
from tether.core.keys import (
    ADMISSION_ANNOTATION,
    ADMITTED_REQUEST_ANNOTATION,
    EVICTED_FOR_ANNOTATION,
    OVERRUN_ANNOTATION,
)

from .test_admission_e2e import BindingWatch, admission_stack, binding

pytestmark = pytest.mark.cluster

TIERS = """\
tiers:
- plugins: [{name: priority}, {name: gang}, {name: datadependency}]
- plugins: [{name: drf}, {name: capacity}, {name: proportion}]
"""


def scheduler_conf(policies: dict[str, str], *, actions: str = "enqueue, allocate, preempt, reclaim, backfill") -> str:
    """The admission ConfigMap's ``volcano-scheduler.conf``, with ``policies`` (queue → its policy, as YAML)."""
    lines = [f'actions: "{actions}"', TIERS.rstrip()]
    if policies:
        lines += ["configurations:", "- name: preempt", "  arguments:", "    queues:"]
        lines += [f"      {queue}: {policy}" for queue, policy in policies.items()]
    return "\n".join(lines) + "\n"


class Versions(BindingWatch):
    """Every version of the namespace's bindings, in the order the server made them: (name, deleted, suspended,
    clusters)."""

    def __init__(self, stack: Stack) -> None:
        super().__init__(stack.kube, stack.namespace)
        self.all: list[tuple[str, bool, bool, tuple[str, ...]]] = []

    def seen(self, type_: str, obj: dict[str, Any]) -> None:
        spec = obj.get("spec") or {}
        self.all.append((obj["metadata"]["name"], type_ == "DELETED",
                         (spec.get("suspension") or {}).get("scheduling") is True,
                         tuple(sorted(c["name"] for c in spec.get("clusters") or []))))


@contextlib.asynccontextmanager
async def queues_of(stack: Stack, specs: dict[str, dict[str, Any]]) -> AsyncIterator[None]:
    """The test's Queues, deleted at the end."""
    try:
        for name, spec in specs.items():
            await stack.kube.create(QUEUES, {"apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue",
                                             "metadata": {"name": name}, "spec": spec})
        yield
    finally:
        for name in reversed(list(specs)):
            with contextlib.suppress(KubeError):
                await delete_cluster_scoped(stack.kube, QUEUES, name)


async def workload(stack: Stack, name: str, queue: str) -> None:
    """A Deployment of ``queue`` (no replicas: on a real cluster it stays a template; its queue is the point)."""
    deployment = manifests.deployment(name, namespace=stack.namespace, replicas=0)
    deployment["spec"]["template"]["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": queue}
    await stack.kube.create(DEPLOYMENTS, deployment, namespace=stack.namespace)


async def arrive(stack: Stack, name: str, queue: str, *, cpu: str, priority: int = 0,
                 change: Callable[[dict[str, Any]], None] | None = None) -> dict[str, Any]:
    """A Deployment of ``queue`` and its binding, created suspended by tether's webhook (queue-managed)."""
    await workload(stack, name, queue)
    raw = binding(stack, f"{name}-deployment", name, cpu=cpu)
    raw["spec"]["schedulePriority"] = {"priority": priority}
    if change is not None:
        change(raw["spec"])
    rb = await stack.apply(raw)
    assert rb["spec"]["suspension"] == {"scheduling": True}
    return rb


def annotations(rb: dict[str, Any] | None) -> dict[str, str]:
    return dict(((rb or {}).get("metadata") or {}).get("annotations") or {})


def evictions(stack: Stack, queue: str, policy: str) -> float:
    assert stack.daemon is not None
    return stack.daemon.metrics.registry.get_sample_value(
        "tether_admission_evictions_total", {"queue": queue, "policy": policy}) or 0.0


async def status(stack: Stack) -> dict[str, Any]:
    assert stack.daemon is not None
    return await daemon_status(stack.daemon, started_at=time.time())


async def queue_entry(stack: Stack, queue: str) -> dict[str, Any]:
    """The queue's entry in ``tether status`` (empty until the daemon knows the queue)."""
    return next((q for q in (await status(stack))["admission"]["queues"] if q["name"] == queue), {})


async def evicted(stack: Stack, name: str, *, within: float = 30) -> dict[str, Any]:
    """The binding once evicted: suspended, without clusters, held with tether's reason."""
    async def probe() -> dict[str, Any] | None:
        rb = await stack.get("ResourceBinding", name)
        spec = (rb or {}).get("spec") or {}
        done = (spec.get("suspension") or {}).get("scheduling") is True and not spec.get("clusters") and \
            EVICTED_FOR_ANNOTATION in annotations(rb)
        return rb if done else None

    result: dict[str, Any] = await stack.eventually(probe, within=within, what=f"{name} evicted")
    return result


async def no_differences(stack: Stack) -> None:
    assert stack.log is not None
    _, differences = await diff(stack.log)
    assert [(d.kind, d.causation, d.detail) for d in differences] == []


async def test_a_high_priority_binding_evicts_exactly_one_low_binding(karmada_kube: KubeEnv, tmp_path: Path) -> None:
    queue = f"preempt-{secrets.token_hex(3)}"
    conf = scheduler_conf({queue: "{withinQueue: LowerPriority}"})
    async with admission_stack(karmada_kube, tmp_path, managed=True, scheduler_conf=conf) as stack, \
            queues_of(stack, {queue: {"weight": 1, "capability": {"cpu": "1"}}}):
        ns = stack.namespace
        await arrive(stack, "low-1", queue, cpu="400m")
        await stack.wait_scheduled("low-1-deployment", None, within=30)
        await arrive(stack, "low-2", queue, cpu="400m")  # admitted by a later cycle: the most recently admitted
        await stack.wait_scheduled("low-2-deployment", None, within=30)
        versions = Versions(stack)
        await versions.start()
        try:
            await arrive(stack, "high", queue, cpu="600m", priority=100)
            await stack.wait_scheduled("high-deployment", None, within=30)
            low = await evicted(stack, "low-2-deployment")
            reason = annotations(low)[ADMISSION_ANNOTATION]
            assert reason.startswith(f"queue {queue}: evicted for {ns}/high-deployment (priority 100 > 0; "
                                     f"withinQueue: LowerPriority)"), reason
            assert annotations(low)[EVICTED_FOR_ANNOTATION] == f"{ns}/high-deployment"
            kept = await stack.get("ResourceBinding", "low-1-deployment")  # exactly one: the other keeps running
            assert kept is not None and kept["spec"].get("clusters") and \
                not (kept["spec"].get("suspension") or {}).get("scheduling")

            async def said() -> list[str] | None:
                messages = [e["message"] for e in await stack.events_for("low-2-deployment")
                            if e.get("reason") == "Evicted"]
                return messages or None

            assert await stack.eventually(said, what="the Evicted Event") == [reason]
            assert evictions(stack, queue, "preempt") == 1.0
            await asyncio.sleep(3)  # cycles go by: the queue is full, the evicted one keeps waiting
            await stack.wait_idle(within=60)
            held = await stack.get("ResourceBinding", "low-2-deployment")
            assert held is not None and not held["spec"].get("clusters")
            assert (held["spec"].get("suspension") or {}).get("scheduling") is True
            assert evictions(stack, queue, "preempt") == 1.0  # not evicted again, nothing else evicted

            await stack.kube.delete(BINDINGS, "high-deployment", namespace=ns)  # room frees
            readmitted = await stack.wait_scheduled("low-2-deployment", None, within=30)
            assert EVICTED_FOR_ANNOTATION not in annotations(readmitted)
            await stack.eventually(versions.caught_up, what="the watch caught up")
        finally:
            await versions.stop()
        # never readmitted before the room freed: from its eviction to the high one's deletion, low-2 was never
        # unsuspended nor placed
        seen = versions.all
        start = seen.index(next(v for v in seen if v[0] == "low-2-deployment" and v[2] and not v[3]))
        freed = seen.index(next(v for v in seen if v[0] == "high-deployment" and v[1]))
        between = [v for v in seen[start:freed] if v[0] == "low-2-deployment"]
        assert between and all(suspended and not clusters for _, _, suspended, clusters in between), between
        assert not [v for v in seen if v[0] == "low-1-deployment" and (v[2] or not v[3])]
        await stack.wait_idle(within=60)
        await no_differences(stack)


async def test_reclaim_takes_back_what_a_queue_borrowed_not_what_it_deserves(karmada_kube: KubeEnv,
                                                                             tmp_path: Path) -> None:
    suffix = secrets.token_hex(3)
    parent, a, b = f"org-{suffix}", f"qa-{suffix}", f"qb-{suffix}"
    conf = scheduler_conf({b: "{reclaim: Any}"})
    async with admission_stack(karmada_kube, tmp_path, managed=True, scheduler_conf=conf) as stack, \
            queues_of(stack, {parent: {"weight": 1, "capability": {"cpu": "1"}},
                              a: {"weight": 1, "parent": parent, "deserved": {"cpu": "400m"}},
                              b: {"weight": 1, "parent": parent, "deserved": {"cpu": "600m"}}}):
        await arrive(stack, "a-deserved", a, cpu="400m")
        await stack.wait_scheduled("a-deserved-deployment", None, within=30)
        await arrive(stack, "a-borrowed", a, cpu="400m")  # over A's share: B's idle share, lent by the backfill
        await stack.wait_scheduled("a-borrowed-deployment", None, within=30)
        await arrive(stack, "b-own", b, cpu="400m")
        await stack.wait_scheduled("b-own-deployment", None, within=30)
        taken = await evicted(stack, "a-borrowed-deployment")
        reason = annotations(taken)[ADMISSION_ANNOTATION]
        assert reason.startswith(f"queue {a}: evicted for {stack.namespace}/b-own-deployment of queue {b} "
                                 f"(reclaim: Any;"), reason
        kept = await stack.get("ResourceBinding", "a-deserved-deployment")
        assert kept is not None and kept["spec"].get("clusters")
        assert evictions(stack, a, "reclaim") == 1.0
        await stack.wait_idle(within=60)
        await no_differences(stack)


async def test_a_growth_waits_for_its_queue_and_a_shrink_frees_room(karmada_kube: KubeEnv, tmp_path: Path) -> None:
    queue = f"growth-{secrets.token_hex(3)}"
    async with admission_stack(karmada_kube, tmp_path, managed=True) as stack, \
            queues_of(stack, {queue: {"weight": 1, "capability": {"cpu": "1"}}}):
        ns = stack.namespace
        await arrive(stack, "grows", queue, cpu="400m")
        await stack.wait_scheduled("grows-deployment", None, within=30)
        await arrive(stack, "other", queue, cpu="400m")
        await stack.wait_scheduled("other-deployment", None, within=30)
        await stack.kube.patch(BINDINGS, "grows-deployment", {"spec": {"replicas": 2}}, namespace=ns)  # 800m

        async def suspended() -> dict[str, Any] | None:
            rb = await stack.get("ResourceBinding", "grows-deployment")
            spec = (rb or {}).get("spec") or {}
            return rb if (spec.get("suspension") or {}).get("dispatching") is True else None

        rb = await stack.eventually(suspended, within=30, what="its dispatching suspended")
        reason = f"queue {queue}: cpu 1200m/1 after its request grew since admission"
        assert annotations(rb)[OVERRUN_ANNOTATION] == reason
        assert not (rb["spec"].get("suspension") or {}).get("scheduling")  # it keeps running as admitted

        async def warned() -> list[str] | None:
            return [e["message"] for e in await stack.events_for("grows-deployment")
                    if e.get("reason") == "AdmissionOverrun"] or None

        assert await stack.eventually(warned, what="the AdmissionOverrun Event") == [reason]
        await stack.kube.delete(BINDINGS, "other-deployment", namespace=ns)  # room frees: the growth is admitted

        async def resumed() -> dict[str, Any] | None:
            rb = await stack.get("ResourceBinding", "grows-deployment")
            spec = (rb or {}).get("spec") or {}
            done = not (spec.get("suspension") or {}).get("dispatching") and OVERRUN_ANNOTATION not in annotations(rb)
            return rb if done else None

        rb = await stack.eventually(resumed, within=30, what="its growth admitted")
        assert annotations(rb)[ADMITTED_REQUEST_ANNOTATION] == '{"cpu":"800m"}'
        await arrive(stack, "waits", queue, cpu="400m")  # 800m + 400m: held

        async def held() -> bool:
            rb = await stack.get("ResourceBinding", "waits-deployment")
            return annotations(rb).get(ADMISSION_ANNOTATION) == f"queue {queue}: cpu 1200m/1"

        await stack.eventually(held, within=30, what="the new binding held for the queue")
        await stack.kube.patch(BINDINGS, "grows-deployment", {"spec": {"replicas": 1}}, namespace=ns)  # scaled down
        # the difference is released at once: the next cycle (a second) admits the held binding — waited for with
        # a generous bound, not timed
        await stack.wait_scheduled("waits-deployment", None, within=30)
        shrunk = await stack.get("ResourceBinding", "grows-deployment")
        assert annotations(shrunk)[ADMITTED_REQUEST_ANNOTATION] == '{"cpu":"400m"}'
        await stack.wait_idle(within=60)
        await no_differences(stack)


async def test_a_binding_of_three_pod_templates_is_charged_their_sum(karmada_kube: KubeEnv, tmp_path: Path) -> None:
    queue = f"components-{secrets.token_hex(3)}"
    components = [{"name": "driver", "replicas": 1, "replicaRequirements": {"resourceRequest": {"cpu": "1"}}},
                  {"name": "executor", "replicas": 4, "replicaRequirements": {"resourceRequest": {"cpu": "500m"}}},
                  {"name": "sidecar", "replicas": 2, "replicaRequirements": {"resourceRequest": {"cpu": "250m"}}}]
    async with admission_stack(karmada_kube, tmp_path, managed=True) as stack, \
            queues_of(stack, {queue: {"weight": 1, "capability": {"cpu": "4"}}}):
        await arrive(stack, "spark", queue, cpu="1", change=lambda spec: spec.update(components=components))
        await stack.wait_scheduled("spark-deployment", None, within=30)
        await arrive(stack, "other", queue, cpu="1")  # 3500m + 1: over the queue's 4

        async def charged() -> dict[str, Any] | None:
            entry = await queue_entry(stack, queue)
            queue_status = (await stack.kube.get(QUEUES, queue) or {}).get("status") or {}
            other = await stack.get("ResourceBinding", "other-deployment")
            done = entry.get("allocated") == {"cpu": "3500m"} and queue_status.get("allocated") == {"cpu": "3500m"} \
                and annotations(other).get(ADMISSION_ANNOTATION) == f"queue {queue}: cpu 4500m/4"
            return entry if done else None

        entry = await stack.eventually(charged, within=30, what="3500m charged, in tether status and on the Queue")
        assert entry["status_allocated"] == {"cpu": "3500m"} and entry["admitted_count"] == 1
        spark = await stack.get("ResourceBinding", "spark-deployment")
        assert annotations(spark)[ADMITTED_REQUEST_ANNOTATION] == '{"cpu":"3500m"}'


async def test_an_unknown_policy_is_refused_and_the_queue_keeps_its_last_valid_one(karmada_kube: KubeEnv,
                                                                                   tmp_path: Path) -> None:
    queue = f"policy-{secrets.token_hex(3)}"
    conf = scheduler_conf({queue: "{withinQueue: LowerPriority}"})
    async with admission_stack(karmada_kube, tmp_path, managed=True, scheduler_conf=conf) as stack, \
            queues_of(stack, {queue: {"weight": 1, "capability": {"cpu": "1"}}}):
        assert stack.daemon is not None
        ns = stack.namespace

        def valid() -> float | None:
            assert stack.daemon is not None
            return stack.daemon.metrics.registry.get_sample_value("tether_admission_config_valid")

        async def policy() -> dict[str, str] | None:
            return (await queue_entry(stack, queue)).get("policy") if valid() is not None else None

        assert await stack.eventually(policy, what="the policy in force") == {"withinQueue": "LowerPriority",
                                                                              "reclaim": "Never"}
        await stack.kube.patch(CONFIGMAPS, "tether-admission", {"data": {"volcano-scheduler.conf": scheduler_conf(
            {queue: "{withinQueue: Always}"})}}, namespace=ns)

        async def refused() -> str | None:
            await asyncio.sleep(0)
            error = (await status(stack))["admission"]["config_error"]
            return error if valid() == 0.0 and error else None

        error = await stack.eventually(refused, what="the policy refused")
        assert f"queue '{queue}': withinQueue: unknown policy 'Always' (known: Never, LowerPriority)" in error
        assert await policy() == {"withinQueue": "LowerPriority", "reclaim": "Never"}  # the last valid one
        # and it still acts: a high-priority arrival evicts
        await arrive(stack, "low-1", queue, cpu="400m")
        await stack.wait_scheduled("low-1-deployment", None, within=30)
        await arrive(stack, "low-2", queue, cpu="400m")
        await stack.wait_scheduled("low-2-deployment", None, within=30)
        await arrive(stack, "high", queue, cpu="600m", priority=100)
        await stack.wait_scheduled("high-deployment", None, within=30)
        await evicted(stack, "low-2-deployment")


async def test_nothing_is_evicted_with_the_default_policy(karmada_kube: KubeEnv, tmp_path: Path) -> None:
    queue = f"never-{secrets.token_hex(3)}"
    async with admission_stack(karmada_kube, tmp_path, managed=True) as stack, \
            queues_of(stack, {queue: {"weight": 1, "capability": {"cpu": "1"}}}):
        await arrive(stack, "low-1", queue, cpu="400m")
        await stack.wait_scheduled("low-1-deployment", None, within=30)
        await arrive(stack, "low-2", queue, cpu="400m")
        await stack.wait_scheduled("low-2-deployment", None, within=30)
        await arrive(stack, "high", queue, cpu="600m", priority=100)

        async def held() -> bool:
            rb = await stack.get("ResourceBinding", "high-deployment")
            return annotations(rb).get(ADMISSION_ANNOTATION) == f"queue {queue}: cpu 1400m/1"

        await stack.eventually(held, within=30, what="the high-priority binding held for the queue")
        await asyncio.sleep(3)  # cycles go by
        await stack.wait_idle(within=60)
        for name in ("low-1-deployment", "low-2-deployment"):
            rb = await stack.get("ResourceBinding", name)
            assert rb is not None and rb["spec"].get("clusters") and EVICTED_FOR_ANNOTATION not in annotations(rb)
        high = await stack.get("ResourceBinding", "high-deployment")
        assert high is not None and (high["spec"].get("suspension") or {}).get("scheduling") is True
        assert evictions(stack, queue, "preempt") == 0.0
        decided = await stack.commands_for(f"ResourceBinding/{stack.namespace}/low-2-deployment")
        assert not [c for c in decided if type(c.command).__name__ == "EvictBinding"]
