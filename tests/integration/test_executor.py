"""KubeExecutor applies each command idempotently: the second application of the same request is a no-op."""

from __future__ import annotations

from tether.adapters import manifests
from tether.adapters.kube_emulator.testing import KubeEnv
from tether.adapters.kubernetes.client import CLAIMS, KubeClient
from tether.adapters.kubernetes.executor import KubeExecutor
from tether.core.commands import UpdateClaimStatus, command_id, command_target
from tether.core.envelope import CommandRecord
from tether.core.events import CommandSucceeded
from tether.core.kube import Condition, ObjectRef


async def test_the_same_status_applied_twice_is_a_noop(kube: KubeEnv) -> None:
    await kube.register_crds("datadependency.volcano.sh_datasourceclaims")
    client = KubeClient(kube.api_client)
    created = await client.create(CLAIMS, manifests.claim("c", namespace=kube.namespace, table="db.t"),
                                  namespace=kube.namespace)
    ref = ObjectRef(api_version=created["apiVersion"], kind="DataSourceClaim", name="c", namespace=kube.namespace,
                    uid=created["metadata"]["uid"])
    command = UpdateClaimStatus(claim=ref, phase="Pending", bound_data_source="", conditions=(
        Condition(type="Bound", status="False", reason="Resolving", message="looking it up",
                  last_transition_time="2026-01-01T00:00:00Z", observed_generation=1),))
    record = CommandRecord(id=command_id(command), at_ms=0, key=command_target(command), command=command,
                           causation="0:1")
    executor = KubeExecutor(client)
    first, = await executor.apply(record)
    second, = await executor.apply(record)
    assert isinstance(first, CommandSucceeded) and not first.noop
    assert isinstance(second, CommandSucceeded) and second.noop  # compared as the API stores it, not as tuples
    assert first.result is not None and second.result is not None
    assert second.result.metadata.resource_version == first.result.metadata.resource_version
