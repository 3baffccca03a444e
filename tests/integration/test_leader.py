"""Leader election on one Lease (``adapters/kubernetes/leader.py``): races, renewal failure, a lost Lease.

Every test drives time through the electors' ``clock``/``sleep`` with a :class:`ManualClock`: leases keep
client-go's durations (15 s / 10 s / 2 s) and no test waits for them. "The candidate tried again and still does
not lead" is asserted after its attempt counter moved, never after a sleep. The API is the emulator (or a real
cluster with ``TETHER_TEST_KUBECONFIG``; the fault-injection test needs the emulator).
"""

from __future__ import annotations

import asyncio
import secrets
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tether.adapters.kubernetes.client import LEASES, KubeClient, Resource
from tether.adapters.kubernetes.leader import LeaderElector, _micro_time
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
    emulator = kube.require_emulator("injects API errors on the Lease")
    leader = elector(KubeClient(kube.api_client), kube, clock, "leader", lease_name)
    running.append(task := asyncio.create_task(leader.run()))
    await clock.settle(1)
    assert leader.is_leader.is_set()
    emulator.faults.fail(code=500, resource="leases", times=None)  # every renewal fails from now on
    for _ in range(5):  # 10 s of failed renewals: not past the deadline yet
        await turn(clock, [leader])
        assert leader.is_leader.is_set() and not leader.lost.is_set()
    await turn(clock, [leader], parked=0)  # 12 s: past renew_deadline, still before the Lease expires (15 s)
    assert leader.lost.is_set()
    assert not leader.is_leader.is_set()  # it stops saying it leads: the daemon's readiness and release read this
    await asyncio.wait_for(task, 5)
    emulator.faults.clear()
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


async def test_a_standby_takes_an_abandoned_lease_only_after_it_expires(kube: KubeEnv, clock: ManualClock,
                                                                        lease_name: str,
                                                                        running: list[asyncio.Task[None]]) -> None:
    base = KubeClient(kube.api_client)
    first, standby = (elector(base, kube, clock, who, lease_name) for who in ("first", "standby"))
    running.append(crashed := asyncio.create_task(first.run()))
    await clock.settle(1)
    running.append(asyncio.create_task(standby.run()))
    await clock.settle(2)
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
    first, standby = (elector(base, kube, clock, who, lease_name) for who in ("first", "standby"))
    running.append(leading := asyncio.create_task(first.run()))
    await clock.settle(1)
    running.append(asyncio.create_task(standby.run()))
    await clock.settle(2)
    leading.cancel()
    await asyncio.gather(leading, return_exceptions=True)
    assert await first.release()  # a graceful stop hands the Lease over
    assert not first.is_leader.is_set()
    await turn(clock, [standby])  # one retry period later: past the released Lease's 1 s
    assert standby.is_leader.is_set()


def test_a_lease_shorter_than_a_second_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1 s"):
        LeaderElector(None, namespace="n", name="l", identity="i", lease_duration=0.5)  # type: ignore[arg-type]
