"""Catalog faults end to end: a sick catalog (half its answers 503, every answer 2 s late) for some tables, and a
catalog that answers garbage.

* Claims on healthy tables are bound while the sick tables' lookups are still in flight (the sandbox says so:
  ``in_flight``), and every claim converges, sick or not, while the faults still hold (each lookup that is
  answered 503 is asked again). The limit this relies on: fewer sick tables than the catalog's ``concurrency``
  (8 by default) — a lookup holds one of those slots while it waits, so a catalog slow on ``concurrency`` tables
  at once delays its other tables' lookups too (other catalogs are not affected: docs/operations.md, Guarantees).
* Garbage — wrong JSON, JSON of the wrong types, a huge body, an endless stream — leaves the claim ``Pending``
  with ``LookupFailed`` and a message that says what was wrong; the daemon keeps serving (another claim binds
  meanwhile), and the claim binds once the catalog answers properly. The bounds on size and time that make this
  safe are tested on the resolver itself (tests/catalog/test_hostile_answers.py).
"""

from __future__ import annotations

import pytest

from tether.adapters.kubernetes import manifests
from tether.adapters.kubernetes.client import DATASOURCES
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import Stack, claim_condition, tether_stack


async def _workload(stack: Stack, name: str, table: str) -> None:
    await stack.apply(manifests.resource_binding(f"{name}-app", namespace=stack.namespace))
    await stack.apply(manifests.claim(name, namespace=stack.namespace, table=table, workload=f"{name}-app"))


async def test_a_sick_catalog_table_delays_only_its_own_claims(kube: KubeEnv, fast_retries: None) -> None:
    slow = {"retryConfig": {"maxRetries": 1, "initialBackoff": "10ms", "maxBackoff": "50ms", "timeout": "5s"}}
    async with tether_stack(kube, plugin_options=slow, catalog_options={"random_seed": 23}) as stack:
        sick = [stack.add_table(f"sick{i}", "east") for i in range(4)]
        healthy = [stack.add_table(f"well{i}", "east") for i in range(3)]
        refused = [stack.catalog.fail_next(10_000, status=503, table=table, probability=0.5) for table in sick]
        for table in sick:
            stack.catalog.delay_next(10_000, 2.0, table=table)
        for i, table in enumerate(sick):  # the sick ones first: their lookups are in flight when the others come
            await _workload(stack, f"s{i}", table)
        await stack.eventually(lambda: _in_flight(stack, 4), what="the sick tables' lookups in flight")
        for i, table in enumerate(healthy):
            await _workload(stack, f"h{i}", table)
        for i in range(len(healthy)):
            await stack.wait_claim(f"h{i}", phase="Bound", within=20)
        assert stack.catalog.in_flight >= 1  # ... bound while the sick lookups are still waiting
        for i in range(len(sick)):  # converge with the faults still on: a 503 is asked again, a delay waited out
            await stack.wait_claim(f"s{i}", phase="Bound", within=60)
            await stack.wait_excluded(f"s{i}-app-deployment", [stack.clusters["west1"]])
        sources, _ = await stack.kube.list(DATASOURCES)
        names = [s["spec"]["name"] for s in sources if s["spec"]["name"] in sick + healthy]
        assert sorted(names) == sorted(sick + healthy)  # one DataSource per table, none twice
        for table in healthy:
            assert stack.catalog.requests_for(table) == 1
        assert sum(rule.fired for rule in refused) >= 1  # (seeded: some sick lookups were answered 503)


async def _in_flight(stack: Stack, n: int) -> bool:
    return stack.catalog.in_flight >= n


GARBAGE = {
    "wrong-json": ("garbage", {"body": "{'metadata': nope"}, "malformed LoadTableResponse"),
    "wrong-types": ("garbage", {"body": '{"metadata": {"location": ["s3://a"]}}'},
                    "'metadata.location' is not a string but an array"),
    "huge": ("huge", {"size": 40 * 1024 * 1024}, "more than 33554432 bytes"),
    "endless": ("stream", {}, "more than 33554432 bytes"),
}


@pytest.mark.parametrize("kind", list(GARBAGE), ids=list(GARBAGE))
async def test_a_catalog_answering_garbage_gives_a_clear_condition(kube: KubeEnv, fast_retries: None,
                                                                   kind: str) -> None:
    fault, options, expected = GARBAGE[kind]
    async with tether_stack(kube, plugin_options={"retryConfig": {"maxRetries": 0, "timeout": "20s"}}) as stack:
        bad, good = stack.add_table("bad", "east"), stack.add_table("good", "east")
        rule = {"garbage": stack.catalog.garbage_next, "huge": stack.catalog.huge_next,
                "stream": stack.catalog.stream_next}[fault](10_000, table=bad, **options)
        await _workload(stack, "victim", bad)
        claim = await stack.wait_claim("victim", phase="Pending", reason="LookupFailed", within=30)
        message = claim_condition(claim)["message"]
        assert expected in message and len(message) < 1_000, message
        await _workload(stack, "bystander", good)  # the daemon still serves
        await stack.wait_claim("bystander", phase="Bound")
        assert stack.daemon is not None and stack.daemon.ready()[0]
        stack.catalog.faults.remove(rule)
        await stack.wait_claim("victim", phase="Bound", within=30)  # the retry timer asks again: heals
