"""API faults that last: one object's writes refused or slowed for as long as the fault holds, every watch dropped
or expired (410 Gone) in the middle of the work.

What is asserted, on recorded state only (no timing):

* **a fault on one object stalls nothing else** — bindings of other workloads, created while the fault holds,
  are placed while it still holds (the fault has fired again since, or the slow write is still in flight),
  whatever the fault: 500, 429 with Retry-After, 409 on every write, or a slow answer;
* **everything converges once the fault ends**;
* **no write repeats for ever** — each failed command of the victim is a bounded number of requests (the executor's
  budget, counted by the emulator per object), and once converged a full relist of everything (every watch expired:
  410 → list) makes **no write at all** (level-triggered: nothing differs, so nothing is sent).

That the executor honours Retry-After is tests/integration/test_executor.py
(``test_retry_after_is_honoured_and_a_long_one_fails_at_once``); the shorter faults of test_faults.py stay.
"""

from __future__ import annotations

import collections
from collections.abc import AsyncIterator
from typing import Any

import pytest

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import DATASOURCES
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, tether_stack
from tether.core.events import CommandFailed, ObjectsListed

EXECUTOR_BUDGET = 1 + 5  # requests of one command at most: a first try and 5 re-reads on conflict (3 on errors)


# what the emulator gives that a real API server does not: faults on demand, and writes counted per object
WHY = ("holds API faults on one object (500, 429, 409, slowness), drops and expires every watch, and counts writes "
       "per object: the emulator's fault rules and write counter; a real API server takes no such orders")


@pytest.fixture
async def stack(kube: KubeEnv, fast_retries: None) -> AsyncIterator[Stack]:
    kube.require_emulator(WHY)
    async with tether_stack(kube) as s:
        yield s


async def _workload(stack: Stack, name: str, table: str) -> None:
    await stack.apply(manifests.resource_binding(f"{name}-app", namespace=stack.namespace))
    await stack.apply(manifests.claim(name, namespace=stack.namespace, table=table, workload=f"{name}-app"))


async def _events(stack: Stack) -> list[Any]:
    assert stack.log is not None
    out = []
    async for batch in stack.log.read("events"):
        out.extend(record.event for record in batch)  # type: ignore[union-attr]
    return out


async def _failures(stack: Stack, key: str) -> int:
    return sum(1 for e in await _events(stack) if isinstance(e, CommandFailed) and e.target == key)


def _writes(stack: Stack) -> collections.Counter[tuple[str, str, str]]:
    emulator = stack.env.require_emulator(WHY)
    return emulator.faults.writes()


async def _quiescent_after_relist(stack: Stack) -> None:
    """Expire every watch (410 → a relist of everything: every object reconciled once) and show that, converged,
    that makes no write at all."""
    emulator = stack.env.require_emulator(WHY)
    assert stack.daemon is not None
    await stack.wait_idle(within=20)
    before = _writes(stack)
    listed = sum(1 for e in await _events(stack) if isinstance(e, ObjectsListed))
    relists = sum(s.relists for s in stack.daemon.sources)
    emulator.faults.expire_watches()

    async def relisted() -> bool:
        # every source listed again, and the lists' ends are in the log (the reconciliation follows them)
        now = sum(1 for e in await _events(stack) if isinstance(e, ObjectsListed))
        return sum(s.relists for s in stack.daemon.sources) >= relists + len(stack.daemon.sources) and \
            now >= listed + len(stack.daemon.sources)

    await stack.eventually(relisted, what="every watch expired and relisted")
    await stack.wait_idle(within=20)
    after = _writes(stack)
    assert after == before, {k: after[k] - before[k] for k in after if after[k] != before[k]}


FAULTS = {
    "500": {"code": 500},
    "429-retry-after": {"code": 429, "retry_after": 1},
    "409": {"code": 409},
    "slow": {"latency": 8.0},
}


@pytest.mark.parametrize("fault", list(FAULTS), ids=list(FAULTS))
async def test_a_fault_on_one_binding_stalls_nothing_else_and_converges(stack: Stack, fault: str) -> None:
    emulator = stack.env.require_emulator(WHY)
    table = stack.add_table("shared", "east")
    west = [stack.clusters["west1"]]
    victim = "victim-app-deployment"
    options = dict(FAULTS[fault])
    if "latency" in options:
        rule = emulator.faults.add_latency(options.pop("latency"), verb="patch", resource="resourcebindings",
                                           name=victim)
    else:
        rule = emulator.faults.fail(verb="patch", resource="resourcebindings", name=victim, times=None, **options)
    await _workload(stack, "victim", table)
    await stack.eventually(lambda: _fired(rule, 1), what="the fault hit the victim's binding")
    others = [f"other{i}" for i in range(3)]
    for name in others:
        await _workload(stack, name, table)
    for name in others:  # placed while the fault holds ...
        await stack.wait_excluded(f"{name}-app-deployment", west, within=20)
    if fault == "slow":
        assert rule.in_flight == 1  # ... while the victim's write is still held by the slow answer
    else:
        fired = rule.fired
        await stack.eventually(lambda: _fired(rule, fired + 1), what="... and still holds")  # (it fired since)
    if fault != "slow":
        key = f"ResourceBinding/{stack.namespace}/{victim}"
        await stack.eventually(lambda: _failures(stack, key), what="a failed command of the victim in the log")
        # the writes first, then the failures: every write counted belongs to a command that has failed by the time
        # the failures are read, or to the one command under way (read the other way round, a command could fail
        # and its successor start writing in between)
        writes = _writes(stack)[("resourcebindings", stack.namespace, victim)]
        failures = await _failures(stack, key)
        # each failed command is a bounded number of requests; one more command may be under way
        assert writes <= (failures + 1) * EXECUTOR_BUDGET, (writes, failures)
    emulator.faults.clear()
    await stack.wait_excluded(victim, west, within=20)  # converges once the fault ends
    for name in ["victim", *others]:
        await stack.wait_claim(name, phase="Bound")
    await _quiescent_after_relist(stack)


async def _fired(rule: Any, n: int) -> bool:
    return bool(rule.fired >= n)


async def test_watches_dropped_and_expired_mid_run_lose_nothing(stack: Stack) -> None:
    """Every watch dropped, then expired (410 Gone: the daemon relists), while claims arrive: every claim ends
    Bound with one DataSource per table, every binding placed, and a relist of the converged state writes nothing."""
    emulator = stack.env.require_emulator(WHY)
    tables = [stack.add_table(f"t{i}", "east") for i in range(3)]
    names = [f"w{i}" for i in range(12)]
    for i, name in enumerate(names):
        await _workload(stack, name, tables[i % 3])
        if i % 4 == 1:
            emulator.faults.drop_watches()
        elif i % 4 == 3:
            emulator.faults.expire_watches()
    for name in names:
        await stack.wait_claim(name, phase="Bound", within=20)
        await stack.wait_excluded(f"{name}-app-deployment", [stack.clusters["west1"]])
    sources, _ = await stack.kube.list(DATASOURCES)
    ours = [s["spec"]["name"] for s in sources if s["spec"]["name"] in tables]
    assert sorted(ours) == sorted(tables)  # one DataSource per table, none twice
    assert stack.daemon is not None and any(s.relists > 1 for s in stack.daemon.sources)  # 410 → relisted
    await _quiescent_after_relist(stack)


