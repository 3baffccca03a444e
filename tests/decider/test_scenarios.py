"""The data-dependency decider, scenario by scenario (issue 2 acceptance; VG's own test list and then some).

Each scenario is a function registered in :data:`SCENARIOS` and run by :func:`test_scenario`, whose test id is
the scenario's name. Most drive the whole loop through :class:`~tether.adapters.testing.fake_cluster.Harness` (the
pipeline against an in-memory cluster until settled); where a single decision is the point, the scenario calls
``projections.step.step`` on a hand-built World. The mapping and placement arithmetic have their own unit tables at
the end.

The universe: Karmada clusters c1..c3; the amoro plugin maps ``s3://east/`` → {c1, c2}, ``s3://west/`` → {c3},
``s3://central/`` → {c2, c3}; the catalog knows ``db.east1``, ``db.east2`` (east), ``db.west1`` (west) and
``db.central1`` (central).
"""

from __future__ import annotations

import copy
import hashlib
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.core.commands import (
    AddFinalizer,
    Command,
    CreateDataSource,
    DeleteDataSource,
    LookupDataLocation,
    RemoveFinalizer,
    SetBindingPlacement,
    StartTimer,
    UpdateClaimStatus,
    UpdateDataSourceLocality,
    UpdateDataSourceStatus,
    command_name,
    command_target,
)
from tether.core.datadependency.exclusions import plan_placement
from tether.core.decision import RETRY_BASE_MS, RETRY_MAX_MS, backoff_ms
from tether.core.envelope import CommandRecord, EventRecord, rfc3339
from tether.core.events import (
    CommandFailed,
    DataLocationResolved,
    Event,
    ListsStarted,
    ObjectObserved,
    ObjectsListed,
    event_key,
    list_source,
)
from tether.core.identity import is_valid_object_name, make_identity
from tether.core.keys import (
    CLAIM_FINALIZER,
    DATASOURCE_FINALIZER,
    EXCLUDED_CLUSTERS_ANNOTATION,
    LOCATION_ANNOTATION,
    PLACEMENT_INJECTED_ANNOTATION,
)
from tether.core.kube import trim
from tether.core.plugin_config import map_location
from tether.core.world import World, initial_world
from tether.projections.snapshot import decode_world, encode_world
from tether.projections.step import step

CLUSTERS = ("c1", "c2", "c3")
MAPPING = {"s3://east/": ["c1", "c2"], "s3://west/": ["c3"], "s3://central/": ["c2", "c3"]}
TABLES = {
    "db.east1": "s3://east/db/east1",
    "db.east2": "s3://east/db/east2",
    "db.west1": "s3://west/db/west1",
    "db.central1": "s3://central/db/central1",
}
CLAIM = "DataSourceClaim"
DS = "DataSource"
RB = "ResourceBinding"
T0 = 1_767_225_600_000

# --- helpers -------------------------------------------------------------------------------------------------


def setup(*, reclaim_policy: str | None = None, plugins: dict[str, str] | None = None,
          clusters: tuple[str, ...] = CLUSTERS) -> Harness:
    h = Harness()
    for c in clusters:
        h.apply(m.cluster(c))
    extra = {"reclaimPolicy": reclaim_policy} if reclaim_policy else {}
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping=MAPPING, **extra), **(plugins or {})}))
    for table, location in TABLES.items():
        h.cluster.catalog[f"amoro/table/{table}"] = location
    return h


def key(table: str) -> str:
    return f"amoro/table/{table}"


def ds_name(table: str) -> str:
    return f"amoro-table-{table}"


def claim(h: Harness, name: str, ns: str = "default") -> dict[str, Any]:
    obj = h.obj(CLAIM, ns, name)
    assert obj is not None, f"claim {ns}/{name} is gone"
    return obj


def status(h: Harness, name: str, ns: str = "default") -> dict[str, Any]:
    return claim(h, name, ns).get("status", {})  # type: ignore[no-any-return]


def cond(h: Harness, name: str, type_: str = "Bound", ns: str = "default") -> dict[str, Any] | None:
    return next((c for c in status(h, name, ns).get("conditions", []) if c["type"] == type_), None)


def reason(h: Harness, name: str, type_: str = "Bound", ns: str = "default") -> tuple[str, str] | None:
    c = cond(h, name, type_, ns)
    return None if c is None else (c["status"], c["reason"])


def assert_bound(h: Harness, name: str, table: str, ns: str = "default") -> None:
    s = status(h, name, ns)
    assert (s.get("phase"), s.get("boundDataSource")) == ("Bound", ds_name(table)), s
    assert reason(h, name, ns=ns) == ("True", "DataSourceBound")


def assert_pending(h: Harness, name: str, why: str, ns: str = "default") -> None:
    s = status(h, name, ns)
    assert s.get("phase") == "Pending", s
    assert "boundDataSource" not in s, s
    assert reason(h, name, ns=ns) == ("False", why), s.get("conditions")


def ds(h: Harness, table: str) -> dict[str, Any] | None:
    return h.obj(DS, "", ds_name(table))


def refs(h: Harness, table: str) -> list[tuple[str, str]]:
    obj = ds(h, table)
    assert obj is not None
    return [(r["namespace"], r["name"]) for r in obj.get("status", {}).get("claimRefs", [])]


def rb(h: Harness, workload: str, ns: str = "default") -> dict[str, Any]:
    obj = h.obj(RB, ns, f"{workload}-deployment")
    assert obj is not None
    return obj


def excludes(binding: dict[str, Any]) -> list[str]:
    return list(binding["spec"]["placement"].get("clusterAffinity", {}).get("exclude", []))


def tether_annotations(binding: dict[str, Any]) -> dict[str, str]:
    ann = binding["metadata"].get("annotations", {})
    return {k: v for k, v in ann.items() if k in (PLACEMENT_INJECTED_ANNOTATION, EXCLUDED_CLUSTERS_ANNOTATION)}


def injected(binding: dict[str, Any], added: str) -> bool:
    return tether_annotations(binding) == {PLACEMENT_INJECTED_ANNOTATION: "true", EXCLUDED_CLUSTERS_ANNOTATION: added}


def cmds(h: Harness, type_: type[Command], since: int = 0) -> list[Any]:
    return [r.command for r in h.commands[since:] if isinstance(r.command, type_)]


def kube_events(h: Harness, name: str, ns: str = "default") -> list[tuple[str, str]]:
    return [(e.event_type, e.reason) for e in h.cluster.kube_events
            if (e.involved.namespace, e.involved.name) == (ns, name)]


def schedule(h: Harness, workload: str, clusters: list[str], ns: str = "default") -> None:
    """Karmada's scheduler writes its result into ``spec.clusters``."""
    raw = copy.deepcopy(rb(h, workload, ns))
    raw["spec"]["clusters"] = [{"name": c, "replicas": 1} for c in clusters]
    h.apply(raw)


def edit(h: Harness, kind: str, ns: str, name: str, change: Callable[[dict[str, Any]], None]) -> None:
    obj = h.obj(kind, ns, name)
    assert obj is not None
    raw = copy.deepcopy(obj)
    change(raw)
    h.apply(raw)


def fail_commands(h: Harness, type_: type[Command], *, retryable: bool, times: int = 1) -> list[CommandRecord]:
    """Make the fake API fail the next ``times`` commands of ``type_``; returns the list of failed records."""
    original = h.cluster.apply
    failed: list[CommandRecord] = []

    def apply(record: CommandRecord) -> list[tuple[str, Event]]:
        if isinstance(record.command, type_) and len(failed) < times:
            failed.append(record)
            return [("executor", CommandFailed(
                command_id=record.id, command=command_name(record.command), target=command_target(record.command),
                reason="Conflict" if retryable else "Invalid", message="injected failure", retryable=retryable))]
        return original(record)

    h.cluster.apply = apply  # type: ignore[method-assign]
    return failed


def lookups_in_flight_never_exceed_one(h: Harness) -> None:
    """Walk the log: a LookupDataLocation for an identity is never issued while another one is unanswered."""
    outstanding: set[str] = set()
    events_by_cause: dict[str, list[EventRecord]] = {}
    for e in h.events:
        events_by_cause.setdefault(e.causation, []).append(e)
    for r in h.commands:
        if isinstance(r.command, LookupDataLocation):
            k = r.command.identity.key
            assert k not in outstanding, f"second lookup of {k} while one is in flight"
            outstanding.add(k)
            if events_by_cause.get(r.id):
                outstanding.discard(k)  # the fake catalog answers synchronously


# --- the scenario table --------------------------------------------------------------------------------------

SCENARIOS: list[Any] = []


def scenario(*variants: dict[str, Any]) -> Callable[[Callable[..., None]], Callable[..., None]]:
    def register(fn: Callable[..., None]) -> Callable[..., None]:
        for v in variants or ({},):
            suffix = ",".join(f"{k}={v[k]}" for k in v)
            SCENARIOS.append(pytest.param(fn, v, id=fn.__name__ + (f"[{suffix}]" if suffix else "")))
        return fn
    return register


@scenario()
def no_finalizer_on_a_new_claim() -> None:
    """Volcano Global's controller adds a finalizer to every claim; tether does not (a write per claim on the shared
    API server: a deleted claim is forgotten by the watch or the next list, tests/integration/test_claim_finalizer.py).
    """
    h = setup()
    h.apply(m.claim("a", table="db.east1", workload="w"))
    assert_bound(h, "a", "db.east1")
    assert "finalizers" not in claim(h, "a")["metadata"]
    assert cmds(h, AddFinalizer) == []  # the DataSource is created with its finalizer: no AddFinalizer at all


@scenario()
def phase_pending_with_condition_while_resolving() -> None:
    h = setup()
    produced = h.feed(ObjectObserved(obj=h.cluster.put(m.claim("a", table="db.east1", workload="w"))))
    statuses = [c.command for c in produced if isinstance(c.command, UpdateClaimStatus)]
    assert len(statuses) == 1
    s = statuses[0]
    assert (s.phase, s.bound_data_source) == ("Pending", "")
    (bound,) = s.conditions
    assert (bound.type, bound.status, bound.reason, bound.observed_generation) == ("Bound", "False", "Resolving", 1)
    assert bound.last_transition_time == rfc3339(h.now_ms)
    assert [type(c.command) for c in produced].count(LookupDataLocation) == 1
    h.settle()
    assert_bound(h, "a", "db.east1")


@scenario({"attributes": False}, {"attributes": True})
def cache_miss_looks_up_once_and_creates_datasource(attributes: bool) -> None:
    h = setup()
    attrs = {"snapshot": "42", "mode": "ro"} if attributes else None
    ident = make_identity("amoro", "table", "db.east1", attrs)
    h.cluster.catalog[ident.key] = "s3://east/db/east1"
    h.apply(m.claim("a", table="db.east1", workload="w", attributes=attrs))
    assert h.cluster.lookups == [ident.key]
    (lookup,) = cmds(h, LookupDataLocation)
    assert (lookup.identity, lookup.trigger, lookup.attempt) == (ident, "miss", 1)
    name = "amoro-table-db.east1"
    if attributes:
        name += "-" + hashlib.sha256(b"mode=ro,snapshot=42").hexdigest()[:8]  # VG's suffix, computed independently
    (create,) = cmds(h, CreateDataSource)
    assert create.name == name
    obj = h.obj(DS, "", name)
    assert obj is not None
    assert obj["metadata"]["finalizers"] == [DATASOURCE_FINALIZER]
    assert obj["metadata"]["annotations"][LOCATION_ANNOTATION] == "s3://east/db/east1"
    assert obj["spec"]["locality"] == {"clusterNames": ["c1", "c2"]}
    assert (obj["spec"]["system"], obj["spec"]["type"], obj["spec"]["name"]) == ("amoro", "table", "db.east1")
    assert obj["spec"].get("attributes") == attrs
    assert obj["spec"]["reclaimPolicy"] == "Retain"
    s = status(h, "a")
    assert (s["phase"], s["boundDataSource"]) == ("Bound", name)
    assert obj["status"]["boundClaims"] == 1


@scenario()
def cache_hit_binds_statically_without_lookup() -> None:
    h = setup()
    h.apply({"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": DS,
             "metadata": {"name": ds_name("db.east1"), "finalizers": [DATASOURCE_FINALIZER]},
             "spec": {"system": "amoro", "type": "table", "name": "db.east1",
                      "locality": {"clusterNames": ["c1", "c2"]}, "reclaimPolicy": "Retain"}})
    h.apply(m.claim("a", table="db.east1", workload="w"))
    assert h.cluster.lookups == []
    assert cmds(h, LookupDataLocation) == [] and cmds(h, CreateDataSource) == []
    assert_bound(h, "a", "db.east1")
    assert refs(h, "db.east1") == [("default", "a")]
    h.apply(m.resource_binding("w"))
    assert excludes(rb(h, "w")) == ["c3"]


@scenario({"arrival": "settled-one-by-one"}, {"arrival": "all-before-the-first-answer"})
def fifty_claims_on_one_table_one_lookup(arrival: str) -> None:
    h = setup()
    for i in range(50):
        obj = h.cluster.put(m.claim(f"c{i:02d}", table="db.east1", workload=f"w{i}"))
        h.feed(ObjectObserved(obj=obj))
        assert len(h.world.lookups_in_flight) <= 1
        if arrival == "settled-one-by-one":
            h.settle()
    if arrival != "settled-one-by-one":
        assert h.cluster.lookups == []  # nothing answered yet
        assert h.world.lookups_in_flight == {key("db.east1"): 1}
    h.settle()
    assert h.cluster.lookups == [key("db.east1")]
    assert len(cmds(h, LookupDataLocation)) == 1
    assert len(cmds(h, CreateDataSource)) == 1
    lookups_in_flight_never_exceed_one(h)
    for i in range(50):
        assert_bound(h, f"c{i:02d}", "db.east1")
    assert len(refs(h, "db.east1")) == 50


@scenario()
def bound_without_binding_waits_then_binding_is_injected() -> None:
    h = setup()
    h.apply(m.claim("a", table="db.east1", workload="w"))
    assert_bound(h, "a", "db.east1")
    assert reason(h, "a", "PlacementInjected") == ("False", "WaitingForResourceBinding")
    h.apply(m.resource_binding("w"))
    binding = rb(h, "w")
    assert excludes(binding) == ["c3"]
    assert injected(binding, "c3")
    assert reason(h, "a", "PlacementInjected") == ("True", "Injected")
    assert_bound(h, "a", "db.east1")


@scenario()
def binding_before_claim() -> None:
    h = setup()
    h.apply(m.resource_binding("w"))
    assert tether_annotations(rb(h, "w")) == {} and excludes(rb(h, "w")) == []
    assert cmds(h, SetBindingPlacement) == []
    h.apply(m.claim("a", table="db.west1", workload="w"))
    binding = rb(h, "w")
    assert excludes(binding) == ["c1", "c2"] and injected(binding, "c1,c2")
    assert reason(h, "a", "PlacementInjected") == ("True", "Injected")


@scenario()
def user_exclusions_and_cluster_names_kept() -> None:
    h = setup()
    h.apply(m.resource_binding("w", cluster_names=["c1", "c2", "c3"], exclude=["c2", "c9"]))
    h.apply(m.claim("a", table="db.west1", workload="w"))  # data on c3 → tether wants c1, c2 excluded
    binding = rb(h, "w")
    affinity = binding["spec"]["placement"]["clusterAffinity"]
    assert affinity["clusterNames"] == ["c1", "c2", "c3"]
    assert affinity["exclude"] == ["c2", "c9", "c1"]  # the user's first, then what tether added
    assert injected(binding, "c1")  # c2 is the user's: not recorded as tether's
    h.delete(CLAIM, "default", "a")
    affinity = rb(h, "w")["spec"]["placement"]["clusterAffinity"]
    assert affinity == {"clusterNames": ["c1", "c2", "c3"], "exclude": ["c2", "c9"]}
    assert tether_annotations(rb(h, "w")) == {}


@scenario()
def cluster_affinities_terms_each_get_exclusions() -> None:
    h = setup()
    raw = m.resource_binding("w")
    raw["spec"]["placement"] = {"clusterAffinities": [
        {"affinityName": "primary", "clusterNames": ["c1", "c3"]},
        {"affinityName": "backup", "exclude": ["c9"]},
    ]}
    h.apply(raw)
    h.apply(m.claim("a", table="db.west1", workload="w"))
    terms = rb(h, "w")["spec"]["placement"]["clusterAffinities"]
    assert terms == [
        {"affinityName": "primary", "clusterNames": ["c1", "c3"], "exclude": ["c1", "c2"]},
        {"affinityName": "backup", "exclude": ["c9", "c1", "c2"]},
    ]
    assert injected(rb(h, "w"), "c1,c2")
    assert "clusterAffinity" not in rb(h, "w")["spec"]["placement"]  # never both
    h.delete(CLAIM, "default", "a")
    assert rb(h, "w")["spec"]["placement"]["clusterAffinities"] == [
        {"affinityName": "primary", "clusterNames": ["c1", "c3"]},
        {"affinityName": "backup", "exclude": ["c9"]},
    ]


def _affinity_terms_with_a_users_exclusion_tether_also_wants() -> None:
    """A cluster the user excludes in one term and tether adds to another: the strip must keep the user's."""
    h = setup()
    raw = m.resource_binding("w")
    raw["spec"]["placement"] = {"clusterAffinities": [
        {"affinityName": "primary", "clusterNames": ["c1", "c3"]},
        {"affinityName": "backup", "exclude": ["c2"]},
    ]}
    h.apply(raw)
    h.apply(m.claim("a", table="db.west1", workload="w"))
    h.delete(CLAIM, "default", "a")
    assert rb(h, "w")["spec"]["placement"]["clusterAffinities"] == [
        {"affinityName": "primary", "clusterNames": ["c1", "c3"]},
        {"affinityName": "backup", "exclude": ["c2"]},  # the user's own exclusion must survive the strip
    ]


SCENARIOS.append(pytest.param(
    _affinity_terms_with_a_users_exclusion_tether_also_wants, {},
    id="cluster_affinities_users_exclusion_in_one_term_survives_strip"))


@scenario()
def second_claim_binds_to_shared_datasource() -> None:
    h = setup()
    h.apply(m.claim("z", namespace="team-b", table="db.east1", workload="w"))
    h.apply(m.claim("a", namespace="team-b", table="db.east1", workload="v"))
    h.apply(m.claim("y", namespace="team-a", table="db.east1", workload="w"))
    assert h.cluster.lookups == [key("db.east1")] and len(cmds(h, CreateDataSource)) == 1
    obj = ds(h, "db.east1")
    assert obj is not None
    uids = {(ns, n): claim(h, n, ns)["metadata"]["uid"] for ns, n in [("team-b", "z"), ("team-b", "a"),
                                                                      ("team-a", "y")]}
    assert obj["status"]["claimRefs"] == [
        {"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": CLAIM, "name": n, "namespace": ns,
         "uid": uids[(ns, n)]}
        for ns, n in [("team-a", "y"), ("team-b", "a"), ("team-b", "z")]
    ]
    assert obj["status"]["boundClaims"] == 3
    for ns, n in uids:
        assert_bound(h, n, "db.east1", ns)


@scenario()
def workload_ref_changed_moves_injection() -> None:
    h = setup()
    h.apply(m.resource_binding("w1"))
    h.apply(m.resource_binding("w2", exclude=["c1"]))
    h.apply(m.claim("a", table="db.west1", workload="w1"))
    assert injected(rb(h, "w1"), "c1,c2") and excludes(rb(h, "w2")) == ["c1"]
    h.apply(m.claim("a", table="db.west1", workload="w2"))
    assert tether_annotations(rb(h, "w1")) == {} and excludes(rb(h, "w1")) == []
    assert excludes(rb(h, "w2")) == ["c1", "c2"] and injected(rb(h, "w2"), "c2")
    assert_bound(h, "a", "db.west1")
    assert len(h.cluster.lookups) == 1  # the data did not change


@scenario()
def switch_to_missing_table_stays_pending() -> None:
    h = setup()
    h.apply(m.resource_binding("w"))
    h.apply(m.claim("a", table="db.east1", workload="w"))
    assert injected(rb(h, "w"), "c3")
    h.apply(m.claim("a", table="db.missing", workload="w"))
    assert_pending(h, "a", "DataSourceNotFound")
    assert tether_annotations(rb(h, "w")) == {} and excludes(rb(h, "w")) == []
    assert refs(h, "db.east1") == [] and ds(h, "db.east1")["status"]["boundClaims"] == 0  # type: ignore[index]
    assert ds(h, "db.missing") is None
    assert reason(h, "a", "PlacementInjected") is None
    # the claim went Bound → BindingInvalid → DataSourceNotFound, one Warning each
    assert kube_events(h, "a")[-2:] == [("Warning", "BindingInvalid"), ("Warning", "DataSourceNotFound")]


@scenario({"scheduled_on": "c1"}, {"scheduled_on": "c3"})
def switch_to_existing_table_rebinds_and_reschedules(scheduled_on: str) -> None:
    h = setup()
    h.apply(m.resource_binding("w"))
    h.apply(m.claim("a", table="db.east1", workload="w"))
    schedule(h, "w", [scheduled_on])
    assert "rescheduleTriggeredAt" not in rb(h, "w")["spec"]
    h.apply(m.claim("a", table="db.west1", workload="w"))  # data now on c3 only
    assert_bound(h, "a", "db.west1")
    assert refs(h, "db.east1") == [] and refs(h, "db.west1") == [("default", "a")]
    binding = rb(h, "w")
    assert excludes(binding) == ["c1", "c2"] and injected(binding, "c1,c2")
    moved = binding["spec"].get("rescheduleTriggeredAt")
    if scheduled_on == "c1":
        assert moved is not None and moved == cmds(h, SetBindingPlacement)[-1].reschedule_at != ""
    else:
        assert moved is None and all(c.reschedule_at == "" for c in cmds(h, SetBindingPlacement))


@scenario({"trigger": "push", "scheduled_on": "c1"}, {"trigger": "refresh", "scheduled_on": "c1"},
          {"trigger": "push", "scheduled_on": "c2"})
def locality_change_follows_data(trigger: str, scheduled_on: str) -> None:
    h = setup()
    h.apply(m.resource_binding("w"))
    h.apply(m.claim("a", table="db.east1", workload="w"))
    schedule(h, "w", [scheduled_on])
    assert excludes(rb(h, "w")) == ["c3"]
    mark = len(h.commands)
    h.cluster.catalog[key("db.east1")] = "s3://central/db/east1"  # {c1,c2} → {c2,c3}
    ident = make_identity("amoro", "table", "db.east1", None)
    h.feed(DataLocationResolved(identity=ident, location="s3://central/db/east1", trigger=trigger), source="catalog")
    h.settle()
    obj = ds(h, "db.east1")
    assert obj is not None
    assert obj["spec"]["locality"] == {"clusterNames": ["c2", "c3"]}
    assert obj["metadata"]["annotations"][LOCATION_ANNOTATION] == "s3://central/db/east1"
    assert len(cmds(h, UpdateDataSourceLocality, mark)) == 1
    assert_bound(h, "a", "db.east1")
    binding = rb(h, "w")
    assert excludes(binding) == ["c1"] and injected(binding, "c1")
    assert (binding["spec"].get("rescheduleTriggeredAt") is not None) == (scheduled_on == "c1")
    assert cmds(h, LookupDataLocation, mark) == [] and cmds(h, CreateDataSource, mark) == []
    # the move keeps the claim Bound: no Event on it (only warnings are a claim's events)
    assert kube_events(h, "a") == []


@scenario()
def locality_written_by_another_writer_is_adopted_not_reverted() -> None:
    """Another writer (a second tether told of a move this one was not) changes the DataSource's location: the
    change is the newer answer. Following this daemon's own, older answer would write the locality back, and the
    two would flip it, and the binding behind it, for ever (issue 21). A later answer of this daemon still wins."""
    h = setup()
    h.apply(m.resource_binding("w"))
    h.apply(m.claim("a", table="db.east1", workload="w"))
    assert excludes(rb(h, "w")) == ["c3"]
    mark = len(h.commands)
    moved = copy.deepcopy(ds(h, "db.east1"))
    assert moved is not None
    moved["metadata"]["annotations"][LOCATION_ANNOTATION] = "s3://west/db/east1"
    moved["spec"]["locality"] = {"clusterNames": ["c3"]}
    h.apply(moved)  # the other writer's patch, as the watch reports it
    assert cmds(h, UpdateDataSourceLocality, mark) == []  # not written back
    assert h.world.lookups[key("db.east1")].location == "s3://west/db/east1"
    assert excludes(rb(h, "w")) == ["c1", "c2"]  # the binding follows the shared DataSource
    # a later answer of this daemon (a push) is newer than the change: it wins, and is written
    h.feed(DataLocationResolved(identity=make_identity("amoro", "table", "db.east1", None),
                                location="s3://central/db/east1", trigger="push"), source="catalog")
    h.settle()
    obj = ds(h, "db.east1")
    assert obj is not None and obj["spec"]["locality"] == {"clusterNames": ["c2", "c3"]}
    assert obj["metadata"]["annotations"][LOCATION_ANNOTATION] == "s3://central/db/east1"
    assert len(cmds(h, UpdateDataSourceLocality, mark)) == 1
    assert excludes(rb(h, "w")) == ["c1"]


@scenario({"watched": "default"}, {"watched": ""})
def claim_refs_of_namespaces_another_tether_watches_are_kept(watched: str) -> None:
    """DataSources are cluster-scoped: tethers watching different namespaces (``--watch-namespace``) share them.
    Each keeps the refs of the claims it does not watch as they are — rewriting them to its own would have the
    tethers clear each other's refs for ever (issue 21, seen on a shared cluster) — and a DataSource still listing
    another namespace's claim is not deleted when its own last claim goes. A tether watching every namespace
    (``watched`` empty) owns every ref: one of a claim it does not know is stale, and is dropped."""
    h = setup(reclaim_policy="Delete")
    h.feed(ListsStarted(sources=(list_source(CLAIM, watched),)))  # the daemon's lists, as it names them
    h.feed(ObjectsListed(kind=CLAIM, namespace=watched, keys=()))
    h.settle()
    assert h.world.claims_namespace == watched
    h.apply(m.claim("a", table="db.east1", workload="w"))
    assert refs(h, "db.east1") == [("default", "a")]
    other = {"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": "DataSourceClaim", "name": "x",
             "namespace": "other", "uid": "ux"}
    mark = len(h.commands)
    raw = h.cluster.objects[f"{DS}//{ds_name('db.east1')}"]  # the other tether's status write: its claim
    raw["status"] = {**raw["status"], "claimRefs": [*raw["status"]["claimRefs"], other], "boundClaims": 2}
    h.feed(ObjectObserved(obj=h.cluster._bump(raw)))
    h.settle()
    if watched:
        assert cmds(h, UpdateDataSourceStatus, mark) == []
        assert refs(h, "db.east1") == [("default", "a"), ("other", "x")]
    else:
        assert refs(h, "db.east1") == [("default", "a")]
    h.delete(CLAIM, "default", "a")
    if watched:
        assert refs(h, "db.east1") == [("other", "x")] and cmds(h, DeleteDataSource) == []
    else:
        assert ds(h, "db.east1") is None  # reclaimPolicy Delete: its last claim went away


@scenario()
def datasource_deletion_forces_unbinding_then_reresolves() -> None:
    h = setup()
    h.apply(m.resource_binding("w"))
    h.apply(m.claim("a", table="db.east1", workload="w"))
    h.apply(m.claim("b", table="db.east1", workload="w"))
    old_uid = ds(h, "db.east1")["metadata"]["uid"]  # type: ignore[index]
    mark = len(h.commands)
    h.delete(DS, "", ds_name("db.east1"))
    after = h.commands[mark:]
    # both claims forced Pending with Bound=False/BindingInvalid
    for n in ("a", "b"):
        unbind = [r for r in after if isinstance(r.command, UpdateClaimStatus) and r.command.claim.name == n]
        first = unbind[0].command
        assert first.phase == "Pending" and first.bound_data_source == ""
        assert [(c.status, c.reason) for c in first.conditions if c.type == "Bound"] == [("False", "BindingInvalid")]
    # the binding is cleaned, refs removed, and only then the finalizer released
    idx = {type(r.command).__name__ + ":" + str(getattr(r.command, "injected", "")): i for i, r in
           reversed(list(enumerate(after)))}
    strip = idx["SetBindingPlacement:False"]
    emptied = next(i for i, r in enumerate(after)
                   if isinstance(r.command, UpdateDataSourceStatus) and r.command.claim_refs == ())
    release = next(i for i, r in enumerate(after) if isinstance(r.command, RemoveFinalizer))
    assert after[release].command.finalizer == DATASOURCE_FINALIZER
    assert emptied < release and strip < release
    relookup = next(i for i, r in enumerate(after) if isinstance(r.command, LookupDataLocation))
    assert release < relookup
    # then re-resolved (a second lookup) and re-created
    assert h.cluster.lookups == [key("db.east1")] * 2
    new = ds(h, "db.east1")
    assert new is not None and new["metadata"]["uid"] != old_uid and "deletionTimestamp" not in new["metadata"]
    for n in ("a", "b"):
        assert_bound(h, n, "db.east1")
    assert refs(h, "db.east1") == [("default", "a"), ("default", "b")]
    assert injected(rb(h, "w"), "c3")
    assert kube_events(h, "a").count(("Warning", "BindingInvalid")) == 1


@scenario()
def claim_deletion_with_retain() -> None:
    h = setup()
    h.apply(m.resource_binding("w", exclude=["c2"]))
    h.apply(m.claim("a", table="db.west1", workload="w"))
    h.delete(CLAIM, "default", "a")
    assert h.obj(CLAIM, "default", "a") is None  # no finalizer: gone at once
    assert refs(h, "db.west1") == [] and ds(h, "db.west1")["status"]["boundClaims"] == 0  # type: ignore[index]
    assert "deletionTimestamp" not in ds(h, "db.west1")["metadata"]  # type: ignore[index]
    assert excludes(rb(h, "w")) == ["c2"] and tether_annotations(rb(h, "w")) == {}
    assert cmds(h, DeleteDataSource) == []
    assert [c for c in cmds(h, RemoveFinalizer) if c.finalizer == CLAIM_FINALIZER] == []  # none to remove
    # the cache is reused by the next claim: no lookup
    h.apply(m.claim("b", table="db.west1", workload="w"))
    assert_bound(h, "b", "db.west1")
    assert len(h.cluster.lookups) == 1


@scenario()
def claim_deletion_with_delete_policy() -> None:
    h = setup(reclaim_policy="Delete")
    h.apply(m.claim("a", table="db.east1", workload="w"))
    h.apply(m.claim("b", table="db.east1", workload="v"))
    assert ds(h, "db.east1")["spec"]["reclaimPolicy"] == "Delete"  # type: ignore[index]
    h.delete(CLAIM, "default", "a")
    assert h.obj(CLAIM, "default", "a") is None
    assert ds(h, "db.east1") is not None and refs(h, "db.east1") == [("default", "b")]
    assert cmds(h, DeleteDataSource) == []
    h.delete(CLAIM, "default", "b")
    assert h.obj(CLAIM, "default", "b") is None
    assert ds(h, "db.east1") is None
    assert len(cmds(h, DeleteDataSource)) == 1


@scenario()
def placement_reverted_by_third_party_is_reinjected() -> None:
    h = setup()
    h.apply(m.resource_binding("w", exclude=["c9"]))
    h.apply(m.claim("a", table="db.east1", workload="w"))
    assert excludes(rb(h, "w")) == ["c9", "c3"]
    policy = m.resource_binding("w", exclude=["c9"])["spec"]["placement"]

    def detector(raw: dict[str, Any]) -> None:  # Karmada re-applies the policy; annotations stay
        raw["spec"]["placement"] = copy.deepcopy(policy)

    edit(h, RB, "default", "w-deployment", detector)
    assert excludes(rb(h, "w")) == ["c9", "c3"] and injected(rb(h, "w"), "c3")
    assert len(cmds(h, SetBindingPlacement)) == 2


@scenario()
def new_karmada_cluster_is_excluded() -> None:
    h = setup()
    h.apply(m.resource_binding("w"))
    h.apply(m.resource_binding("free"))
    h.apply(m.claim("a", table="db.east1", workload="w"))
    h.apply(m.cluster("c4"))
    assert excludes(rb(h, "w")) == ["c3", "c4"] and injected(rb(h, "w"), "c3,c4")
    assert tether_annotations(rb(h, "free")) == {} and excludes(rb(h, "free")) == []  # no claim: untouched
    assert reason(h, "a", "PlacementInjected") == ("True", "Injected")


@scenario()
def unmapped_location() -> None:
    h = setup()
    h.cluster.catalog[key("db.lost")] = "s3://nowhere/db/lost"
    h.apply(m.resource_binding("w"))
    h.apply(m.claim("a", table="db.lost", workload="w"))
    assert_pending(h, "a", "LocationUnmapped")
    assert "s3://nowhere/db/lost" in cond(h, "a")["message"]  # type: ignore[index]
    assert cmds(h, CreateDataSource) == [] and tether_annotations(rb(h, "w")) == {}
    assert kube_events(h, "a")[-1] == ("Warning", "LocationUnmapped")


@scenario()
def unknown_system() -> None:
    h = setup()
    h.apply(m.claim("a", table="db.t", system="hive", workload="w"))
    assert_pending(h, "a", "UnknownSystem")
    assert h.cluster.lookups == [] and cmds(h, LookupDataLocation) == []
    assert kube_events(h, "a") == [("Warning", "UnknownSystem")]


@scenario({"entry": "not-json"}, {"entry": "mapping-not-a-list"}, {"entry": "bad-auth-type"})
def plugin_config_malformed_for_one_system_only(entry: str) -> None:
    bad = {
        "not-json": '{"system": "hive", ',
        "mapping-not-a-list": m.plugin_entry(system="hive", mapping={"hdfs://x/": "c1"}),  # type: ignore[dict-item]
        "bad-auth-type": m.plugin_entry(system="hive", mapping={"hdfs://x/": ["c1"]},
                                        endpoint={"url": "http://h", "auth": {"type": "kerberos"}}),
    }[entry]
    h = setup(plugins={"hive": bad})
    h.apply(m.claim("a", table="db.t", system="hive", workload="w"))
    h.apply(m.claim("b", table="db.east1", workload="w"))
    assert_pending(h, "a", "PluginConfigInvalid")
    assert_bound(h, "b", "db.east1")
    assert h.cluster.lookups == [key("db.east1")]
    # fixing the entry re-decides every claim
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping=MAPPING),
                                "hive": m.plugin_entry(system="hive", mapping={"hdfs://x/": ["c1"]})}))
    h.cluster.catalog["hive/table/db.t"] = "hdfs://x/db/t"
    h.settle()
    assert status(h, "a")["phase"] == "Pending" and reason(h, "a") != ("False", "PluginConfigInvalid")
    assert "hive/table/db.t" in h.cluster.lookups


def _no_system(spec: dict[str, Any]) -> None:
    del spec["system"]


def _attr_int(spec: dict[str, Any]) -> None:
    spec["attributes"] = {"snapshot": 42}


def _attr_list(spec: dict[str, Any]) -> None:
    spec["attributes"] = ["a"]


def _empty_name(spec: dict[str, Any]) -> None:
    spec["dataSourceName"] = ""


def _blank_type(spec: dict[str, Any]) -> None:
    spec["dataSourceType"] = "  "


def _int_system(spec: dict[str, Any]) -> None:
    spec["system"] = 7


def _no_workload(spec: dict[str, Any]) -> None:
    del spec["workload"]


def _workload_no_name(spec: dict[str, Any]) -> None:
    spec["workload"] = {"apiVersion": "apps/v1", "kind": "Deployment"}


def _spec_empty(spec: dict[str, Any]) -> None:
    spec.clear()


@scenario(*({"breakage": f.__name__.lstrip("_")} for f in (_no_system, _attr_int, _attr_list, _empty_name,
                                                          _blank_type, _int_system, _no_workload,
                                                          _workload_no_name, _spec_empty)))
def malformed_claim_spec_is_invalid_spec(breakage: str) -> None:
    h = setup()
    raw = m.claim("a", table="db.east1", workload="w")
    globals()["_" + breakage](raw["spec"])
    h.apply(raw)  # never an exception
    assert_pending(h, "a", "InvalidSpec")
    assert cond(h, "a")["message"].startswith("spec.")  # type: ignore[index]
    assert h.cluster.lookups == [] and cmds(h, CreateDataSource) == []
    assert "finalizers" not in claim(h, "a")["metadata"]
    assert kube_events(h, "a") == [("Warning", "InvalidSpec")]
    h.apply(m.claim("a", table="db.east1", workload="w"))  # fixing the spec binds it
    assert_bound(h, "a", "db.east1")


@scenario()
def table_names_with_upper_case_and_underscores_get_valid_names() -> None:
    h = setup()
    h.cluster.catalog[key("prod.db.User_Events")] = "s3://east/prod/user_events"
    h.cluster.catalog[key("prod.db.user-events")] = "s3://west/prod/user-events"
    h.apply(m.claim("a", table="prod.db.User_Events", workload="w"))
    h.apply(m.claim("b", table="prod.db.user-events", workload="v"))
    names = [c.name for c in cmds(h, CreateDataSource)]
    assert len(names) == 2 and len(set(names)) == 2
    assert all(is_valid_object_name(n) for n in names)
    assert names[1] == "amoro-table-prod.db.user-events"  # VG's name when it is valid
    digest = hashlib.sha256(b"amoro/table/prod.db.User_Events").hexdigest()[:8]
    assert names[0] == f"amoro-table-prod.db.user-events-{digest}"
    assert status(h, "a")["boundDataSource"] == names[0] and status(h, "b")["boundDataSource"] == names[1]


@scenario()
def lookup_failure_retries_with_backoff() -> None:
    h = setup()
    h.cluster.catalog_failures[key("db.east1")] = "503 Service Unavailable"
    h.apply(m.claim("a", table="db.east1", workload="w"))
    assert_pending(h, "a", "LookupFailed")
    assert "503" in cond(h, "a")["message"]  # type: ignore[index]
    (timer,) = cmds(h, StartTimer)
    failed_at = next(e.at_ms for e in h.events if e.source == "catalog")
    assert (timer.purpose, timer.fire_at_ms) == ("lookup-retry", failed_at + RETRY_BASE_MS)
    h.advance(RETRY_BASE_MS - 100)
    assert len(h.cluster.lookups) == 1  # not yet
    h.advance(200)
    assert len(h.cluster.lookups) == 2
    second = cmds(h, LookupDataLocation)[-1]
    assert (second.trigger, second.attempt) == ("retry", 2)
    timers = cmds(h, StartTimer)
    assert len(timers) == 2
    failed_again = [e.at_ms for e in h.events if e.source == "catalog"][-1]
    assert timers[-1].fire_at_ms == failed_again + backoff_ms(2) == failed_again + 2 * RETRY_BASE_MS
    assert_pending(h, "a", "LookupFailed")
    del h.cluster.catalog_failures[key("db.east1")]
    h.advance(2 * RETRY_BASE_MS)
    assert len(h.cluster.lookups) == 3 and cmds(h, LookupDataLocation)[-1].attempt == 3
    assert_bound(h, "a", "db.east1")
    # one Warning per failed attempt's transition; being bound is the status's news, not an Event's
    assert kube_events(h, "a") == [("Warning", "LookupFailed"), ("Warning", "LookupFailed")]
    lookups_in_flight_never_exceed_one(h)


@scenario()
def not_found_then_table_appears() -> None:
    h = setup()
    h.apply(m.claim("a", table="db.new", workload="w"))
    assert_pending(h, "a", "DataSourceNotFound")
    assert [t.purpose for t in cmds(h, StartTimer)] == ["lookup-retry"]
    h.cluster.catalog[key("db.new")] = "s3://west/db/new"
    h.advance(RETRY_BASE_MS)
    assert_bound(h, "a", "db.new")
    assert h.cluster.lookups == [key("db.new")] * 2


@scenario()
def create_rejected_for_good_is_not_resent() -> None:
    h = setup()
    failed = fail_commands(h, CreateDataSource, retryable=False, times=100)
    h.apply(m.claim("a", table="db.east1", workload="w"))
    assert len(failed) == 1
    assert_pending(h, "a", "DataSourceCreateFailed")
    assert "injected failure" in cond(h, "a")["message"]  # type: ignore[index]
    assert cmds(h, StartTimer) == []
    # touching the claim (a label) or a second claim on the same data re-decides, but not the same request
    edit(h, CLAIM, "default", "a", lambda raw: raw["metadata"].setdefault("labels", {}).update(x="1"))
    h.apply(m.claim("b", table="db.east1", workload="w"))
    h.advance(RETRY_MAX_MS + 1)
    assert len(failed) == 1 and len(cmds(h, CreateDataSource)) == 1
    assert_pending(h, "b", "DataSourceCreateFailed")
    assert kube_events(h, "a").count(("Warning", "DataSourceCreateFailed")) == 1


@scenario()
def retryable_command_failure_retries_after_timer() -> None:
    h = setup()
    h.apply(m.claim("a", table="db.east1", workload="w"))
    failed = fail_commands(h, SetBindingPlacement, retryable=True)
    h.apply(m.resource_binding("w"))
    assert len(failed) == 1
    assert tether_annotations(rb(h, "w")) == {}
    (timer,) = cmds(h, StartTimer)
    failed_at = next(e.at_ms for e in h.events if isinstance(e.event, CommandFailed))
    assert timer.purpose == "retry-command" and timer.subject == "ResourceBinding/default/w-deployment"
    assert timer.fire_at_ms == failed_at + RETRY_BASE_MS
    assert len(cmds(h, SetBindingPlacement)) == 1  # parked: not re-sent before the timer
    h.apply(m.claim("b", table="db.east1", workload="w"))  # even when the binding is touched again
    assert len(cmds(h, SetBindingPlacement)) == 1
    h.advance(RETRY_BASE_MS)
    assert len(cmds(h, SetBindingPlacement)) == 2
    assert injected(rb(h, "w"), "c3") and excludes(rb(h, "w")) == ["c3"]
    assert reason(h, "a", "PlacementInjected") == ("True", "Injected")


@scenario({"second": "db.central1", "excluded": "c1,c3"}, {"second": "db.west1", "excluded": "c1,c2,c3"},
          {"second": "db.east2", "excluded": "c3"})
def claims_of_one_workload_in_different_regions(second: str, excluded: str) -> None:
    h = setup()
    h.apply(m.resource_binding("w"))
    h.apply(m.claim("a", table="db.east1", workload="w"))
    h.apply(m.claim("b", table=second, workload="w"))
    binding = rb(h, "w")
    assert excludes(binding) == excluded.split(",") and injected(binding, excluded)
    h.delete(CLAIM, "default", "b")
    assert excludes(rb(h, "w")) == ["c3"] and injected(rb(h, "w"), "c3")


@scenario()
def same_observation_twice_is_idempotent() -> None:
    h = setup()
    h.apply(m.resource_binding("w"))
    h.apply(m.claim("a", table="db.east1", workload="w"))
    for kind, ns, name in [(CLAIM, "default", "a"), (DS, "", ds_name("db.east1")), (RB, "default", "w-deployment")]:
        obj = h.obj(kind, ns, name)
        assert obj is not None
        for _ in range(2):
            assert h.feed(ObjectObserved(obj=trim(obj))) == []
    ident = make_identity("amoro", "table", "db.east1", None)
    for _ in range(2):  # a refresh that finds the data where it was changes nothing either
        assert h.feed(DataLocationResolved(identity=ident, location=TABLES["db.east1"], trigger="refresh")) == []
    assert not h.queue


@scenario()
def older_resource_version_is_ignored() -> None:
    h = setup()
    h.apply(m.claim("a", table="db.east1", workload="w"))
    first = next(e.event for e in h.events
                 if isinstance(e.event, ObjectObserved) and e.event.obj.key == "DataSourceClaim/default/a")
    current = h.world.claims["DataSourceClaim/default/a"]
    assert int(first.obj.metadata.resource_version) < int(current.resource_version)
    assert h.feed(first) == []  # folded, it would lack the status: an UpdateClaimStatus
    assert h.world.claims["DataSourceClaim/default/a"] == current


@scenario()
def kubernetes_events_only_for_what_needs_attention_once_per_transition() -> None:
    h = setup()
    h.apply(m.claim("a", table="db.east1", workload="w"))
    assert kube_events(h, "a") == []  # Resolving, CreatingDataSource, Bound: the status says it, no Event
    h.apply(m.resource_binding("w"))  # the PlacementInjected condition changes; Bound does not
    edit(h, CLAIM, "default", "a", lambda raw: raw["metadata"].setdefault("labels", {}).update(x="1"))
    assert kube_events(h, "a") == []
    h.apply(m.claim("b", table="db.t", system="hive", workload="w"))
    edit(h, CLAIM, "default", "b", lambda raw: raw["metadata"].setdefault("labels", {}).update(x="1"))
    assert kube_events(h, "b") == [("Warning", "UnknownSystem")]  # once, however often the claim changes
    # the binding: its first placement follows from the claim just created (its condition says it): no Event
    assert kube_events(h, "w-deployment") == []
    assert {e.involved.kind for e in h.cluster.kube_events} == {CLAIM}


# --- decisions on a hand-built World (single step) -----------------------------------------------------------

_rv = [0]


def _observed(raw: dict[str, Any], **meta: Any) -> ObjectObserved:
    raw = copy.deepcopy(raw)
    _rv[0] += 1
    raw["metadata"].update({"resourceVersion": str(_rv[0]), "uid": f"u-{raw['metadata']['name']}",
                            "generation": 1, **meta})
    return ObjectObserved(obj=trim(raw))


def _record(event: Event, offset: int, at_ms: int = T0) -> EventRecord:
    return EventRecord(at_ms=at_ms, source="watch", key=event_key(event), event=event, offset=offset)


def hand_built_world(*objects: dict[str, Any]) -> World:
    world = initial_world()
    base = [m.cluster(c) for c in CLUSTERS] + [m.plugin_configmap({"amoro": m.plugin_entry(mapping=MAPPING)})]
    for i, raw in enumerate(base + list(objects)):
        step(world, _record(_observed(raw), i + 1))
    world.inflight.clear()  # a settled world: whatever the fold decided was applied
    world.lookups_in_flight.clear()
    return world


def _bound_claim(name: str, table: str, workload: str) -> dict[str, Any]:
    raw = m.claim(name, table=table, workload=workload)
    raw["metadata"]["finalizers"] = [CLAIM_FINALIZER]
    raw["status"] = {"phase": "Bound", "boundDataSource": ds_name(table)}
    return raw


def _data_source(table: str, clusters: list[str]) -> dict[str, Any]:
    return {"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": DS,
            "metadata": {"name": ds_name(table), "finalizers": [DATASOURCE_FINALIZER]},
            "spec": {"system": "amoro", "type": "table", "name": table, "locality": {"clusterNames": clusters}}}


@scenario()
def step_new_claim_decides_its_status_and_one_lookup() -> None:
    world = hand_built_world()
    out = step(world, _record(_observed(m.claim("a", table="db.east1", workload="w")), 100))
    assert [type(r.command) for r in out] == [LookupDataLocation, UpdateClaimStatus]
    assert out[1].command.conditions[0].reason == "Resolving"  # type: ignore[union-attr]
    assert all(r.causation == "0:100" and r.at_ms == T0 for r in out)
    assert world.lookups_in_flight == {key("db.east1"): 1}


@scenario()
def step_many_claims_before_any_answer_one_lookup() -> None:
    world = hand_built_world()
    lookups = 0
    for i in range(50):
        out = step(world, _record(_observed(m.claim(f"c{i}", table="db.east1", workload="w")), 100 + i))
        lookups += sum(isinstance(r.command, LookupDataLocation) for r in out)
    assert lookups == 1 and world.lookups_in_flight == {key("db.east1"): 1}


@scenario({"scheduled_on": "c1", "reschedule": True}, {"scheduled_on": "c3", "reschedule": False},
          {"scheduled_on": "", "reschedule": False})
def step_reschedule_only_when_scheduled_on_an_excluded_cluster(scheduled_on: str, reschedule: bool) -> None:
    binding = m.resource_binding("w")
    if scheduled_on:
        binding["spec"]["clusters"] = [{"name": scheduled_on, "replicas": 1}]
    world = hand_built_world(_data_source("db.west1", ["c3"]), _bound_claim("a", "db.west1", "w"))
    out = step(world, _record(_observed(binding), 100, at_ms=T0 + 7_000))
    (placement,) = [r.command for r in out if isinstance(r.command, SetBindingPlacement)]
    assert placement.excluded_clusters == ("c1", "c2") and placement.injected
    assert placement.reschedule_at == (rfc3339(T0 + 7_000) if reschedule else "")


@scenario()
def step_is_deterministic_across_fresh_worlds() -> None:
    def run() -> list[bytes]:
        world = hand_built_world(_data_source("db.west1", ["c3"]))
        out = step(world, _record(_observed(m.claim("a", table="db.west1", workload="w")), 100))
        out += step(world, _record(_observed(m.resource_binding("w")), 101))
        return [msgspec.json.encode(r) for r in out]

    _rv[0] = 1000
    first = run()
    _rv[0] = 1000
    assert first == run() and first


@scenario({"reclaim": "Retain"}, {"reclaim": "Delete"}, {"reclaim": ""})
def step_same_commands_from_a_snapshot_restored_world(reclaim: str) -> None:
    """Decoded strings are not the interned literals: command encodings and ids must not depend on that."""
    extra = {"reclaimPolicy": reclaim} if reclaim else {}
    world = initial_world()
    base = [m.cluster(c) for c in CLUSTERS] + [m.plugin_configmap({"amoro": m.plugin_entry(mapping=MAPPING, **extra)})]
    for i, raw in enumerate([*base, m.claim("a", table="db.east1", workload="w")]):
        step(world, _record(_observed(raw), i + 1))
    restored = decode_world(encode_world(world))
    assert restored is not None
    answer = _record(DataLocationResolved(identity=make_identity("amoro", "table", "db.east1", None),
                                          location=TABLES["db.east1"]), 50)
    live = [msgspec.json.encode(r) for r in step(world, answer)]
    again = [msgspec.json.encode(r) for r in step(restored, answer)]
    assert any(b"CreateDataSource" in r for r in live)
    assert live == again


# --- a cache miss places the binding with the DataSource's creation ------------------------------------------


def hold(h: Harness, type_: type[Command]) -> list[CommandRecord]:
    """Keep the commands of ``type_`` in flight (not applied, no outcome) until :func:`release`."""
    original = h.cluster.apply
    held: list[CommandRecord] = []

    def apply(record: CommandRecord) -> list[tuple[str, Event]]:
        if isinstance(record.command, type_):
            held.append(record)
            return []
        return original(record)

    h.cluster.apply = apply  # type: ignore[method-assign]
    return held


def release(h: Harness, held: list[CommandRecord]) -> None:
    """Apply the held commands, in order, and settle."""
    del h.cluster.apply  # back to the class's method
    h.queue.extend(held)
    held.clear()
    h.settle()


def _caused_by_lookup_answer(h: Harness, type_: type[Command]) -> list[Any]:
    answers = {f"{e.partition}:{e.offset}" for e in h.events if isinstance(e.event, DataLocationResolved)}
    return [r.command for r in h.commands if isinstance(r.command, type_) and r.causation in answers]


@scenario({"binding": "before-claim"}, {"binding": "scheduled-on-c1"})
def miss_places_binding_in_the_decision_that_creates_the_datasource(binding: str) -> None:
    """One trip less per cache miss: the lookup's answer decides the DataSource and the binding's exclusions
    together (the exclusions follow from the same locationMapping the DataSource's locality does)."""
    h = setup()
    h.apply(m.resource_binding("w"))
    if binding == "scheduled-on-c1":
        schedule(h, "w", ["c1"])
    held = hold(h, CreateDataSource)
    h.apply(m.claim("a", table="db.west1", workload="w"))
    (create,) = _caused_by_lookup_answer(h, CreateDataSource)
    (placement,) = _caused_by_lookup_answer(h, SetBindingPlacement)
    assert create.cluster_names == ("c3",)
    assert placement.excluded_clusters == ("c1", "c2") and placement.injected
    assert bool(placement.reschedule_at) == (binding == "scheduled-on-c1")
    # the DataSource is still on its way: the claim says so; the binding already carries the constraint
    assert_pending(h, "a", "CreatingDataSource")
    assert reason(h, "a", "PlacementInjected") is None
    assert excludes(rb(h, "w")) == ["c1", "c2"] and injected(rb(h, "w"), "c1,c2")
    release(h, held)
    assert_bound(h, "a", "db.west1")
    assert reason(h, "a", "PlacementInjected") == ("True", "Injected")
    assert len(cmds(h, SetBindingPlacement)) == 1  # not written again once the DataSource exists
    assert [s.phase for s in cmds(h, UpdateClaimStatus)][-1] == "Bound"


@scenario()
def miss_datasource_creation_rejected_strips_the_anticipated_placement() -> None:
    """The API refuses the DataSource for good: the claim cannot bind, so the binding goes back to the user's
    placement (tether's exclusions and both annotations removed), as for any claim that is not Bound."""
    h = setup()
    h.apply(m.resource_binding("w", exclude=["c9"]))
    failed = fail_commands(h, CreateDataSource, retryable=False, times=100)
    h.apply(m.claim("a", table="db.west1", workload="w"))
    assert len(failed) == 1
    assert_pending(h, "a", "DataSourceCreateFailed")
    assert excludes(rb(h, "w")) == ["c9"] and tether_annotations(rb(h, "w")) == {}
    assert [(p.excluded_clusters, p.injected) for p in cmds(h, SetBindingPlacement)] == [
        (("c1", "c2"), True), ((), False)]
    h.apply(m.claim("b", table="db.west1", workload="w"))  # a second claim on it decides the same: nothing
    assert len(cmds(h, SetBindingPlacement)) == 2 and tether_annotations(rb(h, "w")) == {}


@scenario()
def miss_datasource_creation_fails_retryably_keeps_the_anticipated_placement() -> None:
    """A transient failure does not change where the data is: the exclusions stay while the creation is retried."""
    h = setup()
    h.apply(m.resource_binding("w"))
    failed = fail_commands(h, CreateDataSource, retryable=True)
    h.apply(m.claim("a", table="db.west1", workload="w"))
    assert len(failed) == 1
    assert_pending(h, "a", "CreatingDataSource")
    assert excludes(rb(h, "w")) == ["c1", "c2"] and injected(rb(h, "w"), "c1,c2")
    h.advance(RETRY_BASE_MS)
    assert_bound(h, "a", "db.west1")
    assert len(cmds(h, CreateDataSource)) == 2 and len(cmds(h, SetBindingPlacement)) == 1


@scenario()
def miss_claim_switches_table_before_its_datasource_exists() -> None:
    """The claim's spec changes while the first table's DataSource is being created: the binding follows the claim
    as it is now (the new table's answer), never the abandoned one; the abandoned DataSource is left unbound."""
    h = setup()
    h.apply(m.resource_binding("w"))
    held = hold(h, CreateDataSource)
    h.apply(m.claim("a", table="db.west1", workload="w"))
    assert excludes(rb(h, "w")) == ["c1", "c2"]
    edit(h, CLAIM, "default", "a", lambda raw: raw["spec"].update(dataSourceName="db.east1"))
    assert_pending(h, "a", "CreatingDataSource")
    assert excludes(rb(h, "w")) == ["c3"] and injected(rb(h, "w"), "c3")
    release(h, held)
    assert_bound(h, "a", "db.east1")
    assert excludes(rb(h, "w")) == ["c3"] and injected(rb(h, "w"), "c3")
    assert refs(h, "db.west1") == [] and refs(h, "db.east1") == [("default", "a")]
    # stripped while the new table is looked up (as VG's unbinding on a table change), then placed from its answer
    assert [p.excluded_clusters for p in cmds(h, SetBindingPlacement)] == [("c1", "c2"), (), ("c3",)]


@scenario()
def miss_claim_switches_to_a_missing_table_before_its_datasource_exists() -> None:
    h = setup()
    h.apply(m.resource_binding("w"))
    held = hold(h, CreateDataSource)
    h.apply(m.claim("a", table="db.west1", workload="w"))
    edit(h, CLAIM, "default", "a", lambda raw: raw["spec"].update(dataSourceName="db.nowhere"))
    assert_pending(h, "a", "DataSourceNotFound")
    assert excludes(rb(h, "w")) == [] and tether_annotations(rb(h, "w")) == {}
    release(h, held)
    assert_pending(h, "a", "DataSourceNotFound")
    assert excludes(rb(h, "w")) == [] and tether_annotations(rb(h, "w")) == {}


@scenario()
def miss_lookup_superseded_before_the_datasource_exists() -> None:
    """The catalog answers again (a push) with a new location while the DataSource is being created from the
    first answer: the binding follows the newest answer, and once the DataSource exists (from the first answer)
    and its locality follows the new one, everything agrees. In that window the binding may briefly follow the
    DataSource's old locality (as it would without the anticipation, which only adds the first write)."""
    h = setup()
    h.apply(m.resource_binding("w"))
    held = hold(h, CreateDataSource)
    h.apply(m.claim("a", table="db.west1", workload="w"))
    assert excludes(rb(h, "w")) == ["c1", "c2"]
    h.cluster.catalog[key("db.west1")] = "s3://central/db/west1"
    h.feed(DataLocationResolved(identity=make_identity("amoro", "table", "db.west1", None),
                                location="s3://central/db/west1", trigger="push"), source="catalog")
    h.settle()
    assert excludes(rb(h, "w")) == ["c1"] and injected(rb(h, "w"), "c1")
    release(h, held)
    assert_bound(h, "a", "db.west1")
    obj = ds(h, "db.west1")
    assert obj is not None and obj["spec"]["locality"] == {"clusterNames": ["c2", "c3"]}
    assert excludes(rb(h, "w")) == ["c1"] and injected(rb(h, "w"), "c1")
    assert reason(h, "a", "PlacementInjected") == ("True", "Injected")


@scenario()
def miss_unmapped_or_conflicting_name_does_not_anticipate() -> None:
    """No DataSource is on its way (an unmapped location, a name taken by another data source): no placement."""
    h = setup()
    h.apply(m.resource_binding("w"))
    h.cluster.catalog[key("db.mars")] = "s3://mars/db/mars"
    h.apply(m.claim("a", table="db.mars", workload="w"))
    assert_pending(h, "a", "LocationUnmapped")
    assert cmds(h, SetBindingPlacement) == [] and tether_annotations(rb(h, "w")) == {}
    h.apply({"apiVersion": "datadependency.volcano.sh/v1alpha1", "kind": DS,
             "metadata": {"name": ds_name("db.west1"), "finalizers": [DATASOURCE_FINALIZER]},
             "spec": {"system": "amoro", "type": "table", "name": "db.other",
                      "locality": {"clusterNames": ["c3"]}, "reclaimPolicy": "Retain"}})
    h.apply(m.resource_binding("v"))
    h.apply(m.claim("b", table="db.west1", workload="v"))
    assert_pending(h, "b", "DataSourceNameConflict")
    assert cmds(h, SetBindingPlacement) == [] and tether_annotations(rb(h, "v")) == {}


@pytest.mark.parametrize(("fn", "kwargs"), SCENARIOS)
def test_scenario(fn: Callable[..., None], kwargs: dict[str, Any]) -> None:
    fn(**kwargs)


# --- mapping (VG's unit tests) -------------------------------------------------------------------------------

_MAP = (("s3://bucket/", ("c1",)), ("s3://bucket/hot/", ("c2", "c3")), ("hdfs://nn1/warehouse", ("c4",)))


@pytest.mark.parametrize(("location", "clusters"), [
    pytest.param("s3://bucket/", ("c1",), id="exact-prefix"),
    pytest.param("s3://bucket/db/t", ("c1",), id="prefix"),
    pytest.param("s3://bucket/hot/db/t", ("c2", "c3"), id="longest-prefix-wins"),
    pytest.param("hdfs://nn1/warehouse/x", ("c4",), id="other-scheme"),
    pytest.param("s3://other/db/t", None, id="unknown-location-maps-to-nothing"),
    pytest.param("s3://bucke", None, id="shorter-than-prefix"),
    pytest.param("", None, id="empty-location"),
])
def test_map_location(location: str, clusters: tuple[str, ...] | None) -> None:
    assert map_location(_MAP, location) == clusters
    assert map_location(tuple(reversed(_MAP)), location) == clusters  # order of the mapping does not matter


# --- placement arithmetic ------------------------------------------------------------------------------------


def _apply(placement: dict[str, Any], annotations: dict[str, str], desired: frozenset[str] | None,
           ) -> tuple[dict[str, Any], dict[str, str], bool]:
    plan = plan_placement(placement=placement, annotations=annotations, desired=desired)
    ann = dict(annotations)
    for k, v in plan.annotations.items():
        if v is None:
            ann.pop(k, None)
        else:
            ann[k] = v
    return plan.placement, ann, plan.changed


@pytest.mark.parametrize(("user", "desired", "exclude", "added"), [
    pytest.param([], {"c3"}, ["c3"], "c3", id="inject-into-empty"),
    pytest.param(["c1"], {"c3"}, ["c1", "c3"], "c3", id="keep-users-exclusions"),
    pytest.param(["c3"], {"c3"}, ["c3"], "", id="users-own-exclusion-not-claimed"),
    pytest.param(["c9"], set(), ["c9"], "", id="nothing-to-exclude"),
])
def test_plan_placement_injects_and_strips_only_its_own(user: list[str], desired: set[str], exclude: list[str],
                                                        added: str) -> None:
    start = {"clusterAffinity": {"clusterNames": ["c1", "c2", "c3"], **({"exclude": user} if user else {})}}
    placement, ann, changed = _apply(start, {}, frozenset(desired))
    assert changed
    assert placement["clusterAffinity"].get("exclude", []) == exclude
    assert placement["clusterAffinity"]["clusterNames"] == ["c1", "c2", "c3"]
    assert ann == {PLACEMENT_INJECTED_ANNOTATION: "true", EXCLUDED_CLUSTERS_ANNOTATION: added}
    # idempotent: planning again against the result changes nothing
    again, ann2, changed2 = _apply(placement, ann, frozenset(desired))
    assert not changed2 and again == placement and ann2 == ann
    # stripping removes exactly what was added
    stripped, ann3, _ = _apply(placement, ann, None)
    assert stripped == start and ann3 == {}
    assert not _apply(stripped, ann3, None)[2]


def test_plan_placement_reinjects_after_revert_and_follows_changes() -> None:
    placement, ann, _ = _apply({"clusterAffinity": {"exclude": ["u"]}}, {}, frozenset({"c1", "c2"}))
    assert placement["clusterAffinity"]["exclude"] == ["u", "c1", "c2"]
    reverted, ann2, changed = _apply({"clusterAffinity": {"exclude": ["u"]}}, ann, frozenset({"c1", "c2"}))
    assert changed and reverted == placement and ann2 == ann
    moved, ann3, changed = _apply(placement, ann, frozenset({"c2", "c3"}))
    assert changed and moved["clusterAffinity"]["exclude"] == ["u", "c2", "c3"]
    assert ann3[EXCLUDED_CLUSTERS_ANNOTATION] == "c2,c3"


def test_plan_placement_leaves_untouched_binding_alone() -> None:
    start = {"clusterAffinities": [{"affinityName": "a", "exclude": ["x"]}]}
    plan = plan_placement(placement=start, annotations={}, desired=None)
    assert not plan.changed and plan.placement == start and plan.annotations == {}
    plan = plan_placement(placement=start, annotations={}, desired=frozenset({"c1"}))
    assert plan.placement == {"clusterAffinities": [{"affinityName": "a", "exclude": ["x", "c1"]}]}
    assert start == {"clusterAffinities": [{"affinityName": "a", "exclude": ["x"]}]}  # input not mutated
