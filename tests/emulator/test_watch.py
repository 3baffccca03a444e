"""Conformance: watch streams (resume, initial state, selectors, bookmarks, timeouts, 410 Gone)."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

from tether.core.keys import TEST_FINALIZER

MERGE = "application/merge-patch+json"
OTHER_HOLD = TEST_FINALIZER + "-2"


async def collect(stream, n: int, *, seconds: float = 10.0) -> list[tuple[str, str]]:
    """First ``n`` (type, name) pairs from a kubernetes-asyncio watch stream."""
    out: list[tuple[str, str]] = []
    async with asyncio.timeout(seconds):
        async for ev in stream:
            obj = ev["raw_object"]
            out.append((ev["type"], obj.get("metadata", {}).get("name", "")))
            if len(out) >= n:
                break
    return out


async def collect_raw(stream, n: int, *, seconds: float = 10.0) -> list[tuple[str, dict]]:
    """First ``n`` (type, raw object) pairs, skipping the ``kube-root-ca.crt`` a real cluster publishes."""
    out: list[tuple[str, dict]] = []
    async with asyncio.timeout(seconds):
        async for ev in stream:
            if ev["raw_object"].get("metadata", {}).get("name") == "kube-root-ca.crt":
                continue
            out.append((ev["type"], ev["raw_object"]))
            if len(out) >= n:
                break
    return out


def real_names(events: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [e for e in events if e[1] != "kube-root-ca.crt"]


async def test_watch_from_resource_version_sees_only_later_events(kube):
    core, ns = kube.core, kube.namespace
    await core.create_namespaced_config_map(ns, {"metadata": {"name": "before"}})
    lst = await core.list_namespaced_config_map(ns)
    rv = lst.metadata.resource_version
    await core.create_namespaced_config_map(ns, {"metadata": {"name": "after"}})
    await core.patch_namespaced_config_map("after", ns, {"data": {"k": "v"}}, _content_type=MERGE)
    await core.delete_namespaced_config_map("after", ns)
    async with watch.Watch() as w:
        events = await collect(w.stream(core.list_namespaced_config_map, ns, resource_version=rv,
                                        timeout_seconds=10), 3)
    assert events == [("ADDED", "after"), ("MODIFIED", "after"), ("DELETED", "after")]


async def test_watch_without_resource_version_starts_with_current_state(kube):
    core, ns = kube.core, kube.namespace
    for n in ("a", "b"):
        await core.create_namespaced_config_map(ns, {"metadata": {"name": n, "labels": {"t": "1"}}})
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_config_map, ns, label_selector="t=1", timeout_seconds=10)
        first = await collect(stream, 2)
        assert sorted(first) == [("ADDED", "a"), ("ADDED", "b")]
        await core.create_namespaced_config_map(ns, {"metadata": {"name": "c", "labels": {"t": "1"}}})
        assert await collect(stream, 1) == [("ADDED", "c")]


async def test_watch_filters_by_namespace_and_selector_transitions(kube):
    core, ns = kube.core, kube.namespace
    other = await kube.create_namespace("tether-other")
    rv = (await core.list_namespaced_config_map(ns)).metadata.resource_version
    await core.create_namespaced_config_map(other, {"metadata": {"name": "elsewhere", "labels": {"t": "1"}}})
    await core.create_namespaced_config_map(ns, {"metadata": {"name": "x", "labels": {"t": "0"}}})
    await core.patch_namespaced_config_map("x", ns, {"metadata": {"labels": {"t": "1"}}}, _content_type=MERGE)
    await core.patch_namespaced_config_map("x", ns, {"data": {"a": "b"}}, _content_type=MERGE)
    await core.patch_namespaced_config_map("x", ns, {"metadata": {"labels": {"t": "2"}}}, _content_type=MERGE)
    async with watch.Watch() as w:
        events = await collect(w.stream(core.list_namespaced_config_map, ns, label_selector="t=1",
                                        resource_version=rv, timeout_seconds=10), 3)
    # starts matching -> ADDED; stops matching -> DELETED (apiserver watch-cache semantics)
    assert events == [("ADDED", "x"), ("MODIFIED", "x"), ("DELETED", "x")]


async def test_noop_write_emits_no_event(kube):
    core, ns = kube.core, kube.namespace
    cm = await core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}, "data": {"k": "v"}})
    await core.patch_namespaced_config_map("a", ns, {"data": {"k": "v"}}, _content_type=MERGE)
    await core.patch_namespaced_config_map("a", ns, {"data": {"k": "w"}}, _content_type=MERGE)
    async with watch.Watch() as w:
        events = await collect(w.stream(core.list_namespaced_config_map, ns,
                                        resource_version=cm.metadata.resource_version, timeout_seconds=10), 1)
    assert events == [("MODIFIED", "a")]
    assert (await core.read_namespaced_config_map("a", ns)).data == {"k": "w"}


async def test_removing_the_last_finalizer_yields_only_deleted(kube):
    """Around finalizers, a watcher sees: the DELETE as MODIFIED (deletionTimestamp set); removing one of two
    finalizers as MODIFIED; a second DELETE as nothing; removing the last finalizer as a single DELETED — the
    registry deletes instead of storing the emptied list — whose object is the last stored state (deletionTimestamp
    and that finalizer still on it). The sentinel proves nothing else came in between."""
    core, ns = kube.core, kube.namespace
    cm = await core.create_namespaced_config_map(ns, {"metadata": {"name": "f",
                                                                   "finalizers": [TEST_FINALIZER, OTHER_HOLD]}})
    await core.delete_namespaced_config_map("f", ns)
    await core.patch_namespaced_config_map("f", ns, {"metadata": {"finalizers": [TEST_FINALIZER]}},
                                           _content_type=MERGE)
    await core.delete_namespaced_config_map("f", ns)  # already being deleted: no write
    await core.patch_namespaced_config_map("f", ns, {"metadata": {"finalizers": None}}, _content_type=MERGE)
    with pytest.raises(ApiException) as ei:
        await core.read_namespaced_config_map("f", ns)
    assert ei.value.status == 404
    await core.create_namespaced_config_map(ns, {"metadata": {"name": "sentinel"}})
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_config_map, ns, resource_version=cm.metadata.resource_version,
                          timeout_seconds=10)
        events = await collect_raw(stream, 4)
    assert [(t, o["metadata"]["name"]) for t, o in events] == [
        ("MODIFIED", "f"), ("MODIFIED", "f"), ("DELETED", "f"), ("ADDED", "sentinel")]
    marked, released, gone = (o["metadata"] for _, o in events[:3])
    assert marked["deletionTimestamp"] and marked["finalizers"] == [TEST_FINALIZER, OTHER_HOLD]
    assert released["finalizers"] == [TEST_FINALIZER]
    assert gone["deletionTimestamp"] and gone["finalizers"] == [TEST_FINALIZER]
    assert int(gone["resourceVersion"]) > int(released["resourceVersion"])


async def test_delete_without_finalizers_is_a_single_deleted(kube):
    core, ns = kube.core, kube.namespace
    cm = await core.create_namespaced_config_map(ns, {"metadata": {"name": "plain"}})
    await core.delete_namespaced_config_map("plain", ns)
    await core.create_namespaced_config_map(ns, {"metadata": {"name": "sentinel"}})
    async with watch.Watch() as w:
        events = await collect(w.stream(core.list_namespaced_config_map, ns,
                                        resource_version=cm.metadata.resource_version, timeout_seconds=10), 2)
    assert events == [("DELETED", "plain"), ("ADDED", "sentinel")]


async def test_pod_deletion_is_graceful_even_when_immediate(kube):
    """Pods have graceful deletion: the registry always writes the Terminating state first. An unscheduled pod
    has nothing to stop, so its grace is 0 and the DELETED follows at once: MODIFIED (deletionTimestamp,
    deletionGracePeriodSeconds 0), then DELETED. (The pod names a scheduler that does not exist, so a real
    cluster leaves it unscheduled.)"""
    core, ns = kube.core, kube.namespace
    body = {"metadata": {"name": "p"}, "spec": {"schedulerName": "none-such", "containers": [
        {"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}
    pod = await core.create_namespaced_pod(ns, body)
    await core.delete_namespaced_pod("p", ns)
    await core.create_namespaced_pod(ns, {**body, "metadata": {"name": "sentinel"}})
    async with watch.Watch() as w:
        events = await collect_raw(w.stream(core.list_namespaced_pod, ns,
                                            resource_version=pod.metadata.resource_version, timeout_seconds=10), 3)
    assert [(t, o["metadata"]["name"]) for t, o in events] == [
        ("MODIFIED", "p"), ("DELETED", "p"), ("ADDED", "sentinel")]
    marked = events[0][1]["metadata"]
    assert marked["deletionTimestamp"] and marked["deletionGracePeriodSeconds"] == 0


async def test_bound_pod_deletion_waits_for_the_kubelet(emulated_kube):
    """A bound pod gets its grace period (MODIFIED with deletionTimestamp in the future and the pod's
    terminationGracePeriodSeconds); the kubelet ends it with a grace-0 delete (MODIFIED, then DELETED). A real
    cluster needs a real node for that, hence emulator-only (the emulator's kubelet stand-in acts at once)."""
    kube = emulated_kube  # (the emulator's own machinery: an emulator of its own)
    kube.require_emulator("a kubelet that ends a bound pod: the emulator's stand-in; the real control plane the "
                          "tests run on has no kubelet, and a real node is not a test's to run pods on")
    core, ns = kube.core, kube.namespace
    body = {"metadata": {"name": "b"}, "spec": {"nodeName": "n1", "terminationGracePeriodSeconds": 30,
                                                 "containers": [{"name": "c", "image": "registry.k8s.io/pause:3.9"}]}}
    pod = await core.create_namespaced_pod(ns, body)
    await core.delete_namespaced_pod("b", ns)
    async with watch.Watch() as w:
        events = await collect_raw(w.stream(core.list_namespaced_pod, ns,
                                            resource_version=pod.metadata.resource_version, timeout_seconds=10), 3)
    assert [t for t, _ in events] == ["MODIFIED", "MODIFIED", "DELETED"]
    assert events[0][1]["metadata"]["deletionGracePeriodSeconds"] == 30
    assert events[1][1]["metadata"]["deletionGracePeriodSeconds"] == 0


async def test_timeout_seconds_ends_the_stream_cleanly(kube):
    core, ns = kube.core, kube.namespace
    rv = (await core.list_namespaced_config_map(ns)).metadata.resource_version
    seen = []
    async with asyncio.timeout(10), watch.Watch() as w:
        async for ev in w.stream(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=1):
            seen.append(ev)
    assert [e for e in seen if e["type"] != "BOOKMARK"] == []


async def test_bookmarks_carry_current_resource_version(emulated_kube):
    kube = emulated_kube  # (the emulator's own machinery: an emulator of its own)
    emulator = kube.require_emulator("bookmarks every 0.1 s (the emulator's bookmark_interval); a real API server "
                                     "sends one about a minute into a watch")
    emulator.bookmark_interval = 0.1
    core, ns = kube.core, kube.namespace
    rv = (await core.list_namespaced_config_map(ns)).metadata.resource_version
    await core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    types = []
    async with asyncio.timeout(10), watch.Watch() as w:
        async for ev in w.stream(core.list_namespaced_config_map, ns, resource_version=rv,
                                 allow_watch_bookmarks=True, timeout_seconds=5):
            types.append(ev["type"])
            if ev["type"] == "BOOKMARK":
                assert int(ev["raw_object"]["metadata"]["resourceVersion"]) >= int(rv) + 1
                break
    assert types[0] == "ADDED" and types[-1] == "BOOKMARK"


async def test_expired_resource_version_is_410(emulated_kube):
    kube = emulated_kube  # (the emulator's own machinery: an emulator of its own)
    emulator = kube.require_emulator("a watch history of 3 events (the emulator's hub); a real API server keeps "
                                     "its history until etcd compacts it, every 5 minutes by default")
    emulator.store.hub.history = type(emulator.store.hub.history)(maxlen=3)
    core, ns = kube.core, kube.namespace
    rv = (await core.list_namespaced_config_map(ns)).metadata.resource_version
    for i in range(6):
        await core.create_namespaced_config_map(ns, {"metadata": {"name": f"c{i}"}})
    with pytest.raises(ApiException) as ei:
        async with watch.Watch() as w:
            async for _ in w.stream(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=2):
                pass
    assert ei.value.status == 410
    # the raw stream is a 200 whose only event is ERROR with a Status 410, like a real apiserver's watch
    resp = await core.list_namespaced_config_map(ns, watch=True, resource_version=rv, timeout_seconds=2,
                                                 _preload_content=False)
    assert resp.status == 200
    import json

    line = json.loads(await resp.content.readline())
    assert line["type"] == "ERROR" and line["object"]["code"] == 410 and line["object"]["reason"] == "Expired"
    resp.release()


async def test_dropped_watch_reconnects_from_last_version(emulated_kube):
    kube = emulated_kube  # (the emulator's own machinery: an emulator of its own)
    emulator = kube.require_emulator("watches dropped on demand (the emulator's fault injection)")
    core, ns = kube.core, kube.namespace
    rv = (await core.list_namespaced_config_map(ns)).metadata.resource_version
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_config_map, ns, resource_version=rv)  # no timeout: reconnects
        await core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
        assert await collect(stream, 1) == [("ADDED", "a")]
        assert emulator.faults.drop_watches(resource="configmaps") == 1
        await core.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
        assert await collect(stream, 1) == [("ADDED", "b")]
    assert emulator.faults.count(verb="watch", resource="configmaps") == 2


async def test_custom_object_watch_sees_status_writes(kube):
    group, version, plural = "datadependency.volcano.sh", "v1alpha1", "datasourceclaims"
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
    body = {"apiVersion": f"{group}/{version}", "kind": "DataSourceClaim", "metadata": {"name": "c"},
            "spec": {"system": "s", "dataSourceType": "t", "dataSourceName": "n",
                     "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"}}}
    created = await kube.custom.create_namespaced_custom_object(group, version, kube.namespace, plural, body)
    await kube.custom.patch_namespaced_custom_object_status(group, version, kube.namespace, plural, "c",
                                                            {"status": {"phase": "Bound"}}, _content_type=MERGE)
    async with watch.Watch() as w:
        stream = w.stream(kube.custom.list_namespaced_custom_object, group, version, kube.namespace, plural,
                          resource_version=created["metadata"]["resourceVersion"], timeout_seconds=10)
        async with asyncio.timeout(10):
            async for ev in stream:
                assert ev["type"] == "MODIFIED"
                assert ev["object"]["status"]["phase"] == "Bound"
                assert ev["object"]["apiVersion"] == f"{group}/{version}"
                break
