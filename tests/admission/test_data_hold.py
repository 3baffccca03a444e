"""Holding a new binding for its data through a catalog outage, and the bound (``core.admission.data_hold``): the
webhook's decision and the admission decider, through the real pipeline on the fake cluster.

The universe: clusters c1..c3; ``s3://east/`` → {c1, c2}; the catalog knows ``db.east1`` but fails on demand —
transiently (``catalog_failures``: unavailable, circuit open) or for good (``catalog_refusals``: a refused
authentication). Bindings are created as the API server would store them: the webhook's patch applied to the
request. Time moves with ``Harness.advance``, which fires due timers (the lookup retries, the admission cycles, the
hold's bound).
"""

from __future__ import annotations

import copy
from typing import Any

import msgspec

from tether.adapters.kubernetes import manifests as m
from tether.adapters.sandbox.kube_emulator.patch import json_patch
from tether.adapters.testing.fake_cluster import Harness
from tether.core.admission.data_hold import format_duration
from tether.core.admission.webhook_decision import decide_binding_admission
from tether.core.commands import ResumeBinding
from tether.core.events import ObjectObserved, SettingsApplied
from tether.core.keys import ADMISSION_ANNOTATION, RELEASED_ANNOTATION
from tether.core.kube import trim
from tether.core.world import Settings, initial_world
from tether.projections.step import step

TABLE = "amoro/table/db.east1"
CIRCUIT_OPEN = "circuit open for http://amoro.invalid:1630 after 5 consecutive failures; retry in 30s"
MINUTE = 60_000


def settings(*, max_hold_ms: int) -> SettingsApplied:
    """The daemon's settings with the default ConfigMaps (what the harness's world reads)."""
    return SettingsApplied(max_hold_ms=max_hold_ms, plugin_configmap=Settings().plugin_configmap,
                           admission_configmap=Settings().admission_configmap)


def universe(*, managed: bool = False) -> Harness:
    h = Harness()
    for name in ("c1", "c2", "c3"):
        h.apply(m.cluster(name))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1", "c2"]})}))
    h.cluster.catalog[TABLE] = "s3://east/db/east1"
    if managed:
        h.apply({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "tether-admission", "namespace": "tether-system"},
                 "data": {"queue-managed": "kinds: [apps/Deployment]\n"}})
    return h


def binding(name: str = "w1-deployment", workload: str = "w1") -> dict[str, Any]:
    return {"apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
            "metadata": {"name": name, "namespace": "default",
                         "labels": {"propagationpolicy.karmada.io/permanent-id": "p"}},
            "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": workload,
                                  "namespace": "default"}, "replicas": 1}}


def create(h: Harness, rb: dict[str, Any]) -> dict[str, Any]:
    """A CREATE through the webhook's decision, stored (with a creationTimestamp, as the server sets it after the
    webhook), observed by the watch, and settled."""
    verdict = decide_binding_admission(world=h.world, operation="CREATE", obj=rb)
    stored = json_patch(copy.deepcopy(rb), list(verdict.patch))
    h.feed(ObjectObserved(obj=h.cluster.put(stored)))
    h.settle()
    return stored


def stored(h: Harness, name: str = "w1-deployment") -> dict[str, Any]:
    rb = h.obj("ResourceBinding", "default", name)
    assert rb is not None
    return rb


def suspended(rb: dict[str, Any]) -> bool:
    return (rb["spec"].get("suspension") or {}).get("scheduling") is True


def annotations(rb: dict[str, Any]) -> dict[str, str]:
    return rb["metadata"].get("annotations") or {}


def excluded(rb: dict[str, Any]) -> list[str]:
    return list(((rb["spec"].get("placement") or {}).get("clusterAffinity") or {}).get("exclude") or [])


def events(h: Harness, reason: str) -> list[Any]:
    return [e for e in h.cluster.kube_events if e.reason == reason]


def test_a_transient_catalog_failure_holds_a_new_binding_and_the_catalogs_return_places_it() -> None:
    h = universe()
    h.cluster.catalog_failures[TABLE] = CIRCUIT_OPEN
    h.apply(m.claim("c", table="db.east1", workload="w1"))  # LookupFailed, retried on a timer
    created = create(h, binding())
    assert suspended(created)
    hold = annotations(created)[ADMISSION_ANNOTATION]
    assert "default/c (LookupFailed)" in hold and "held 10m0s at most" in hold
    for _ in range(4):  # two minutes of outage: lookups retried and failing, admission cycles every second
        h.advance(30_000)
        assert suspended(stored(h)) and h.cluster.resumed == []
    del h.cluster.catalog_failures[TABLE]  # the catalog is back: the next retry answers
    h.advance(2 * MINUTE)
    rb = stored(h)
    assert not suspended(rb) and h.cluster.resumed == ["ResourceBinding/default/w1-deployment"]
    assert excluded(rb) == ["c3"]  # resumed with its data constraint: never anywhere else
    assert RELEASED_ANNOTATION not in annotations(rb) and ADMISSION_ANNOTATION not in annotations(rb)


def test_a_binding_held_while_resolving_stays_held_when_the_lookup_then_fails_transiently() -> None:
    h = universe()
    h.feed(ObjectObserved(obj=h.cluster.put(m.claim("c", table="db.east1", workload="w1"))))  # lookup in flight
    h.cluster.catalog_failures[TABLE] = CIRCUIT_OPEN  # ... and it will fail
    created = create(h, binding())  # (decided while the lookup is in flight; settled after)
    assert "default/c (Resolving)" in annotations(created)[ADMISSION_ANNOTATION]
    h.advance(2_000)  # an admission cycle
    rb = stored(h)
    assert suspended(rb) and h.cluster.resumed == []
    assert "(LookupFailed); the catalog fails transiently" in annotations(rb)[ADMISSION_ANNOTATION]
    [warning] = events(h, "WaitingForData")
    assert warning.event_type == "Warning"


def test_past_max_hold_the_binding_is_released_without_the_data_constraint_and_placed_when_the_data_comes() -> None:
    h = universe()
    h.cluster.catalog_failures[TABLE] = CIRCUIT_OPEN
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    create(h, binding())
    h.advance(9 * MINUTE)
    assert suspended(stored(h)) and h.cluster.resumed == []  # held all along
    h.advance(2 * MINUTE)  # the bound (creation + 10 min) passes: its timer fires
    rb = stored(h)
    assert not suspended(rb) and h.cluster.resumed == ["ResourceBinding/default/w1-deployment"]
    released = annotations(rb)[RELEASED_ANNOTATION]
    assert released == f"released without the data constraint after 10m0s: claim default/c: looking up {TABLE} " \
                       f"failed: {CIRCUIT_OPEN}"
    [warning] = events(h, "ReleasedWithoutData")
    assert (warning.event_type, warning.message) == ("Warning", released)
    assert [e.reason for e in h.cluster.kube_events if e.message == released] == ["ReleasedWithoutData"]  # once
    assert excluded(rb) == []  # free to go anywhere now
    del h.cluster.catalog_failures[TABLE]
    h.advance(6 * MINUTE)  # the next lookup retry answers: tether places it where the data is
    rb = stored(h)
    assert excluded(rb) == ["c3"] and RELEASED_ANNOTATION not in annotations(rb)


def test_the_bound_is_the_daemons_setting_from_the_log() -> None:
    h = universe()
    h.feed(settings(max_hold_ms=MINUTE))
    h.cluster.catalog_failures[TABLE] = CIRCUIT_OPEN
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    assert "held 1m0s at most" in annotations(create(h, binding()))[ADMISSION_ANNOTATION]
    h.advance(30_000)
    assert suspended(stored(h))
    h.advance(40_000)
    assert not suspended(stored(h))
    assert annotations(stored(h))[RELEASED_ANNOTATION].startswith("released without the data constraint after 1m0s")


def test_max_hold_zero_turns_the_hold_off() -> None:
    h = universe()
    h.feed(settings(max_hold_ms=0))
    h.cluster.catalog_failures[TABLE] = CIRCUIT_OPEN
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    created = create(h, binding())
    assert not suspended(created) and ADMISSION_ANNOTATION not in annotations(created)


def test_a_permanent_failure_releases_as_before() -> None:
    h = universe()
    h.cluster.catalog_refusals[TABLE] = "401 Unauthorized: NotAuthorizedException"
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    created = create(h, binding())
    assert not suspended(created)
    # held while resolving, then the lookup is refused for good: resumed at once, no bound, nothing "released"
    h2 = universe()
    h2.feed(ObjectObserved(obj=h2.cluster.put(m.claim("c", table="db.east1", workload="w1"))))
    h2.cluster.catalog_refusals[TABLE] = "401 Unauthorized: NotAuthorizedException"  # the lookup in flight will be
    assert suspended(create(h2, binding()))
    h2.advance(2_000)
    rb = stored(h2)
    assert not suspended(rb) and RELEASED_ANNOTATION not in annotations(rb) and excluded(rb) == []
    assert h2.cluster.resumed == ["ResourceBinding/default/w1-deployment"]


def test_a_queue_managed_binding_waits_for_its_data_then_its_queue_admits_it_at_the_bound() -> None:
    h = universe(managed=True)
    h.cluster.catalog_failures[TABLE] = CIRCUIT_OPEN
    h.apply(m.deployment("w1"))
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    assert suspended(create(h, binding()))
    h.advance(5 * MINUTE)
    assert suspended(stored(h)) and h.cluster.resumed == []  # the queue has room; the data does not
    h.advance(6 * MINUTE)
    rb = stored(h)
    assert not suspended(rb)
    assert annotations(rb)[RELEASED_ANNOTATION].startswith("released without the data constraint after 10m0s")
    assert [e.event_type for e in events(h, "ReleasedWithoutData")] == ["Warning"]


def test_the_decisions_are_a_function_of_the_log() -> None:
    """What ``tether replay --diff`` checks: the same events, folded again, give the same commands byte for byte."""
    h = universe()
    h.cluster.catalog_failures[TABLE] = CIRCUIT_OPEN
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    create(h, binding())
    h.advance(11 * MINUTE)
    del h.cluster.catalog_failures[TABLE]
    h.advance(6 * MINUTE)
    world = initial_world()
    again = [c for record in h.events for c in step(world, record)]
    def encode(c: Any) -> bytes:
        return msgspec.json.encode(msgspec.structs.replace(c, offset=0))  # (the harness numbers what it logs)

    assert [encode(c) for c in again] == [encode(c) for c in h.commands]
    assert any(isinstance(c.command, ResumeBinding) and "released without" in c.command.reason for c in again)


def test_durations_read_as_go_prints_them() -> None:
    assert [format_duration(ms) for ms in (600_000, 90_000, 1_500, 3_600_000, 0)] == [
        "10m0s", "1m30s", "1.5s", "1h0m0s", "0s"]


def test_a_replay_reads_the_configmaps_and_the_bound_the_settings_name() -> None:
    """Both folds — the daemon's (``evolve``) and a replay's (``ReplayFold``) — configure the world from the ConfigMaps
    a ``SettingsApplied`` names, not from the replaying machine's defaults."""
    from tether.core.envelope import EventRecord
    from tether.core.events import event_key
    from tether.projections.fold import evolve
    from tether.projections.replay_fold import fold_batch

    plugins = m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1"]})}, namespace="ops",
                                 name="plugins")
    admission = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "admission", "namespace": "ops",
                                                                      "resourceVersion": "2"},
                 "data": {"queue-managed": "kinds: [apps/Deployment]\n"}}
    plugins["metadata"]["resourceVersion"] = "1"
    events = [SettingsApplied(max_hold_ms=MINUTE, plugin_configmap="ops/plugins", admission_configmap="ops/admission"),
              ObjectObserved(obj=trim(plugins)), ObjectObserved(obj=trim(admission))]
    records = [EventRecord(at_ms=1, source="test", key=event_key(e), event=e, offset=i)
               for i, e in enumerate(events, 1)]
    evolved, replayed = initial_world(), initial_world()
    for record in records:
        evolve(evolved, record)
    fold_batch(replayed, records)
    for world in (evolved, replayed):
        assert world.settings == Settings(plugin_configmap="ops/plugins", admission_configmap="ops/admission")
        assert set(world.plugins.plugins) == {"amoro"} and world.admission.managed.kinds == ("apps/Deployment",)
        assert world.admission.max_hold_ms == MINUTE
