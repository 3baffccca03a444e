"""A WatchSource across a watch gap: 410 Gone resets its resourceVersion and relists.

The emulator keeps a short history here (3 events), so a watch that was away while more changed cannot resume: its
resourceVersion is too old, the server answers 410 Expired, and the source must forget that version and list again
— announcing the relist (``ListsStarted``) and ending it with an ``ObjectsListed`` that no longer names what was
deleted in the gap. A source that kept its version would ask to resume from it for ever (410 after 410) and never
learn of the deletion.

The gap is made without timing: the watch requests fail (500) from the moment the open stream is dropped until the
test has written what the watch must miss. Emulator only (it shortens the history and injects the failures).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from tether.adapters.kubernetes.client import CONFIGMAPS, KubeClient
from tether.adapters.kubernetes.watch import WatchSource
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import eventually
from tether.core.events import Event, ListsStarted, ObjectDeleted, ObjectObserved, ObjectsListed


async def _events(log: SqliteLog) -> list[Event]:
    return [record.event async for batch in log.read("events") for record in batch]  # type: ignore[union-attr]


def _configmap(name: str) -> dict[str, object]:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": name}}


async def test_a_watch_gap_beyond_the_history_is_relisted(kube: KubeEnv, tmp_path: Path) -> None:
    emulator = kube.require_emulator("a watch history shortened to a few events and watch requests failed on demand "
                                     "(the emulator's hub and fault rules); a real API server keeps its history until "
                                     "etcd compacts it")
    hub = emulator.store.hub
    kubeclient = KubeClient(kube.api_client)
    ns = kube.namespace
    await kubeclient.create(CONFIGMAPS, _configmap("doomed"), namespace=ns)
    log = await SqliteLog.open(f"{tmp_path}/tether.db")
    source = WatchSource(kubeclient, log, CONFIGMAPS, namespace=ns)
    task = asyncio.create_task(source.run())
    try:
        await asyncio.wait_for(source.synced.wait(), 10)
        await eventually(lambda: asyncio.sleep(0, sum(len(w) for w in hub.watchers.values()) >= 1), "watching")
        seen = source.resource_version
        hub.history = type(hub.history)(maxlen=3)

        broken = emulator.faults.fail(code=500, verb="watch", resource="configmaps", times=None)
        emulator.faults.drop_watches()  # the stream ends; every reconnect fails until the test is done writing
        await eventually(lambda: asyncio.sleep(0, broken.fired >= 1), "a failed reconnect")
        await kubeclient.delete(CONFIGMAPS, "doomed", namespace=ns)  # missed by the watch: only a relist tells
        for i in range(5):  # more than the history holds: the version the source has is gone from it
            await kubeclient.create(CONFIGMAPS, _configmap(f"later-{i}"), namespace=ns)
        emulator.faults.clear()

        await eventually(lambda: asyncio.sleep(0, source.relists == 2), "the relist after 410 Gone")
        assert source.resource_version != seen
        events = await _events(log)
        relist = max(i for i, e in enumerate(events) if isinstance(e, ListsStarted))
        assert events[relist] == ListsStarted(sources=(source.list_source,))
        listed = [e for e in events[relist:] if isinstance(e, ObjectsListed)]
        assert len(listed) == 1
        mine = {key.rsplit("/", 1)[1] for key in listed[0].keys}
        assert "doomed" not in mine and {f"later-{i}" for i in range(5)} <= mine
        assert not any(isinstance(e, ObjectDeleted) for e in events)  # nothing saw the deletion but the relist

        # and the source watches again from the relist's version: a change after it arrives as a watch event
        await kubeclient.create(CONFIGMAPS, _configmap("after"), namespace=ns)

        async def watched() -> bool:
            return any(getattr(e, "obj", None) is not None and e.obj.metadata.name == "after"  # type: ignore[union-attr]
                       for e in await _events(log))

        await eventually(watched, "a change after the relist")
        assert source.relists == 2
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await log.close()


async def test_a_list_longer_than_a_batch_is_logged_once_and_the_watch_keeps_its_place(kube: KubeEnv,
                                                                                      tmp_path: Path) -> None:
    kubeclient = KubeClient(kube.api_client)
    for i in range(5):
        await kubeclient.create(CONFIGMAPS, _configmap(f"listed-{i}"), namespace=kube.namespace)
    log = await SqliteLog.open(f"{tmp_path}/tether.db")
    seen: list[tuple[str, bool]] = []  # what the source tells its observer (CompetingWrites): name, deleted
    source = WatchSource(kubeclient, log, CONFIGMAPS, namespace=kube.namespace, batch_size=2,
                         on_object=lambda obj, deleted: seen.append((obj.metadata.name, deleted)))
    task = asyncio.create_task(source.run())
    try:
        await asyncio.wait_for(source.synced.wait(), 10)
        observed = [e.obj.metadata.name for e in await _events(log) if isinstance(e, ObjectObserved)]
        assert sorted(observed) == [f"listed-{i}" for i in range(5)]  # three batches, each object once
        listed_at = source.resource_version
        await kubeclient.create(CONFIGMAPS, _configmap("watched"), namespace=kube.namespace)
        await kubeclient.delete(CONFIGMAPS, "listed-0", namespace=kube.namespace)

        async def watched() -> bool:
            return any(isinstance(e, ObjectDeleted) and e.obj.metadata.name == "listed-0" for e in await _events(log))

        await eventually(watched, "the watch events")
        assert ("watched", False) in seen and ("listed-0", True) in seen and ("listed-0", False) in seen
        # a reconnect resumes after what was seen, not from the list
        await eventually(lambda: asyncio.sleep(0, source.resource_version != listed_at), "the watch's own version")
    finally:
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
        await log.close()


async def test_a_list_of_more_than_a_page_is_read_to_its_end(kube: KubeEnv) -> None:
    """The client asks for 500 objects a page and follows ``continue``: a relist of a big cluster misses nothing
    (a missed object would be taken for deleted by the ObjectsListed that ends the relist)."""
    kubeclient = KubeClient(kube.api_client)
    names = [f"page-{i:03}" for i in range(501)]
    for start in range(0, len(names), 50):
        await asyncio.gather(*(kubeclient.create(CONFIGMAPS, _configmap(name), namespace=kube.namespace)
                               for name in names[start:start + 50]))
    items, version = await kubeclient.list(CONFIGMAPS, namespace=kube.namespace)
    assert sorted(item["metadata"]["name"] for item in items) == names and version
