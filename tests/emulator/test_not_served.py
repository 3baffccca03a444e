"""Conformance: the shapes of 404, on the emulator and on a real API server (``TETHER_TEST_KUBECONFIG``).

Measured on kube-apiserver v1.28, and asserted here for both:

- a request for an API **outside the built-in groups** that the server does not serve — a group nobody serves, a
  resource or a version that a CRD group lacks (a CRD that is not installed), a CRD's resource in the wrong scope,
  the watch of any of them — falls through to the server's last handler: ``404``, ``Content-Type: text/plain``,
  the body ``404 page not found``, no ``Status``;
- **within a built-in group** (the core group, ``apps``…) a missing resource or version is a JSON ``Status``
  NotFound that names no object ("the server could not find the requested resource", ``details: {}``);
- a **served resource whose object is missing** is a JSON ``Status`` NotFound naming it.

tether's client turns each into a ``KubeError(404)``, the first two marked ``not_served``: a watch of an optional
CRD that is not installed depends on it (``WatchSource(absent_ok=True)``).

The group ``nonexistent.tether.test`` is served by no server (``.test`` is a reserved top-level domain); the CRD
group used is tether's own ``datadependency.volcano.sh``, registered and kept as every test does.
"""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from tether.adapters.kubernetes.client import (
    CONFIGMAPS,
    DATASOURCES,
    KubeClient,
    KubeError,
    Resource,
    error_of,
    merge_patch,
)
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv

pytestmark = pytest.mark.cluster

UNSERVED_GROUP = "nonexistent.tether.test"
CRD_GROUP = "datadependency.volcano.sh/v1alpha1"
PLAIN_TEXT = {
    "unknown group": f"/apis/{UNSERVED_GROUP}/v1/things",
    "unknown group, namespaced": f"/apis/{UNSERVED_GROUP}/v1/namespaces/default/things/a",
    "unknown group's discovery": f"/apis/{UNSERVED_GROUP}",
    "watch of an unknown group's resource": f"/apis/{UNSERVED_GROUP}/v1/things?watch=true",
    "unknown resource of a CRD's group": f"/apis/{CRD_GROUP}/nonexistenttetherthings",
    "watch of an unknown resource of a CRD's group": f"/apis/{CRD_GROUP}/nonexistenttetherthings?watch=true",
    "unknown version of a CRD's group": "/apis/datadependency.volcano.sh/v999/datasources",
    "a cluster-scoped CRD's resource in a namespace": f"/apis/{CRD_GROUP}/namespaces/default/datasources",
}
GENERIC_STATUS = {
    "unknown resource of a built-in group": "/apis/apps/v1/nonexistenttetherthings",
    "unknown version of a built-in group": "/apis/apps/v999/deployments",
    "unknown resource of the core group": "/api/v1/nonexistenttetherthings",
    "watch of an unknown resource of the core group": "/api/v1/nonexistenttetherthings?watch=true",
    "a cluster-scoped built-in resource in a namespace": "/api/v1/namespaces/default/nodes",
}


async def _raw(kube: KubeEnv, path: str) -> tuple[int, str, bytes]:
    """(status, Content-Type, body) of a GET, nothing decoded."""
    base, _, query = path.partition("?")
    response = await kube.api_client.call_api(
        base, "GET", query_params=[tuple(kv.split("=", 1)) for kv in query.split("&") if kv],
        header_params={"Accept": "application/json"}, auth_settings=["BearerToken"], _preload_content=False)
    try:
        return response.status, response.headers.get("Content-Type", ""), await response.read()
    finally:
        response.release()


@pytest.mark.parametrize("case", sorted(PLAIN_TEXT))
async def test_an_api_not_served_outside_the_built_in_groups_is_a_plain_text_404(kube: KubeEnv, case: str) -> None:
    await kube.register_crds("datadependency.volcano.sh_datasources")
    status, content_type, body = await _raw(kube, PLAIN_TEXT[case])
    assert (status, content_type.split(";")[0], body.strip()) == (404, "text/plain", b"404 page not found")


@pytest.mark.parametrize("case", sorted(GENERIC_STATUS))
async def test_an_api_not_served_in_a_built_in_group_is_a_status_naming_no_object(kube: KubeEnv, case: str) -> None:
    status, content_type, body = await _raw(kube, GENERIC_STATUS[case])
    assert status == 404 and content_type.split(";")[0] == "application/json"
    answer: dict[str, Any] = msgspec.json.decode(body)
    assert (answer["kind"], answer["reason"], answer["code"], answer.get("details") or {}) == (
        "Status", "NotFound", 404, {})
    assert answer["message"] == "the server could not find the requested resource"


async def test_a_missing_object_of_a_served_resource_is_a_json_status_not_found(kube: KubeEnv) -> None:
    await kube.register_crds("datadependency.volcano.sh_datasources")
    for path, resource in ((f"/api/v1/namespaces/{kube.namespace}/configmaps/missing-tether-test", "configmaps"),
                           ("/apis/datadependency.volcano.sh/v1alpha1/datasources/missing-tether-test",
                            "datasources")):
        status, content_type, body = await _raw(kube, path)
        assert status == 404 and content_type.split(";")[0] == "application/json", path
        answer: dict[str, Any] = msgspec.json.decode(body)
        assert answer["kind"] == "Status" and answer["reason"] == "NotFound" and answer["code"] == 404
        assert answer["details"]["name"] == "missing-tether-test" and answer["details"]["kind"] == resource


async def test_the_client_turns_both_shapes_into_a_404_kube_error(kube: KubeEnv) -> None:
    await kube.register_crds("datadependency.volcano.sh_datasources")
    client = KubeClient(kube.api_client)
    unserved = Resource(UNSERVED_GROUP, "v1", "things", "Thing", True)
    with pytest.raises(KubeError) as listed:
        await client.list(unserved, namespace=kube.namespace)
    assert listed.value.status == 404 and listed.value.not_served and not listed.value.retryable
    assert listed.value.reason == "NotFound" and listed.value.message == "404 page not found"
    with pytest.raises(KubeError) as watched:
        async for _ in client.watch(unserved, resource_version="", namespace=kube.namespace, timeout_seconds=1):
            pass
    assert watched.value.status == 404 and watched.value.not_served
    with pytest.raises(KubeError) as in_builtin:
        await client.list(Resource("apps", "v1", "nonexistenttetherthings", "Thing", True), namespace=kube.namespace)
    assert in_builtin.value.status == 404 and in_builtin.value.not_served
    assert await client.get(unserved, "a", namespace=kube.namespace) is None
    assert await client.delete(unserved, "a", namespace=kube.namespace) is None

    for resource, namespace in ((CONFIGMAPS, kube.namespace), (DATASOURCES, "")):
        with pytest.raises(KubeError) as missing:
            await client.patch(resource, "missing-tether-test", {"metadata": {"labels": {"a": "b"}}},
                               namespace=namespace)
        assert missing.value.status == 404 and not missing.value.not_served
        assert missing.value.reason == "NotFound" and '"missing-tether-test" not found' in missing.value.message
        assert await client.get(resource, "missing-tether-test", namespace=namespace) is None


@pytest.mark.parametrize(("status", "content_type", "body", "expected"), [
    (404, "text/plain; charset=utf-8", b"404 page not found\n", (404, "NotFound", "404 page not found", True)),
    (404, "application/json", b'{"kind":"Status","reason":"NotFound","details":{},'
                              b'"message":"the server could not find the requested resource"}',
     (404, "NotFound", "the server could not find the requested resource", True)),
    (404, "application/json", b'{"kind":"Status","reason":"NotFound","details":{"name":"a","kind":"things"},'
                              b'"message":"things \\"a\\" not found"}',
     (404, "NotFound", 'things "a" not found', False)),
    (502, "text/html", b"<html>Bad Gateway</html>", (502, "Error", "<html>Bad Gateway</html>", False)),
    (503, "", b"", (503, "ServiceUnavailable", "HTTP 503", False)),
    (500, "application/json", b"{not json", (500, "InternalError", "{not json", False)),
    (409, "application/json", b'{"kind":"Status","reason":"Conflict","message":"changed"}',
     (409, "Conflict", "changed", False)),
])
def test_an_error_answer_is_a_kube_error_whatever_its_body(status: int, content_type: str, body: bytes,
                                                           expected: tuple[int, str, str, bool]) -> None:
    """What a proxy, a load balancer or the server may answer: never a decoding error; ``not_served`` for a 404
    that names no object."""
    error = error_of(status, content_type, body)
    assert (error.status, error.reason, error.message, error.not_served) == expected
    assert str(error) == f"{expected[0]} {expected[1]}: {expected[2]}"  # (what a log line or a one-line error says)
    assert error.retryable == (status >= 500 or status == 409)


def test_the_wait_an_error_asks_for_comes_from_the_header_or_else_from_its_status() -> None:
    """A 429 or a 503 says how long to wait in its Retry-After header, or only in ``details.retryAfterSeconds``
    (the API server's priority and fairness does both; some proxies keep only the body)."""
    body = b'{"kind":"Status","reason":"TooManyRequests","message":"slow down","details":{"retryAfterSeconds":3}}'
    assert error_of(429, "application/json", body).retry_after == 3.0
    assert error_of(429, "application/json", body, retry_after=7.0).retry_after == 7.0  # the header wins
    assert error_of(429, "application/json", body.replace(b"3}", b"-1}")).retry_after is None
    assert error_of(429, "application/json", b'{"kind":"Status","details":{}}').retry_after is None


def test_a_merge_patch_nulls_what_went_and_descends_into_what_changed() -> None:
    before = {"a": 1, "gone": True, "nested": {"keep": 1, "change": "x", "drop": 2}, "list": [1, 2]}
    after = {"a": 1, "nested": {"keep": 1, "change": "y", "new": 3}, "list": [2], "added": {"b": 1}}
    assert merge_patch(before, after) == {"gone": None, "nested": {"change": "y", "drop": None, "new": 3},
                                          "list": [2], "added": {"b": 1}}
    assert merge_patch(before, before) == {} and merge_patch("x", {"a": 1}) == {"a": 1}
