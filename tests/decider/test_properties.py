"""Property tests of the data-dependency decider: random user/world histories on a small universe.

The universe: Karmada clusters c1..c3 (c4 may join); the amoro plugin maps three locations — east → {c1, c2},
west → {c3}, central → {c2, c3}; four tables start at east, east, west, central and may migrate; claims are
``<ns>/k0..k2`` in namespaces n0 and n1 on workloads w0/w1 of their namespace; each workload may have a
ResourceBinding (w1's carries the user's own exclusion of c1).

A history is a list of actions — create/update/delete a claim (changing its table or workload), create/delete a
binding, Karmada reverting a binding's placement, the scheduler placing a binding, an operator deleting a
DataSource, a table migrating (catalog change + a pushed DataLocationResolved), the catalog failing or recovering
for a table, a cluster joining, time passing. After every action the harness settles; the invariants are then
checked on the objects of the fake cluster (what a user would see), and at the end on the log (replay).
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.core.commands import LookupDataLocation
from tether.core.decision import RETRY_MAX_MS
from tether.core.envelope import CommandRecord
from tether.core.events import (
    DataLocationLookupFailed,
    DataLocationResolved,
    DataSourceNotInCatalog,
    Event,
    ObjectObserved,
)
from tether.core.identity import make_identity
from tether.core.keys import EXCLUDED_CLUSTERS_ANNOTATION, PLACEMENT_INJECTED_ANNOTATION
from tether.core.kube import trim
from tether.core.world import initial_world
from tether.projections.snapshot import decode_world, encode_world
from tether.projections.step import step

LOCATIONS = {"east": ["c1", "c2"], "west": ["c3"], "central": ["c2", "c3"]}
TABLES = {"t0": "east", "t1": "east", "t2": "west", "t3": "central"}
NAMESPACES = ("n0", "n1")
CLAIMS = ("k0", "k1", "k2")
WORKLOADS = ("w0", "w1")
USER_EXCLUDES = {"w0": [], "w1": ["c1"]}


def location(table: str, region: str, generation: int = 0) -> str:
    return f"s3://{region}/db/{table}/v{generation}"


def key(table: str) -> str:
    return f"amoro/table/db.{table}"


class CheckedHarness(Harness):
    """A harness that checks, after every event, that no identity has two lookups in flight."""

    def __init__(self) -> None:
        super().__init__()
        self.outstanding: set[str] = set()

    def feed(self, event: Event, *, source: str = "watch", causation: str = "") -> list[CommandRecord]:
        if isinstance(event, DataLocationResolved | DataSourceNotInCatalog | DataLocationLookupFailed):
            self.outstanding.discard(event.identity.key)
        produced = super().feed(event, source=source, causation=causation)
        for r in produced:
            if isinstance(r.command, LookupDataLocation):
                k = r.command.identity.key
                assert k not in self.outstanding, f"a second lookup of {k} while one is in flight"
                self.outstanding.add(k)
        assert set(self.world.lookups_in_flight) == self.outstanding
        return produced


# --- actions ---------------------------------------------------------------------------------------------------

ns_ = st.sampled_from(NAMESPACES)
_claim = st.tuples(st.just("claim"), ns_, st.sampled_from(CLAIMS), st.sampled_from(sorted(TABLES)),
                   st.sampled_from(WORKLOADS))
_binding = st.tuples(st.just("binding"), ns_, st.sampled_from(WORKLOADS))
_schedule = st.tuples(st.just("schedule"), ns_, st.sampled_from(WORKLOADS), st.sampled_from(["c1", "c2", "c3"]))
actions = st.one_of(  # one_of picks a branch uniformly: claims and bindings are listed several times
    _claim, _claim, _claim, _claim,
    _binding, _binding, _schedule, _schedule,
    st.tuples(st.just("delete_claim"), ns_, st.sampled_from(CLAIMS)),
    st.tuples(st.just("delete_binding"), ns_, st.sampled_from(WORKLOADS)),
    st.tuples(st.just("revert"), ns_, st.sampled_from(WORKLOADS)),
    st.tuples(st.just("delete_ds"), st.sampled_from(sorted(TABLES))),
    st.tuples(st.just("migrate"), st.sampled_from(sorted(TABLES)), st.sampled_from(sorted(LOCATIONS))),
    st.tuples(st.just("catalog_fails"), st.sampled_from(sorted(TABLES)), st.booleans()),
    st.tuples(st.just("add_cluster")),
    st.tuples(st.just("advance"), st.sampled_from([1_000, 5_000, 20_000, RETRY_MAX_MS + 1_000])),
)


class Universe:
    def __init__(self) -> None:
        self.h = CheckedHarness()
        self.migrations = 0
        for c in ("c1", "c2", "c3"):
            self.h.apply(m.cluster(c))
        mapping = {f"s3://{region}/": clusters for region, clusters in LOCATIONS.items()}
        self.h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping=mapping)}))
        for table, region in TABLES.items():
            self.h.cluster.catalog[key(table)] = location(table, region)

    def binding(self, ns: str, workload: str) -> dict[str, Any] | None:
        return self.h.obj("ResourceBinding", ns, f"{workload}-deployment")

    def do(self, action: tuple[Any, ...]) -> None:
        h = self.h
        match action:
            case ("claim", ns, name, table, workload):
                h.apply(m.claim(name, namespace=ns, table=f"db.{table}", workload=workload))
            case ("delete_claim", ns, name):
                if h.obj("DataSourceClaim", ns, name) is not None:
                    h.delete("DataSourceClaim", ns, name)
            case ("binding", ns, workload):
                if self.binding(ns, workload) is None:
                    h.apply(m.resource_binding(workload, namespace=ns, exclude=USER_EXCLUDES[workload]))
            case ("delete_binding", ns, workload):
                if self.binding(ns, workload) is not None:
                    h.delete("ResourceBinding", ns, f"{workload}-deployment")
            case ("revert", ns, workload):  # Karmada's detector re-applies the policy's placement
                current = self.binding(ns, workload)
                if current is not None:
                    raw = copy.deepcopy(current)
                    policy = m.resource_binding(workload, namespace=ns, exclude=USER_EXCLUDES[workload])
                    raw["spec"]["placement"] = policy["spec"]["placement"]
                    h.apply(raw)
            case ("schedule", ns, workload, cluster):
                current = self.binding(ns, workload)
                if current is not None:
                    raw = copy.deepcopy(current)
                    raw["spec"]["clusters"] = [{"name": cluster, "replicas": 1}]
                    h.apply(raw)
            case ("delete_ds", table):
                if h.obj("DataSource", "", f"amoro-table-db.{table}") is not None:
                    h.delete("DataSource", "", f"amoro-table-db.{table}")
            case ("migrate", table, region):
                self.migrations += 1
                where = location(table, region, self.migrations)
                h.cluster.catalog[key(table)] = where
                h.feed(DataLocationResolved(identity=make_identity("amoro", "table", f"db.{table}", None),
                                            location=where, trigger="push"), source="catalog")
                h.settle()
            case ("catalog_fails", table, on):
                if on:
                    h.cluster.catalog_failures[key(table)] = "503 Service Unavailable"
                else:
                    h.cluster.catalog_failures.pop(key(table), None)
            case ("add_cluster",):
                if h.obj("Cluster", "", "c4") is None:
                    h.apply(m.cluster("c4"))
            case ("advance", ms):
                h.advance(ms)
            case _:
                raise AssertionError(action)
        assert not h.queue

    # --- invariants on what a user sees ------------------------------------------------------------------------

    def objects(self, kind: str) -> dict[str, dict[str, Any]]:
        return {k: v for k, v in self.h.cluster.objects.items() if k.startswith(kind + "/")}

    def check(self) -> None:
        claims = self.objects("DataSourceClaim")
        sources = {o["metadata"]["name"]: o for o in self.objects("DataSource").values()}
        clusters = {o["metadata"]["name"] for o in self.objects("Cluster").values()}
        bound: dict[str, list[tuple[str, str, str]]] = {}
        for k, c in claims.items():
            assert "deletionTimestamp" not in c["metadata"], f"{k} is stuck deleting"
            s = c.get("status", {})
            if s.get("phase") != "Bound":
                assert "boundDataSource" not in s, (k, s)
                continue
            name = s.get("boundDataSource")
            ds = sources.get(name)
            assert ds is not None, f"{k} is bound to a missing DataSource {name}"
            assert "deletionTimestamp" not in ds["metadata"], f"{k} is bound to deleting {name}"
            spec = c["spec"]
            assert (ds["spec"]["system"], ds["spec"]["type"], ds["spec"]["name"]) == (
                spec["system"], spec["dataSourceType"], spec["dataSourceName"]), (k, name)
            meta = c["metadata"]
            bound.setdefault(name, []).append((meta["namespace"], meta["name"], meta["uid"]))
        for name, ds in sources.items():
            assert "deletionTimestamp" not in ds["metadata"], f"DataSource {name} is stuck deleting"
            st_ = ds.get("status", {})
            listed = [(r["namespace"], r["name"], r["uid"]) for r in st_.get("claimRefs", [])]
            assert listed == sorted(bound.get(name, [])), (name, listed, bound.get(name))
            assert st_.get("boundClaims", 0) == len(listed)
        for k, rb in self.objects("ResourceBinding").items():
            ns, workload = rb["metadata"]["namespace"], rb["spec"]["resource"]["name"]
            user = USER_EXCLUDES[workload]
            localities = [set(sources[c["status"]["boundDataSource"]]["spec"]["locality"]["clusterNames"])
                          for c in claims.values()
                          if c["metadata"]["namespace"] == ns and c["spec"]["workload"]["name"] == workload
                          and c.get("status", {}).get("phase") == "Bound"]
            exclude = rb["spec"]["placement"].get("clusterAffinity", {}).get("exclude", [])
            annotations = {a: v for a, v in rb["metadata"].get("annotations", {}).items()
                           if a in (PLACEMENT_INJECTED_ANNOTATION, EXCLUDED_CLUSTERS_ANNOTATION)}
            if not localities:
                assert exclude == user and annotations == {}, (k, exclude, annotations)
                continue
            allowed = set.intersection(*localities)
            known = clusters.union(*localities)
            mine = sorted(known - allowed - set(user))
            assert exclude == user + mine, (k, exclude, user, mine)
            assert annotations == {PLACEMENT_INJECTED_ANNOTATION: "true", EXCLUDED_CLUSTERS_ANNOTATION: ",".join(mine)}

    def check_quiescent(self) -> None:
        """Settled means settled: observing every object again (a relist) decides nothing."""
        for raw in list(self.h.cluster.objects.values()):
            produced = self.h.feed(ObjectObserved(obj=trim(raw)))
            assert produced == [], [r.reason for r in produced]

    def converge(self) -> None:
        """The catalog recovers and time passes: every claim ends up Bound."""
        self.h.cluster.catalog_failures.clear()
        self.h.advance(RETRY_MAX_MS + 1_000)
        self.check()
        for k, c in self.objects("DataSourceClaim").items():
            assert c.get("status", {}).get("phase") == "Bound", (k, c.get("status"))


# --- replay ----------------------------------------------------------------------------------------------------


def _encoded(records: list[CommandRecord]) -> list[bytes]:
    return [msgspec.json.encode(msgspec.structs.replace(r, offset=0)) for r in records]


def replay(h: Harness, start: int = 0, world: Any = None) -> list[list[bytes]]:
    """Commands per event from ``start`` on, folding into ``world`` (a fresh one by default)."""
    world = world if world is not None else initial_world()
    return [_encoded(step(world, record)) for record in h.events[start:]]


def check_replay(h: Harness, cut_fraction: float) -> None:
    full = replay(h)
    assert full == replay(h)  # deterministic: byte for byte, ids included
    assert [c for per_event in full for c in per_event] == _encoded(h.commands)  # and what ran live
    cut = int(len(h.events) * cut_fraction)
    world = initial_world()
    for record in h.events[:cut]:
        step(world, record)
    restored = decode_world(encode_world(world))
    assert restored is not None
    assert replay(h, cut, restored) == full[cut:]


# --- the property ---------------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None,
          suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])
@given(history=st.lists(actions, min_size=8, max_size=30), cut=st.floats(min_value=0.0, max_value=1.0))
def test_random_histories_keep_the_invariants(history: list[tuple[Any, ...]], cut: float) -> None:
    u = Universe()
    for action in history:
        u.do(action)
        u.check()
        u.check_quiescent()
    u.converge()
    u.check_quiescent()
    check_replay(u.h, cut)
