"""Kubernetes Events on ResourceBindings (``core.admission.binding_events``): one per observed transition of what
tether owns on a binding — placed, placement changed, rescheduled, stripped, suspended — and none otherwise: not on
an echo, an unrelated edit, a restart's relist or a cold start's list."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from tether.adapters.kubernetes import manifests as m
from tether.adapters.testing.fake_cluster import Harness
from tether.core.admission.binding_events import (
    PLACEMENT_STRIPPED,
    RESCHEDULED,
    SUSPENDED,
    UNSEEN,
    BindingMark,
    binding_events,
)
from tether.core.commands import EmitKubernetesEvent
from tether.core.events import DataLocationResolved, ListsStarted, ObjectObserved, ObjectsListed, list_source
from tether.core.identity import make_identity
from tether.core.keys import ADMISSION_ANNOTATION
from tether.core.kube import ObjectRef

MAPPING = {"s3://east/": ["c1", "c2"], "s3://west/": ["c3"]}
RB = "ResourceBinding"


def universe() -> Harness:
    h = Harness()
    for c in ("c1", "c2", "c3"):
        h.apply(m.cluster(c))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping=MAPPING)}))
    h.cluster.catalog["amoro/table/db.t"] = "s3://east/db/t"
    return h


def events_on(h: Harness, name: str) -> list[tuple[str, str]]:
    return [(e.reason, e.message) for e in h.cluster.kube_events if e.involved.kind == RB and e.involved.name == name]


def reasons(h: Harness, name: str) -> list[str]:
    return [reason for reason, _ in events_on(h, name)]


def edit(h: Harness, name: str, change: Any) -> None:
    raw = copy.deepcopy(h.obj(RB, "default", name))
    assert raw is not None
    change(raw)
    h.apply(raw)


def excluded(binding: dict[str, Any] | None) -> list[str]:
    assert binding is not None
    return sorted(binding["spec"]["placement"]["clusterAffinity"].get("exclude") or [])


def schedule(h: Harness, name: str, clusters: list[str]) -> None:
    edit(h, name, lambda raw: raw["spec"].update(clusters=[{"name": c, "replicas": 1} for c in clusters]))


def move(h: Harness, location: str) -> None:
    h.cluster.catalog["amoro/table/db.t"] = location
    h.feed(DataLocationResolved(identity=make_identity("amoro", "table", "db.t", None), location=location,
                                trigger="push"), source="catalog")
    h.settle()


def test_a_binding_moved_by_its_data_and_stripped_says_so_once_each() -> None:
    h = universe()
    h.apply(m.resource_binding("w"))
    schedule(h, "w-deployment", ["c3"])  # Karmada was first: the binding runs where the data is not
    assert reasons(h, "w-deployment") == []
    h.apply(m.claim("a", table="db.t", workload="w"))
    # the first placement follows from the claim just created: its condition says so, no Event (module doc)
    assert reasons(h, "w-deployment") == []
    edit(h, "w-deployment", lambda raw: raw["metadata"].setdefault("labels", {}).update(x="1"))  # unrelated
    schedule(h, "w-deployment", ["c1"])  # Karmada moved it: nothing tether owns changed
    assert reasons(h, "w-deployment") == []

    move(h, "s3://west/db/t/v2")  # the data moves west, where the binding does not run
    assert events_on(h, "w-deployment") == [
        (RESCHEDULED, "the data of apps/Deployment/default/w is no longer where the binding runs: excluding c1,c2 "
                      "(was c3); rescheduling away from c1")]
    schedule(h, "w-deployment", ["c3"])
    move(h, "s3://east/db/t/v3")  # back east: the binding runs on c3, excluded now → rescheduled again
    assert reasons(h, "w-deployment") == [RESCHEDULED, RESCHEDULED]

    h.delete("DataSourceClaim", "default", "a")
    assert events_on(h, "w-deployment")[-1] == (
        PLACEMENT_STRIPPED, "no bound claim left for apps/Deployment/default/w: tether's exclusions (c3) removed")
    assert len(events_on(h, "w-deployment")) == 3


def test_exclusions_that_change_where_the_binding_does_not_run_say_nothing() -> None:
    """A cluster joining Karmada is excluded from every placed binding; none runs there: no Event (issue 35 — on a
    federation with hundreds of bindings, an Event each per cluster joining was the largest share of the writes)."""
    h = universe()
    h.apply(m.resource_binding("w"))
    h.apply(m.claim("a", table="db.t", workload="w"))  # not scheduled yet: no reschedule
    before = excluded(h.obj(RB, "default", "w-deployment"))
    h.apply(m.cluster("c4"))  # a new cluster without the data: excluded too
    assert excluded(h.obj(RB, "default", "w-deployment")) == sorted([*before, "c4"])
    assert events_on(h, "w-deployment") == []


def test_a_binding_created_suspended_with_tethers_hold_says_suspended() -> None:
    h = universe()
    held = m.resource_binding("w", suspended=True)
    held["metadata"]["annotations"] = {ADMISSION_ANNOTATION: "queue-managed: waiting for admission"}
    h.apply(held)
    # (no claim holds it: admission lets it go at once, and says so after the suspension)
    assert events_on(h, "w-deployment") == [
        (SUSPENDED, "scheduling suspended by tether: queue-managed: waiting for admission"),
        ("Admitted", "its data placement is in place")]
    h.apply(m.resource_binding("other", suspended=True))  # suspended by someone else: not tether's to report
    edit(h, "other-deployment", lambda raw: raw["metadata"].setdefault("annotations", {}).update(
        {ADMISSION_ANNOTATION: "queue q: cpu 2/1"}))  # and annotated later: still not a suspension by tether
    assert SUSPENDED not in reasons(h, "other-deployment")


def test_a_list_reports_nothing_a_watch_reports_a_new_binding() -> None:
    """A cold start lists bindings placed long ago (not a transition tether saw); a binding that appears later, placed
    in its own write (the webhook), is one."""
    placed = universe()
    placed.apply(m.resource_binding("w"))
    placed.apply(m.claim("a", table="db.t", workload="w"))
    objects = [placed.cluster.get(key) for key in sorted(placed.cluster.objects)]
    cold = Harness()
    cold.feed(ListsStarted(sources=(list_source(RB), list_source("DataSourceClaim"))))
    for raw in objects:
        assert raw is not None
        cold.feed(ObjectObserved(obj=cold.cluster.put(copy.deepcopy(raw))))
    for kind in (RB, "DataSourceClaim"):
        cold.feed(ObjectsListed(kind=kind, keys=tuple(k for k in placed.cluster.objects if k.startswith(kind))))
    cold.settle()
    assert [e for e in cold.cluster.kube_events if e.involved.kind == RB] == []

    second = copy.deepcopy(placed.obj(RB, "default", "w-deployment"))
    assert second is not None
    second["metadata"]["name"] = "w2-deployment"
    second["metadata"]["uid"] = "uid-w2"
    second["metadata"]["annotations"][ADMISSION_ANNOTATION] = "queue-managed: waiting for admission"
    second["spec"]["suspension"] = {"scheduling": True}
    cold.apply(second)  # created held, with tether's placement in it, as the webhook does
    assert reasons(cold, "w2-deployment")[:1] == [SUSPENDED]


def test_a_relist_of_unchanged_bindings_reports_nothing() -> None:
    h = universe()
    h.apply(m.resource_binding("w"))
    h.apply(m.claim("a", table="db.t", workload="w"))
    before = len(h.cluster.kube_events)
    h.feed(ListsStarted(sources=(list_source(RB),)))
    binding = h.obj(RB, "default", "w-deployment")
    assert binding is not None
    h.feed(ObjectObserved(obj=h.cluster.put(copy.deepcopy(binding))))  # a new resourceVersion, the same content
    h.feed(ObjectsListed(kind=RB, keys=(f"{RB}/default/w-deployment",)))
    h.settle()
    assert len(h.cluster.kube_events) == before


REF = ObjectRef(api_version="work.karmada.io/v1alpha2", kind=RB, name="w-deployment", namespace="ns", uid="u")


@pytest.mark.parametrize(("before", "after", "scheduled", "expected"), [
    (UNSEEN, BindingMark(), (), []),
    (UNSEEN, BindingMark(injected=True, excluded=("c3",)), (), []),
    (UNSEEN, BindingMark(injected=True, excluded=("c3",)), ("c3",), []),
    (BindingMark(injected=True, excluded=("c3",)), BindingMark(injected=True, excluded=("c3",)), ("c1",), []),
    (BindingMark(injected=True, excluded=("c3",)), BindingMark(injected=True, excluded=("c1", "c2")), ("c1",),
     [RESCHEDULED]),
    # not moved yet, and a cluster joined: it still leaves c1, as it was, and says nothing again
    (BindingMark(injected=True, excluded=("c1", "c2")), BindingMark(injected=True, excluded=("c1", "c2", "c4")),
     ("c1",), []),
    (BindingMark(injected=True, excluded=("c3",)), BindingMark(injected=True, excluded=("c1", "c2")), ("c3",), []),
    (BindingMark(injected=True, excluded=("c3",)), BindingMark(injected=True, excluded=("c1", "c2")), (), []),
    (BindingMark(injected=True, excluded=("c3",)), BindingMark(), (), [PLACEMENT_STRIPPED]),
    (UNSEEN, BindingMark(suspended=True, hold="why"), (), [SUSPENDED]),
    (UNSEEN, BindingMark(suspended=True), (), []),
    (BindingMark(suspended=True), BindingMark(suspended=True, hold="why"), (), []),
    (UNSEEN, BindingMark(injected=True, excluded=("c3",), suspended=True, hold="why"), (), [SUSPENDED]),
])
def test_transitions(before: BindingMark, after: BindingMark, scheduled: tuple[str, ...],
                     expected: list[str]) -> None:
    events = binding_events(involved=REF, workload="apps/Deployment/ns/w", before=before, after=after,
                            scheduled=scheduled)
    assert [e.reason for e in events] == expected
    assert all(isinstance(e, EmitKubernetesEvent) and e.involved == REF and e.event_type == "Normal"
               for e in events)


def test_a_cluster_gone_from_karmada_writes_no_binding_until_another_change_does() -> None:
    """Excluding a cluster Karmada no longer has excludes nothing: a placed binding is not rewritten for a cluster
    gone (on a federation where clusters come and go, each would rewrite every placed binding); the next write
    it needs for another reason drops it."""
    h = universe()
    h.apply(m.cluster("c4"))
    h.apply(m.resource_binding("w"))
    h.apply(m.claim("a", table="db.t", workload="w"))
    assert excluded(h.obj(RB, "default", "w-deployment")) == ["c3", "c4"]
    start = len(h.commands)
    h.delete("Cluster", "", "c4")
    assert [r for r in h.commands[start:] if r.key == f"{RB}/default/w-deployment"] == []
    assert excluded(h.obj(RB, "default", "w-deployment")) == ["c3", "c4"]  # left as it is
    move(h, "s3://west/db/t/v2")  # the data moves: the binding is written, and c4 goes with it
    assert excluded(h.obj(RB, "default", "w-deployment")) == ["c1", "c2"]
