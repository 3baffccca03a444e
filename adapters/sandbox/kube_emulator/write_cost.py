"""What a write costs on an etcd-backed API server: a service time with group commit, for benchmarks.

The emulator commits a write in memory in well under a millisecond, where a real kube-apiserver waits for etcd to
make it durable: a bare JSON merge PATCH of a ResourceBinding through kubernetes-asyncio takes 5.5-9.5 ms at the
median and 22-29 ms at p99 on a real control plane, against ~0.7 / ~1 ms on the emulator. A controller that
writes five or six times per object pays that on a real cluster and not here, so a benchmark on the bare emulator
hides the very cost that separates one controller from another. :class:`GroupCommit` puts it back.

**The model** (etcd's raft loop, simplified). A write waits for a *commit*. A write that arrives while no commit
is in progress starts one at once and pays its full cost (a lone write is never cheaper than one fsync); writes
that arrive while a commit is in progress all join the *next* one, which starts as soon as the current one ends
(etcd appends every proposal that arrived during a WAL fsync in the next Ready batch, with one fsync for all).
A commit of ``n`` writes takes ``commit_ms x jitter + n x per_write_ms``: the fsync-like part is paid once per
commit and dominates; the per-write part (encoding, the apply, the watch fan-out) grows with the batch. The
jitter is log-normal with median 1 and shape ``sigma``: disk syncs have a long right tail, which is where a real
server's p99 of 3-4x its median comes from. Reads (get, list, watch) pay nothing: the apiserver serves them from
its watch cache.

**Where it sits.** The emulator's HTTP layer awaits :meth:`GroupCommit.write` before it hands a write (create,
update, patch, delete, pod binding) to the store, whose compute-and-commit is atomic on the event loop. The write
therefore becomes visible — its answer, its watch event, its ``commit_times`` entry — only once its commit ended,
as on a real server, and the store's concurrency rules are untouched. Two simplifications: the object is computed
after the wait rather than before (the outcome is the same, a conflict is only detected a little later), and a
write that turns out to be a no-op still pays a commit (a real server pays a quorum read instead; tether's
executor only sends writes that change something, so its no-ops are rare).

Off by default (no :class:`WriteCost`, no waiting, nothing changes). The calibrated figures
(:data:`CALIBRATED`, measured in ``docs/performance.md``) make the emulator's bare PATCH and its watch→PATCH relay
land on a real control plane's. Tests replace :attr:`GroupCommit.sleep` to drive commits without a clock.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import math
import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass


@dataclass(frozen=True, kw_only=True)
class WriteCost:
    """The service time of a commit: ``commit_ms`` (median, paid once per commit) x a log-normal jitter of shape
    ``sigma`` (0: none) + ``per_write_ms`` per write in the commit. ``seed`` makes the jitter repeatable."""

    commit_ms: float
    per_write_ms: float = 0.0
    sigma: float = 0.0
    seed: int | None = None

    def __post_init__(self) -> None:
        if self.commit_ms < 0 or self.per_write_ms < 0 or self.sigma < 0:
            raise ValueError("write cost figures must not be negative")


#: Calibrated against a real control plane (kube-apiserver v1.28 on etcd 3.4): with it the emulator's bare PATCH
#: (p50 6.3, p99 24.6 ms; real 5.5-9.5 / 22-29) and its watch→PATCH relay at 20 claims/s (p50 14.6, p99 37.5 ms;
#: real 11-17 / 25-38) land within 30 % of the middle of the real ranges (docs/performance.md, "End to end").
CALIBRATED = WriteCost(commit_ms=4.0, per_write_ms=0.2, sigma=0.75)


class GroupCommit:
    """Serialises writes into commits, etcd style (module doc). ``await write()`` returns when the commit that
    holds this write has ended. Counts what it did: :attr:`commits`, :attr:`writes` and :attr:`batches` (commit
    size → how many commits had it)."""

    def __init__(self, cost: WriteCost, *, sleep: Callable[[float], Awaitable[object]] = asyncio.sleep) -> None:
        self.cost = cost
        self.sleep = sleep
        self._rng = random.Random(cost.seed)
        self._pending: list[asyncio.Future[None]] = []
        self._committer: asyncio.Task[None] | None = None
        self.commits = 0
        self.writes = 0
        self.batches: collections.Counter[int] = collections.Counter()

    @property
    def pending(self) -> int:
        """Writes waiting for the next commit (not the one in progress)."""
        return len(self._pending)

    @property
    def committing(self) -> bool:
        return self._committer is not None

    def seconds(self, n: int) -> float:
        """The duration of one commit of ``n`` writes (a new jitter draw each time)."""
        jitter = math.exp(self._rng.gauss(0.0, self.cost.sigma)) if self.cost.sigma else 1.0
        return (self.cost.commit_ms * jitter + n * self.cost.per_write_ms) / 1000

    async def write(self) -> None:
        """Wait until a commit holding this write has ended. A cancelled caller (its client went away) leaves
        its place in the batch: the commit still costs what its other writes cost."""
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append(future)
        if self._committer is None:
            self._committer = asyncio.create_task(self._commit_loop())
        await future

    async def _commit_loop(self) -> None:
        batch: list[asyncio.Future[None]] = []
        try:
            while self._pending:
                # everything that arrived while the previous commit ran (or, for the first, at the same moment)
                batch, self._pending = self._pending, []
                await self.sleep(self.seconds(len(batch)))
                self.commits += 1
                self.writes += len(batch)
                self.batches[len(batch)] += 1
                for future in batch:
                    if not future.done():
                        future.set_result(None)
        finally:
            self._committer = None
            # only when the loop itself was cancelled (the emulator stopping): nobody is left to commit these
            for future in (*batch, *self._pending):
                if not future.done():
                    future.cancel()
            self._pending = []

    async def close(self) -> None:
        """Stop committing; writes still waiting are cancelled."""
        task, self._committer = self._committer, None
        if task is not None:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await task
