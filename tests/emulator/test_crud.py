"""Conformance: CRUD, resourceVersion, conflicts, patches, selectors, discovery (plain kubernetes-asyncio)."""

from __future__ import annotations

import json

import pytest
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException

GROUP, VERSION, DSC = "datadependency.volcano.sh", "v1alpha1", "datasourceclaims"
MERGE = "application/merge-patch+json"


def status_of(exc: pytest.ExceptionInfo[ApiException]) -> dict:
    body = json.loads(exc.value.body)
    assert body["kind"] == "Status" and body["apiVersion"] == "v1" and body["status"] == "Failure"
    assert body["code"] == exc.value.status
    return body


def claim(name: str, **spec: object) -> dict:
    base = {"system": "amoro", "dataSourceType": "table", "dataSourceName": "db.t",
            "workload": {"apiVersion": "apps/v1", "kind": "Deployment", "name": "w"}}
    base.update(spec)
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DataSourceClaim", "metadata": {"name": name},
            "spec": base}


async def test_discovery_and_version(kube):
    api = client.ApisApi(kube.api_client)
    groups = await api.get_api_versions()
    names = {g.name for g in groups.groups}
    assert {"apps", "coordination.k8s.io", "apiextensions.k8s.io", "admissionregistration.k8s.io"} <= names
    core = await client.CoreApi(kube.api_client).get_api_versions()
    assert "v1" in core.versions
    res = await kube.core.get_api_resources()
    by_name = {r.name: r for r in res.resources}
    assert by_name["pods"].namespaced and not by_name["nodes"].namespaced
    assert "pods/status" in by_name and "pods/binding" in by_name
    ver = await client.VersionApi(kube.api_client).get_code()
    assert ver.major == "1"


async def test_crd_registration_is_discoverable(kube):
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
    res = await client.CustomObjectsApi(kube.api_client).get_api_resources(GROUP, VERSION)
    names = {r.name for r in res.resources}
    assert {"datasourceclaims", "datasourceclaims/status"} <= names


async def test_create_get_and_server_fields(kube):
    cm = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "a"},
                                                                       "data": {"k": "v"}})
    assert cm.metadata.uid and cm.metadata.creation_timestamp and int(cm.metadata.resource_version) > 0
    got = await kube.core.read_namespaced_config_map("a", kube.namespace)
    assert got.data == {"k": "v"} and got.metadata.uid == cm.metadata.uid
    with pytest.raises(ApiException) as ei:
        await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "a"}})
    assert ei.value.status == 409 and status_of(ei)["reason"] == "AlreadyExists"
    with pytest.raises(ApiException) as ei:
        await kube.core.read_namespaced_config_map("missing", kube.namespace)
    body = status_of(ei)
    assert ei.value.status == 404 and body["reason"] == "NotFound"
    assert body["message"] == 'configmaps "missing" not found'


async def test_generate_name_and_invalid_name(kube):
    cm = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"generateName": "gen-"}})
    assert cm.metadata.name.startswith("gen-") and len(cm.metadata.name) == len("gen-") + 5
    with pytest.raises(ApiException) as ei:
        await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "Bad_Name"}})
    assert ei.value.status == 422 and status_of(ei)["reason"] == "Invalid"
    with pytest.raises(ApiException) as ei:
        await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {}})
    assert ei.value.status == 422


async def test_namespace_must_exist(kube):
    with pytest.raises(ApiException) as ei:
        await kube.core.create_namespaced_config_map("no-such-ns-x1", {"metadata": {"name": "a"}})
    assert ei.value.status == 404
    assert status_of(ei)["message"] == 'namespaces "no-such-ns-x1" not found'


async def test_resource_version_is_global_and_monotonic(kube):
    a = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "a"}})
    b = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "b"}})
    assert int(b.metadata.resource_version) > int(a.metadata.resource_version)
    lst = await kube.core.list_namespaced_config_map(kube.namespace)
    assert int(lst.metadata.resource_version) >= int(b.metadata.resource_version)


async def test_update_conflict_on_stale_resource_version(kube):
    cm = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "a"},
                                                                       "data": {"k": "1"}})
    stale = cm.metadata.resource_version
    cm.data = {"k": "2"}
    cm2 = await kube.core.replace_namespaced_config_map("a", kube.namespace, cm)
    assert int(cm2.metadata.resource_version) > int(stale)
    cm2.metadata.resource_version = stale
    cm2.data = {"k": "3"}
    with pytest.raises(ApiException) as ei:
        await kube.core.replace_namespaced_config_map("a", kube.namespace, cm2)
    body = status_of(ei)
    assert ei.value.status == 409 and body["reason"] == "Conflict"
    assert body["message"] == ('Operation cannot be fulfilled on configmaps "a": the object has been modified; '
                               "please apply your changes to the latest version and try again")
    # A merge patch carrying a stale resourceVersion is a precondition too.
    with pytest.raises(ApiException) as ei:
        await kube.core.patch_namespaced_config_map("a", kube.namespace,
                                                    {"metadata": {"resourceVersion": stale}, "data": {"k": "4"}},
                                                    _content_type=MERGE)
    assert ei.value.status == 409


async def test_noop_update_keeps_resource_version(kube):
    cm = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "a"},
                                                                       "data": {"k": "1"}})
    same = await kube.core.patch_namespaced_config_map("a", kube.namespace, {"data": {"k": "1"}},
                                                       _content_type=MERGE)
    assert same.metadata.resource_version == cm.metadata.resource_version
    again = await kube.core.replace_namespaced_config_map("a", kube.namespace, same)
    assert again.metadata.resource_version == cm.metadata.resource_version


async def test_patch_dialects(kube):
    await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "a", "labels": {"x": "1"}},
                                                                  "data": {"a": "1", "b": "2"}})
    merged = await kube.core.patch_namespaced_config_map("a", kube.namespace, {"data": {"a": None, "c": "3"}},
                                                         _content_type=MERGE)
    assert merged.data == {"b": "2", "c": "3"}
    jp = await kube.core.patch_namespaced_config_map("a", kube.namespace, [
        {"op": "test", "path": "/data/b", "value": "2"}, {"op": "replace", "path": "/data/b", "value": "9"}])
    assert jp.data["b"] == "9"
    with pytest.raises(ApiException) as ei:
        await kube.core.patch_namespaced_config_map("a", kube.namespace, [
            {"op": "test", "path": "/data/b", "value": "nope"}, {"op": "remove", "path": "/data/b"}])
    assert ei.value.status == 422
    # strategic merge patch (default for dict bodies on built-in kinds)
    smp = await kube.core.patch_namespaced_config_map("a", kube.namespace, {"metadata": {"labels": {"y": "2"}}})
    assert smp.metadata.labels == {"x": "1", "y": "2"}
    with pytest.raises(ApiException) as ei:
        await kube.core.patch_namespaced_config_map("missing", kube.namespace, {"data": {}}, _content_type=MERGE)
    assert ei.value.status == 404


async def test_custom_resource_patches_and_smp_rejected(kube):
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
    api = kube.custom
    await api.create_namespaced_custom_object(GROUP, VERSION, kube.namespace, DSC, claim("c1"))
    out = await api.patch_namespaced_custom_object(GROUP, VERSION, kube.namespace, DSC, "c1",
                                                   {"spec": {"dataSourceName": "db.u"}}, _content_type=MERGE)
    assert out["spec"]["dataSourceName"] == "db.u"
    with pytest.raises(ApiException) as ei:
        await api.patch_namespaced_custom_object(GROUP, VERSION, kube.namespace, DSC, "c1", {"spec": {}},
                                                 _content_type="application/strategic-merge-patch+json")
    assert ei.value.status == 415 and status_of(ei)["reason"] == "UnsupportedMediaType"
    # A PUT of a custom resource without resourceVersion is rejected (no unconditional update for CRs).
    body = claim("c1")
    with pytest.raises(ApiException) as ei:
        await api.replace_namespaced_custom_object(GROUP, VERSION, kube.namespace, DSC, "c1", body)
    assert ei.value.status == 422


async def test_label_and_field_selectors(kube):
    specs = {"a": {"app": "web", "tier": "fe"}, "b": {"app": "web", "tier": "be"}, "c": {"app": "db"}, "d": {}}
    for name, labels in specs.items():
        await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": name, "labels": labels}})

    async def names(**kw: str) -> list[str]:
        lst = await kube.core.list_namespaced_config_map(kube.namespace, **kw)
        # Real clusters publish kube-root-ca.crt into every namespace.
        return sorted(i.metadata.name for i in lst.items if i.metadata.name != "kube-root-ca.crt")

    assert await names(label_selector="app=web") == ["a", "b"]
    assert await names(label_selector="app==web,tier!=fe") == ["b"]
    assert await names(label_selector="app in (web, db)") == ["a", "b", "c"]
    assert await names(label_selector="app notin (web)") == ["c", "d"]
    assert await names(label_selector="tier") == ["a", "b"]
    assert await names(label_selector="!tier") == ["c", "d"]
    assert await names(field_selector="metadata.name=c") == ["c"]
    assert await names(field_selector="metadata.name!=c") == ["a", "b", "d"]
    assert await names(field_selector=f"metadata.namespace={kube.namespace}") == ["a", "b", "c", "d"]
    with pytest.raises(ApiException) as ei:
        await kube.core.list_namespaced_config_map(kube.namespace, field_selector="data.k=v")
    assert ei.value.status == 400


async def test_list_pagination(kube):
    for i in range(5):
        await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": f"p{i}"}})
    seen, token = [], None
    while True:
        page = await kube.core.list_namespaced_config_map(kube.namespace, limit=2, _continue=token)
        assert len(page.items) <= 2
        seen += [i.metadata.name for i in page.items]
        token = page.metadata._continue
        if not token:
            break
    assert sorted(n for n in seen if n != "kube-root-ca.crt") == [f"p{i}" for i in range(5)]


async def get_raw(kube, path: str, **query: str) -> tuple[int, dict]:
    """GET ``path`` with query parameters sent as written (the generated client types ``limit`` as an integer)."""
    response = await kube.api_client.call_api(path, "GET", query_params=list(query.items()),
                                              header_params={"Accept": "application/json"},
                                              auth_settings=["BearerToken"], _preload_content=False)
    try:
        return response.status, json.loads((await response.read()).splitlines()[0])
    finally:
        response.release()


#: More digits than Python's ``int()`` converts (a real server: out of range).
THOUSANDS_OF_DIGITS = pytest.param("9" * 5000, id="5000-digits")


@pytest.mark.parametrize("text", ["abc", "²", "1_0", "+", "99999999999999999999", THOUSANDS_OF_DIGITS])
async def test_a_limit_that_is_not_an_integer_is_a_bad_request_with_parse_ints_words(kube, text):
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    status, body = await get_raw(kube, path, limit=text)
    problem = "value out of range" if text.isascii() and text.isdigit() else "invalid syntax"
    assert (status, body["reason"], body["message"]) == (400, "BadRequest",
                                                         f'strconv.ParseInt: parsing "{text}": {problem}')


async def test_a_limit_of_zero_or_less_lists_everything(kube):
    for i in range(3):
        await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": f"l{i}"}})
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    everything = sorted(i["metadata"]["name"] for i in (await get_raw(kube, path))[1]["items"])
    for text in ("-1", "0", "+0"):
        status, body = await get_raw(kube, path, limit=text)
        assert status == 200 and "continue" not in body["metadata"]
        assert sorted(i["metadata"]["name"] for i in body["items"]) == everything


@pytest.mark.parametrize("text", ["abc", "²", "1_0", "-1", "99999999999999999999", THOUSANDS_OF_DIGITS])
@pytest.mark.parametrize("watch", [False, True])
async def test_a_resource_version_that_is_not_a_number_is_refused_as_a_real_server_does(kube, text, watch):
    """A real server answers 500 with no reason (kube-apiserver 1.28), for a list and for a watch alike."""
    path = f"/api/v1/namespaces/{kube.namespace}/configmaps"
    query = {"resourceVersion": text, **({"watch": "true", "timeoutSeconds": "1"} if watch else {})}
    status, body = await get_raw(kube, path, **query)
    problem = "value out of range" if text.isascii() and text.isdigit() else "invalid syntax"
    assert status == 500 and "reason" not in body, (status, body)
    assert body["message"] == (f'resourceVersion: Invalid value: "{text}": '
                               f'strconv.ParseUint: parsing "{text}": {problem}')


async def test_delete_and_namespace_deletion(kube):
    ns = await kube.create_namespace("tether-del")
    await kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "a"}})
    await kube.core.delete_namespaced_config_map("a", ns)
    with pytest.raises(ApiException) as ei:
        await kube.core.read_namespaced_config_map("a", ns)
    assert ei.value.status == 404
    with pytest.raises(ApiException) as ei:
        await kube.core.delete_namespaced_config_map("a", ns)
    assert ei.value.status == 404
    await kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "b"}})
    deleted = await kube.core.delete_namespace(ns)
    assert deleted is not None
    # Real clusters empty the namespace asynchronously: poll until the content (and the namespace) is gone.
    import asyncio

    for _ in range(300):
        lst = await kube.core.list_namespaced_config_map(ns, field_selector="metadata.name=b")
        if not lst.items:
            break
        await asyncio.sleep(0.1)
    else:
        pytest.fail("namespace content was never removed")
    with pytest.raises(ApiException) as ei:
        await kube.core.create_namespaced_config_map(ns, {"metadata": {"name": "c"}})
    assert ei.value.status in (403, 404)


async def test_creation_timestamps_have_one_second_resolution_and_uids_are_random(kube):
    """As a real server: ``creationTimestamp`` is RFC 3339 to the second (two objects created in one second tie),
    and a UID is a random (version 4) UUID — nothing about creation order can be read from it."""
    import re
    import uuid

    stamps, uids = [], []
    for i in range(3):
        resp = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": f"t{i}"}},
                                                            _preload_content=False)
        meta = json.loads(await resp.read())["metadata"]
        stamps.append(meta["creationTimestamp"])
        uids.append(meta["uid"])
    assert all(re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", s) for s in stamps), stamps
    assert stamps == sorted(stamps)
    assert len(set(uids)) == 3 and all(uuid.UUID(u).version == 4 for u in uids), uids
