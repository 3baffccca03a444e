"""The emulator's write-cost model (``adapters/sandbox/kube_emulator/write_cost.py``): etcd-like group commit.

No timing assertions: the commits are driven by a manual sleep (each commit waits until the test lets it end),
and the assertions are about counts — commits, their sizes, what is visible before and after a commit.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

import aiohttp
import pytest
from kubernetes_asyncio import client

from tether.adapters.sandbox.kube_emulator import CALIBRATED, GroupCommit, KubeEmulator, WriteCost
from tether.adapters.sandbox.kube_emulator.__main__ import write_cost as write_cost_from_flags

MERGE = "application/merge-patch+json"


class ManualSleep:
    """A sleep that ends when the test says so: each call records its duration and waits for :meth:`release`."""

    def __init__(self) -> None:
        self.calls: list[float] = []
        self._go = asyncio.Semaphore(0)

    async def __call__(self, seconds: float) -> None:
        self.calls.append(seconds)
        await self._go.acquire()

    def release(self) -> None:
        self._go.release()


async def until(probe: Callable[[], bool], *, turns: int = 5000) -> None:
    """Let the event loop (and loopback HTTP) run until ``probe`` holds; a bounded number of turns, not a clock."""
    for _ in range(turns):
        if probe():
            return
        await asyncio.sleep(0.001 if _ % 10 == 9 else 0)
    raise AssertionError("the condition never held")


async def test_a_lone_write_pays_a_full_commit() -> None:
    sleep = ManualSleep()
    commits = GroupCommit(WriteCost(commit_ms=6.0, per_write_ms=0.5), sleep=sleep)
    write = asyncio.create_task(commits.write())
    await until(lambda: len(sleep.calls) == 1)
    assert not write.done() and commits.committing
    sleep.release()
    await write
    assert sleep.calls == [pytest.approx(0.0065)]  # the fsync-like part and one write's
    assert (commits.commits, commits.writes, dict(commits.batches)) == (1, 1, {1: 1})
    await until(lambda: not commits.committing)


async def test_writes_arriving_during_a_commit_join_the_next_one() -> None:
    sleep = ManualSleep()
    commits = GroupCommit(WriteCost(commit_ms=5.0, per_write_ms=1.0), sleep=sleep)
    first = asyncio.create_task(commits.write())
    await until(lambda: len(sleep.calls) == 1)
    later = [asyncio.create_task(commits.write()) for _ in range(4)]
    await until(lambda: commits.pending == 4)
    assert len(sleep.calls) == 1  # they wait for the commit in progress to end: no second one started
    sleep.release()
    await first
    await until(lambda: len(sleep.calls) == 2)
    assert not any(w.done() for w in later)
    sleep.release()
    await asyncio.gather(*later)
    assert sleep.calls == [pytest.approx(0.006), pytest.approx(0.009)]  # one fsync each, per-write cost by size
    assert (commits.commits, commits.writes, dict(commits.batches)) == (2, 5, {1: 1, 4: 1})


async def test_a_cancelled_writer_leaves_its_commit() -> None:
    sleep = ManualSleep()
    commits = GroupCommit(WriteCost(commit_ms=1.0), sleep=sleep)
    first = asyncio.create_task(commits.write())
    await until(lambda: len(sleep.calls) == 1)
    gone, kept = asyncio.create_task(commits.write()), asyncio.create_task(commits.write())
    await until(lambda: commits.pending == 2)
    gone.cancel()
    sleep.release()
    await first
    await until(lambda: len(sleep.calls) == 2)
    sleep.release()
    await kept
    assert gone.cancelled() and commits.commits == 2


def test_commit_time_and_jitter() -> None:
    flat = GroupCommit(WriteCost(commit_ms=4.0, per_write_ms=0.25))
    assert [flat.seconds(n) for n in (1, 4)] == [pytest.approx(0.00425), pytest.approx(0.005)]
    a, b = (GroupCommit(WriteCost(commit_ms=4.0, sigma=0.5, seed=7)) for _ in range(2))
    draws = [a.seconds(1) for _ in range(50)]
    assert draws == [b.seconds(1) for _ in range(50)]  # seeded: repeatable
    assert len(set(draws)) == 50 and min(draws) > 0
    with pytest.raises(ValueError):
        WriteCost(commit_ms=-1.0)


def test_flags() -> None:
    import argparse

    def args(**kw: object) -> argparse.Namespace:
        base = {"write_cost": None, "write_cost_ms": None, "write_cost_per_write_ms": 0.0, "write_cost_sigma": 0.0,
                "write_cost_seed": None}
        return argparse.Namespace(**{**base, **kw})

    assert write_cost_from_flags(args()) is None  # off by default
    assert write_cost_from_flags(args(write_cost="calibrated")) == CALIBRATED
    assert write_cost_from_flags(args(write_cost_ms=3.0, write_cost_per_write_ms=0.1)) == WriteCost(
        commit_ms=3.0, per_write_ms=0.1)


@contextlib.asynccontextmanager
async def _emulator(**options: object):  # type: ignore[no-untyped-def]
    async with KubeEmulator(**options) as emu, client.ApiClient(emu.configuration()) as api:  # type: ignore[arg-type]
        await emu.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "w"}})  # in-process: free
        yield emu, client.CoreV1Api(api)


async def _writes(emu: KubeEmulator) -> dict[str, object]:
    async with aiohttp.ClientSession() as session, session.get(f"{emu.url}/_emulator/writes") as resp:
        resp.raise_for_status()
        body: dict[str, object] = await resp.json()
        return body


async def test_the_emulator_batches_concurrent_writes_and_shows_a_write_only_once_committed() -> None:
    sleep = ManualSleep()
    async with _emulator(write_cost=WriteCost(commit_ms=5.0)) as (emu, core):
        assert emu.group_commit is not None
        emu.group_commit.sleep = sleep

        def create(i: int) -> Awaitable[object]:
            return core.create_namespaced_config_map("w", {"metadata": {"name": f"c{i}"}})

        first = asyncio.create_task(create(0))  # type: ignore[arg-type]
        await until(lambda: len(sleep.calls) == 1)
        assert emu.get("v1", "ConfigMap", "c0", "w") is None  # not visible before its commit ended
        rest = [asyncio.create_task(create(i)) for i in range(1, 6)]  # type: ignore[arg-type]
        await until(lambda: emu.group_commit is not None and emu.group_commit.pending == 5)
        # reads do not wait for a commit, and see only what was committed
        assert (await core.list_namespaced_config_map("w")).items == []
        sleep.release()
        await first
        assert emu.get("v1", "ConfigMap", "c0", "w") is not None
        await until(lambda: len(sleep.calls) == 2)
        sleep.release()
        await asyncio.gather(*rest)
        assert emu.group_commit.commits == 2 and dict(emu.group_commit.batches) == {1: 1, 5: 1}
        assert len((await core.list_namespaced_config_map("w")).items) == 6
        assert emu.group_commit.commits == 2  # (the list paid nothing)
        body = await _writes(emu)
        assert body["commits"] == 2 and body["committed_writes"] == 6
        assert {"verb": "create", "resource": "configmaps", "namespace": "w", "count": 6} in body["writes"]  # type: ignore[operator]


async def test_without_a_write_cost_nothing_waits_and_writes_are_still_counted() -> None:
    async with _emulator() as (emu, core):
        assert emu.group_commit is None
        await core.create_namespaced_config_map("w", {"metadata": {"name": "c"}})  # type: ignore[arg-type]
        await core.patch_namespaced_config_map("c", "w", {"data": {"a": "1"}})
        await core.patch_namespaced_config_map("c", "w", {"data": {"a": "2"}})
        await core.read_namespaced_config_map("c", "w")
        await core.delete_namespaced_config_map("c", "w")
        assert emu.api_writes[("create", "configmaps", "w")] == 1
        assert emu.api_writes[("patch", "configmaps", "w")] == 2
        assert emu.api_writes[("delete", "configmaps", "w")] == 1
        assert not any(verb in ("get", "list") for verb, _, _ in emu.api_writes)
        body = await _writes(emu)
        assert body["commits"] is None and body["committed_writes"] is None
