"""Webhook benchmark: tether's ResourceBinding admission webhook, server side, at 200 requests/s.

Two handlers on the same stack (``WebhookServer``: aiohttp, TLS with a self-signed ECDSA certificate, loopback),
measured in the same run, alternating rounds:

* ``value`` — ``/mutate/resourcebindings``: the real handler (``adapters/kubernetes/binding_webhook``) on a world of
  1,000 bound claims and their DataSources over 3 clusters, each request a CREATE of a binding whose workload has a
  bound claim (so every answer carries the data constraint) — the decision (``core.admission.webhook_decision``) plus
  the decision appended to an embedded SQLite log before answering, as the daemon does;
* ``baseline`` — ``/echo``: a handler that answers "allowed" at once (a bare HTTPS echo on the same server).

Server-side time is what ``WebhookServer`` observes from reading the request to having the response (its
``observe`` hook, the daemon's ``tether_webhook_seconds``): decode, serving check, handler, encode. Requests are
paced at ``--rate`` per second on one connection pool (the API server keeps connections open). Each round sends
``--requests`` to each handler; the reported p50/p99 are the medians over ``--rounds`` rounds.

Usage: ``python ops/bench/webhook.py [--rounds 5] [--requests 1000] [--rate 200]``. The last line of output is one
JSON object: ``{"bench": "webhook", "value": p99_ms, "unit": "ms", "baseline": echo_p99_ms, "ratio": ...,
"p50_ms": ..., "target_ms": 5, "target_met": ...}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import ssl
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import aiohttp

from tether.adapters.kubernetes import manifests as m
from tether.adapters.kubernetes.binding_webhook import BindingWebhook
from tether.adapters.kubernetes.webhook import AdmissionRequest, WebhookAnswer, WebhookServer
from tether.adapters.kubernetes.webhook_certs import ensure_self_signed
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.testing.fake_cluster import Harness
from tether.core.keys import PERMANENT_ID_LABEL

TARGET_MS = 5.0


def build_world(claims: int) -> Harness:
    h = Harness()
    for name in ("c1", "c2", "c3"):
        h.apply(m.cluster(name))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1", "c2"],
                                                                 "s3://west/": ["c3"]})}))
    for i in range(claims):
        table = f"db.t{i}"
        h.cluster.catalog[f"amoro/table/{table}"] = f"s3://{'east' if i % 2 else 'west'}/db/t{i}"
        h.apply(m.claim(f"c{i}", table=table, workload=f"w{i}"))
    return h


def review(i: int) -> bytes:
    rb = {"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
          "metadata": {"name": f"w{i}-deployment", "namespace": "default",
                       "labels": {PERMANENT_ID_LABEL: "p"}},
          "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": f"w{i}",
                                "namespace": "default"}, "replicas": 2,
                   "replicaRequirements": {"resourceRequest": {"cpu": "500m", "memory": "1Gi"}},
                   "placement": {"clusterAffinity": {"clusterNames": ["c1", "c2", "c3"]},
                                 "replicaScheduling": {"replicaSchedulingType": "Divided"}}}}
    return json.dumps({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                       "request": {"uid": str(uuid.uuid4()), "operation": "CREATE", "namespace": "default",
                                   "name": rb["metadata"]["name"], "object": rb}}).encode()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def run(args: argparse.Namespace) -> dict[str, Any]:
    h = build_world(args.claims)
    timings: dict[str, list[float]] = {"/mutate/resourcebindings": [], "/echo": []}

    def observe(path: str, outcome: str, seconds: float) -> None:
        timings[path].append(seconds * 1000)

    def echo(request: AdmissionRequest) -> WebhookAnswer:
        return WebhookAnswer()

    with tempfile.TemporaryDirectory(prefix="tether-bench-webhook-") as tmp:
        cert, key, ca = ensure_self_signed(Path(tmp) / "certs", names=["127.0.0.1"])
        log = await SqliteLog.open(str(Path(tmp) / "tether.db"))
        handler = BindingWebhook(world=lambda: h.world, append=lambda records: log.append("events", records))
        server = WebhookServer(handlers={handler.path: handler, "/echo": echo}, cert_file=str(cert),
                               key_file=str(key), serving=lambda: (True, "current"), host="127.0.0.1", port=0,
                               observe=observe)
        await server.start()
        context = ssl.create_default_context(cadata=ca.decode())
        bodies = [review(i % args.claims) for i in range(args.requests)]
        results: dict[str, list[tuple[float, float]]] = {path: [] for path in timings}
        patched = 0
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(ssl=context, limit=32)) as http:
                async def send(path: str, body: bytes) -> dict[str, Any]:
                    async with http.post(f"https://127.0.0.1:{server.port}{path}", data=body) as response:
                        assert response.status == 200, await response.text()
                        answer: dict[str, Any] = await response.json()
                        return answer

                for path in timings:  # warm-up: connections, TLS sessions, first decisions
                    await asyncio.gather(*(send(path, bodies[i]) for i in range(50)))
                for _ in range(args.rounds):
                    for path in timings:
                        timings[path].clear()
                        interval = 1.0 / args.rate
                        start = time.perf_counter()
                        tasks = []
                        for i, body in enumerate(bodies):
                            delay = start + i * interval - time.perf_counter()
                            if delay > 0:
                                await asyncio.sleep(delay)
                            tasks.append(asyncio.create_task(send(path, body)))
                        answers = await asyncio.gather(*tasks)
                        if path != "/echo":
                            patched = sum(1 for a in answers if a["response"].get("patch"))
                        samples = timings[path]
                        results[path].append((percentile(samples, 0.5), percentile(samples, 0.99)))
        finally:
            await server.stop()
            await log.close()
    value = results["/mutate/resourcebindings"]
    base = results["/echo"]
    p50 = statistics.median(r[0] for r in value)
    p99 = statistics.median(r[1] for r in value)
    echo_p50 = statistics.median(r[0] for r in base)
    echo_p99 = statistics.median(r[1] for r in base)
    return {"bench": "webhook", "value": round(p99, 3), "unit": "ms", "baseline": round(echo_p99, 3),
            "ratio": round(p99 / echo_p99, 2) if echo_p99 else None, "p50_ms": round(p50, 3),
            "baseline_p50_ms": round(echo_p50, 3), "target_ms": TARGET_MS, "target_met": p99 <= TARGET_MS,
            "rate": args.rate, "requests_per_round": args.requests, "rounds": args.rounds, "claims": args.claims,
            "patched": patched}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--requests", type=int, default=1000)
    parser.add_argument("--rate", type=float, default=200.0)
    parser.add_argument("--claims", type=int, default=1000)
    args = parser.parse_args(argv)
    out = asyncio.run(run(args))
    print(f"webhook p50 {out['p50_ms']} ms, p99 {out['value']} ms; echo p50 {out['baseline_p50_ms']} ms, "
          f"p99 {out['baseline']} ms ({out['patched']} of {args.requests} answers patched)")
    print(json.dumps(out))
    return 0


if __name__ == "__main__":
    sys.exit(main())
