"""Admission webhooks called over HTTPS (mutating before validating, failurePolicy, timeouts, selectors).

The webhook server runs inside the test process on loopback. A real API server calls it too when it runs on this
machine (``require_loopback_webhooks``); there the configurations are the test's (unique names, deleted however the
test ends, a ``namespaceSelector`` of the test's namespace only: a ``failurePolicy: Fail`` hook on every ConfigMap
of a shared cluster would stop everyone), and since a real API server starts and stops calling a configuration a
moment after it is written, each step first waits, with dry-run requests, until the configuration is in force.
A service reference stays emulator-only: the API server reaches a Service through its ClusterIP, and the test's
server is on this machine's loopback, behind no Service.
"""

from __future__ import annotations

import asyncio
import base64
import json
import secrets
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
    """A webhook on ConfigMap creations (in the namespace ``namespaceSelector`` names: the test's own)."""
    return {"name": name, "clientConfig": client_config, "admissionReviewVersions": ["v1"],
            "sideEffects": "None", "timeoutSeconds": extra.pop("timeoutSeconds", 5),
            "failurePolicy": extra.pop("failurePolicy", "Fail"),
            "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                       "resources": ["configmaps"], "scope": "Namespaced"}], **extra}


def only(namespace: str) -> dict:
    return {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}}


async def register(kube, kind: str, name: str, *hooks: dict) -> str:
    """Create a webhook configuration of a name of the test's own, deleted when the test ends."""
    reg = client.AdmissionregistrationV1Api(kube.api_client)
    unique = f"{name}-{secrets.token_hex(4)}"
    create, delete = ((reg.create_mutating_webhook_configuration, reg.delete_mutating_webhook_configuration)
                      if kind == "mutating" else
                      (reg.create_validating_webhook_configuration, reg.delete_validating_webhook_configuration))
    kube.defer(lambda: delete(unique))
    await create({"metadata": {"name": unique}, "webhooks": list(hooks)})
    return unique


async def create_status(kube, name: str, *, dry_run: bool = True) -> tuple[int, dict]:
    """Create a ConfigMap in the test's namespace (a dry run unless told): (status, ConfigMap or Status)."""
    resp = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": name}},
                                                        dry_run="All" if dry_run else None, _preload_content=False)
    return resp.status, json.loads(await resp.read())


async def in_force(probe, what: str, *, within: float = 30.0) -> None:
    """Wait until ``probe()`` is true: a real API server calls a configuration a moment after it is written."""
    deadline = asyncio.get_running_loop().time() + within
    while not await probe():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"not in force after {within}s: {what}")
        await asyncio.sleep(0.1)


async def test_mutating_then_validating(kube, webhook_server):
    kube.require_loopback_webhooks()
    base = f"https://127.0.0.1:{webhook_server['port']}"
    await register(kube, "mutating", "m", hook("m.tether.io", {"url": f"{base}/mutate",
                                                               "caBundle": webhook_server["ca_bundle"]},
                                               **only(kube.namespace)))
    await register(kube, "validating", "v", hook("v.tether.io", {"url": f"{base}/validate",
                                                                 "caBundle": webhook_server["ca_bundle"]},
                                                 **only(kube.namespace)))

    async def both() -> bool:
        status, cm = await create_status(kube, "probe")
        return status == 201 and (cm["metadata"].get("labels") or {}).get("mutated") == "yes" and (
            await create_status(kube, "deny-probe"))[0] == 403

    await in_force(both, "the mutating and the validating webhook")
    webhook_server["seen"].clear()  # (the dry runs' calls)
    cm = await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "ok"}})
    assert cm.metadata.labels == {"mutated": "yes"}
    calls = webhook_server["seen"]
    assert [c["path"] for c in calls] == ["mutate", "validate"]
    assert calls[1]["object"]["metadata"]["labels"] == {"mutated": "yes"}  # validating sees the mutation
    assert calls[0]["operation"] == "CREATE" and calls[0]["namespace"] == kube.namespace
    assert calls[0]["resource"] == {"group": "", "version": "v1", "resource": "configmaps"}
    assert calls[0]["dryRun"] is False
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
    kube.require_loopback_webhooks()
    base = f"https://127.0.0.1:{webhook_server['port']}"
    # a hook that cannot be called, failurePolicy Ignore; and one that answers too late (its timeout 1 s)
    await register(kube, "validating", "ignore", hook(
        "down.tether.io", {"url": "https://127.0.0.1:1/none", "caBundle": webhook_server["ca_bundle"]},
        failurePolicy="Ignore", **only(kube.namespace)))
    slow = await register(kube, "validating", "slow", hook(
        "slow.tether.io", {"url": f"{base}/slow", "caBundle": webhook_server["ca_bundle"]}, timeoutSeconds=1,
        **only(kube.namespace)))
    # (once the later configuration is in force, so is the earlier: one watch, in order)
    await in_force(lambda: _status_is(kube, 500), "the slow webhook")
    with pytest.raises(ApiException) as ei:
        await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "b"}})
    assert ei.value.status == 500
    message = json.loads(ei.value.body)["message"]
    assert 'failed calling webhook "slow.tether.io"' in message and "down.tether.io" not in message
    # without the slow one, the unreachable hook's failure is ignored
    await client.AdmissionregistrationV1Api(kube.api_client).delete_validating_webhook_configuration(slow)
    await in_force(lambda: _status_is(kube, 201), "the slow webhook's removal")
    await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "a"}})
    # an untrusted certificate is a call failure too
    await register(kube, "validating", "untrusted", hook("tls.tether.io", {"url": f"{base}/validate"},
                                                         **only(kube.namespace)))
    await in_force(lambda: _status_is(kube, 500), "the untrusted webhook")
    with pytest.raises(ApiException) as ei:
        await kube.core.create_namespaced_config_map(kube.namespace, {"metadata": {"name": "c"}})
    assert ei.value.status == 500
    assert 'failed calling webhook "tls.tether.io"' in json.loads(ei.value.body)["message"]


async def _status_is(kube, status: int) -> bool:
    return (await create_status(kube, "probe"))[0] == status


async def test_service_reference_and_object_selector(kube, webhook_server):
    emu = kube.require_emulator("a service reference: a real API server reaches a Service through its ClusterIP, and "
                                "the test's webhook server is on this machine's loopback, behind no Service")
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
