"""The ResourceBinding webhook's decision (``core.admission.webhook_decision``) on worlds built by the real pipeline.

The universe: clusters c1..c3; ``s3://east/`` → {c1, c2}, ``s3://west/`` → {c3}; the catalog knows ``db.east1``.
The patch is applied with the emulator's JSON Patch, as the API server would, and the result is checked — not
the patch's wording.
"""

from __future__ import annotations

import copy
from collections.abc import Sequence
from typing import Any

import pytest

from tether.adapters.kubernetes import manifests as m
from tether.adapters.kubernetes.binding_webhook import BindingWebhook
from tether.adapters.kubernetes.webhook import AdmissionRequest, NotServing
from tether.adapters.sandbox.kube_emulator.patch import json_patch
from tether.adapters.testing.fake_cluster import Harness
from tether.core.admission.webhook_decision import decide_binding_admission
from tether.core.envelope import EventRecord
from tether.core.events import BindingAdmissionDecided, ObjectObserved
from tether.core.keys import ADDED_BY_TERM_ANNOTATION, ADMISSION_ANNOTATION

MAPPING = {"s3://east/": ["c1", "c2"], "s3://west/": ["c3"]}


def universe(*, managed: str = "") -> Harness:
    h = Harness()
    for name in ("c1", "c2", "c3"):
        h.apply(m.cluster(name))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping=MAPPING)}))
    h.cluster.catalog["amoro/table/db.east1"] = "s3://east/db/east1"
    if managed:
        h.apply({"apiVersion": "v1", "kind": "ConfigMap",
                 "metadata": {"name": "tether-admission", "namespace": "tether-system"},
                 "data": {"queue-managed": managed}})
    return h


def binding(name: str = "w1-deployment", *, workload: str = "w1", placement: dict[str, Any] | None = None,
            annotations: dict[str, str] | None = None) -> dict[str, Any]:
    rb: dict[str, Any] = {
        "apiVersion": "work.karmada.io/v1alpha2", "kind": "ResourceBinding",
        "metadata": {"name": name, "namespace": "default",
                     "labels": {"propagationpolicy.karmada.io/permanent-id": "p"}},
        "spec": {"resource": {"apiVersion": "apps/v1", "kind": "Deployment", "name": workload,
                              "namespace": "default"}, "replicas": 1},
    }
    if placement is not None:
        rb["spec"]["placement"] = placement
    if annotations:
        rb["metadata"]["annotations"] = annotations
    return rb


def admitted(h: Harness, operation: str, rb: dict[str, Any]) -> tuple[dict[str, Any], str]:
    verdict = decide_binding_admission(world=h.world, operation=operation, obj=rb)
    return json_patch(copy.deepcopy(rb), list(verdict.patch)), verdict.reason


def excludes(rb: dict[str, Any]) -> list[str]:
    return list(((rb["spec"].get("placement") or {}).get("clusterAffinity") or {}).get("exclude") or [])


def test_a_bound_claim_puts_the_data_constraint_into_the_create_itself() -> None:
    h = universe()
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    out, reason = admitted(h, "CREATE", binding(placement={"clusterAffinity": {"exclude": ["mine"]}}))
    assert excludes(out) == ["mine", "c3"]  # the user's own exclusion kept
    assert out["metadata"]["annotations"]["datadependency.volcano.sh/placement-injected"] == "true"
    assert "suspension" not in out["spec"]
    assert "excluding c3" in reason


def test_a_stale_record_of_a_multi_term_placement_is_removed_and_the_hold_is_said() -> None:
    h = universe()
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    stale = {ADDED_BY_TERM_ANNOTATION: '{"0":["c3"],"1":["c3"]}', "team": "ml"}  # from when it had two terms
    out, _ = admitted(h, "CREATE", binding(annotations=stale))
    assert ADDED_BY_TERM_ANNOTATION not in out["metadata"]["annotations"] and excludes(out) == ["c3"]
    assert out["metadata"]["annotations"]["team"] == "ml"
    h.feed(ObjectObserved(obj=h.cluster.put(m.claim("d", table="db.east2", workload="w2"))))  # lookup in flight
    held = decide_binding_admission(world=h.world, operation="CREATE", obj=binding("w2-deployment", workload="w2"))
    assert held.suspended and "suspended" in held.reason


def test_the_decider_agrees_with_the_webhook_so_it_writes_nothing_after_it() -> None:
    h = universe()
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    out, _ = admitted(h, "CREATE", binding())
    produced = h.feed(ObjectObserved(obj=h.cluster.put(out)))
    assert [type(c.command).__name__ for c in produced if type(c.command).__name__ == "SetBindingPlacement"] == []


def test_a_detector_rewrite_of_placement_is_undone_in_the_same_update() -> None:
    h = universe()
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    stored, _ = admitted(h, "CREATE", binding())
    rewrite = copy.deepcopy(stored)
    rewrite["spec"]["placement"] = {"clusterAffinity": {"clusterNames": ["c1", "c2", "c3"]}}  # the policy's
    out, _ = admitted(h, "UPDATE", rewrite)
    assert excludes(out) == ["c3"] and out["spec"]["placement"]["clusterAffinity"]["clusterNames"] == ["c1", "c2",
                                                                                                      "c3"]
    again, _ = admitted(h, "UPDATE", out)
    assert again == out  # nothing more to add


def test_a_claim_still_resolving_creates_the_binding_suspended_with_a_reason() -> None:
    h = universe()
    h.feed(ObjectObserved(obj=h.cluster.put(m.claim("c", table="db.east1", workload="w1"))))  # lookup in flight
    out, _ = admitted(h, "CREATE", binding())
    assert out["spec"]["suspension"] == {"scheduling": True}
    assert "default/c (Resolving)" in out["metadata"]["annotations"][ADMISSION_ANNOTATION]
    update, _ = admitted(h, "UPDATE", binding())  # an update never suspends (Karmada forbids it once scheduled)
    assert "suspension" not in update["spec"]


def test_a_claim_that_cannot_resolve_does_not_hold_its_binding() -> None:
    h = universe()
    h.apply(m.claim("c", table="db.missing", workload="w1"))  # DataSourceNotFound
    out, reason = admitted(h, "CREATE", binding())
    assert out == binding() and "admitted unchanged" in reason


def test_a_queue_managed_kind_is_created_suspended_and_others_are_not() -> None:
    h = universe(managed="kinds: [apps/Deployment]\nnamespaces: [default]\n")
    out, _ = admitted(h, "CREATE", binding())
    assert out["spec"]["suspension"] == {"scheduling": True}
    assert out["metadata"]["annotations"][ADMISSION_ANNOTATION] == "queue-managed: waiting for admission"
    other = binding()
    other["metadata"]["namespace"] = "elsewhere"
    assert admitted(h, "CREATE", other)[0] == other
    suspended = binding()
    suspended["spec"]["suspension"] = {"scheduling": True}
    assert admitted(h, "CREATE", suspended)[0] == suspended  # someone suspended it already: no patch


def test_a_malformed_binding_is_admitted_unchanged_with_a_reason() -> None:
    h = universe()
    verdict = decide_binding_admission(world=h.world, operation="CREATE", obj={"metadata": "nonsense", "spec": 1})
    assert verdict.patch == () and "malformed" in verdict.reason and not verdict.suspended  # (recorded as placed)
    deleted = decide_binding_admission(world=h.world, operation="DELETE", obj=binding())
    assert deleted.patch == () and not deleted.suspended and "nothing to decide" in deleted.reason


def test_a_binding_with_annotations_keeps_them_and_gets_the_hold_beside_them() -> None:
    """The hold is added as one key of the existing map (its ``/`` escaped in the JSON Pointer), not as a new map
    that would drop the others."""
    h = universe()
    h.feed(ObjectObserved(obj=h.cluster.put(m.claim("c", table="db.east1", workload="w1"))))  # lookup in flight
    out, _ = admitted(h, "CREATE", binding(annotations={"team": "ml", "example.com/a~b": "kept"}))
    annotations = out["metadata"]["annotations"]
    assert (annotations["team"], annotations["example.com/a~b"]) == ("ml", "kept")
    assert "default/c (Resolving)" in annotations[ADMISSION_ANNOTATION]


async def test_the_webhook_waits_for_its_lists_records_the_requests_namespace_and_owns_an_updates_patch() -> None:
    """The binding webhook around the decision: not serving until the world is listed; a CREATE whose body omits
    the namespace is decided and recorded in the request's; an UPDATE it patched is its own change."""
    h = universe()
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    recorded: list[EventRecord] = []
    patched: list[str] = []
    listed = (False, "the bindings are still being listed")

    async def append(records: Sequence[EventRecord]) -> list[EventRecord]:
        recorded.extend(records)
        return list(records)

    hook = BindingWebhook(world=lambda: h.world, append=append, current=lambda: listed, on_patch=patched.append)
    body = binding()
    del body["metadata"]["namespace"]
    with pytest.raises(NotServing, match="still being listed"):
        await hook(AdmissionRequest(uid="1", operation="CREATE", namespace="default", name="w1-deployment",
                                    object=body))
    listed = (True, "current")
    answer = await hook(AdmissionRequest(uid="2", operation="CREATE", namespace="default", name="w1-deployment",
                                         object=body))
    assert answer.patch and patched == []  # a CREATE's patch is the object's first version: nothing to own
    [event] = [r.event for r in recorded]
    assert isinstance(event, BindingAdmissionDecided) and event.key == "ResourceBinding/default/w1-deployment"
    assert event.obj.metadata.namespace == "default"
    await hook(AdmissionRequest(uid="3", operation="UPDATE", namespace="default", name="w1-deployment", object=body))
    assert patched == ["ResourceBinding/default/w1-deployment"]


def test_a_preferred_claim_puts_its_locality_tiers_into_the_create_and_undoes_a_revert() -> None:
    h = Harness()
    for name, region in (("c1", "east"), ("c2", "east"), ("c3", "west")):
        h.apply(m.cluster(name, labels={"topology.karmada.io/region": region}))
    h.apply(m.plugin_configmap({"amoro": m.plugin_entry(mapping={"s3://east/": ["c1"]}, locality={
        "policy": "Preferred", "topologyKey": "topology.karmada.io/region"})}))
    h.cluster.catalog["amoro/table/db.east1"] = "s3://east/db/east1"
    h.apply(m.claim("c", table="db.east1", workload="w1"))
    user = {"clusterAffinity": {"exclude": ["mine"]}}
    out, reason = admitted(h, "CREATE", binding(placement=user))
    terms = out["spec"]["placement"]["clusterAffinities"]
    assert [(t["affinityName"].split("-")[0], t["clusterNames"], t["exclude"]) for t in terms] == [
        ("data", ["c1"], ["mine"]), ("near", ["c2"], ["mine"])]
    assert "clusterAffinity" not in out["spec"]["placement"]
    assert "prefers its data's clusters: locality tiers data c1; near-data c2" in reason
    # the detector puts the user's placement back: the same request puts the groups back
    reverted = copy.deepcopy(out)
    reverted["spec"]["placement"] = user
    again, _ = admitted(h, "UPDATE", reverted)
    assert again["spec"]["placement"] == out["spec"]["placement"]
    assert again["metadata"]["annotations"] == out["metadata"]["annotations"]
