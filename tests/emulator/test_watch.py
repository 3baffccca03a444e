"""Conformance: watch streams (resume, initial state, selectors, bookmarks, timeouts, 410 Gone)."""

from __future__ import annotations

import asyncio

import pytest
from kubernetes_asyncio import watch
from kubernetes_asyncio.client.exceptions import ApiException

MERGE = "application/merge-patch+json"


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


async def test_finalized_delete_is_modified_then_deleted(kube):
    core, ns = kube.core, kube.namespace
    cm = await core.create_namespaced_config_map(ns, {"metadata": {"name": "f", "finalizers": ["x.io/hold"]}})
    await core.delete_namespaced_config_map("f", ns)
    await core.patch_namespaced_config_map("f", ns, {"metadata": {"finalizers": None}}, _content_type=MERGE)
    async with watch.Watch() as w:
        stream = w.stream(core.list_namespaced_config_map, ns, resource_version=cm.metadata.resource_version,
                          timeout_seconds=10)
        events = await collect(stream, 3)
    assert events[0] == ("MODIFIED", "f") and events[-1] == ("DELETED", "f")


async def test_timeout_seconds_ends_the_stream_cleanly(kube):
    core, ns = kube.core, kube.namespace
    rv = (await core.list_namespaced_config_map(ns)).metadata.resource_version
    seen = []
    async with asyncio.timeout(10), watch.Watch() as w:
        async for ev in w.stream(core.list_namespaced_config_map, ns, resource_version=rv, timeout_seconds=1):
            seen.append(ev)
    assert [e for e in seen if e["type"] != "BOOKMARK"] == []


async def test_bookmarks_carry_current_resource_version(kube, emulator):
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


async def test_expired_resource_version_is_410(kube, emulator):
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


async def test_dropped_watch_reconnects_from_last_version(kube, emulator):
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
