"""Admission webhooks called over HTTPS (mutating before validating, failurePolicy, timeouts, selectors).

The webhook server runs inside the test process on loopback, which a real cluster cannot reach: these tests are
emulator-only.
"""

from __future__ import annotations

import asyncio
import base64
import json
import ssl

import pytest
import trustme
from aiohttp import web
from kubernetes_asyncio import client
from kubernetes_asyncio.client.exceptions import ApiException


@pytest.fixture
async def webhook_server():
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1", "localhost", "wh.webhooks.svc")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    cert.configure_cert(ctx)
    seen: list[dict] = []

    async def mutate(request: web.Request) -> web.Response:
        req = (await request.json())["request"]
        seen.append({"path": "mutate", **req})
        patch = [{"op": "add", "path": "/metadata/labels", "value": {"mutated": "yes"}}]
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": {
            "uid": req["uid"], "allowed": True, "patchType": "JSONPatch",
            "patch": base64.b64encode(json.dumps(patch).encode()).decode()}})

    async def validate(request: web.Request) -> web.Response:
        req = (await request.json())["request"]
        seen.append({"path": "validate", **req})
        name = req["object"]["metadata"].get("name", "")
        allowed = not name.startswith("deny-")
        resp = {"uid": req["uid"], "allowed": allowed}
        if not allowed:
            resp["status"] = {"code": 403, "reason": "Forbidden", "message": "names starting with deny- are refused"}
        return web.json_response({"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview", "response": resp})

    async def slow(request: web.Request) -> web.Response:
        await asyncio.sleep(1.5)
        return web.json_response({})

    app = web.Application()
    app.router.add_post("/mutate", mutate)
    app.router.add_post("/validate", validate)
    app.router.add_post("/slow", slow)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]
    bundle = base64.b64encode(ca.cert_pem.bytes()).decode()
    yield {"port": port, "ca_bundle": bundle, "seen": seen}
    await runner.cleanup()


def hook(name: str, client_config: dict, **extra: object) -> dict:
    return {"name": name, "clientConfig": client_config, "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "timeoutSeconds": extra.pop("timeoutSeconds", 5),
            "failurePolicy": extra.pop("failurePolicy", "Fail"),
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["configmaps"], "scope": "Namespaced"}], **extra}


async def test_mutating_then_validating(kube, webhook_server):
    kube.require_emulator("the webhook listens on the test's loopback")
    reg = client.AdmissionregistrationV1Api(kube.api_client)
    base = f"https://127.0.0.1:{webhook_server['port']}"
    await reg.create_mutating_webhook_configuration({"metadata": {"name": "m"}, "webhooks": [
        hook("m.tether.io", {"url": f"{base}/mutate", "caBundle": webhook_server["ca_bundle"]})]})
    await reg.create_validating_webhook_configuration({"metadata": {"name": "v"}, "webhooks": [
        hook("v.tether.io", {"url": f"{base}/validate", "caBundle": webhook_server["ca_bundle"]})]})
    cm = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "ok"}})
    assert cm.metadata.labels == {"mutated": "yes"}
    calls = webhook_server["seen"]
    assert [c["path"] for c in calls] == ["mutate", "validate"]
    assert calls[1]["object"]["metadata"]["labels"] == {"mutated": "yes"}  # validating sees the mutation
    assert calls[0]["operation"] == "CREATE" and calls[0]["namespace"] == kube.namespace
    assert calls[0]["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    with pytest.raises(ApiException) as ei:
        await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "deny-me"}})
    body = json.loads(ei.value.body)
    assert ei.value.status == 403
    assert body["message"] == ('admission webhook "v.tether.io" denied the request: '
                               "names starting with deny- are refused")
    # UPDATE is not in the rules: no call
    n = len(calls)
    await kube.core.patch_namespaced_config_map("ok", kube.namespace, {"data": {"a": "b"}})
    assert len(calls) == n


async def test_failure_policy_and_timeout(kube, webhook_server):
    kube.require_emulator("the webhook listens on the test's loopback")
    reg = client.AdmissionregistrationV1Api(kube.api_client)
    base = f"https://127.0.0.1:{webhook_server['port']}"
    await reg.create_validating_webhook_configuration({"metadata": {"name": "ignore"}, "webhooks": [
        hook("down.tether.io", {"url": "https://127.0.0.1:1/none", "caBundle": webhook_server["ca_bundle"]},
             failurePolicy="Ignore")]})
    await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "a"}})
    await reg.create_validating_webhook_configuration({"metadata": {"name": "slow"}, "webhooks": [
        hook("slow.tether.io", {"url": f"{base}/slow", "caBundle": webhook_server["ca_bundle"]}, timeoutSeconds=1)]})
    with pytest.raises(ApiException) as ei:
        await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "b"}})
    assert ei.value.status == 500
    assert 'failed calling webhook "slow.tether.io"' in json.loads(ei.value.body)["message"]
    # an untrusted certificate is a call failure too
    await reg.delete_validating_webhook_configuration("slow")
    await reg.create_validating_webhook_configuration({"metadata": {"name": "untrusted"}, "webhooks": [
        hook("tls.tether.io", {"url": f"{base}/validate"})]})
    with pytest.raises(ApiException) as ei:
        await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "c"}})
    assert ei.value.status == 500


async def test_service_reference_and_object_selector(kube, webhook_server):
    emu = kube.require_emulator("the webhook listens on the test's loopback")
    emu.admission.services["webhooks/wh"] = f"127.0.0.1:{webhook_server['port']}"
    reg = client.AdmissionregistrationV1Api(kube.api_client)
    svc = {"service": {"namespace": "webhooks", "name": "wh", "path": "/mutate", "port": 443},
           "caBundle": webhook_server["ca_bundle"]}
    await reg.create_mutating_webhook_configuration({"metadata": {"name": "m"}, "webhooks": [
        hook("m.tether.io", svc, objectSelector={"matchLabels": {"hook": "on"}},
             namespaceSelector={"matchLabels": {"kubernetes.io/metadata.name": kube.namespace}})]})
    on = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "on",
                                                                                    "labels": {"hook": "on"}}})
    off = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "off"}})
    assert on.metadata.labels == {"mutated": "yes"} and off.metadata.labels is None
    other = await kube.create_namespace("tether-other")
    elsewhere = await kube.core.create_namespaced_config_map(other, {"metadata": {"name": "x",
                                                                                  "labels": {"hook": "on"}}})
    assert elsewhere.metadata.labels == {"hook": "on"}
