"""Optional APIs: every API that is not built into kube-apiserver may be absent, installed later, or deleted while
tether runs — Volcano's Queues and Jobs on the control plane, Godel's PodGroups and each of Fluid's operations on a
member. Absent, it lists as empty (one warning, ``tether_watch_resource_absent`` 1) so that nothing waits for it;
installed, it is listed and watched; deleted, its objects are forgotten.

**On a real, shared cluster** the real CRDs of those APIs may be installed (the suite installs them and never
deletes them), so their absence cannot be staged there. Each test therefore serves the API from a group of its own
(``<name>-<random>.tether.test``, ``DaemonConfig.api_groups`` → ``client.served_from``): tether watches the kind
there exactly as it would watch the real one, and its objects enter the world under the real apiVersion. The test
creates that CRD and deletes it — its own, under a group nobody else uses. The same runs on the emulator, so both
answer the same way (a not-served API is the plain-text ``404 page not found``, ``tests/emulator/test_not_served``).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import tempfile
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any

import pytest
import structlog
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException

from tether.adapters.daemon.status import daemon_status
from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import QUEUES, VOLCANO_JOBS, KubeClient, KubeError, Resource, served_from
from tether.adapters.kubernetes.members import FLUID, POD_GROUPS
from tether.adapters.kubernetes.watch import WatchSource
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.kube_emulator.testing import KUBECONFIG_ENV, KubeEnv
from tether.adapters.testing.tether_stack import Stack, eventually, tether_stack
from tether.core.envelope import EventRecord
from tether.core.events import ListsStarted, ObjectDeleted, ObjectObserved, ObjectsListed

pytestmark = pytest.mark.cluster

NOT_SERVED = "resource not served (its CRD is not installed?): listed as empty, asking again periodically"
#: Every optional API tether watches: where, and what.
OPTIONAL_APIS = {
    "Volcano Queue": ("control plane", QUEUES),
    "Volcano Job": ("control plane", VOLCANO_JOBS),
    "Godel PodGroup": ("member", POD_GROUPS),
    **{f"Fluid {res.kind}": ("member", res) for res in FLUID},
}


def own_group(res: Resource) -> str:
    """A group that serves ``res`` for this test only."""
    return f"{res.group.split('.')[0]}-{secrets.token_hex(4)}.tether.test"


def crd_for(res: Resource) -> dict[str, Any]:
    """A CRD serving ``res`` where it is served (its ``served_group``); any content is kept."""
    group = res.served_group or res.group
    return {"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
            "metadata": {"name": f"{res.plural}.{group}"},
            "spec": {"group": group, "scope": "Namespaced" if res.namespaced else "Cluster",
                     "names": {"plural": res.plural, "singular": res.kind.lower(), "kind": res.kind,
                               "listKind": f"{res.kind}List"},
                     "versions": [{"name": res.version, "served": True, "storage": True,
                                   "subresources": {"status": {}},
                                   "schema": {"openAPIV3Schema": {"type": "object",
                                                                  "x-kubernetes-preserve-unknown-fields": True}}}]}}


async def _served(kube: KubeClient, res: Resource) -> bool:
    try:
        await kube.list(res)
    except KubeError as exc:
        if exc.status == 404:
            return False
        raise
    return True


@contextlib.asynccontextmanager
async def own_crd(env: KubeEnv, res: Resource) -> AsyncIterator[Callable[[], Awaitable[None]]]:
    """Install the test's own CRD for ``res`` (its unique ``served_group``) and wait until it is served; yields a
    function that deletes it and waits until it is not. Deleted on the way out in any case."""
    assert res.served_group.endswith(".tether.test"), "only a CRD of the test's own group may be deleted"
    ext, kube, body = k8s.ApiextensionsV1Api(env.api_client), KubeClient(env.api_client), crd_for(res)
    name = body["metadata"]["name"]
    await ext.create_custom_resource_definition(body)

    async def delete() -> None:
        with contextlib.suppress(ApiException):  # already gone
            await ext.delete_custom_resource_definition(name)
        await eventually(lambda: _not(_served(kube, res)), f"{name} no longer served", within=60)

    try:
        await eventually(lambda: _served(kube, res), f"{name} served", within=30)
        yield delete
    finally:
        with contextlib.suppress(ApiException):
            await ext.delete_custom_resource_definition(name)


async def _not(probe: Awaitable[bool]) -> bool:
    return not await probe


async def _events(log: SqliteLog) -> list[Any]:
    out = []
    async for batch in log.read("events"):
        for record in batch:
            assert isinstance(record, EventRecord)
            out.append(record.event)
    return out


def _object(res: Resource, name: str, namespace: str) -> dict[str, Any]:
    meta: dict[str, Any] = {"name": name, **({"namespace": namespace} if res.namespaced else {})}
    return {"apiVersion": f"{res.served_group or res.group}/{res.version}", "kind": res.kind, "metadata": meta,
            "spec": {"weight": 1} if res.kind == "Queue" else {}}


async def test_a_watched_optional_resource_absent_installed_then_deleted(kube: KubeEnv, tmp_path: Path) -> None:
    """The watch itself: absent, it lists as empty once (one warning, however often it asks); installed, a relist
    announced with its own ListsStarted lists what is there; its CRD deleted, the log says what the projections
    need to forget its objects — their deletion and an empty list — with one more warning."""
    res = served_from(QUEUES, {QUEUES.group: own_group(QUEUES)})
    log = await SqliteLog.open(f"{tmp_path}/tether.db")
    client = KubeClient(kube.api_client)
    asked = 0
    list_ = client.list

    async def counted_list(*args: Any, **kwargs: Any) -> Any:
        nonlocal asked
        asked += 1
        return await list_(*args, **kwargs)

    client.list = counted_list  # type: ignore[method-assign]
    source = WatchSource(client, log, res, absent_ok=True, absent_retry=0.05, timeout_seconds=5)
    task = asyncio.create_task(source.run())
    try:
        with structlog.testing.capture_logs() as logs:
            await asyncio.wait_for(source.synced.wait(), 10)
            assert source.absent
            # however often it asks while absent: one empty list, one warning (asked again every 0.05 s)
            await eventually(lambda: asyncio.sleep(0, asked >= 3), "the source asking again, twice")
            assert await _events(log) == [ObjectsListed(kind="Queue", keys=())]

            async with own_crd(kube, res) as delete_crd:
                name = f"q-{secrets.token_hex(4)}"
                await client.create(res, _object(res, name, ""))

                async def observed() -> bool:
                    return any(isinstance(e, ObjectObserved) and e.obj.metadata.name == name
                               for e in await _events(log))

                await eventually(observed, "the Queue listed once its CRD is installed")
                assert not source.absent
                later = await _events(log)
                assert isinstance(later[1], ListsStarted) and later[1].sources == (source.list_source,)
                observed_obj = next(e.obj for e in later if isinstance(e, ObjectObserved))
                assert observed_obj.api_version == QUEUES.api_version  # known by its own group, wherever served

                await delete_crd()
                await eventually(lambda: asyncio.sleep(0, source.absent), "the source absent again", within=30)
                after = (await _events(log))[len(later):]
                # forgotten: deleted with its CRD (a watch event), then listed as empty
                assert after[-1] == ObjectsListed(kind="Queue", keys=())
                gone = [e for e in after if isinstance(e, ObjectDeleted)]
                assert all(e.obj.metadata.name == name for e in gone)
            assert [e["event"] for e in logs if e["log_level"] == "warning"] == [NOT_SERVED, NOT_SERVED]
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await log.close()


def _known(stack: Stack, res: Resource, name: str) -> bool:
    """Whether ``name`` of ``res``'s kind is in the daemon's world (the projection that uses it)."""
    assert stack.daemon is not None
    world, ns = stack.daemon.world, stack.namespace
    if res is QUEUES:
        return name in world.admission.queues
    if res is VOLCANO_JOBS:
        return f"{VOLCANO_JOBS.group}/Job/{ns}/{name}" in world.admission.workloads
    member = world.members.clusters.get("m1")
    if member is None:
        return False
    table = member.groups if res.kind == POD_GROUPS.kind else member.operations
    return f"{res.kind}/{ns}/{name}" in table


def _absent_metric(stack: Stack, source: WatchSource) -> float | None:
    assert stack.daemon is not None
    return stack.daemon.metrics.registry.get_sample_value("tether_watch_resource_absent", {"resource": source.name})


@pytest.mark.parametrize("api", sorted(OPTIONAL_APIS))
async def test_an_optional_api_absent_installed_later_and_deleted(kube: KubeEnv, api: str) -> None:
    where, canonical = OPTIONAL_APIS[api]
    group = own_group(canonical)
    res = served_from(canonical, {canonical.group: group})
    options: dict[str, Any] = {"api_groups": {canonical.group: group}, "absent_retry": 0.2}
    if where == "control plane":
        options |= {"admission": True, "admission_volcano_jobs": True,
                    "admission_configmap": f"{kube.namespace}/none"}
    async with contextlib.AsyncExitStack() as exits:
        if where == "member":  # the cluster is its own member (a real one: read only but for the test's namespace)
            config = os.environ.get(KUBECONFIG_ENV) or str(kube.require_emulator().kubeconfig_path(
                exits.enter_context(tempfile.TemporaryDirectory(prefix="tether-member-"))))
            options["members"] = {"m1": config}
        stack = await exits.enter_async_context(tether_stack(kube, daemon_options=options))
        daemon = stack.daemon
        assert daemon is not None

        async def source() -> WatchSource | None:
            sources = daemon.sources if where == "control plane" else [
                s for m in (daemon.members.members.values() if daemon.members else ()) for s in m.sources]
            return next((s for s in sources if s.resource == res and s.synced.is_set()), None)

        watched: WatchSource = await eventually(source, f"the {api} source listed")
        # absent: listed as empty, so that nothing waits for it; said by the metric
        assert watched.absent
        assert not daemon.world.lists_pending
        if where == "member":
            async def member_listed() -> bool:
                state = daemon.world.members.clusters.get("m1")
                return state is not None and not state.lists_pending

            await eventually(member_listed, "the member's lists ended")
        await eventually(lambda: asyncio.sleep(0, _absent_metric(stack, watched) == 1),
                         "tether_watch_resource_absent 1")
        status = await daemon_status(daemon, started_at=0.0)
        if where == "member":  # tether status names what a member does not serve
            [row] = [m for m in status["members"] if m["name"] == "m1"]
            assert res.plural in row["absent"]
        else:
            assert any(w["resource"] == watched.name and w["absent"] for w in status["watches"])

        async with own_crd(kube, res) as delete_crd:
            name = f"{res.kind.lower()}-{secrets.token_hex(3)}"
            await stack.kube.create(res, _object(res, name, stack.namespace), namespace=stack.namespace)
            await eventually(lambda: asyncio.sleep(0, _known(stack, canonical, name)),
                             f"the {api} known once its CRD is installed", within=30)
            assert not watched.absent
            await eventually(lambda: asyncio.sleep(0, _absent_metric(stack, watched) == 0),
                             "tether_watch_resource_absent 0")

            await delete_crd()
            await eventually(lambda: asyncio.sleep(0, not _known(stack, canonical, name) and watched.absent),
                             f"the {api} forgotten with its CRD", within=30)
            await eventually(lambda: asyncio.sleep(0, _absent_metric(stack, watched) == 1),
                             "tether_watch_resource_absent 1 again")


async def test_admission_without_volcano_apis_becomes_ready_and_decides(kube: KubeEnv) -> None:
    """``tether run --admission --admission-volcano-jobs`` on a control plane that serves neither Volcano's Queues
    nor its Jobs (served from groups no server has): ready once every other list ended, and it decides — a
    data-dependent binding is placed."""
    groups = {QUEUES.group: own_group(QUEUES), VOLCANO_JOBS.group: own_group(VOLCANO_JOBS)}
    options = {"admission": True, "admission_volcano_jobs": True, "admission_configmap": f"{kube.namespace}/none",
               "absent_retry": 0.2, "api_groups": groups}
    async with tether_stack(kube, daemon_options=options) as stack:  # ready: every list ended
        assert stack.daemon is not None
        absent = {s.resource.plural for s in stack.daemon.sources if s.absent}
        assert absent == {QUEUES.plural, VOLCANO_JOBS.plural}
        assert not stack.daemon.world.lists_pending
        table = stack.add_table("orders", "east")
        await stack.apply(manifests.claim("orders", namespace=stack.namespace, table=table, workload="etl"))
        await stack.apply(manifests.resource_binding("etl", namespace=stack.namespace))
        await stack.wait_claim("orders", phase="Bound")
        await stack.wait_excluded("etl-deployment", [stack.clusters["west1"]])

