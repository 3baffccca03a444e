"""Light on the API server every controller shares (issue 35), counted by the server itself.

A burst of claims over a few tables (cache misses and hits) through the daemon, on the emulator or a real cluster:

* tether's writes per claim, from its log, are at most 3 — the binding's placement, the claim's status once, the
  DataSource's ``claimRefs`` coalesced per table, its creation per table — and at most 0.5 of them Events;
* the API server's own ``apiserver_request_total`` counts the same writes (exactly on the emulator; on a shared
  real cluster other clients may add to the counter, never take from it). The test's bindings name a scheduler
  nobody runs, so karmada-scheduler writes nothing to them in the window;
* placement first: every binding's placement was written before its claim's status (the order of the outcomes in
  tether's log: a deferred bookkeeping write starts only after its deadline, and never while a placement waits);
* nothing is dropped: once the burst ends, every claim is Bound and listed in its DataSource's ``claimRefs``.
"""

from __future__ import annotations

import asyncio
import collections
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import BINDINGS, CLAIMS, DATASOURCES
from tether.adapters.kubernetes.executor import KUBE_COMMANDS
from tether.adapters.log import aclosing_iter
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.request_metrics import request_totals, writes
from tether.adapters.testing.tether_stack import Stack, tether_stack
from tether.core.commands import command_name
from tether.core.events import CommandSucceeded
from tether.core.keys import PLACEMENT_INJECTED_ANNOTATION

pytestmark = pytest.mark.cluster

CLAIMS_N, TABLES = 30, 3
GROUP = "datadependency.volcano.sh"


@pytest.fixture
async def stack(kube: KubeEnv) -> AsyncIterator[Stack]:
    async with tether_stack(kube) as s:  # the daemon's defaults: --bookkeeping-delay 1s
        yield s


async def _outcomes(stack: Stack) -> list[tuple[CommandSucceeded, str]]:
    """tether's Kubernetes writes that changed something, in the order their outcomes were logged, each with the key
    of the event that caused its command."""
    kube_commands = {command_name(c) for c in KUBE_COMMANDS}
    log = await SqliteLog.open(str(Path(stack.tmp) / "tether.db"))
    keys: dict[str, str] = {}  # "partition:offset" → the event's key
    causes: dict[str, str] = {}  # command id → its causation
    out: list[tuple[CommandSucceeded, str]] = []
    try:
        async with aclosing_iter(log.read("commands")) as batches:
            async for batch in batches:
                causes.update((r.id, r.causation) for r in batch)  # type: ignore[union-attr]
        async with aclosing_iter(log.read("events")) as batches:
            async for batch in batches:
                for r in batch:
                    keys[f"{r.partition}:{r.offset}"] = r.key
                    event = r.event  # type: ignore[union-attr]
                    if isinstance(event, CommandSucceeded) and not event.noop and event.command in kube_commands:
                        out.append((event, keys.get(causes.get(event.command_id, ""), "")))
    finally:
        await log.close()
    return out


def _ours(stack: Stack, cause: str) -> bool:
    """Whether ``cause`` (an event's key) is this test's doing: its claims and bindings, its tables' data and
    DataSources, the outcomes of writes to them. On a shared control plane other runs add and remove Karmada
    Clusters: tether excludes each from every placed binding, as it must, but those writes are not the claims'."""
    return f"/{stack.namespace}/" in cause or f".{stack.suffix}." in cause


async def test_a_burst_is_placed_first_and_written_lightly_as_the_server_counts(stack: Stack) -> None:
    ns = stack.namespace
    tables = [stack.add_table(f"t{i}", "east") for i in range(TABLES)]
    for i in range(CLAIMS_N):
        binding = manifests.resource_binding(f"w{i}", namespace=ns)
        binding["spec"]["schedulerName"] = "nobody"  # no scheduler writes to it in the window
        await stack.apply(binding)
    await stack.wait_idle(within=30)
    before = await request_totals(stack.env.api_client)
    start = len(await _outcomes(stack))  # (the writes before the burst: none of the claims')
    await asyncio.gather(*(stack.apply(manifests.claim(f"c{i}", namespace=ns, table=tables[i % TABLES],
                                                       workload=f"w{i}")) for i in range(CLAIMS_N)))

    async def converged() -> bool:
        claims, _ = await stack.kube.list(CLAIMS, namespace=ns)
        bound = {c["metadata"]["name"] for c in claims if (c.get("status") or {}).get("phase") == "Bound"}
        sources, _ = await stack.kube.list(DATASOURCES)
        listed = {r["name"] for s in sources for r in (s.get("status") or {}).get("claimRefs") or []
                  if r.get("namespace") == ns}
        return len(bound) == len(listed & bound) == CLAIMS_N

    await stack.eventually(converged, within=60, what="every claim Bound and listed")
    await stack.wait_idle(within=30)
    after = await request_totals(stack.env.api_client)
    caused = (await _outcomes(stack))[start:]
    outcomes = [o for o, cause in caused if _ours(stack, cause)]
    foreign = len(caused) - len(outcomes)
    assert foreign == 0 or not stack.env.is_emulated  # (nobody else on the emulator)

    by_log = collections.Counter(o.command for o in outcomes)
    assert sum(by_log.values()) / CLAIMS_N <= 3.0, by_log
    assert by_log["emit_kubernetes_event"] / CLAIMS_N <= 0.5, by_log
    assert by_log["add_finalizer"] == 0 and by_log["set_binding_placement"] == CLAIMS_N, by_log
    assert by_log["update_claim_status"] == CLAIMS_N, by_log  # one status write per claim: Bound, placement in
    assert by_log["update_data_source_status"] < CLAIMS_N, by_log  # claimRefs coalesced per table

    served = writes(before, after)
    served[f"datasourceclaims.{GROUP} POST"] -= CLAIMS_N  # the test's own claims
    ours = {k: v for k, v in served.items() if v > 0 and k.split(" ")[0].split(".")[0].split("/")[0] in (
        "datasourceclaims", "datasources", "resourcebindings", "events")}
    if stack.env.is_emulated:
        assert sum(ours.values()) == sum(by_log.values()), (ours, by_log)
    else:  # a shared server: other clients may have written too
        assert sum(ours.values()) >= sum(by_log.values()) + foreign, (ours, by_log, foreign)

    placed = {o.target.split("/")[-1].removesuffix("-deployment"): i for i, o in enumerate(outcomes)
              if o.command == "set_binding_placement"}
    status = {o.target.split("/")[-1].removeprefix("c"): i for i, o in enumerate(outcomes)
              if o.command == "update_claim_status"}
    assert all(placed[f"w{i}"] < status[str(i)] for i in range(CLAIMS_N)), (placed, status)
    bindings, _ = await stack.kube.list(BINDINGS, namespace=ns)
    assert all(b["metadata"].get("annotations", {}).get(PLACEMENT_INJECTED_ANNOTATION) for b in bindings)
