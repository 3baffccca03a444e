"""Writes where correctness needs them, no more: one claim status write per transition.

On a cache hit a claim becomes Bound and its binding's placement is written in the same pass. Writing the claim's
status at once would say ``PlacementInjected=False/Injecting`` and a second write would follow the binding's
outcome; the decider waits for that outcome instead, so Bound and Injected go out together. It only waits while
the binding's write is under way: a write that failed leaves the claim saying so at once.
"""

from __future__ import annotations

from collections import Counter

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.core.commands import SetBindingPlacement, UpdateClaimStatus, UpdateDataSourceStatus
from tether.core.events import CommandFailed, ObjectObserved


def universe() -> Harness:
    h = Harness()
    for c in ("c1", "c2", "c3"):
        h.apply(m.cluster(c))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1", "c2"], "s3://west/": ["c3"]})}))
    h.cluster.catalog["amoro/table/db.t"] = "s3://east/db/t"
    h.apply(m.claim("first", table="db.t", workload="w0"))  # the DataSource exists from here on: cache hits
    h.apply(m.resource_binding("w0"))
    return h


def conditions(h: Harness, name: str) -> dict[str, tuple[str, str]]:
    claim = h.obj("DataSourceClaim", "default", name)
    assert claim is not None
    return {c["type"]: (c["status"], c["reason"]) for c in claim["status"]["conditions"]}


def test_a_cache_hit_writes_the_claim_status_once_with_the_placement_in() -> None:
    h = universe()
    h.apply(m.resource_binding("w1"))
    start = len(h.commands)
    h.apply(m.claim("c", table="db.t", workload="w1"))
    statuses = [r.command for r in h.commands[start:] if isinstance(r.command, UpdateClaimStatus)]
    assert len(statuses) == 1
    written = {c.type: (c.status, c.reason) for c in statuses[0].conditions}
    assert written == {"Bound": ("True", "DataSourceBound"), "PlacementInjected": ("True", "Injected")}
    assert conditions(h, "c") == written


def test_writes_per_claim_on_a_cache_hit() -> None:
    h = universe()
    start = len(h.commands)
    n = 20
    for i in range(n):
        h.apply(m.resource_binding(f"w{i + 1}"))
        h.apply(m.claim(f"c{i}", table="db.t", workload=f"w{i + 1}"))
    per_kind = Counter(type(r.command).__name__ for r in h.commands[start:])
    assert per_kind["UpdateClaimStatus"] == n
    # the binding's placement, the claim's status, the DataSource's claimRefs: no finalizer, no routine Event
    # (issue 35). Decided one claim at a time, claimRefs are one each; the executor coalesces them in a burst
    # (tests/integration/test_executor_pipeline.py; counted by the server: tests/integration/test_write_economy.py)
    assert per_kind == {"SetBindingPlacement": n, "UpdateClaimStatus": n, "UpdateDataSourceStatus": n}


def test_a_failed_placement_write_does_not_hold_the_claim_status() -> None:
    h = universe()
    h.apply(m.resource_binding("w1"))
    start = len(h.commands)
    h.feed(ObjectObserved(obj=h.cluster.put(m.claim("c", table="db.t", workload="w1"))))
    placement = next(r for r in h.queue if isinstance(r.command, SetBindingPlacement))
    h.queue.remove(placement)
    assert not any(isinstance(r.command, UpdateClaimStatus) for r in h.commands[start:])  # waiting for it
    h.feed(CommandFailed(command_id=placement.id, command="set_binding_placement", target=placement.key,
                         reason="InternalError", message="etcd timeout", retryable=True),
           causation=placement.id)
    h.settle()
    assert conditions(h, "c") == {"Bound": ("True", "DataSourceBound"), "PlacementInjected": ("False", "Injecting")}
    h.advance(60_000)  # the retry timer fires, the placement goes in, and the claim says so
    assert conditions(h, "c") == {"Bound": ("True", "DataSourceBound"), "PlacementInjected": ("True", "Injected")}


def test_a_claim_before_its_workload_is_written_at_once() -> None:
    """No binding, nothing under way: the claim is Bound and waits for its ResourceBinding, visibly."""
    h = universe()
    h.apply(m.claim("early", table="db.t", workload="later"))
    assert conditions(h, "early") == {"Bound": ("True", "DataSourceBound"),
                                      "PlacementInjected": ("False", "WaitingForResourceBinding")}


def test_a_burst_of_claims_on_one_table_writes_the_datasource_claimrefs_twice_not_per_claim() -> None:
    """Claims arriving while a DataSource status write is in flight wait for its outcome, then go out together."""
    h = universe()
    start = len(h.commands)
    for i in range(10):  # observed before any command is applied: a burst
        h.feed(ObjectObserved(obj=h.cluster.put(m.claim(f"burst{i}", table="db.t", workload=f"b{i}"))))
    h.settle()
    writes = [r.command for r in h.commands[start:] if isinstance(r.command, UpdateDataSourceStatus)]
    assert len(writes) == 2  # the first claim's, then the nine that came meanwhile, in one
    source = h.obj("DataSource", "", "amoro-table-db.t")
    assert source is not None and source["status"]["boundClaims"] == 11
