"""Leader election with a ``coordination.k8s.io/v1`` Lease, the way client-go's leaderelection does it.

Only the leader watches and decides; a second replica stands by and takes over when the leader stops renewing
(crash, partition, rollout). Every write goes through the Lease's resourceVersion, so two candidates racing for
an expired Lease cannot both win: one gets 409 and keeps waiting. A leader that cannot renew within
``renew_deadline`` gives up *before* its Lease can expire and be taken, and the daemon then stops its loops
(like controller-runtime, leaving a clean restart to the supervisor) — two leaders never act at once for longer
than clock skew allows.

**The Lease's namespace** (``--lease-namespace``, ``tether-system`` by default) is created when it does not exist
(``ops/deploy`` creates it, so a deployed tether never needs the right; a ``tether run`` from a laptop usually has
it). When it cannot be created, or the Lease may not be read or written, the campaign says so in one line naming
the namespace and the permissions needed — once per distinct problem, not every ``retry_period`` — and keeps
trying (the namespace or the grant may come later); ``/readyz`` of the standby repeats it.

**Time is injected.** ``clock`` (seconds since the epoch: the Lease's timestamps are wall times that every
candidate compares) and ``sleep`` are keyword arguments, so tests drive an election with a manual clock
(``adapters/testing/clock.py``) and assert on what happened instead of sleeping through lease durations. The
renew deadline is measured with the same clock — the one the other candidates judge expiry by; a wall clock
that jumps forward makes the leader give up early, which is the safe direction. :attr:`LeaderElector.attempts`
counts finished attempts (acquire or renew), so a test can wait for "one more attempt" rather than for a time.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import structlog

from .client import LEASES, KubeClient, KubeError, Resource

log = structlog.get_logger("tether.leader")

NAMESPACES = Resource("", "v1", "namespaces", "Namespace", False)


class LeaseProblem(Exception):
    """Why this candidate cannot campaign at all (a missing namespace, a missing permission): one line for people."""


def _micro_time(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _parse(ts: str | None) -> float:
    if not ts:
        return 0.0
    return datetime.fromisoformat(ts.replace("Z", "+00:00")).timestamp()


class LeaderElector:
    def __init__(self, kube: KubeClient, *, namespace: str, name: str, identity: str, lease_duration: float = 15.0,
                 renew_deadline: float = 10.0, retry_period: float = 2.0,
                 clock: Callable[[], float] = time.time,
                 sleep: Callable[[float], Awaitable[None]] = asyncio.sleep) -> None:
        if lease_duration < 1:  # leaseDurationSeconds is an integer: a shorter lease would be written as 0
            raise ValueError(f"lease_duration must be at least 1 s, not {lease_duration}")
        self.kube = kube
        self.namespace = namespace
        self.name = name
        self.identity = identity
        self.lease_duration = lease_duration
        self.renew_deadline = renew_deadline
        self.retry_period = retry_period
        self.clock = clock
        self.sleep = sleep
        self.is_leader = asyncio.Event()
        self.lost = asyncio.Event()
        self.holder = ""  # who held the Lease at the last look (this replica once it acquires it): GET /status
        self.problem = ""  # the last LeaseProblem, until a campaign round goes through
        self.attempts = 0  # finished attempts to acquire or renew, whatever their outcome (module doc)

    def _forbidden(self, verb: str, exc: KubeError) -> LeaseProblem:
        return LeaseProblem(
            f"leader election: may not {verb} the Lease {self.namespace}/{self.name} ({exc.status} {exc.reason}): "
            f"tether needs get, create and update on leases.coordination.k8s.io in namespace {self.namespace} "
            "(the chart's Role tether-leader-election), or --lease-namespace of a namespace where it has them, or "
            "--no-leader-elect for a single replica")

    async def _call(self, verb: str, call: Any) -> Any:
        """``await call``, a 401/403 turned into the :class:`LeaseProblem` that says what to grant."""
        try:
            return await call
        except KubeError as exc:
            if exc.status in (401, 403):
                raise self._forbidden(verb, exc) from exc
            raise

    async def _create_namespace(self) -> None:
        """Create the Lease's namespace (module doc); a :class:`LeaseProblem` when that is not allowed."""
        body = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": self.namespace}}
        try:
            await self.kube.create(NAMESPACES, body)
        except KubeError as exc:
            if exc.status == 409:
                return  # created meanwhile (another replica)
            raise LeaseProblem(
                f"leader election: the Lease namespace {self.namespace} does not exist and tether could not create it "
                f"({exc.status} {exc.reason}): create it (kubectl create namespace {self.namespace}) or pass "
                "--lease-namespace of an existing one, where tether needs get, create and update on "
                "leases.coordination.k8s.io; or --no-leader-elect for a single replica") from exc
        log.info("created the Lease namespace", namespace=self.namespace)

    async def _create_lease(self, body: dict[str, Any]) -> None:
        try:
            await self._call("create", self.kube.create(LEASES, body, namespace=self.namespace))
        except KubeError as exc:
            if exc.status != 404:  # 404 on a create: the namespace does not exist
                raise
            await self._create_namespace()
            await self._call("create", self.kube.create(LEASES, body, namespace=self.namespace))

    def _spec(self, *, acquire: float, transitions: int) -> dict[str, Any]:
        now = self.clock()
        return {"holderIdentity": self.identity, "leaseDurationSeconds": int(self.lease_duration),
                "acquireTime": _micro_time(acquire), "renewTime": _micro_time(now), "leaseTransitions": transitions}

    async def try_acquire_or_renew(self) -> bool:
        lease = await self._call("get", self.kube.get(LEASES, self.name, namespace=self.namespace))
        now = self.clock()
        if lease is None:
            body = {"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
                    "metadata": {"name": self.name, "namespace": self.namespace},
                    "spec": self._spec(acquire=now, transitions=0)}
            try:
                await self._create_lease(body)
            except KubeError as exc:
                if exc.status == 409:
                    return False
                raise
            return True
        spec = lease.get("spec") or {}
        holder = self.holder = spec.get("holderIdentity") or ""
        transitions = int(spec.get("leaseTransitions") or 0)
        if holder == self.identity:
            new = self._spec(acquire=_parse(spec.get("acquireTime")) or now, transitions=transitions)
        else:
            expires = _parse(spec.get("renewTime")) + float(spec.get("leaseDurationSeconds") or self.lease_duration)
            if holder and expires > now:
                return False
            new = self._spec(acquire=now, transitions=transitions + 1)
        lease["spec"] = new
        try:
            await self._call("update", self.kube.replace(LEASES, self.name, lease, namespace=self.namespace))
        except KubeError as exc:
            if exc.status == 409:
                return False
            raise
        return True

    async def release(self) -> bool:
        """Give the Lease up (a graceful stop), so a standby takes over at once instead of after the lease
        duration — client-go's ``ReleaseOnCancel``. Only a Lease this candidate holds is touched."""
        if not self.is_leader.is_set() or self.lost.is_set():
            return False
        try:
            lease = await self.kube.get(LEASES, self.name, namespace=self.namespace)
            if lease is None or (lease.get("spec") or {}).get("holderIdentity") != self.identity:
                return False
            now = _micro_time(self.clock())
            lease["spec"] = {**lease["spec"], "holderIdentity": "", "leaseDurationSeconds": 1,
                             "acquireTime": now, "renewTime": now}
            await self.kube.replace(LEASES, self.name, lease, namespace=self.namespace)
        except KubeError as exc:
            log.warning("could not release the lease", status=exc.status, message=exc.message[:200])
            return False
        self.is_leader.clear()
        log.info("released the lease", lease=f"{self.namespace}/{self.name}", identity=self.identity)
        return True

    async def _attempt(self) -> bool:
        try:
            return await self.try_acquire_or_renew()
        finally:
            self.attempts += 1

    async def run(self) -> None:
        """Campaign until leader, then renew until cancelled or lost (sets :attr:`lost`)."""
        while not self.is_leader.is_set():
            try:
                acquired = await self._attempt()
                self.problem = ""
                if acquired:
                    self.is_leader.set()
                    log.info("became leader", lease=f"{self.namespace}/{self.name}", identity=self.identity)
                    break
            except LeaseProblem as exc:
                if str(exc) != self.problem:  # once per distinct problem (module doc)
                    log.error(str(exc))
                self.problem = str(exc)
            except KubeError as exc:
                log.warning("leader election failed; retrying", status=exc.status, message=exc.message[:200])
            await self.sleep(self.retry_period)
        last_renew = self.clock()
        while True:
            await self.sleep(self.retry_period)
            try:
                if await self._attempt():
                    last_renew = self.clock()
                    continue
            except (KubeError, LeaseProblem) as exc:
                log.warning("lease renewal failed", error=str(exc)[:300])
            if self.clock() - last_renew > self.renew_deadline:
                log.error("lost leadership", lease=f"{self.namespace}/{self.name}", identity=self.identity)
                self.is_leader.clear()
                self.lost.set()
                return
