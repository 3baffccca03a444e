"""The webhook machinery on the API server's real admission path: the emulator's (or a real API server that can
reach this machine's loopback, with ``TETHER_TEST_KUBECONFIG``).

A ConfigMap webhook stands in for tether's own (the handler is a plain function): it is registered with a
self-signed certificate whose CA is injected as ``caBundle``, limited to the test's namespace by a
``namespaceSelector`` (the cluster may be shared), and removed at the end. A real API server calls a configuration
(and its new ``caBundle``) a moment after it is written: each registration waits, with dry runs, until the answer
comes from the server under test rather than from a TLS failure.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import secrets
import ssl
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from kubernetes_asyncio import client as k8s

from tether.adapters.kubernetes.client import CONFIGMAPS, KubeClient, KubeError
from tether.adapters.kubernetes.webhook import (
    AdmissionRequest,
    WebhookAnswer,
    WebhookServer,
    json_patch_ops,
)
from tether.adapters.kubernetes.webhook_certs import MUTATING_WEBHOOKS, ensure_self_signed, inject_ca_bundle
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.core.kube import pointer_token

pytestmark = pytest.mark.cluster

PATH = "/mutate/configmaps"
STAMP = "tether.dev/stamped"


class Stamp:
    """Adds an annotation to every ConfigMap created; counts its calls."""

    def __init__(self) -> None:
        self.calls: list[AdmissionRequest] = []

    def __call__(self, request: AdmissionRequest) -> WebhookAnswer:
        self.calls.append(request)
        obj = request.object or {}
        ops: list[tuple[str, str, Any]] = []
        if not (obj.get("metadata") or {}).get("annotations"):
            ops.append(("add", "/metadata/annotations", {}))
        ops.append(("add", f"/metadata/annotations/{pointer_token(STAMP)}", "yes"))
        return WebhookAnswer(patch=json_patch_ops(ops))


class Fixture:
    def __init__(self, kube: KubeEnv, server: WebhookServer, stamp: Stamp, name: str, ca: bytes,
                 state: dict[str, Any]) -> None:
        self.kube, self.server, self.stamp, self.name, self.ca, self.state = kube, server, stamp, name, ca, state
        self.client = KubeClient(kube.api_client)

    async def register(self, *, failure_policy: str = "Fail") -> None:
        config = {
            "apiVersion": "admissionregistration.k8s.io/v1", "kind": "MutatingWebhookConfiguration",
            "metadata": {"name": self.name},
            "webhooks": [{
                "name": "stamp.tether.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
                "failurePolicy": failure_policy, "timeoutSeconds": 5,
                "clientConfig": {"url": f"https://127.0.0.1:{self.server.port}{PATH}"},
                "rules": [{"operations": ["CREATE"], "apiGroups": [""], "apiVersions": ["v1"],
                           "resources": ["configmaps"]}],
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": self.kube.namespace}},
            }],
        }
        existing = await self.client.get(MUTATING_WEBHOOKS, self.name)
        if existing is None:
            await self.client.create(MUTATING_WEBHOOKS, config)
        else:
            config["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            await self.client.replace(MUTATING_WEBHOOKS, self.name, config)
        await inject_ca_bundle(self.client, self.name, self.ca)
        await self._in_force(failure_policy)

    async def _in_force(self, failure_policy: str, *, within: float = 30.0) -> None:
        """Wait until the API server calls the registered configuration with its caBundle (module doc): a dry-run
        create is stamped (serving) or refused by the serving gate rather than by TLS (not serving, ``Fail``); with
        ``Ignore`` and not serving nothing tells, nor does it matter. The dry runs' calls are forgotten."""
        serving = self.state["serving"][0]
        if not serving and failure_policy != "Fail":
            return
        core = k8s.CoreV1Api(self.kube.api_client)
        deadline = asyncio.get_running_loop().time() + within
        while True:
            response = await core.create_namespaced_config_map(
                self.kube.namespace, {"metadata": {"name": "probe"}}, dry_run="All", _preload_content=False)
            body = json.loads(await response.read())
            if serving and STAMP in ((body.get("metadata") or {}).get("annotations") or {}):
                break
            if not serving and response.status >= 400 and "certificate" not in str(body.get("message")):
                break
            if asyncio.get_running_loop().time() > deadline:
                raise AssertionError(f"the webhook configuration not in force after {within}s: {body}")
            await asyncio.sleep(0.1)
        self.stamp.calls.clear()

    async def create(self, name: str) -> dict[str, Any]:
        body = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": {"k": "v"}}
        return await self.client.create(CONFIGMAPS, body, namespace=self.kube.namespace)


@pytest.fixture
async def hook(kube: KubeEnv, tmp_path: Path) -> AsyncIterator[Fixture]:
    kube.require_loopback_webhooks()  # the server below listens on this machine's loopback
    cert, key, ca = ensure_self_signed(tmp_path / "certs", names=["127.0.0.1", "localhost"])
    state = {"serving": (True, "ready")}
    stamp = Stamp()
    server = WebhookServer(handlers={PATH: stamp}, cert_file=str(cert), key_file=str(key),
                           serving=lambda: state["serving"], host="127.0.0.1", port=0)
    await server.start()
    fixture = Fixture(kube, server, stamp, f"tether-test-stamp-{secrets.token_hex(3)}", ca, state)
    try:
        yield fixture
    finally:
        with contextlib.suppress(KubeError):
            await fixture.client.delete(MUTATING_WEBHOOKS, fixture.name)
        await server.stop()


async def test_the_api_server_applies_the_handlers_patch(hook: Fixture) -> None:
    await hook.register()
    created = await hook.create("stamped")
    assert created["metadata"]["annotations"][STAMP] == "yes"
    assert [c.operation for c in hook.stamp.calls] == ["CREATE"]
    assert hook.stamp.calls[0].namespace == hook.kube.namespace


async def test_a_replica_that_is_not_current_leaves_it_to_the_failure_policy(hook: Fixture) -> None:
    hook.state["serving"] = (False, "standby (not the leader)")
    await hook.register(failure_policy="Fail")
    with pytest.raises(KubeError) as refused:
        await hook.create("refused")
    assert refused.value.status >= 400
    await hook.register(failure_policy="Ignore")
    admitted = await hook.create("unstamped")
    assert STAMP not in (admitted["metadata"].get("annotations") or {})
    assert hook.stamp.calls == []  # never asked: the answer came from the serving gate


async def test_the_ca_bundle_is_written_once(hook: Fixture) -> None:
    await hook.register()  # (injects)
    assert await inject_ca_bundle(hook.client, hook.name, hook.ca) is False


async def test_a_request_that_is_not_an_admission_review_gets_a_clear_400(hook: Fixture) -> None:
    context = ssl.create_default_context(cadata=hook.ca.decode())
    async with aiohttp.ClientSession() as http:
        url = f"https://127.0.0.1:{hook.server.port}{PATH}"
        async with http.post(url, data=b'{"kind": "AdmissionReview"}', ssl=context) as response:
            assert response.status == 400
            assert "without a request" in await response.text()
        async with http.post(url, data=b"not json", ssl=context) as response:
            assert response.status == 400
            assert "not an admission.k8s.io/v1 AdmissionReview" in await response.text()


async def test_a_rotated_certificate_is_served_without_a_restart(hook: Fixture, tmp_path: Path) -> None:
    new_ca = rotate(tmp_path / "rotated", hook.server)
    assert hook.server.reload_if_changed()
    context = ssl.create_default_context(cadata=new_ca.decode())
    url = f"https://127.0.0.1:{hook.server.port}{PATH}"
    async with aiohttp.ClientSession() as http, http.post(url, data=b"{}", ssl=context) as response:
        assert response.status == 400  # the handshake verified against the new CA


def rotate(folder: Path, server: WebhookServer) -> bytes:
    """What cert-manager does to the mounted Secret: a new key and certificate (from a new CA) in place."""
    cert, key, ca = ensure_self_signed(folder, names=["127.0.0.1"])
    Path(server.key_file).write_bytes(key.read_bytes())
    Path(server.cert_file).write_bytes(cert.read_bytes())
    return ca


async def test_a_handler_that_raises_is_answered_500_and_the_failure_policy_applies(kube: KubeEnv,
                                                                                    tmp_path: Path) -> None:
    """A bug in a handler is a failed call, like tether being down: 500 with a one-line reason, logged with the
    object's key, counted as an error — and the API server applies the webhook's failurePolicy to it."""
    kube.require_loopback_webhooks()
    cert, key, ca = ensure_self_signed(tmp_path / "certs", names=["127.0.0.1", "localhost"])
    outcomes: list[tuple[str, str]] = []

    def broken(request: AdmissionRequest) -> WebhookAnswer:
        raise KeyError("spec")

    server = WebhookServer(handlers={PATH: broken}, cert_file=str(cert), key_file=str(key),
                           serving=lambda: (True, "ready"), host="127.0.0.1", port=0,
                           observe=lambda path, outcome, seconds: outcomes.append((path, outcome)))
    await server.start()
    # (for Fixture.register's wait: this webhook refuses every call — with a 500 of its own, not a TLS error)
    fixture = Fixture(kube, server, Stamp(), f"tether-test-broken-{secrets.token_hex(3)}", ca,
                      {"serving": (False, "its handler raises")})
    try:
        review = {"apiVersion": "admission.k8s.io/v1", "kind": "AdmissionReview",
                  "request": {"uid": "u1", "operation": "CREATE", "namespace": kube.namespace,
                              "object": {"kind": "ConfigMap", "metadata": {"name": "cm"}}}}
        context = ssl.create_default_context(cadata=ca.decode())
        with structlog.testing.capture_logs() as logs:
            async with aiohttp.ClientSession() as http, http.post(
                    f"https://127.0.0.1:{server.port}{PATH}", json=review, ssl=context) as response:
                assert response.status == 500
                assert await response.text() == f"tether webhook {PATH} failed: KeyError('spec')"
        assert outcomes == [(PATH, "error")]
        failed = [e for e in logs if e["event"] == "webhook handler failed; the webhook's failurePolicy applies"]
        assert len(failed) == 1 and failed[0]["key"] == f"ConfigMap/{kube.namespace}/cm"

        await fixture.register(failure_policy="Fail")
        with pytest.raises(KubeError) as refused:
            await fixture.create("refused")
        assert refused.value.status >= 400
        await fixture.register(failure_policy="Ignore")
        admitted = await fixture.create("admitted")  # the policy's choice: admitted unchanged
        assert STAMP not in (admitted["metadata"].get("annotations") or {})
    finally:
        with contextlib.suppress(KubeError):
            await fixture.client.delete(MUTATING_WEBHOOKS, fixture.name)
        await server.stop()
