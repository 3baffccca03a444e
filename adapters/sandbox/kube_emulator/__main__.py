"""Run the emulator standalone: ``python -m tether.adapters.sandbox.kube_emulator --port 8001 --crds ops/crds``.

Prints the URL and writes a kubeconfig (``--kubeconfig-dir``) so kubectl-like tools and tether itself can connect.
It starts with the namespaces a real API server has (``default`` — the kubeconfig's namespace —, ``kube-system``,
``kube-public``, ``kube-node-lease``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gc
import logging
import signal

from . import CALIBRATED, KubeEmulator, WriteCost


async def _main(args: argparse.Namespace) -> None:
    emu = KubeEmulator(host=args.host, port=args.port, crds=args.crds or [], binder=args.binder,
                       karmada_scheduler=args.karmada, history_size=args.history_size,
                       bookmark_interval=args.bookmark_interval, commit_times=args.commit_times,
                       write_cost=write_cost(args))
    await emu.start()
    await emu.add_system_namespaces()  # (kubectl's context namespace is default: without it, kubectl create fails)
    # as the daemon does (adapters/daemon/daemon.py, "startup heap"): the modules' objects out of the cyclic GC's reach,
    # so a full collection is not a 30 ms pause in the middle of a request
    gc.collect()
    gc.freeze()
    path = emu.kubeconfig_path(args.kubeconfig_dir) if args.kubeconfig_dir else None
    print(f"kube emulator serving on {emu.url}" + (f" (kubeconfig: {path})" if path else ""), flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await emu.stop()


def write_cost(args: argparse.Namespace) -> WriteCost | None:
    """The write cost the flags ask for: ``--write-cost calibrated`` (a real control plane's, :data:`CALIBRATED`)
    or ``--write-cost-ms`` with its companions; None (off) by default."""
    if args.write_cost == "calibrated":
        return CALIBRATED
    if args.write_cost_ms is None:
        return None
    return WriteCost(commit_ms=args.write_cost_ms, per_write_ms=args.write_cost_per_write_ms,
                     sigma=args.write_cost_sigma, seed=args.write_cost_seed)


def main() -> None:
    p = argparse.ArgumentParser(prog="python -m tether.adapters.sandbox.kube_emulator")
    p.add_argument("--host", default="127.0.0.1")
    p.add_argument("--port", type=int, default=8001)
    p.add_argument("--crds", action="append", help="CRD file, directory or name under tether/crds (repeatable)")
    p.add_argument("--binder", action="store_true", help="bind ungated pods to matching nodes")
    p.add_argument("--karmada", action="store_true", help="run the Karmada scheduler stand-in")
    p.add_argument("--history-size", type=int, default=10_000)
    p.add_argument("--bookmark-interval", type=float, default=1.0)
    p.add_argument("--commit-times", action="store_true",
                   help="remember when each resourceVersion was committed (GET /_emulator/commit-times)")
    p.add_argument("--write-cost", choices=("calibrated",),
                   help="make writes cost what they cost on a real etcd-backed API server (group commit)")
    p.add_argument("--write-cost-ms", type=float,
                   help="median service time of one group commit in ms (turns the write cost on)")
    p.add_argument("--write-cost-per-write-ms", type=float, default=0.0, help="added per write in a commit")
    p.add_argument("--write-cost-sigma", type=float, default=0.0,
                   help="log-normal jitter of the commit time (0: every commit takes the median)")
    p.add_argument("--write-cost-seed", type=int, help="seed of the jitter")
    p.add_argument("--kubeconfig-dir", help="write <dir>/kubeconfig pointing at the emulator")
    p.add_argument("-v", "--verbose", action="store_true")
    args = p.parse_args()
    logging.basicConfig(level=logging.DEBUG if args.verbose else logging.INFO)
    asyncio.run(_main(args))


if __name__ == "__main__":
    main()
