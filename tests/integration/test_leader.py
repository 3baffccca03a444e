"""Leader election on one Lease (``adapters/kubernetes/leader.py``): races, renewal failure, a lost Lease.

Every test drives time through the electors' ``clock``/``sleep`` with a :class:`ManualClock`: leases keep
client-go's durations (15 s / 10 s / 2 s) and no test waits for them. "The candidate tried again and still does
not lead" is asserted after its attempt counter moved, never after a sleep. The API is the emulator (or a real
cluster with ``TETHER_TEST_KUBECONFIG``, where the Lease writes refused on demand are refused by its RBAC:
:class:`Refusals`).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tether.adapters.kubernetes.client import LEASES, KubeClient, KubeError, Resource
from tether.adapters.kubernetes.leader import LeaderElector, LeaseProblem, _micro_time
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.clock import ManualClock, next_attempt

LEASE = {"lease_duration": 15.0, "renew_deadline": 10.0, "retry_period": 2.0}


@pytest.fixture
def clock() -> ManualClock:
    return ManualClock()


def elector(kube: KubeClient, env: KubeEnv, clock: ManualClock, identity: str, name: str,
            **options: Any) -> LeaderElector:
    return LeaderElector(kube, namespace=env.namespace, name=name, identity=identity, clock=clock.time,
                         sleep=clock.sleep, **{**LEASE, **options})


@pytest.fixture
def lease_name() -> str:
    return f"lease-{secrets.token_hex(3)}"


@pytest.fixture
async def running() -> AsyncIterator[list[asyncio.Task[None]]]:
    """Tasks of ``LeaderElector.run`` started by a test; cancelled at its end."""
    tasks: list[asyncio.Task[None]] = []
    yield tasks
    for task in tasks:
        task.cancel()
    await asyncio.gather(*tasks, return_exceptions=True)


async def turn(clock: ManualClock, electors: list[LeaderElector], *, parked: int | None = None) -> None:
    """One retry period: each elector has made its next attempt and is parked again (``parked``: how many)."""
    await next_attempt(clock, electors, seconds=LEASE["retry_period"], parked=parked)


async def lease(kube: KubeClient, env: KubeEnv, name: str) -> dict[str, Any]:
    got = await kube.get(LEASES, name, namespace=env.namespace)
    assert got is not None
    return got


class Refusals:
    """Lease writes the API server refuses on demand. On the emulator its fault rules (a 500); on a real control
    plane its RBAC (a 403): the electors act as a ServiceAccount of the test's namespace, granted get, create and
    update on leases, and the verbs refused are revoked — the real server's refusal, whatever its code."""

    def __init__(self, env: KubeEnv) -> None:
        self.env = env
        self.user = ""
        self.grant = ""

    async def client(self) -> KubeClient:
        if self.env.emulator is not None:
            return KubeClient(self.env.api_client)
        api, self.user = await self.env.client_without_rights()
        await self.allow()
        return KubeClient(api)

    async def allow(self, verbs: tuple[str, ...] = ("get", "create", "update")) -> None:
        if self.env.emulator is not None:
            self.env.emulator.faults.clear()
            return
        if self.grant:
            await self.env.revoke(self.grant, self.user, verb="get", resource="leases", api_group=LEASE_GROUP)
        self.grant = await self.env.grant(self.user, verbs=list(verbs), resources=["leases"], api_group=LEASE_GROUP)

    async def refuse(self, *verbs: str) -> None:
        """Refuse ``verbs`` from now on (until :meth:`allow`)."""
        if self.env.emulator is not None:
            for verb in verbs:
                self.env.emulator.faults.fail(code=500, verb=verb, resource="leases", times=None)
            return
        kept = tuple(v for v in ("get", "create", "update") if v not in verbs)
        await self.env.revoke(self.grant, self.user, verb=verbs[0], resource="leases", api_group=LEASE_GROUP)
        self.grant = await self.env.grant(self.user, verbs=list(kept), resources=["leases"],
                                          api_group=LEASE_GROUP) if kept else ""


LEASE_GROUP = "coordination.k8s.io"


class ReadTogether(KubeClient):
    """A client whose Lease GETs all return only once ``parties`` of them have read: every candidate decides from
    the same version, and their writes then race on its resourceVersion (the interleaving of a real race)."""

    def __init__(self, inner: KubeClient, barrier: asyncio.Barrier) -> None:
        super().__init__(inner.api)
        self._barrier = barrier

    async def get(self, res: Resource, name: str, *, namespace: str = "") -> dict[str, Any] | None:
        got = await super().get(res, name, namespace=namespace)
        await self._barrier.wait()
        return got


async def test_two_candidates_creating_the_lease_at_once_one_wins(kube: KubeEnv, clock: ManualClock,
                                                                   lease_name: str) -> None:
    barrier = asyncio.Barrier(2)
    base = KubeClient(kube.api_client)
    a, b = (elector(ReadTogether(base, barrier), kube, clock, who, lease_name) for who in ("a", "b"))
    won = await asyncio.gather(a.try_acquire_or_renew(), b.try_acquire_or_renew())
    assert sorted(won) == [False, True]  # both saw no Lease; the API let one create it (the other got 409)
    winner = "a" if won[0] else "b"
    assert (await lease(base, kube, lease_name))["spec"]["holderIdentity"] == winner


async def test_two_candidates_taking_an_expired_lease_at_once_one_wins(kube: KubeEnv, clock: ManualClock,
                                                                       lease_name: str) -> None:
    base = KubeClient(kube.api_client)
    old = elector(base, kube, clock, "gone", lease_name)
    assert await old.try_acquire_or_renew()
    clock.advance(LEASE["lease_duration"] + 1)  # the holder stopped renewing: expired
    barrier = asyncio.Barrier(2)
    a, b = (elector(ReadTogether(base, barrier), kube, clock, who, lease_name) for who in ("a", "b"))
    won = await asyncio.gather(a.try_acquire_or_renew(), b.try_acquire_or_renew())
    assert sorted(won) == [False, True]  # both replaced the same version; one got 409
    spec = (await lease(base, kube, lease_name))["spec"]
    assert spec["holderIdentity"] == ("a" if won[0] else "b") and spec["leaseTransitions"] == 1


async def test_of_two_running_candidates_exactly_one_leads(kube: KubeEnv, clock: ManualClock, lease_name: str,
                                                           running: list[asyncio.Task[None]]) -> None:
    base = KubeClient(kube.api_client)
    candidates = [elector(base, kube, clock, who, lease_name) for who in ("a", "b")]
    running.extend(asyncio.create_task(c.run()) for c in candidates)
    await clock.settle(2)
    for _ in range(12):  # well past a lease duration: the leader renews, the other keeps waiting
        leading = [c.identity for c in candidates if c.is_leader.is_set()]
        assert len(leading) == 1, leading
        assert (await lease(base, kube, lease_name))["spec"]["holderIdentity"] == leading[0]
        await turn(clock, candidates)
    assert not any(c.lost.is_set() for c in candidates)
    assert all(c.attempts >= 12 for c in candidates)


async def test_renewal_failing_past_the_deadline_gives_leadership_up(kube: KubeEnv, clock: ManualClock,
                                                                     lease_name: str,
                                                                     running: list[asyncio.Task[None]]) -> None:
    refusals = Refusals(kube)
    leader = elector(await refusals.client(), kube, clock, "leader", lease_name)
    running.append(task := asyncio.create_task(leader.run()))
    await clock.settle(1)
    assert leader.is_leader.is_set()
    await refusals.refuse("get", "update")  # every renewal fails from now on
    for _ in range(5):  # 10 s of failed renewals: not past the deadline yet
        await turn(clock, [leader])
        assert leader.is_leader.is_set() and not leader.lost.is_set()
    await turn(clock, [leader], parked=0)  # 12 s: past renew_deadline, still before the Lease expires (15 s)
    assert leader.lost.is_set()
    assert not leader.is_leader.is_set()  # it stops saying it leads: the daemon's readiness and release read this
    await asyncio.wait_for(task, 5)
    await refusals.allow()
    assert not await leader.release()  # a candidate that lost leadership touches the Lease no more


async def test_another_holder_taking_the_lease_is_lost_leadership(kube: KubeEnv, clock: ManualClock,
                                                                  lease_name: str,
                                                                  running: list[asyncio.Task[None]]) -> None:
    base = KubeClient(kube.api_client)
    leader = elector(base, kube, clock, "leader", lease_name)
    running.append(task := asyncio.create_task(leader.run()))
    await clock.settle(1)
    assert leader.is_leader.is_set()
    # someone else writes the Lease as theirs (a split brain in the making, or an operator's hand)
    taken = await lease(base, kube, lease_name)
    now = _micro_time(clock.time())
    taken["spec"].update(holderIdentity="intruder", renewTime=now, acquireTime=now)
    await base.replace(LEASES, lease_name, taken, namespace=kube.namespace)
    for _ in range(5):
        await turn(clock, [leader])
        assert not leader.lost.is_set()
    await turn(clock, [leader], parked=0)
    assert leader.lost.is_set() and not leader.is_leader.is_set()
    await asyncio.wait_for(task, 5)
    assert not await leader.release()
    assert (await lease(base, kube, lease_name))["spec"]["holderIdentity"] == "intruder"  # never overwritten


async def leader_and_standby(base: KubeClient, kube: KubeEnv, clock: ManualClock, lease_name: str,
                             running: list[asyncio.Task[None]]) -> tuple[LeaderElector, LeaderElector,
                                                                         asyncio.Task[None]]:
    """"first" started a second before "standby", two seconds of the clock later: ``(first, standby, first's
    task)``."""
    first, standby = (elector(base, kube, clock, who, lease_name) for who in ("first", "standby"))
    running.append(first_task := asyncio.create_task(first.run()))
    await clock.settle(1)
    running.append(asyncio.create_task(standby.run()))
    await clock.settle(2)
    return first, standby, first_task


async def test_a_standby_takes_an_abandoned_lease_only_after_it_expires(kube: KubeEnv, clock: ManualClock,
                                                                        lease_name: str,
                                                                        running: list[asyncio.Task[None]]) -> None:
    base = KubeClient(kube.api_client)
    first, standby, crashed = await leader_and_standby(base, kube, clock, lease_name, running)
    assert first.is_leader.is_set() and not standby.is_leader.is_set()
    crashed.cancel()  # a crash: no release, the Lease stays as last renewed
    await asyncio.gather(crashed, return_exceptions=True)
    for _ in range(7):  # 14 s since the last renewal: not expired, the standby waits
        await turn(clock, [standby])
        assert not standby.is_leader.is_set()
    await turn(clock, [standby])  # 16 s: expired
    assert standby.is_leader.is_set()
    spec = (await lease(base, kube, lease_name))["spec"]
    assert spec["holderIdentity"] == "standby" and spec["leaseTransitions"] == 1


async def test_a_released_lease_is_taken_at_the_next_attempt(kube: KubeEnv, clock: ManualClock, lease_name: str,
                                                             running: list[asyncio.Task[None]]) -> None:
    base = KubeClient(kube.api_client)
    first, standby, leading = await leader_and_standby(base, kube, clock, lease_name, running)
    leading.cancel()
    await asyncio.gather(leading, return_exceptions=True)
    assert await first.release()  # a graceful stop hands the Lease over
    assert not first.is_leader.is_set()
    await turn(clock, [standby])  # one retry period later: past the released Lease's 1 s
    assert standby.is_leader.is_set()


def test_a_lease_shorter_than_a_second_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 s"):
        LeaderElector(None, namespace="n", name="l", identity="i", lease_duration=0.5)  # type: ignore[arg-type]


async def test_a_failing_lease_write_is_never_taken_for_leadership(kube: KubeEnv, clock: ManualClock,
                                                                  lease_name: str) -> None:
    """The API refusing the write (a 500 on the create or on the update, not a 409) is no leadership: only a write
    the API accepted is."""
    refusals = Refusals(kube)
    base = KubeClient(kube.api_client)
    candidate = elector(await refusals.client(), kube, clock, "candidate", lease_name)
    await refusals.refuse("create")
    with pytest.raises((KubeError, LeaseProblem)):  # (a 403 is a problem to report: LeaseProblem)
        await candidate.try_acquire_or_renew()
    assert await base.get(LEASES, lease_name, namespace=kube.namespace) is None
    await refusals.allow()
    assert await candidate.try_acquire_or_renew()  # (the API answers again)
    await refusals.refuse("update")
    with pytest.raises((KubeError, LeaseProblem)):
        await candidate.try_acquire_or_renew()  # the renewal's write failed: not renewed


async def test_renewals_failing_only_on_the_write_give_leadership_up(kube: KubeEnv, clock: ManualClock,
                                                                     lease_name: str,
                                                                     running: list[asyncio.Task[None]]) -> None:
    refusals = Refusals(kube)
    leader = elector(await refusals.client(), kube, clock, "leader", lease_name)
    running.append(asyncio.create_task(leader.run()))
    await clock.settle(1)
    for _ in range(8):  # renewing well past a renew deadline: the deadline runs from the last renewal
        await turn(clock, [leader])
    await refusals.refuse("update")  # every write fails from now on
    await turn(clock, [leader])  # one failed renewal, right after a good one: still the leader
    assert leader.is_leader.is_set() and not leader.lost.is_set()
    for _ in range(4):  # reads succeed, every write fails: 10 s since the last renewal, not past the deadline
        await turn(clock, [leader])
        assert leader.is_leader.is_set()
    await turn(clock, [leader], parked=0)  # 12 s
    assert leader.lost.is_set() and not leader.is_leader.is_set()


async def test_release_touches_only_a_lease_this_candidate_holds(kube: KubeEnv, clock: ManualClock,
                                                                 lease_name: str) -> None:
    refusals = Refusals(kube)
    base = await refusals.client()
    first, other = (elector(base, kube, clock, who, lease_name) for who in ("first", "other"))
    assert not await other.release()  # never led: nothing to release
    assert await first.try_acquire_or_renew()
    first.is_leader.set()
    taken = await lease(base, kube, lease_name)
    now = _micro_time(clock.time())
    taken["spec"].update(holderIdentity="other", renewTime=now, acquireTime=now)
    await base.replace(LEASES, lease_name, taken, namespace=kube.namespace)
    # taken over before this candidate noticed (it still believes it leads): its release must not hand the new
    # holder's Lease away
    assert not await first.release()
    assert (await lease(base, kube, lease_name))["spec"]["holderIdentity"] == "other"
    other.is_leader.set()
    await refusals.refuse("update")
    assert not await other.release()  # the API refused it: not released, says so
    await refusals.allow()
    assert (await lease(base, kube, lease_name))["spec"]["holderIdentity"] == "other"


async def test_the_lease_keeps_its_acquire_time_and_counts_every_transition(kube: KubeEnv, clock: ManualClock,
                                                                            lease_name: str) -> None:
    base = KubeClient(kube.api_client)
    a, b = (elector(base, kube, clock, who, lease_name) for who in ("a", "b"))
    assert await a.try_acquire_or_renew()
    acquired = (await lease(base, kube, lease_name))["spec"]["acquireTime"]
    clock.advance(2)
    assert await a.try_acquire_or_renew()  # a renewal keeps the acquire time
    spec = (await lease(base, kube, lease_name))["spec"]
    assert spec["acquireTime"] == acquired and spec["renewTime"] != acquired and spec["leaseTransitions"] == 0
    for holder, n in ((b, 1), (a, 2), (b, 3)):  # each takeover of an expired Lease counts
        clock.advance(LEASE["lease_duration"] + 1)
        assert await holder.try_acquire_or_renew()
        assert (await lease(base, kube, lease_name))["spec"]["leaseTransitions"] == n


async def test_the_holders_lease_duration_decides_expiry_not_the_candidates(kube: KubeEnv, clock: ManualClock,
                                                                            lease_name: str) -> None:
    """Replicas configured differently (a rollout changing the lease duration): expiry is judged by the duration
    the holder wrote into the Lease."""
    base = KubeClient(kube.api_client)
    slow = elector(base, kube, clock, "slow", lease_name, lease_duration=40.0)
    eager = elector(base, kube, clock, "eager", lease_name)  # 15 s
    assert await slow.try_acquire_or_renew()
    clock.advance(20)  # expired by the candidate's 15 s, not by the holder's 40 s
    assert not await eager.try_acquire_or_renew()
    clock.advance(21)
    assert await eager.try_acquire_or_renew()


def test_a_lease_of_one_second_is_accepted() -> None:
    assert LeaderElector(None, namespace="n", name="l", identity="i",  # type: ignore[arg-type]
                         lease_duration=1.0).lease_duration == 1.0
