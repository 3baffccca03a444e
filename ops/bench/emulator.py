"""Benchmark the Kubernetes emulator: request throughput and watch fan-out with 1k vs 10k stored objects.

Starts the emulator in-process on loopback, seeds N ConfigMaps, then measures create/get/patch requests per
second over HTTP (aiohttp, 16 concurrent clients) and watch fan-out (10 watchers, events delivered per second).
Per-request cost must not grow with the number of stored objects, so ``ratio`` (10k / 1k) should stay near 1.
The last line printed is one JSON object.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import aiohttp

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from tether.adapters.sandbox.kube_emulator import KubeEmulator

CONCURRENCY = 16
OPS = 1500
WATCHERS = 10
EVENTS = 500


async def _run(n: int) -> dict[str, float]:
    async with KubeEmulator(history_size=50_000) as emu:
        store = emu.store
        ns_rt, cm_rt = store.type_for("", "namespaces"), store.type_for("", "configmaps")
        await store.create(ns_rt, {"metadata": {"name": "bench"}})
        for i in range(n):
            await store.create(cm_rt, {"metadata": {"name": f"seed-{i}", "labels": {"i": str(i % 10)}},
                                       "data": {"k": "v"}}, namespace="bench")
        base = f"{emu.url}/api/v1/namespaces/bench/configmaps"
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=CONCURRENCY)) as s:

            async def worker(wid: int, kind: str) -> None:
                for j in range(wid, OPS, CONCURRENCY):
                    if kind == "create":
                        r = await s.post(base, json={"metadata": {"name": f"new-{j}"}, "data": {"k": "v"}})
                    elif kind == "get":
                        r = await s.get(f"{base}/seed-{j % n}")
                    else:
                        r = await s.patch(f"{base}/seed-{j % n}", json={"data": {"k": f"p{j}"}},
                                          headers={"Content-Type": "application/merge-patch+json"})
                    await r.read()
                    assert r.status < 300, r.status

            total, elapsed = 0, 0.0
            for kind in ("create", "get", "patch"):
                start = time.perf_counter()
                await asyncio.gather(*(worker(w, kind) for w in range(CONCURRENCY)))
                elapsed += time.perf_counter() - start
                total += OPS
            rv = str(store.rv)
            received = [0] * WATCHERS

            async def watcher(idx: int, ready: asyncio.Event) -> None:
                async with s.get(base, params={"watch": "1", "resourceVersion": rv},
                                 timeout=aiohttp.ClientTimeout(total=60)) as r:
                    ready.set()
                    async for _line in r.content:
                        received[idx] += 1
                        if received[idx] >= EVENTS:
                            return

            readies = [asyncio.Event() for _ in range(WATCHERS)]
            tasks = [asyncio.create_task(watcher(i, readies[i])) for i in range(WATCHERS)]
            await asyncio.gather(*(e.wait() for e in readies))
            await asyncio.sleep(0.05)
            start = time.perf_counter()
            for j in range(EVENTS):
                await store.patch(cm_rt, f"seed-{j % n}", lambda o, j=j: {**o, "data": {"k": f"w{j}"}},
                                  namespace="bench")
            await asyncio.gather(*tasks)
            fanout = WATCHERS * EVENTS / (time.perf_counter() - start)
        return {"req_per_s": total / elapsed, "watch_events_per_s": fanout}


async def main() -> None:
    small = await _run(1_000)
    large = await _run(10_000)
    print(f"1k objects:  {small['req_per_s']:.0f} req/s, watch fan-out {small['watch_events_per_s']:.0f} events/s")
    print(f"10k objects: {large['req_per_s']:.0f} req/s, watch fan-out {large['watch_events_per_s']:.0f} events/s")
    print(json.dumps({
        "bench": "emulator", "value": round(large["req_per_s"], 1), "unit": "req/s",
        "baseline": round(small["req_per_s"], 1), "ratio": round(large["req_per_s"] / small["req_per_s"], 3),
        "watch_events_per_s_10k": round(large["watch_events_per_s"], 1),
        "watch_events_per_s_1k": round(small["watch_events_per_s"], 1),
        "watchers": WATCHERS, "concurrency": CONCURRENCY,
    }))


if __name__ == "__main__":
    asyncio.run(main())
