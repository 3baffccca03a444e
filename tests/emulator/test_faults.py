"""Fault injection (emulator-only): injected errors, Retry-After, latency, the HTTP admin endpoint — the emulator's
own machinery, which a real API server does not have."""

from __future__ import annotations

import json
import time

import aiohttp
import pytest
from kubernetes_asyncio.client.exceptions import ApiException

WHY = "the emulator's own fault injection"


async def test_injected_errors_match_and_expire(emulated_kube):
    kube = emulated_kube  # (the emulator's own machinery: an emulator of its own)
    emulator = kube.require_emulator(WHY)
    core, ns = kube.core, kube.namespace
    await core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    emulator.faults.fail(code=429, verb="get", resource="configmaps", name="a", times=2, retry_after=3)
    for _ in range(2):
        with pytest.raises(ApiException) as ei:
            await core.read_namespaced_config_map("a", ns)
        assert ei.value.status == 429 and ei.value.headers["Retry-After"] == "3"
        body = json.loads(ei.value.body)
        assert body["reason"] == "TooManyRequests" and body["details"]["retryAfterSeconds"] == 3
    assert (await core.read_namespaced_config_map("a", ns)).metadata.name == "a"  # rule used up
    emulator.faults.fail(code=409, verb="patch", resource="configmaps")
    with pytest.raises(ApiException) as ei:
        await core.patch_namespaced_config_map("a", ns, {"data": {"k": "v"}})
    assert ei.value.status == 409 and json.loads(ei.value.body)["reason"] == "Conflict"
    emulator.faults.fail(code=500, verb="list", times=None)
    with pytest.raises(ApiException) as ei:
        await core.list_namespaced_config_map(ns)
    assert ei.value.status == 500
    emulator.faults.clear()
    await core.list_namespaced_config_map(ns)


async def test_latency_and_http_admin(emulated_kube):
    kube = emulated_kube  # (the emulator's own machinery: an emulator of its own)
    emulator = kube.require_emulator(WHY)
    core, ns = kube.core, kube.namespace
    emulator.faults.add_latency(0.2, verb="list", resource="configmaps", times=1)
    start = time.monotonic()
    await core.list_namespaced_config_map(ns)
    assert time.monotonic() - start >= 0.2
    async with aiohttp.ClientSession() as s, s.post(f"{emulator.url}/_emulator/faults",
                      json={"action": "fail", "code": 503, "verb": "create", "resource": "configmaps"}) as r:
        assert r.status == 200
    with pytest.raises(ApiException) as ei:
        await core.create_namespaced_config_map(ns, {"metadata": {"name": "x"}})
    assert ei.value.status == 503


async def test_commit_times_are_remembered_per_resource_version_when_asked() -> None:
    """``commit_times``: the server-side clock of each commit, served at ``/_emulator/commit-times`` (off: 404)."""
    from kubernetes_asyncio import client

    from tether.adapters.sandbox.kube_emulator import KubeEmulator

    async with KubeEmulator(commit_times=True, history_size=3) as emu, client.ApiClient(emu.configuration()) as api:
        core = client.CoreV1Api(api)
        await core.create_namespace({"metadata": {"name": "default"}})
        rvs = []
        for name in ("a", "b", "c", "d"):
            cm = await core.create_namespaced_config_map("default", {"metadata": {"name": name}})
            rvs.append(int(cm.metadata.resource_version))
        assert emu.commit_times is not None and list(emu.commit_times) == rvs[1:]  # the last history_size
        times = [emu.commit_times[rv] for rv in rvs[1:]]
        assert times == sorted(times)
        async with aiohttp.ClientSession() as http, http.get(f"{emu.url}/_emulator/commit-times",
                                                             params={"since": str(rvs[2])}) as resp:
            assert resp.status == 200
            assert (await resp.json())["times"] == {str(rvs[3]): emu.commit_times[rvs[3]]}
    async with KubeEmulator() as emu, aiohttp.ClientSession() as http, http.get(
            f"{emu.url}/_emulator/commit-times") as resp:
        assert resp.status == 404 and emu.commit_times is None
