"""The Karmada scheduler stand-in reproduces what karmada-scheduler v1.18.2 did on the reference examples.

The examples (clusters and bindings that a real karmada-scheduler placed) are Karmada facts, read from
``../shared/reference/karmada/examples`` at test time; the module is skipped when that is absent. Every test runs
twice: on Karmada's own CRDs from the same place (exact upstream validation and pruning), and on tether's minimal
schemas in ``ops/crds/upstream`` (what the demo registers) — so a field the stand-in needs cannot be missing there.
"""

from __future__ import annotations

import asyncio
import copy
import datetime
import json

import pytest
import yaml
from kubernetes_asyncio.client.exceptions import ApiException

from tether.adapters.testing.reference import missing_reason, reference_path

KARMADA = reference_path("karmada")
pytestmark = pytest.mark.skipif(KARMADA is None, reason=missing_reason("karmada"))
FIX = KARMADA / "examples" if KARMADA is not None else None
W, V, RBS = "work.karmada.io", "v1alpha2", "resourcebindings"
C, CV, CLUSTERS = "cluster.karmada.io", "v1alpha1", "clusters"
MERGE = "application/merge-patch+json"
AFFINITY_MSG = "0/2 clusters are available: 2 cluster(s) did not match the placement cluster affinity constraint."


def fixture(name: str) -> dict:
    assert FIX is not None
    return yaml.safe_load((FIX / name).read_text())


@pytest.fixture(params=["karmada-crds", "tether-schemas"])
async def karmada(emulated_kube, request):
    kube = emulated_kube  # (the emulator's own machinery: an emulator of its own)
    emu = kube.require_emulator(
        "tests the emulator's Karmada scheduler stand-in against what karmada-scheduler v1.18.2 did on the "
        "reference examples: Clusters named member1/member2 and messages counting every Cluster the scheduler "
        "sees, which on a shared cluster includes everyone's (a real karmada-scheduler is tested through "
        "karmada_kube: migration, admission end to end)")
    if request.param == "karmada-crds":
        assert KARMADA is not None
        # Registered before the scheduler starts, so it does not register tether's schemas instead.
        await emu.register_crds(*(KARMADA / f for f in ("cluster.karmada.io_clusters.standin.yaml",
                                                         "work.karmada.io_resourcebindings.yaml",
                                                         "work.karmada.io_clusterresourcebindings.yaml")))
    await emu.enable_karmada_scheduler(retry_interval=0.2)
    for m in ("member1", "member2"):
        await kube.custom.create_cluster_custom_object(C, CV, CLUSTERS, fixture(f"cluster-{m}.yaml"))
        status = json.loads((FIX / f"cluster-{m}-status.json").read_text())
        await kube.custom.patch_cluster_custom_object_status(C, CV, CLUSTERS, m, status, _content_type=MERGE)
    return kube


async def create_rb(kube, doc: dict, **spec_changes: object) -> dict:
    doc = copy.deepcopy(doc)
    doc["metadata"]["namespace"] = kube.namespace
    doc["spec"]["resource"]["namespace"] = kube.namespace
    doc["spec"].update(spec_changes)
    return await kube.custom.create_namespaced_custom_object(W, V, kube.namespace, RBS, doc)


async def get_rb(kube, name: str) -> dict:
    return await kube.custom.get_namespaced_custom_object(W, V, kube.namespace, RBS, name)


async def wait_rb(kube, name: str, pred, seconds: float = 5.0) -> dict:
    async with asyncio.timeout(seconds):
        while True:
            rb = await get_rb(kube, name)
            if pred(rb):
                return rb
            await asyncio.sleep(0.02)


def scheduled(rb: dict) -> dict | None:
    return next((c for c in (rb.get("status") or {}).get("conditions") or [] if c["type"] == "Scheduled"), None)


async def test_cluster_names_schedule_to_that_cluster(karmada):
    await create_rb(karmada, fixture("rb-member2.yaml"))
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: scheduled(rb) is not None)
    cond = scheduled(rb)
    assert (cond["status"], cond["reason"]) == ("True", "Success")
    assert rb["spec"]["clusters"] == [{"name": "member2", "replicas": 2}]
    assert json.loads(rb["metadata"]["annotations"]["policy.karmada.io/applied-placement"]) == \
        rb["spec"]["placement"]
    assert rb["status"]["schedulerObservedGeneration"] == rb["metadata"]["generation"]
    assert rb["status"]["lastScheduledTime"]


async def test_suspended_is_untouched_then_scheduled_when_unsuspended(karmada):
    await create_rb(karmada, fixture("rb-suspended.yaml"))
    # A later, unsuspended binding getting scheduled proves the scheduler has seen the suspended one.
    probe = fixture("rb-member2.yaml")
    probe["metadata"]["name"] = "probe"
    await create_rb(karmada, probe)
    await wait_rb(karmada, "probe", lambda rb: scheduled(rb) is not None)
    rb = await get_rb(karmada, "nginx-deployment-suspended")
    assert "status" not in rb or not rb["status"].get("conditions")
    assert "clusters" not in rb["spec"]
    assert "policy.karmada.io/applied-placement" not in (rb["metadata"].get("annotations") or {})
    await karmada.custom.patch_namespaced_custom_object(W, V, karmada.namespace, RBS, "nginx-deployment-suspended",
                                                        {"spec": {"suspension": {"scheduling": False}}},
                                                        _content_type=MERGE)
    rb = await wait_rb(karmada, "nginx-deployment-suspended", lambda rb: scheduled(rb) is not None)
    assert scheduled(rb)["reason"] == "Success"
    assert rb["spec"]["clusters"] == [{"name": "member2", "replicas": 2}]


async def test_unmatched_affinity_is_no_cluster_fit(karmada):
    placement = {"clusterAffinity": {"clusterNames": ["member3"]}}
    await create_rb(karmada, fixture("rb-member2.yaml"), placement=placement)
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: scheduled(rb) is not None)
    cond = scheduled(rb)
    assert (cond["status"], cond["reason"], cond["message"]) == ("False", "NoClusterFit", AFFINITY_MSG)
    assert not rb["spec"].get("clusters")
    assert "lastScheduledTime" not in rb["status"]


async def test_exclude_is_honoured(karmada):
    placement = {"clusterAffinity": {"clusterNames": ["member1", "member2"], "exclude": ["member1"]}}
    await create_rb(karmada, fixture("rb-member2.yaml"), placement=placement)
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: scheduled(rb) is not None)
    assert rb["spec"]["clusters"] == [{"name": "member2", "replicas": 2}]


async def test_minimal_managed_by_binding_respects_suspension_and_exclude(karmada):
    await create_rb(karmada, fixture("rb-minimal.yaml"))
    await karmada.custom.patch_namespaced_custom_object(W, V, karmada.namespace, RBS, "nginx-deployment",
                                                        {"spec": {"suspension": None}}, _content_type=MERGE)
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: scheduled(rb) is not None)
    assert scheduled(rb)["reason"] == "Success"
    # Divided/Weighted without weight preference: equal static weights over member1 and member2
    assert rb["spec"]["clusters"] == [{"name": "member1", "replicas": 1}, {"name": "member2", "replicas": 1}]


async def test_divided_by_available_replicas(karmada):
    await create_rb(karmada, fixture("rb-divided.yaml"))
    rb = await wait_rb(karmada, "nginx-divided", lambda rb: scheduled(rb) is not None)
    assert scheduled(rb)["reason"] == "Success"
    assert rb["spec"]["clusters"] == [{"name": "member1", "replicas": 5}, {"name": "member2", "replicas": 5}]
    too_big = fixture("rb-divided.yaml")
    too_big["metadata"]["name"] = "too-big"
    await create_rb(karmada, too_big, replicas=100)
    rb = await wait_rb(karmada, "too-big", lambda rb: scheduled(rb) is not None)
    assert (scheduled(rb)["status"], scheduled(rb)["reason"]) == ("False", "Unschedulable")


async def test_unlabelled_binding_is_ignored_and_not_ready_cluster_skipped(karmada):
    doc = fixture("rb-member2.yaml")
    doc["metadata"]["labels"] = {}
    doc["metadata"]["name"] = "unlabelled"
    await create_rb(karmada, doc)
    await karmada.custom.patch_cluster_custom_object_status(
        C, CV, CLUSTERS, "member1", {"status": {"conditions": [
            {"type": "Ready", "status": "False", "reason": "ClusterNotReachable", "message": "down",
             "lastTransitionTime": "2026-01-01T00:00:00Z"}]}}, _content_type=MERGE)
    await create_rb(karmada, fixture("rb-member2.yaml"),
                    placement={"clusterAffinity": {"clusterNames": ["member1", "member2"]}})
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: scheduled(rb) is not None)
    assert rb["spec"]["clusters"] == [{"name": "member2", "replicas": 2}]
    assert "status" not in await get_rb(karmada, "unlabelled")


async def test_reschedule_triggered_later_than_last_scheduled(karmada):
    """Divided (Karmada schedules a Duplicated binding on every change of its spec, whatever the trigger)."""
    custom, ns = karmada.custom, karmada.namespace
    await custom.patch_cluster_custom_object(C, CV, CLUSTERS, "member1", {"metadata": {"labels": {"tier": "a"}}},
                                             _content_type=MERGE)
    await custom.patch_cluster_custom_object(C, CV, CLUSTERS, "member2", {"metadata": {"labels": {"tier": "a"}}},
                                             _content_type=MERGE)
    placement = {"clusterAffinity": {"labelSelector": {"matchLabels": {"tier": "a"}}},
                 "replicaScheduling": {"replicaSchedulingType": "Divided", "replicaDivisionPreference": "Weighted"}}
    await create_rb(karmada, fixture("rb-member2.yaml"), placement=placement)
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: scheduled(rb) is not None)
    assert [c["name"] for c in rb["spec"]["clusters"]] == ["member1", "member2"]
    await custom.patch_cluster_custom_object(C, CV, CLUSTERS, "member1", {"metadata": {"labels": {"tier": "b"}}},
                                             _content_type=MERGE)
    last = datetime.datetime.fromisoformat(rb["status"]["lastScheduledTime"].replace("Z", "+00:00"))
    # an earlier trigger does not reschedule (only observedGeneration follows)
    earlier = (last - datetime.timedelta(seconds=5)).strftime("%Y-%m-%dT%H:%M:%SZ")
    await custom.patch_namespaced_custom_object(W, V, ns, RBS, "nginx-deployment",
                                                {"spec": {"rescheduleTriggeredAt": earlier}}, _content_type=MERGE)
    rb = await wait_rb(karmada, "nginx-deployment",
                       lambda rb: rb["status"]["schedulerObservedGeneration"] == rb["metadata"]["generation"])
    assert [c["name"] for c in rb["spec"]["clusters"]] == ["member1", "member2"]
    later = (last + datetime.timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%SZ")
    await custom.patch_namespaced_custom_object(W, V, ns, RBS, "nginx-deployment",
                                                {"spec": {"rescheduleTriggeredAt": later}}, _content_type=MERGE)
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: [c["name"] for c in rb["spec"]["clusters"]]
                       == ["member2"])
    assert scheduled(rb)["reason"] == "Success"


async def test_a_kind_no_cluster_lists_in_api_enablements_is_not_scheduled(karmada):
    """Karmada's APIEnablement filter: a cluster whose ``status.apiEnablements`` lacks the binding's kind does not
    fit ("did not have the API resource") — the examples' clusters list apps/v1 Deployments, not batch/v1 Jobs."""
    doc = fixture("rb-member2.yaml")
    doc["spec"]["resource"].update(apiVersion="batch/v1", kind="Job")
    await create_rb(karmada, doc, placement={"clusterAffinity": {"clusterNames": ["member1", "member2"]}})
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: scheduled(rb) is not None)
    cond = scheduled(rb)
    assert (cond["status"], cond["reason"], cond["message"]) == (
        "False", "NoClusterFit", "0/2 clusters are available: 2 cluster(s) did not have the API resource.")
    assert not rb["spec"].get("clusters")
    # a cluster that lists the kind fits (the same binding for a kind the examples list)
    doc = fixture("rb-member2.yaml")
    doc["metadata"]["name"] = "listed"
    doc["spec"]["resource"].update(apiVersion="v1", kind="Service")
    await create_rb(karmada, doc, placement={"clusterAffinity": {"clusterNames": ["member1", "member2"]}})
    rb = await wait_rb(karmada, "listed", lambda rb: scheduled(rb) is not None)
    assert scheduled(rb)["reason"] == "Success"
    assert [c["name"] for c in rb["spec"]["clusters"]] == ["member1", "member2"]


async def test_divided_without_a_division_preference_is_a_scheduler_error(karmada):
    """Karmada has no assignment for Divided without ``replicaDivisionPreference`` (the CRD defaults neither)."""
    placement = {"clusterAffinity": {"clusterNames": ["member1", "member2"]},
                 "replicaScheduling": {"replicaSchedulingType": "Divided"}}
    await create_rb(karmada, fixture("rb-member2.yaml"), placement=placement)
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: scheduled(rb) is not None)
    cond = scheduled(rb)
    assert (cond["status"], cond["reason"]) == ("False", "SchedulerError")
    assert "unsupported replica scheduling strategy" in cond["message"]
    assert not rb["spec"].get("clusters")


async def test_an_eviction_leaves_the_binding_unscheduled_until_its_suspension_is_lifted(karmada):
    """Queue admission's eviction (``EvictBinding``): scheduling suspended and ``spec.clusters`` cleared in one merge
    patch. karmada-scheduler leaves the binding unscheduled (it skips a suspended binding; measured on the kit), and
    schedules it again once the suspension is lifted."""
    await create_rb(karmada, fixture("rb-member2.yaml"))
    await wait_rb(karmada, "nginx-deployment", lambda rb: bool(rb["spec"].get("clusters")))
    await karmada.custom.patch_namespaced_custom_object(
        W, V, karmada.namespace, RBS, "nginx-deployment",
        {"spec": {"suspension": {"scheduling": True}, "clusters": None}}, _content_type=MERGE)
    probe = fixture("rb-member2.yaml")  # a later binding scheduled: the scheduler has seen the eviction too
    probe["metadata"]["name"] = "probe"
    await create_rb(karmada, probe)
    await wait_rb(karmada, "probe", lambda rb: scheduled(rb) is not None)
    rb = await get_rb(karmada, "nginx-deployment")
    assert "clusters" not in rb["spec"] and rb["spec"]["suspension"] == {"scheduling": True}
    await karmada.custom.patch_namespaced_custom_object(W, V, karmada.namespace, RBS, "nginx-deployment",
                                                        {"spec": {"suspension": {"scheduling": None}}},
                                                        _content_type=MERGE)
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: bool(rb["spec"].get("clusters")))
    assert rb["spec"]["clusters"] == [{"name": "member2", "replicas": 2}]


async def test_components_and_dispatching_suspension_are_stored_as_karmadas_crd_has_them(karmada):
    """A workload of several pod templates (``spec.components``, Karmada v1.16+) and ``suspension.dispatching``:
    accepted and stored as given; a component without its required ``replicas`` is refused, as the real CRD does."""
    components = [{"name": "driver", "replicas": 1, "replicaRequirements": {"resourceRequest": {"cpu": "1"}}},
                  {"name": "executor", "replicas": 4, "replicaRequirements": {"resourceRequest": {"cpu": "500m"}}}]
    rb = await create_rb(karmada, fixture("rb-member2.yaml"), components=components,
                         suspension={"dispatching": True})
    assert rb["spec"]["components"] == components and rb["spec"]["suspension"] == {"dispatching": True}
    bad = fixture("rb-member2.yaml")
    bad["metadata"]["name"] = "no-replicas"
    with pytest.raises(ApiException) as refused:
        await create_rb(karmada, bad, components=[{"name": "driver"}])
    assert refused.value.status == 422


async def test_a_duplicated_binding_is_scheduled_on_every_change_of_its_spec(karmada):
    """Karmada's ``doScheduleBinding``: "Duplicated resources should always be scheduled" — an earlier trigger, which
    would not move a Divided binding, reschedules a Duplicated one onto the clusters that fit now."""
    custom, ns = karmada.custom, karmada.namespace
    for member in ("member1", "member2"):
        await custom.patch_cluster_custom_object(C, CV, CLUSTERS, member, {"metadata": {"labels": {"tier": "a"}}},
                                                 _content_type=MERGE)
    placement = {"clusterAffinity": {"labelSelector": {"matchLabels": {"tier": "a"}}}}
    await create_rb(karmada, fixture("rb-member2.yaml"), placement=placement)
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: scheduled(rb) is not None)
    assert [c["name"] for c in rb["spec"]["clusters"]] == ["member1", "member2"]
    await custom.patch_cluster_custom_object(C, CV, CLUSTERS, "member1", {"metadata": {"labels": {"tier": "b"}}},
                                             _content_type=MERGE)
    await custom.patch_namespaced_custom_object(W, V, ns, RBS, "nginx-deployment",
                                                {"spec": {"rescheduleTriggeredAt": "2000-01-01T00:00:00Z"}},
                                                _content_type=MERGE)
    rb = await wait_rb(karmada, "nginx-deployment", lambda rb: [c["name"] for c in rb["spec"]["clusters"]]
                       == ["member2"])
    assert scheduled(rb)["reason"] == "Success"
