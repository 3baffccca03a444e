"""Leader election is ``tether run``'s default, so its Lease namespace must not be a trap: created when missing,
and when it cannot be (or the Lease may not be touched), one line that names the namespace and the permissions.

The namespace test runs on the emulator and on a real cluster (it creates a namespace of its own and deletes it);
the refusals are answered by a client that refuses, as an API server without the grant would.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from typing import Any

import pytest

from tether.adapters.cli.run import run_cmd
from tether.adapters.kubernetes.client import LEASES, KubeClient, KubeError
from tether.adapters.kubernetes.leader import NAMESPACES, LeaderElector, LeaseProblem
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.tether_stack import eventually

pytestmark = pytest.mark.cluster


def test_tether_run_campaigns_by_default() -> None:
    option = next(p for p in run_cmd.params if p.name == "leader_elect")
    assert option.default is True and "--no-leader-elect" in option.secondary_opts


async def test_a_missing_lease_namespace_is_created(kube: KubeEnv) -> None:
    client = KubeClient(kube.api_client)
    namespace = f"tether-lease-{secrets.token_hex(3)}"
    assert await client.get(NAMESPACES, namespace) is None
    elector = LeaderElector(client, namespace=namespace, name="tether-leader", identity="one", retry_period=0.05)
    try:
        assert await elector.try_acquire_or_renew()
        lease = await client.get(LEASES, "tether-leader", namespace=namespace)
        assert lease is not None and lease["spec"]["holderIdentity"] == "one"
    finally:
        with contextlib.suppress(KubeError):
            await client.delete(NAMESPACES, namespace)


class Refusing(KubeClient):
    """Answers what an API server answers a service account without the grants: ``refuse`` maps
    (method, resource plural) to the status."""

    def __init__(self, refuse: dict[tuple[str, str], int]) -> None:
        self.refuse = refuse
        self.calls: list[tuple[str, str]] = []

    async def _answer(self, method: str, res: Any) -> None:
        self.calls.append((method, res.plural))
        status = self.refuse.get((method, res.plural))
        if status is not None:
            reason = {403: "Forbidden", 404: "NotFound"}[status]
            raise KubeError(status, reason, f"{res.plural} is {reason.lower()}")

    async def get(self, res: Any, name: str, **kwargs: Any) -> dict[str, Any] | None:
        await self._answer("get", res)
        return None

    async def create(self, res: Any, body: dict[str, Any], **kwargs: Any) -> dict[str, Any]:
        await self._answer("create", res)
        return body


@pytest.mark.parametrize(("refuse", "says"), [
    ({("get", "leases"): 403}, ["may not get the Lease tether-system/tether-leader",
                                "get, create and update on leases.coordination.k8s.io in namespace tether-system"]),
    ({("create", "leases"): 403}, ["may not create the Lease tether-system/tether-leader"]),
    ({("create", "leases"): 404, ("create", "namespaces"): 403},
     ["the Lease namespace tether-system does not exist and tether could not create it (403 Forbidden)",
      "kubectl create namespace tether-system", "leases.coordination.k8s.io"]),
])
async def test_a_refusal_is_one_line_naming_the_namespace_and_the_grant(refuse: dict[tuple[str, str], int],
                                                                       says: list[str]) -> None:
    elector = LeaderElector(Refusing(refuse), namespace="tether-system", name="tether-leader", identity="one",
                            retry_period=0.01)
    with pytest.raises(LeaseProblem) as caught:
        await elector.try_acquire_or_renew()
    line = str(caught.value)
    assert "\n" not in line and all(part in line for part in says), line


async def test_the_campaign_keeps_trying_and_says_what_is_wrong_until_it_is_fixed() -> None:
    client = Refusing({("create", "leases"): 404, ("create", "namespaces"): 403})
    elector = LeaderElector(client, namespace="tether-system", name="tether-leader", identity="one",
                            retry_period=0.01)
    campaign = asyncio.create_task(elector.run())
    try:
        # three rounds: get, create the Lease (404), create the namespace (403)
        await eventually(lambda: asyncio.sleep(0, len(client.calls) >= 9), "three campaign rounds")
        assert "tether-system does not exist" in elector.problem and not elector.is_leader.is_set()
        client.refuse = {}  # someone created the namespace
        await asyncio.wait_for(elector.is_leader.wait(), 5)
        assert elector.problem == ""
    finally:
        campaign.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await campaign
