"""Data readiness as admission checks end to end (issue 36): a queue-managed binding whose queue names
``data-bound`` and ``data-loaded`` is held while the DataLoad of its claim's Fluid Dataset runs in a member cluster,
and admitted onto that DataLoad's cluster once it completes; a failed DataLoad gives the check Retry, then Rejected
after its limit, with the reason on the binding.

The member is an emulated one, or with ``TETHER_TEST_KUBECONFIG`` the real cluster itself (``adapters/testing/
member.py``), with Fluid's real CRDs (``../shared/reference/fluid`` when present: the DataLoads' status carries what
they require). Karmada is the emulator's stand-in or the real karmada-scheduler. The test owns its Clusters (the
member's name is one of them), its Queue, its namespaces and the admission ConfigMap; the claim names its Dataset
by annotation, which works under either CRD (Volcano Global's prunes ``spec.dataset``).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import tempfile
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from tether.adapters.cli.replay.diff import diff
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import CLUSTERS, CONFIGMAPS, DEPLOYMENTS, QUEUES, KubeClient
from tether.adapters.kubernetes.members import FLUID
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.member import FLUID_CRDS, TestMember, member
from tether.adapters.testing.reference import reference_path
from tether.adapters.testing.tether_stack import Stack, delete_cluster_scoped, tether_stack
from tether.core.keys import ADMISSION_ANNOTATION, ADMISSION_CHECKS_ANNOTATION, DATASET_ANNOTATION

pytestmark = pytest.mark.cluster
LOADS = FLUID[0]


def _fluid_crds() -> tuple[str | Path, ...]:
    fluid = reference_path("fluid")
    return tuple(sorted(fluid.glob("data.fluid.io_*.yaml"))) if fluid is not None else FLUID_CRDS


@contextlib.asynccontextmanager
async def checks_stack(env: KubeEnv, tmp: str, checks: str) -> AsyncIterator[tuple[Stack, TestMember, str, str]]:
    """A stack with admission on and the admission ConfigMap naming ``checks`` for a Queue of the test's own; two
    Clusters of its own holding the data, the first also a member (its DataLoads are watched). Yields the stack,
    the member, the queue's name and the table."""
    kube = KubeClient(env.api_client)
    run = secrets.token_hex(3)
    loaded, other, queue = f"dl-{run}", f"dl-other-{run}", f"checks-{run}"
    await env.register_crds("cluster.karmada.io_clusters", "scheduling.volcano.sh_queues")
    try:
        for name in (loaded, other):
            raw = manifests.cluster(name)
            status = raw.pop("status")
            await kube.create(CLUSTERS, raw)
            await kube.patch(CLUSTERS, name, {"status": status}, subresource="status")
        await kube.create(QUEUES, {"apiVersion": QUEUES.api_version, "kind": "Queue", "metadata": {"name": queue},
                                   "spec": {"weight": 1}})
        await kube.create(CONFIGMAPS, {"apiVersion": "v1", "kind": "ConfigMap",
                                       "metadata": {"name": "tether-admission", "namespace": env.namespace},
                                       "data": {"queue-managed": f"kinds: [apps/Deployment]\nnamespaces: "
                                                                 f"[{env.namespace}]\n",
                                                "admission-checks": checks.replace("QUEUE", queue)}},
                          namespace=env.namespace)
        async with member(env, loaded, tmp, racks=1, per_rack=1, crds=_fluid_crds()) as m:
            options = {**m.daemon_options(), "admission": True,
                       "admission_configmap": f"{env.namespace}/tether-admission"}
            plugin = {"locationMapping": {f"s3://wh-{run}/": [loaded, other]}}
            async with tether_stack(env, daemon_options=options, plugin_options=plugin) as stack:
                table = f"chk{run}.db.orders"
                stack.catalog.add_table(table, f"s3://wh-{run}/orders")
                yield stack, m, queue, table
    finally:
        for res, name in ((QUEUES, queue), (CLUSTERS, loaded), (CLUSTERS, other)):
            with contextlib.suppress(Exception):
                await delete_cluster_scoped(kube, res, name)


async def workload(stack: Stack, m: TestMember, queue: str, table: str, name: str = "train") -> str:
    """A claim naming Dataset ``ds`` of the member's namespace, a Deployment of the queue (no replicas: nothing to
    run on a control plane), and its binding as the binding webhook leaves a queue-managed one: suspended."""
    claim = manifests.claim(name, namespace=stack.namespace, table=table)
    claim["metadata"]["annotations"] = {DATASET_ANNOTATION: f"{m.namespace}/ds"}
    await stack.apply(claim)
    deployment = manifests.deployment(name, namespace=stack.namespace, replicas=0)
    deployment["spec"]["template"]["metadata"]["annotations"] = {"scheduling.volcano.sh/queue-name": queue}
    await stack.kube.create(DEPLOYMENTS, deployment, namespace=stack.namespace)
    rb = manifests.resource_binding(name, namespace=stack.namespace, suspended=True)
    rb["metadata"]["annotations"] = {ADMISSION_ANNOTATION: "queue-managed: waiting for admission"}
    return str((await stack.apply(rb))["metadata"]["name"])


async def dataload(m: TestMember, name: str) -> None:
    await m.kube.create(LOADS, {"apiVersion": LOADS.api_version, "kind": "DataLoad",
                                "metadata": {"name": name, "namespace": m.namespace},
                                "spec": {"dataset": {"name": "ds", "namespace": m.namespace}}}, namespace=m.namespace)


async def phase(m: TestMember, name: str, value: str) -> None:
    """What Fluid's controller writes: the phase, its duration and its conditions (its CRD requires all three)."""
    await m.kube.patch(LOADS, name, {"status": {"phase": value, "duration": "Unfinished" if value == "Executing"
                                                else "3s", "conditions": []}}, namespace=m.namespace,
                       subresource="status")


async def no_differences(stack: Stack) -> None:
    """``tether replay --diff`` of the daemon's log re-derives every decision (the checks' states and timers too)."""
    await stack.wait_idle()
    assert stack.log is not None
    _, differences = await diff(stack.log)
    assert [(d.kind, d.causation, d.detail) for d in differences] == []


def checks_of(rb: dict[str, Any] | None) -> dict[str, Any]:
    raw = ((rb or {}).get("metadata") or {}).get("annotations", {}).get(ADMISSION_CHECKS_ANNOTATION)
    return json.loads(raw) if raw else {}


async def check_is(stack: Stack, binding: str, check: str, state: str, *, within: float = 30) -> dict[str, Any]:
    async def probe() -> dict[str, Any] | None:
        rb = await stack.get("ResourceBinding", binding)
        return rb if checks_of(rb).get(check, {}).get("state") == state else None

    result: dict[str, Any] = await stack.eventually(probe, within=within, what=f"{binding}: {check} {state}")
    return result


async def test_a_binding_is_held_while_its_dataload_runs_and_admitted_onto_its_cluster_once_complete(
        karmada_kube: KubeEnv) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        async with checks_stack(karmada_kube, tmp, "queues: {QUEUE: [data-bound, data-loaded]}\n") as (
                stack, m, queue, table):
            binding = await workload(stack, m, queue, table)
            await dataload(m, "load")
            await phase(m, "load", "Executing")
            rb = await check_is(stack, binding, "data-bound", "Ready")  # the claim is Bound (its DataSource made)

            async def loading() -> dict[str, Any] | None:
                now = await stack.get("ResourceBinding", binding)
                return now if "is Executing" in checks_of(now).get("data-loaded", {}).get("reason", "") else None

            rb = await stack.eventually(loading, within=30, what="data-loaded Pending: the DataLoad is Executing")
            assert checks_of(rb)["data-loaded"]["state"] == "Pending"

            async def held_by_the_check() -> dict[str, Any] | None:  # (the next cycle says it on the binding)
                now = await stack.get("ResourceBinding", binding)
                text = ((now or {}).get("metadata") or {}).get("annotations", {}).get(ADMISSION_ANNOTATION, "")
                return now if text.startswith("admission checks: data-loaded Pending") else None

            held = await stack.eventually(held_by_the_check, within=30, what="the hold annotation")
            assert held["spec"]["suspension"] == {"scheduling": True}

            await phase(m, "load", "Complete")
            completed = time.monotonic()

            async def admitted() -> dict[str, Any] | None:
                now = await stack.get("ResourceBinding", binding)
                return now if now is not None and not (now["spec"].get("suspension") or {}).get("scheduling") \
                    else None

            # a generous bound, not a benchmark: the checks pass on the DataLoad's event, the placement is written,
            # and a cycle runs at once (docs/admission-checks.md)
            rb = await stack.eventually(admitted, within=1.0, what=f"{binding} admitted within 1 s")
            assert time.monotonic() - completed <= 1.0
            assert checks_of(rb)["data-loaded"]["clusters"] == [m.name]
            scheduled = await stack.wait_scheduled(binding, [m.name], within=30)  # that DataLoad's cluster only
            assert m.name not in scheduled["spec"]["placement"]["clusterAffinity"].get("exclude", [])

            async def said() -> list[dict] | None:  # (an Event is bookkeeping: written after the placement)
                events = await stack.events_for(binding)
                return events if any(e.get("reason") == "Admitted" and "admission checks passed"
                                     in e.get("message", "") for e in events) else None

            await stack.eventually(said, what="the Admitted Event naming the checks")
            await no_differences(stack)


async def test_a_failed_dataload_gives_retry_then_rejected_after_its_limit(karmada_kube: KubeEnv) -> None:
    checks = "queues:\n  QUEUE:\n  - name: data-loaded\n    retryLimit: 1\n    backoff: 1s\n"
    with tempfile.TemporaryDirectory() as tmp:
        async with checks_stack(karmada_kube, tmp, checks) as (stack, m, queue, table):
            binding = await workload(stack, m, queue, table)
            await dataload(m, "load")
            await phase(m, "load", "Failed")
            rb = await check_is(stack, binding, "data-loaded", "Retry")
            assert checks_of(rb)["data-loaded"]["attempt"] == 1
            assert f"failed: {m.namespace}/load in {m.name}" in checks_of(rb)["data-loaded"]["reason"]
            rb = await check_is(stack, binding, "data-loaded", "Rejected")
            state = checks_of(rb)["data-loaded"]
            assert state["attempt"] == 2 and "(after 2 attempts)" in state["reason"]
            assert rb["spec"]["suspension"] == {"scheduling": True}

            async def held_rejected() -> bool:
                now = await stack.get("ResourceBinding", binding)
                text = ((now or {}).get("metadata") or {}).get("annotations", {}).get(ADMISSION_ANNOTATION, "")
                return text.startswith("admission checks: data-loaded Rejected")

            await stack.eventually(held_rejected, within=30, what="the hold annotation saying Rejected")

            async def rejected_event() -> list[dict[str, Any]] | None:
                found = [e for e in await stack.events_for(binding) if e.get("reason") == "AdmissionCheckRejected"]
                return found or None

            [event] = await stack.eventually(rejected_event, within=30, what="the AdmissionCheckRejected Event")
            assert event["type"] == "Warning" and "failed" in event["message"]
            assert stack.daemon is not None
            registry = stack.daemon.metrics.registry

            async def counted() -> bool:  # (the reporter sets the gauge once a second)
                await asyncio.sleep(0)
                return registry.get_sample_value("tether_admission_checks", {"check": "data-loaded",
                                                                             "state": "Rejected"}) == 1.0

            await stack.eventually(counted, within=10, what="tether_admission_checks{data-loaded,Rejected} 1")
            await no_differences(stack)


@pytest.mark.parametrize("bad", ["queues: {QUEUE: [data-warm]}\n",
                                 "queues: {QUEUE: [{name: data-loaded, retryLimit: many}]}\n"],
                         ids=["unknown-check", "malformed-check"])
async def test_a_bad_check_is_refused_with_a_reason_and_nothing_admitted_changes(karmada_kube: KubeEnv,
                                                                                 bad: str) -> None:
    from tether.adapters.daemon.status import daemon_status

    with tempfile.TemporaryDirectory() as tmp:
        async with checks_stack(karmada_kube, tmp, "queues: {QUEUE: [data-loaded]}\n") as (stack, m, queue, table):
            binding = await workload(stack, m, queue, table)
            await dataload(m, "load")
            await phase(m, "load", "Complete")
            admitted = await stack.wait_scheduled(binding, [m.name], within=30)
            assert stack.daemon is not None
            daemon = stack.daemon
            with structlog.testing.capture_logs() as logs:
                await stack.kube.patch(CONFIGMAPS, "tether-admission",
                                       {"data": {"admission-checks": bad.replace("QUEUE", queue)}},
                                       namespace=stack.namespace)

                async def refused() -> bool:
                    await asyncio.sleep(0)
                    return daemon.metrics.registry.get_sample_value("tether_admission_config_valid") == 0.0

                await stack.eventually(refused, what="tether_admission_config_valid 0")
                await asyncio.sleep(1.2)  # (the reporter's next pass logs it)
            why = "unknown check 'data-warm'" if "warm" in bad else "retryLimit: expected a non-negative integer"
            assert why in daemon.world.admission.config_error
            assert [p.name for p in daemon.world.admission.checks_config.queues[queue]] == ["data-loaded"]
            assert any(e.get("log_level") == "warning" and why in str(e.get("error")) for e in logs), logs
            status = await daemon_status(daemon, started_at=0)
            assert why in status["admission"]["config_error"]
            await stack.wait_idle()
            now = await stack.get("ResourceBinding", binding)
            assert now is not None and now["spec"]["clusters"] == admitted["spec"]["clusters"]
            assert now["spec"]["placement"] == admitted["spec"]["placement"]
            assert checks_of(now) == checks_of(admitted)
