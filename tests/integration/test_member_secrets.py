"""Member clusters connected from their Karmada Cluster's ``secretRef``: bad Secrets and rotated ones.

:class:`MemberClusters` reads a member's token and CA from the Secret its Cluster names. A Secret that is missing,
unreadable, without a token, with a token that is not base64 text, or with a caBundle that is not a certificate
leaves that member unconnected with one warning naming it — never an exception in a background task, never another
member or the control plane affected — and the next observation of the Cluster tries again. A rotated Secret (new
token) reconnects the member with the new credentials at the next observation; the same Secret observed again
(a status heartbeat) changes nothing.

The Clusters and their Secrets are on the control plane — the emulator, or the real one of
``TETHER_TEST_KUBECONFIG`` — and the member's API server is an emulator (the control plane's own, or a private one
beside a real control plane: ``KubeEnv.member_endpoint``), whose credentials the test makes up: only the credentials
tether takes from the Secret are under test. A 403 on the Secret's read is a fault rule on the emulator and the
real server's RBAC on a real control plane.
"""

from __future__ import annotations

import base64
import secrets
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import structlog

from tether.adapters.kubernetes.client import CLUSTERS, KubeClient
from tether.adapters.kubernetes.members import SECRETS, MemberClusters, MemberExecutor
from tether.adapters.log.sqlite import SqliteLog
from tether.adapters.sandbox.kube_emulator import KubeEmulator
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.member import CRDS as MEMBER_CRDS
from tether.core.events import MemberDisconnected
from tether.core.kube import trim

TOKEN_A, TOKEN_B = "token-a", "token-b"


class Karmada:
    def __init__(self, kube: KubeEnv, emulator: KubeEmulator, members: MemberClusters, log: SqliteLog) -> None:
        self.kube, self.emulator, self.members, self.log = kube, emulator, members, log
        self.client = KubeClient(kube.api_client)
        self.name = f"m-{secrets.token_hex(3)}"

    def cluster(self, secret: str = "member-secret") -> dict[str, Any]:
        return {"apiVersion": CLUSTERS.api_version, "kind": "Cluster",
                "metadata": {"name": self.name, "resourceVersion": "1"},
                "spec": {"apiEndpoint": self.emulator.url, "syncMode": "Push",
                         "secretRef": {"namespace": self.kube.namespace, "name": secret}}}

    async def secret(self, data: dict[str, str], name: str = "member-secret") -> None:
        body = {"apiVersion": "v1", "kind": "Secret", "metadata": {"name": name, "namespace": self.kube.namespace},
                "data": data}
        existing = await self.client.get(SECRETS, name, namespace=self.kube.namespace)
        if existing is None:
            await self.client.create(SECRETS, body, namespace=self.kube.namespace)
        else:
            body["metadata"]["resourceVersion"] = existing["metadata"]["resourceVersion"]
            await self.client.replace(SECRETS, name, body, namespace=self.kube.namespace)

    async def observe(self, secret: str = "member-secret") -> list[dict[str, Any]]:
        """The Cluster observed (as the daemon's watch hands it over); the warnings it logged."""
        with structlog.testing.capture_logs() as logs:
            await self.members._connect_from_cluster(trim(self.cluster(secret)))
        return [e for e in logs if e["log_level"] == "warning"]

    def token(self) -> str | None:
        member = self.members.members.get(self.name)
        return None if member is None else member.api.configuration.api_key["authorization"]

    async def joins_and_leaves(self) -> list[Any]:
        """What MemberClusters itself appended: a ListsStarted per join, a MemberDisconnected per leave."""
        return [r.event async for batch in self.log.read("events") for r in batch  # type: ignore[union-attr]
                if r.source == "members"]


@pytest.fixture
async def karmada(kube: KubeEnv, tmp_path: Path) -> AsyncIterator[Karmada]:
    async with kube.member_endpoint(crds=MEMBER_CRDS) as emulator:  # (Godel's and Fluid's: nothing absent to say)
        log = await SqliteLog.open(tmp_path / "tether.db")
        members = MemberClusters(log, MemberExecutor(), karmada=KubeClient(kube.api_client))
        try:
            yield Karmada(kube, emulator, members, log)
        finally:
            await members.stop()
            await log.close()


def b64(text: str | bytes) -> str:
    return base64.b64encode(text.encode() if isinstance(text, str) else text).decode()


@pytest.mark.parametrize(("data", "warning"), [
    (None, "member cluster secret not found"),
    ({"caBundle": b64("x")}, "member cluster secret has no token"),
    ({"token": "not base64!"}, "member cluster secret's token is unreadable (not base64-encoded text)"),
    ({"token": b64(b"\xff\xfe")}, "member cluster secret's token is unreadable (not base64-encoded text)"),
    ({"token": b64(TOKEN_A), "caBundle": b64("not a certificate")}, "member cluster caBundle unusable"),
])
async def test_a_bad_secret_leaves_only_that_member_unconnected_with_a_warning(
        karmada: Karmada, data: dict[str, str] | None, warning: str) -> None:
    if data is not None:
        if data.get("token") == "not base64!":
            karmada.kube.require_emulator("a Secret whose data is not base64, which a real API server refuses to store")
        await karmada.secret(data)
    warnings = await karmada.observe()
    assert [w["event"] for w in warnings] == [warning] and warnings[0]["cluster"] == karmada.name
    assert TOKEN_A not in repr(warnings)  # (the token is never logged)
    assert karmada.name not in karmada.members.members
    assert karmada.name not in karmada.members.executor.executors
    # fixed: the next observation connects it
    await karmada.secret({"token": b64(TOKEN_A)})
    assert await karmada.observe() == []
    assert karmada.token() == TOKEN_A


async def test_an_unreadable_secret_is_retried_at_the_next_observation(karmada: Karmada) -> None:
    """A 403 on the Secret's read: a fault rule on the emulator; on a real control plane its RBAC, tether reading
    as a ServiceAccount without a role, then granted one."""
    await karmada.secret({"token": b64(TOKEN_A)})
    kube = karmada.kube
    if kube.emulator is not None:
        kube.emulator.faults.fail(code=403, verb="get", resource="secrets", times=1)
    else:
        api, user = await kube.client_without_rights()
        await karmada.members.stop()
        karmada.members = MemberClusters(karmada.log, MemberExecutor(), karmada=KubeClient(api))
    warnings = await karmada.observe()
    assert [w["event"] for w in warnings] == ["member cluster secret unreadable"] and warnings[0]["status"] == 403
    assert karmada.token() is None
    if kube.emulator is None:
        await kube.grant(user, verbs=["get"], resources=["secrets"])
    assert await karmada.observe() == [] and karmada.token() == TOKEN_A
    await karmada.members.stop()


async def test_a_rotated_secret_reconnects_the_member_with_the_new_token(karmada: Karmada) -> None:
    await karmada.secret({"token": b64(TOKEN_A + "\n")})  # (a trailing newline, as `kubectl --from-file` leaves)
    await karmada.observe()
    assert karmada.token() == TOKEN_A
    first = karmada.members.members[karmada.name]
    assert await karmada.observe() == []  # the same Secret observed again (a heartbeat): nothing changes
    assert karmada.members.members[karmada.name] is first

    await karmada.secret({"token": b64(TOKEN_B)})  # rotated
    assert await karmada.observe() == []
    assert karmada.token() == TOKEN_B
    assert karmada.members.members[karmada.name] is not first
    assert first.api.rest_client.pool_manager.closed  # the old connection is closed, its tasks stopped
    assert all(task.done() for task in first.tasks)
    events = await karmada.joins_and_leaves()
    assert [type(e).__name__ for e in events] == ["ListsStarted", "MemberDisconnected", "ListsStarted"]
    assert events[1] == MemberDisconnected(cluster=karmada.name, reason="credentials changed")
