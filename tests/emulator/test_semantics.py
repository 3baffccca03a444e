"""Conformance: generation, status subresource, finalizers, schema validation/defaulting/pruning."""

from __future__ import annotations

import asyncio
import json
import secrets

import pytest
import yaml
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

from tether.adapters.sandbox.kube_emulator.crds import load_crd_documents
from tether.core.keys import TEST_FINALIZER

GROUP, VERSION, DSC, DS = "datadependency.volcano.sh", "v1alpha1", "datasourceclaims", "datasources"
MERGE = "application/merge-patch+json"
FINALIZER = "datadependency.volcano.sh/finalizer"
HOLD = TEST_FINALIZER  # released by the test environment should a test fail while holding an object


def claim(name: str, **extra: object) -> dict:
    obj = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DataSourceClaim", "metadata": {"name": name},
           "spec": {"system": "amoro", "dataSourceType": "table", "dataSourceName": "db.t",
                    "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"}}}
    obj.update(extra)
    return obj


@pytest.fixture
async def crs(kube):
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims", "datadependency.volcano.sh_datasources")
    return kube.custom


async def test_generation_bumps_only_on_spec_changes(kube, crs):
    ns = kube.namespace
    c = await crs.create_namespaced_custom_object(GROUP, VERSION, ns, DSC, claim("c"))
    assert c["metadata"]["generation"] == 1
    c = await crs.patch_namespaced_custom_object(GROUP, VERSION, ns, DSC, "c",
                                                 {"metadata": {"labels": {"a": "b"}}}, _content_type=MERGE)
    assert c["metadata"]["generation"] == 1
    c = await crs.patch_namespaced_custom_object_status(GROUP, VERSION, ns, DSC, "c",
                                                        {"status": {"boundDataSource": "x"}}, _content_type=MERGE)
    assert c["metadata"]["generation"] == 1 and c["status"]["boundDataSource"] == "x"
    c = await crs.patch_namespaced_custom_object(GROUP, VERSION, ns, DSC, "c", {"spec": {"dataSourceName": "u"}},
                                                 _content_type=MERGE)
    assert c["metadata"]["generation"] == 2


async def test_status_subresource_separation(kube, crs):
    ns = kube.namespace
    created = await crs.create_namespaced_custom_object(GROUP, VERSION, ns, DSC,
                                                        claim("c", status={"phase": "Bound"}))
    assert "status" not in created  # create cannot set status when the subresource is enabled
    # the main endpoint ignores status changes (a status-only patch there is a no-op)
    same = await crs.patch_namespaced_custom_object(GROUP, VERSION, ns, DSC, "c", {"status": {"phase": "Bound"}},
                                                    _content_type=MERGE)
    assert "status" not in same
    assert same["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]
    # the status endpoint only changes status; the default (phase Pending) is applied on status writes
    st = await crs.patch_namespaced_custom_object_status(
        GROUP, VERSION, ns, DSC, "c", {"spec": {"dataSourceName": "ignored"}, "status": {"boundDataSource": "x"}},
        _content_type=MERGE)
    assert st["status"] == {"boundDataSource": "x", "phase": "Pending"}
    assert st["spec"]["dataSourceName"] == "db.t"


async def test_schema_validation_rejects_with_causes(kube, crs):
    ns = kube.namespace
    bad = claim("bad")
    del bad["spec"]["system"]
    bad["spec"]["workload"] = {"kind": "Deployment"}
    with pytest.raises(ApiException) as ei:
        await crs.create_namespaced_custom_object(GROUP, VERSION, ns, DSC, bad)
    body = json.loads(ei.value.body)
    assert ei.value.status == 422 and body["reason"] == "Invalid"
    fields = {c["field"] for c in body["details"]["causes"]}
    assert {"spec.system", "spec.workload.apiVersion", "spec.workload.name"} <= fields
    assert body["details"]["kind"] == "DataSourceClaim" and body["details"]["group"] == GROUP
    wrong_type = claim("t")
    wrong_type["spec"]["attributes"] = {"k": 1}
    with pytest.raises(ApiException) as ei:
        await crs.create_namespaced_custom_object(GROUP, VERSION, ns, DSC, wrong_type)
    assert ei.value.status == 422
    await crs.create_namespaced_custom_object(GROUP, VERSION, ns, DSC, claim("ok"))
    cond = {"type": "Bound", "status": "Maybe", "reason": "X", "message": "", "lastTransitionTime":
            "2026-01-01T00:00:00Z"}
    with pytest.raises(ApiException) as ei:
        await crs.patch_namespaced_custom_object_status(GROUP, VERSION, ns, DSC, "ok",
                                                        {"status": {"conditions": [cond]}}, _content_type=MERGE)
    assert ei.value.status == 422
    assert "Unsupported value" in json.loads(ei.value.body)["message"]


async def test_unknown_fields_are_pruned(kube, crs):
    obj = claim("p")
    obj["spec"]["bogus"] = {"deep": 1}
    obj["metadata"]["bogusMeta"] = "x"
    out = await crs.create_namespaced_custom_object(GROUP, VERSION, kube.namespace, DSC, obj)
    assert "bogus" not in out["spec"] and "bogusMeta" not in out["metadata"]


async def test_cluster_scoped_custom_resource(kube, crs):
    ds = {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DataSource",
          "metadata": {"name": f"amoro-table-x-{kube.namespace}"},
          "spec": {"system": "amoro", "type": "table", "name": "x", "locality": {"clusterNames": ["m1"]}}}
    out = await crs.create_cluster_custom_object(GROUP, VERSION, DS, ds)
    assert "namespace" not in out["metadata"]
    try:
        got = await crs.get_cluster_custom_object(GROUP, VERSION, DS, ds["metadata"]["name"])
        assert got["spec"]["locality"]["clusterNames"] == ["m1"]
    finally:
        await crs.delete_cluster_custom_object(GROUP, VERSION, DS, ds["metadata"]["name"])


async def test_finalizers_and_deletion_timestamp(kube, crs):
    ns = kube.namespace
    c = claim("f")
    c["metadata"]["finalizers"] = [FINALIZER]
    await crs.create_namespaced_custom_object(GROUP, VERSION, ns, DSC, c)
    deleted = await crs.delete_namespaced_custom_object(GROUP, VERSION, ns, DSC, "f")
    assert deleted["metadata"]["deletionTimestamp"]
    assert deleted["metadata"]["deletionGracePeriodSeconds"] == 0
    # the registry's markAsDeleting bumps generation: a controller must see that the object is going
    assert deleted["metadata"]["generation"] == 2
    still = await crs.get_namespaced_custom_object(GROUP, VERSION, ns, DSC, "f")
    assert still["metadata"]["finalizers"] == [FINALIZER]
    # deleting again is accepted and changes nothing (no second bump either)
    again = await crs.delete_namespaced_custom_object(GROUP, VERSION, ns, DSC, "f")
    assert again["metadata"]["resourceVersion"] == still["metadata"]["resourceVersion"]
    assert again["metadata"]["generation"] == 2
    with pytest.raises(ApiException) as ei:
        await crs.patch_namespaced_custom_object(GROUP, VERSION, ns, DSC, "f",
                                                 {"metadata": {"finalizers": [FINALIZER, "x.io/other"]}},
                                                 _content_type=MERGE)
    assert ei.value.status == 422
    assert "no new finalizers can be added if the object is being deleted" in json.loads(ei.value.body)["message"]
    await crs.patch_namespaced_custom_object(GROUP, VERSION, ns, DSC, "f", {"metadata": {"finalizers": None}},
                                             _content_type=MERGE)
    with pytest.raises(ApiException) as ei:
        await crs.get_namespaced_custom_object(GROUP, VERSION, ns, DSC, "f")
    assert ei.value.status == 404


async def test_delete_preconditions(kube):
    cm = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "a"}})
    with pytest.raises(ApiException) as ei:
        await kube.core.delete_namespaced_config_map(
            "a", kube.namespace, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid="nope")))
    assert ei.value.status == 409
    await kube.core.delete_namespaced_config_map(
        "a", kube.namespace, body=client.V1DeleteOptions(preconditions=client.V1Preconditions(uid=cm.metadata.uid)))


async def test_deployment_generation_and_validation(kube):
    apps = client.AppsV1Api(kube.api_client)
    dep = {"metadata": {"name": "web"}, "spec": {"replicas": 1, "selector": {"matchLabels": {"app": "web"}},
           "template": {"metadata": {"labels": {"app": "web"}},
                        "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
    d = await apps.create_namespaced_deployment(kube.namespace, dep)
    assert d.metadata.generation == 1
    d = await apps.patch_namespaced_deployment("web", kube.namespace, {"spec": {"replicas": 3}})
    assert d.metadata.generation == 2 and d.spec.replicas == 3
    # apps/v1: annotations are copied onto ReplicaSets, so changing them is a new generation (measured: 3)
    d = await apps.patch_namespaced_deployment("web", kube.namespace, {"metadata": {"annotations": {"a": "b"}}})
    assert d.metadata.generation == 3
    # labels are not, and neither is the status subresource
    d = await apps.patch_namespaced_deployment("web", kube.namespace, {"metadata": {"labels": {"l": "1"}}})
    assert d.metadata.generation == 3
    d = await apps.patch_namespaced_deployment_status("web", kube.namespace, {"status": {"observedGeneration": 3}})
    assert d.metadata.generation == 3
    # annotations written through /status (as the deployment controller writes its revision) do not bump either
    d = await apps.patch_namespaced_deployment_status("web", kube.namespace,
                                                      {"metadata": {"annotations": {"tether.test/via": "status"}}})
    assert d.metadata.generation == 3 and d.metadata.annotations["tether.test/via"] == "status"
    bad = json.loads(json.dumps(dep))
    bad["metadata"]["name"] = "bad"
    bad["spec"]["template"]["metadata"]["labels"] = {"app": "other"}
    with pytest.raises(ApiException) as ei:
        await apps.create_namespaced_deployment(kube.namespace, bad)
    assert ei.value.status == 422


async def test_kinds_without_generation_never_get_one(kube):
    """ConfigMaps and Namespaces have no generation semantics: none on create, none after writes or a delete
    held by a finalizer (the registry bumps only a generation that is already set)."""
    core, ns = kube.core, kube.namespace
    cm = await core.create_namespaced_config_map(ns, {"metadata": {"name": "g", "finalizers": [HOLD]},
                                                      "data": {"k": "v"}})
    assert cm.metadata.generation is None
    cm = await core.patch_namespaced_config_map("g", ns, {"data": {"k": "w"}, "metadata": {"annotations": {"a": "b"}}})
    assert cm.metadata.generation is None
    resp = await core.delete_namespaced_config_map("g", ns, _preload_content=False)  # the object, not a Status
    deleted = json.loads(await resp.read())["metadata"]
    assert deleted["deletionTimestamp"] and "generation" not in deleted
    await core.patch_namespaced_config_map("g", ns, {"metadata": {"finalizers": None}}, _content_type=MERGE)
    assert (await core.read_namespace(ns)).metadata.generation is None


async def test_generation_bump_on_delete_for_deployments(kube):
    """A Deployment held by a finalizer: the DELETE bumps generation once, like any kind that has one."""
    apps = client.AppsV1Api(kube.api_client)
    dep = {"metadata": {"name": "held", "finalizers": [HOLD]},
           "spec": {"replicas": 0, "selector": {"matchLabels": {"app": "held"}},
                    "template": {"metadata": {"labels": {"app": "held"}},
                                 "spec": {"containers": [{"name": "c", "image": "nginx"}]}}}}
    await apps.create_namespaced_deployment(kube.namespace, dep)
    await apps.delete_namespaced_deployment("held", kube.namespace)
    d = await apps.read_namespaced_deployment("held", kube.namespace)
    assert d.metadata.deletion_timestamp is not None and d.metadata.generation == 2
    await apps.delete_namespaced_deployment("held", kube.namespace)
    assert (await apps.read_namespaced_deployment("held", kube.namespace)).metadata.generation == 2
    await apps.patch_namespaced_deployment("held", kube.namespace, {"metadata": {"finalizers": None}},
                                           _content_type=MERGE)
    with pytest.raises(ApiException) as ei:
        await apps.read_namespaced_deployment("held", kube.namespace)
    assert ei.value.status == 404


async def test_crd_deletion_removes_the_api(kube, tmp_path):
    """Deleting a CRD stops serving its API. The CRD is one of the test's own — Volcano's Queue schema in a group
    nobody else serves — since on a shared cluster a CRD is everybody's (deleting one deletes their objects)."""
    [doc] = load_crd_documents("scheduling.volcano.sh_queues")
    group = f"q{secrets.token_hex(4)}.test.tether.dev"
    doc["spec"]["group"] = group
    doc["metadata"]["name"] = name = f"{doc['spec']['names']['plural']}.{group}"
    path = tmp_path / "crd.yaml"
    path.write_text(yaml.safe_dump(doc))
    ext = client.ApiextensionsV1Api(kube.api_client)
    kube.defer(lambda: ext.delete_custom_resource_definition(name))  # the test's own: gone however it ends
    await kube.register_crds(path)
    crd = await ext.read_custom_resource_definition(name)
    assert any(c.type == "Established" and c.status == "True" for c in crd.status.conditions)
    await kube.custom.list_cluster_custom_object(group, "v1beta1", "queues")  # served
    await ext.delete_custom_resource_definition(name)
    async with asyncio.timeout(30):
        while True:
            try:
                await kube.custom.list_cluster_custom_object(group, "v1beta1", "queues")
            except ApiException as e:
                assert e.status == 404
                break
            await asyncio.sleep(0.05)


async def test_label_keys_and_values_are_validated(kube):
    """metadata.labels as kube-apiserver validates them: a value is at most 63 characters of ``[-A-Za-z0-9_.]``
    (a ``/`` is the usual mistake: a key's prefix written as a value), a key an optional DNS subdomain prefix and a
    name. (The emulator let ``tether.dev/leader-endpoints`` through as a label value; a real server refused it.)"""
    core, ns = kube.core, kube.namespace
    ok = await core.create_namespaced_config_map(ns, {"metadata": {"name": "ok", "labels": {
        "tether.dev/k": "v-1.2_3", "plain": "", "x": "A" * 63}}})
    assert ok.metadata.labels["tether.dev/k"] == "v-1.2_3"
    for name, labels, shown in (("slash", {"k": "tether.dev/leader"}, "tether.dev/leader"),
                                ("long", {"k": "a" * 64}, "a" * 64), ("key", {"bad key": "v"}, "bad key"),
                                ("prefix", {"Not_A.Domain/k": "v"}, "Not_A.Domain/k")):
        with pytest.raises(ApiException) as ei:
            await core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": labels}})
        assert ei.value.status == 422, name
        message = json.loads(ei.value.body)["message"]
        assert f'metadata.labels: Invalid value: "{shown}"' in message, message
    # each rule of a qualified key is its own message, as a real server words it
    for name, key, detail in (("prefix-empty", "/k", "prefix part must be non-empty"),
                              ("name-long", "a" * 64, "name part must be no more than 63 characters"),
                              ("slashes", "a/b/c", "a qualified name must consist of alphanumeric characters")):
        with pytest.raises(ApiException) as ei:
            await core.create_namespaced_config_map(ns, {"metadata": {"name": name, "labels": {key: "v"}}})
        assert f'metadata.labels: Invalid value: "{key}": {detail}' in json.loads(ei.value.body)["message"], name


async def test_events_are_validated_for_their_namespace_and_reporting_fields(kube):
    """Core v1 Events as kube-apiserver 1.28 validates them (what tether's executor writes, and what it must not):
    an Event without ``eventTime`` lives in its object's namespace (``default`` for a cluster-scoped object, as
    tether writes a DataSource's); one with ``eventTime`` names its reporting component (a qualified name), instance,
    action and reason, within their limits. The messages, causes and their order are a real server's."""
    core, ns = kube.core, kube.namespace
    ev = {"involvedObject": {"kind": "DataSourceClaim", "name": "clicks", "namespace": ns}, "reason": "Bound",
          "message": "m" * 2000, "type": "Normal", "source": {"component": "tether"}}
    await core.create_namespaced_event(ns, {**ev, "metadata": {"name": "legacy-long-message"}})  # (no limit)
    timed = {**ev, "eventTime": "2026-11-26T10:00:00.000000Z", "message": "m", "reportingComponent": "tether",
             "reportingInstance": "tether-0", "action": "Bind", "source": {}}
    await core.create_namespaced_event(ns, {**timed, "metadata": {"name": "timed"}})
    refused = [
        ("elsewhere", {**ev, "involvedObject": {**ev["involvedObject"], "namespace": "elsewhere"}},
         'involvedObject.namespace: Invalid value: "elsewhere": does not match event.namespace',
         [("involvedObject.namespace", "FieldValueInvalid")]),
        ("cluster-scoped", {**ev, "involvedObject": {"kind": "DataSource", "name": "amoro-table-x"}},
         'involvedObject.namespace: Invalid value: "": does not match event.namespace',
         [("involvedObject.namespace", "FieldValueInvalid")]),
        ("timed-bare", {"involvedObject": {"kind": "Cluster", "name": "member1"}, "eventTime": timed["eventTime"]},
         None,
         [("involvedObject.namespace", "FieldValueInvalid"), ("reportingComponent", "FieldValueRequired"),
          ("reportingComponent", "FieldValueInvalid"), ("reportingComponent", "FieldValueInvalid"),
          ("reportingInstance", "FieldValueRequired"), ("action", "FieldValueRequired"),
          ("reason", "FieldValueRequired")]),
        ("timed-long", {**timed, "reportingComponent": "bad name!", "reportingInstance": "i" * 129,
                        "action": "A" * 129, "reason": "R" * 129, "message": "m" * 1025},
         'action: Invalid value: "": can have at most 128 characters',
         [("reportingComponent", "FieldValueInvalid"), ("reportingInstance", "FieldValueInvalid"),
          ("action", "FieldValueInvalid"), ("reason", "FieldValueInvalid"), ("message", "FieldValueInvalid")]),
    ]
    for name, body, shown, causes in refused:
        with pytest.raises(ApiException) as ei:
            await core.create_namespaced_event(ns, {**body, "metadata": {"name": name}})
        assert ei.value.status == 422, name
        status = json.loads(ei.value.body)
        assert status["message"].startswith(f'Event "{name}" is invalid: '), status["message"]
        if shown is not None:
            assert shown in status["message"], status["message"]
        assert [(c["field"], c["reason"]) for c in status["details"]["causes"]] == causes, name
    # a cluster-scoped object's Event in default, as tether's executor writes it (and cleans it up)
    if kube.emulator is not None:  # (a real server has default from the start; the in-process emulator does not)
        await kube.emulator.apply({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "default"}})
    name = f"tether-test-{secrets.token_hex(4)}"
    await core.create_namespaced_event("default", {**ev, "metadata": {"name": name},
                                                   "involvedObject": {"kind": "DataSource", "name": "amoro-table-x"}})
    await core.delete_namespaced_event(name, "default")
