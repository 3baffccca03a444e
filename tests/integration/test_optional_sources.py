"""Optional sources: a resource whose CRD is not installed must not stall tether.

With ``--admission`` the daemon watches Volcano Queues (and, with ``--admission-volcano-jobs``, Volcano Jobs). On a
control plane without those CRDs their lists used to fail for ever, ``World.lists_pending`` never emptied, and
tether decided nothing — data dependency included. Now such a source lists as empty with one warning, asks again
periodically, and picks the resource up once its CRD is installed.

Emulator only: each test gets a fresh emulator without Volcano's CRDs; a shared real cluster may have them
installed (the suite never deletes a CRD), which would make the absence these tests need impossible.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import structlog

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import QUEUES, VOLCANO_JOBS, KubeClient
from tether.adapters.kubernetes.watch import WatchSource
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.daemon import eventually, tether_stack
from tether.core.envelope import EventRecord
from tether.core.events import ListsStarted, ObjectObserved, ObjectsListed

NOT_SERVED = "resource not served (its CRD is not installed?): listed as empty, asking again periodically"


async def test_an_absent_queue_crd_lists_as_empty_once_and_is_picked_up_when_installed(kube: KubeEnv,
                                                                                       tmp_path: Path) -> None:
    kube.require_emulator("needs an API server without Volcano's Queue CRD")
    log = await SqliteLog.open(f"{tmp_path}/tether.db")
    source = WatchSource(KubeClient(kube.api_client), log, QUEUES, absent_ok=True, absent_retry=0.05)
    try:
        with structlog.testing.capture_logs() as logs:
            task = asyncio.create_task(source.run())
            await asyncio.wait_for(source.synced.wait(), 5)
            await asyncio.sleep(0.3)  # several retries while absent: still one warning, one empty list
            assert source.absent
            events = [r.event async for r in _events(log)]
            assert events == [ObjectsListed(kind="Queue", keys=())]
            assert [e["event"] for e in logs if e["log_level"] == "warning"] == [NOT_SERVED]

            await kube.register_crds("scheduling.volcano.sh_queues")
            await KubeClient(kube.api_client).create(QUEUES, {
                "apiVersion": "scheduling.volcano.sh/v1beta1", "kind": "Queue", "metadata": {"name": "q1"},
                "spec": {"weight": 1}})

            async def observed() -> bool:
                return any([isinstance(r.event, ObjectObserved) and r.event.obj.metadata.name == "q1"
                            async for r in _events(log)])

            await eventually(observed, "the Queue listed once its CRD is installed")
            assert not source.absent
            later = [r.event async for r in _events(log)]
            # the relist announces itself like any relist, then lists what is there
            assert isinstance(later[1], ListsStarted) and later[1].sources == (source.list_source,)
            assert [e["event"] for e in logs if e["log_level"] == "warning"] == [NOT_SERVED]
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
    finally:
        await log.close()


async def _events(log: SqliteLog) -> AsyncIterator[EventRecord]:
    async for batch in log.read("events"):
        for record in batch:
            assert isinstance(record, EventRecord)
            yield record


async def test_admission_without_volcano_crds_still_places_data_dependent_bindings(kube: KubeEnv) -> None:
    kube.require_emulator("needs an API server without Volcano's CRDs")
    options = {"admission": True, "admission_volcano_jobs": True, "admission_configmap": f"{kube.namespace}/none",
               "absent_retry": 0.2}
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
