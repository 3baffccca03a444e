"""Crash and restart at full size: ``kill -9`` of the tether daemon at random points of a large workload.

Every part is its own process (adapters/testing/chaos.py): the Kubernetes emulator with the Karmada scheduler
stand-in, a member emulator with racks of nodes, ``tether run`` with queue admission, the ResourceBinding webhook
(``failurePolicy: Fail``) and pod placement, and the sandbox Iceberg REST catalog, which counts lookups. The
workload creates ``--claims`` claims over ``--tables`` tables, a ResourceBinding per workload and ``--groups`` gated
pod groups (the member gets racks enough for them all, with a quarter to spare: 7 racks of 4 nodes of 8 CPU for
the default 40 groups of 4 pods of 1 CPU, one rack each); at ``--kills`` points drawn from the seed, the daemon is
killed with SIGKILL and started again at once.
With ``--kafka`` the log is Kafka (a tansu broker started here) and ``--replicas`` replicas (default 2) campaign
for the Lease: each kill is the leader's. ``--broker-restarts N`` (with ``--kafka``) also kills the broker itself
N times and starts it again on its storage (adapters/testing/kafka_durable.py), and audits the log on the broker's
bytes: nothing acknowledged lost, no offset gap, no command stored twice with different bytes.

What must hold at the end (adapters/testing/chaos_run.py): converged (every claim Bound, every binding on clusters
holding its data, every pod bound), no duplicate DataSource, no binding version scheduled without its data
constraint while its claim was Bound (every version, from a watcher of its own), no pod group split across
racks, catalog lookups <= tables x (1 + restarts), and ``tether replay --diff`` of the log without a difference.

The seed is printed first (``--seed`` repeats a run); progress goes to stderr; the last line printed is one JSON
object, the report, with ``"passed"``. Exit code 0 when it passed, 1 when not.

Usage: ``python ops/chaos/crash_restart.py [--claims 5000] [--kills 20] [--tables 50] [--groups 40] [--seed N]
[--kafka [--replicas 2] [--broker-restarts N]]``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

import structlog

from tether.adapters.testing.chaos_run import crash_restart, passed


async def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", type=int, default=5000)
    parser.add_argument("--kills", type=int, default=20)
    parser.add_argument("--tables", type=int, default=50)
    parser.add_argument("--groups", type=int, default=40, help="pod groups of 4 gated pods in the member")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--kafka", action="store_true", help="the Kafka log (tansu) with --replicas replicas")
    parser.add_argument("--broker-restarts", type=int, default=0,
                        help="with --kafka: kill -9 and restart the broker (tansu on S3 storage) this many times")
    parser.add_argument("--replicas", type=int, default=None, help="daemon replicas (default 1; 2 with --kafka)")
    parser.add_argument("--settle", type=float, default=900.0, help="seconds to wait for convergence at the end")
    parser.add_argument("--concurrency", type=int, default=16, help="workloads created at once")
    args = parser.parse_args()
    structlog.configure(wrapper_class=structlog.make_filtering_bound_logger(30))
    seed = args.seed if args.seed is not None else random.randrange(1 << 30)
    print(f"seed {seed}", file=sys.stderr, flush=True)
    started = time.monotonic()

    def say(line: str) -> None:
        print(f"[{time.monotonic() - started:7.1f}s] {line}", file=sys.stderr, flush=True)

    replicas = args.replicas or (2 if args.kafka else 1)
    options = {"claims": args.claims, "kills": args.kills, "tables": args.tables, "groups": args.groups,
               "seed": seed, "replicas": replicas, "settle_within": args.settle, "concurrency": args.concurrency,
               "progress": say}
    if args.kafka and args.broker_restarts:
        from tether.adapters.testing.kafka_durable import durable_broker

        with durable_broker() as durable:
            report = await crash_restart(kafka_bootstrap=durable.bootstrap, broker=durable,
                                         broker_restarts=args.broker_restarts, **options)
    elif args.kafka:
        from tether.adapters.testing.kafka_broker import running_broker

        with running_broker(proxied=False) as broker:
            report = await crash_restart(kafka_bootstrap=broker.bootstrap, **options)
    else:
        report = await crash_restart(**options)
    report["passed"] = passed(report)
    print(json.dumps(report))
    return 0 if report["passed"] else 1


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
