"""``--leader-service``: the leader writes its own address into the EndpointSlice of each leader-only Service
(push, webhooks), a takeover moves it, a graceful stop withdraws it — and a standby stays ready, webhooks or not.
With self-signed certificates per replica, the webhook configuration's caBundle follows the leader too."""

from __future__ import annotations

import asyncio
import base64
import dataclasses
import secrets
from pathlib import Path
from typing import Any

import pytest

from tether.adapters.kubernetes.client import KubeClient, KubeError, Resource
from tether.adapters.kubernetes.leader_endpoints import ENDPOINT_SLICES, MANAGED_BY, LeaderEndpoints, slice_name
from tether.adapters.kubernetes.webhook_certs import CA_FILE, MUTATING_WEBHOOKS
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.clock import ManualClock, next_attempt
from tether.adapters.testing.tether_stack import Stack, spawn_daemon, tether_stack

from .test_daemon import LEASE, leading


async def addresses(stack: Stack, service: str) -> list[str] | None:
    found = await stack.kube.get(ENDPOINT_SLICES, slice_name(service), namespace=stack.namespace)
    if found is None:
        return None
    return [a for e in found.get("endpoints") or [] for a in e["addresses"]]


async def ca_bundle(stack: Stack, name: str) -> bytes:
    config = await stack.kube.get(MUTATING_WEBHOOKS, name)
    assert config is not None
    return base64.b64decode(config["webhooks"][0]["clientConfig"].get("caBundle") or "")


async def test_the_leaders_address_and_ca_follow_the_lease(kube: KubeEnv, tmp_path: Path) -> None:
    service, config_name = f"tether-push-{secrets.token_hex(3)}", f"tether-test-rb-{secrets.token_hex(3)}"
    hook: dict[str, Any] = {
        "name": "resourcebindings.tether.dev", "admissionReviewVersions": ["v1"], "sideEffects": "None",
        "failurePolicy": "Ignore", "clientConfig": {"url": "https://127.0.0.1:1/mutate/resourcebindings"},
        "rules": [{"operations": ["CREATE"], "apiGroups": ["work.karmada.io"], "apiVersions": ["v1alpha2"],
                   "resources": ["resourcebindings"]}],
        # no namespace carries this label: the API server never calls it (only its caBundle matters here)
        "namespaceSelector": {"matchLabels": {"tether.dev/test-never": config_name}}}
    options = LEASE | {
        "identity": "first", "leader_services": [service], "pod_ip": "10.0.0.1", "pod_namespace": kube.namespace,
        "binding_webhook": True, "webhook_port": 0, "webhook_host": "127.0.0.1", "webhook_self_signed": True,
        "webhook_cert_dir": str(tmp_path / "first"), "webhook_configuration": config_name}
    clock = ManualClock()  # the electors' time (test_daemon.py): a takeover when the test moves it
    async with tether_stack(kube, daemon_options=options, lease_clock=clock) as stack:
        await leading(stack)
        await stack.kube.create(MUTATING_WEBHOOKS, {"apiVersion": "admissionregistration.k8s.io/v1",
                                                    "kind": "MutatingWebhookConfiguration",
                                                    "metadata": {"name": config_name}, "webhooks": [hook]})
        assert stack.daemon is not None and stack.cfg is not None
        first = stack.daemon
        second_log = await SqliteLog.open(str(tmp_path / "second.db"))
        try:
            await stack.eventually(lambda: addresses(stack, service), what="the leader's address published")
            published = await stack.kube.get(ENDPOINT_SLICES, slice_name(service), namespace=stack.namespace)
            assert published is not None and first.endpoints is not None and first.webhook is not None
            assert published["metadata"]["labels"] == {"kubernetes.io/service-name": service,
                                                       "endpointslice.kubernetes.io/managed-by": MANAGED_BY}
            assert published["addressType"] == "IPv4"
            assert published["endpoints"] == [{"addresses": ["10.0.0.1"], "conditions": {"ready": True},
                                               "targetRef": {"kind": "Pod", "name": "first",
                                                             "namespace": stack.namespace}}]
            assert {p["name"]: p["port"] for p in published["ports"]} == {
                "http": first.endpoints.port, "webhook": first.webhook.port}

            # the configuration existed only after the first leader started: a restart of its leadership would
            # inject; here the second replica's takeover does, with its own CA (its own certificate directory)
            cfg = dataclasses.replace(stack.cfg, identity="second", pod_ip="10.0.0.2",
                                      log_url=f"sqlite:///{tmp_path}/second.db",
                                      webhook_cert_dir=str(tmp_path / "second"))
            second, stop, task = await spawn_daemon(cfg, stack.env, second_log, lease_clock=clock)
            try:
                await stack.eventually(lambda: asyncio.sleep(0, second.webhook is not None), what="standby serving")
                # a standby serving a webhook stays ready: the Services do not route by readiness
                assert second.ready() == (True, "standby (not the leader)")
                assert await addresses(stack, service) == ["10.0.0.1"]

                assert await stack.stop_daemon() == 0  # a rollout: the leader goes, releasing the Lease
                assert second.leader is not None
                await clock.settle(1)
                await next_attempt(clock, [second.leader], seconds=LEASE["retry_period"])  # takes the released Lease
                await asyncio.wait_for(second.started.wait(), 10)

                async def moved() -> bool:
                    return await addresses(stack, service) == ["10.0.0.2"]

                await stack.eventually(moved, what="the new leader's address")
                assert await ca_bundle(stack, config_name) == (tmp_path / "second" / CA_FILE).read_bytes()
                assert (tmp_path / "first" / CA_FILE).read_bytes() != (tmp_path / "second" / CA_FILE).read_bytes()
            finally:
                stop.set()
                assert await asyncio.wait_for(task, 10) == 0
            assert await addresses(stack, service) == []  # a graceful stop withdraws the address
        finally:
            await second_log.close()
            await stack.kube.delete(MUTATING_WEBHOOKS, config_name)


class _Interloper(KubeClient):
    """A client under which another writer changes the slice between our read and our write (``times`` times)."""

    times = 1
    replaces = 0

    async def replace(self, res: Resource, name: str, body: dict[str, Any], *, namespace: str = "") -> dict[str, Any]:
        self.replaces += 1
        if self.times:
            self.times -= 1
            current = await self.get(res, name, namespace=namespace)
            assert current is not None
            current["metadata"].setdefault("labels", {})["someone.else/touched"] = str(self.replaces)
            await super().replace(res, name, current, namespace=namespace)
        return await super().replace(res, name, body, namespace=namespace)


async def test_a_conflict_on_the_slice_is_read_again_and_written_over(kube: KubeEnv) -> None:
    service = f"tether-push-{secrets.token_hex(3)}"
    client = _Interloper(kube.api_client)
    endpoints = LeaderEndpoints(client, namespace=kube.namespace, services=[service], address="10.0.0.7",
                                ports={"push": 8443})
    await endpoints.publish()  # created: no replace yet
    await endpoints.withdraw()  # read, someone else's write, a 409 (the write names the version read), read again
    found = await client.get(ENDPOINT_SLICES, slice_name(service), namespace=kube.namespace)
    assert client.replaces == 2 and found is not None and found.get("endpoints") in (None, [])
    client.times = 5  # someone else writes before every one of our attempts: we give up, and say so
    with pytest.raises(KubeError, match="a conflict on every attempt"):
        await endpoints.publish()
    await client.delete(ENDPOINT_SLICES, slice_name(service), namespace=kube.namespace)


class _CountingCreates(KubeClient):
    creates = 0

    async def create(self, res: Resource, body: dict[str, Any], *, namespace: str = "") -> dict[str, Any]:
        self.creates += 1
        return await super().create(res, body, namespace=namespace)


async def test_a_refused_slice_write_is_not_retried(kube: KubeEnv) -> None:
    """A 403: the real API server's RBAC refusing a ServiceAccount without a role (on the emulator, which has no
    RBAC, a fault rule)."""
    if kube.emulator is not None:
        kube.emulator.faults.fail(code=403, verb="create", resource="endpointslices", times=None)
        client = _CountingCreates(kube.api_client)
    else:  # the leader's Role without "create"
        api, user = await kube.client_without_rights()
        await kube.grant(user, verbs=["get", "update"], resources=["endpointslices"], api_group="discovery.k8s.io")
        client = _CountingCreates(api)
    endpoints = LeaderEndpoints(client, namespace=kube.namespace,
                                services=[f"tether-push-{secrets.token_hex(3)}"], address="10.0.0.7",
                                ports={"push": 8443})
    with pytest.raises(KubeError) as refused:
        await endpoints.publish()
    assert refused.value.status == 403 and client.creates == 1
