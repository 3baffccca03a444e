"""Nothing is decided from a half-listed world: a cold start, a takeover and a relist (``events.ListsStarted``).

A settled cluster (claims Bound, bindings carrying tether's exclusions) is listed into a **fresh** world in the
daemon's order — plugin ConfigMap, Clusters, DataSources, bindings, claims — as a first install, a standby taking
over on an empty log, or a switch from Volcano Global would see it. Announced with ``ListsStarted``, the lists
lead to no command at all; without it (the behaviour this guards against), the bindings folded before their
claims are stripped of their placement.
"""

from __future__ import annotations

import copy
from typing import Any

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.core.commands import SetBindingPlacement, UpdateClaimStatus
from tether.core.envelope import CommandRecord, EventRecord
from tether.core.events import Event, ListsStarted, ObjectObserved, ObjectsListed, event_key, list_source
from tether.core.keys import EXCLUDED_CLUSTERS_ANNOTATION
from tether.core.kube import trim
from tether.core.world import World, initial_world
from tether.projections.step import step

ORDER = ("ConfigMap", "Cluster", "DataSource", "ResourceBinding", "DataSourceClaim")
PLUGIN_NAMESPACE = "volcano-global"


def settled_cluster() -> Harness:
    """Three clusters, two tables, three claims on two workloads, their bindings injected."""
    h = Harness()
    for c in ("c1", "c2", "c3"):
        h.apply(m.cluster(c))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1", "c2"],
                                                                 "s3://west/": ["c3"]})}))
    h.cluster.catalog["amoro/table/db.east1"] = "s3://east/db/east1"
    h.cluster.catalog["amoro/table/db.west1"] = "s3://west/db/west1"
    for name, table, workload in (("a", "db.east1", "app-a"), ("b", "db.west1", "app-b"),
                                  ("b2", "db.west1", "app-b")):
        h.apply(m.claim(name, table=table, workload=workload))
    for workload in ("app-a", "app-b"):
        h.apply(m.resource_binding(workload))
    for workload in ("app-a", "app-b"):
        binding = h.obj("ResourceBinding", "default", f"{workload}-deployment")
        assert binding is not None and binding["metadata"]["annotations"].get(EXCLUDED_CLUSTERS_ANNOTATION)
    return h


def namespace_of(kind: str) -> str:
    return PLUGIN_NAMESPACE if kind == "ConfigMap" else ""


def lists(h: Harness) -> list[list[Event]]:
    """One list per source, in the daemon's order: its objects, then its ObjectsListed."""
    out: list[list[Event]] = []
    for kind in ORDER:
        objects = [trim(copy.deepcopy(raw)) for key, raw in sorted(h.cluster.objects.items())
                   if key.startswith(f"{kind}/")]
        events: list[Event] = [ObjectObserved(obj=o) for o in objects]
        events.append(ObjectsListed(kind=kind, keys=tuple(o.key for o in objects), namespace=namespace_of(kind)))
        out.append(events)
    return out


def fold(world: World, events: list[Event], *, offset: int) -> list[CommandRecord]:
    commands: list[CommandRecord] = []
    for i, event in enumerate(events):
        record = EventRecord(at_ms=1_800_000_000_000 + i, source="watch", key=event_key(event), event=event,
                             offset=offset + i)
        commands.extend(step(world, record))
    return commands


def announced(sources: list[str]) -> list[Event]:
    return [ListsStarted(sources=tuple(sources))]


ALL_SOURCES = [list_source(kind, namespace_of(kind)) for kind in ORDER]


def writes(commands: list[CommandRecord]) -> list[str]:
    return [f"{type(c.command).__name__} {c.key}" for c in commands
            if c.key.startswith(("ResourceBinding/", "DataSourceClaim/"))]


def test_a_fresh_world_listing_a_settled_cluster_decides_nothing() -> None:
    h = settled_cluster()
    world = initial_world()
    events = announced(ALL_SOURCES) + [e for one in lists(h) for e in one]
    assert fold(world, events, offset=1) == []
    assert world.lists_pending == set()
    assert {c.phase for c in world.claims.values()} == {"Bound"}


def test_without_the_announcement_the_bindings_listed_first_are_stripped() -> None:
    """The failure the gate prevents (and the proof that the scenario above can fail)."""
    h = settled_cluster()
    world = initial_world()
    commands = fold(world, [e for one in lists(h) for e in one], offset=1)
    stripped = [c for c in commands if isinstance(c.command, SetBindingPlacement)]
    assert stripped, "expected the pre-gate behaviour: bindings decided before their claims were listed"
    assert any("no bound claim" in c.reason for c in stripped)


def test_decisions_wait_for_the_last_list_then_reconcile_everything_once() -> None:
    """While one list is outstanding, even an object that needs work waits; the last list's end decides it."""
    h = settled_cluster()
    world = initial_world()
    per_source = lists(h)
    commands = fold(world, announced(ALL_SOURCES) + [e for one in per_source[:-1] for e in one], offset=1)
    assert commands == []
    assert world.lists_pending == {list_source("DataSourceClaim")}
    claims = per_source[-1]
    # one claim lost its status meanwhile: it must be written, but only once the picture is complete
    first = claims[0]
    assert isinstance(first, ObjectObserved)
    raw: dict[str, Any] = copy.deepcopy(h.cluster.objects[first.obj.key])
    raw.pop("status", None)
    claims = [ObjectObserved(obj=trim(raw)), *claims[1:]]
    before_end = fold(world, claims[:-1], offset=100)
    assert before_end == []
    at_end = fold(world, claims[-1:], offset=200)
    assert UpdateClaimStatus in [type(c.command) for c in at_end]
    assert {c.key for c in at_end} == {first.obj.key}  # (with the Kubernetes Event of its transition)


def test_a_relist_after_a_watch_gap_makes_no_transient_decision() -> None:
    """Bindings relisted (410) while a claim was deleted and another created in the gap: nothing is decided
    from the mixture; once the claims' relist ends, the binding's placement follows the claims that exist."""
    h = settled_cluster()
    world = initial_world()
    assert fold(world, announced(ALL_SOURCES) + [e for one in lists(h) for e in one], offset=1) == []
    # the gap: claim b2 deleted (b keeps app-b on the west), nothing else changes; a relist of both kinds
    del h.cluster.objects["DataSourceClaim/default/b2"]
    relist = lists(h)
    gap = announced([list_source("ResourceBinding"), list_source("DataSourceClaim")]) + relist[3] + relist[4][:-1]
    assert writes(fold(world, gap, offset=300)) == []
    end = fold(world, relist[4][-1:], offset=400)
    assert "DataSourceClaim/default/b2" not in world.claims
    # app-b still has a bound claim on the west table: its placement is unchanged, so no binding write at all
    assert [c for c in end if isinstance(c.command, SetBindingPlacement)] == []
