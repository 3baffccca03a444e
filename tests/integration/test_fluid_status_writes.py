"""What tether writes on a Fluid operation is valid against Fluid's own schema, on the emulator and on a real server.

The member executor's ``SetMemberCondition`` (``adapters/kubernetes/members.py``) against Fluid's real DataProcess
CRD (``../shared/reference/fluid``), whose status requires ``conditions``, ``duration`` and ``phase``:

* onto a DataProcess whose status Fluid has not written, it writes nothing (a merge patch of conditions alone is
  refused ``422 [duration: Required value, phase: Required value]``, ``tests/emulator/test_status_schema.py``) and
  reports the object as it is;
* onto one Fluid has reconciled, it merge-patches ``status.conditions`` alone: Fluid's condition kept verbatim,
  ``phase`` and ``duration`` untouched.

The CRD is served under a group of tether's own (``fluid-schema.tether.dev``, ``reference.crd_under_group``): a
shared real cluster already serves ``data.fluid.io`` with some schema, and a test never replaces a CRD it did not
create. The executor is pointed at that group through its ``resources`` map.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tether.adapters.kubernetes.client import KubeClient, Resource
from tether.adapters.kubernetes.members import _MemberKube
from tether.adapters.sandbox.kube_emulator.testing import KubeEnv
from tether.adapters.testing.reference import crd_under_group, require_reference
from tether.core.commands import SetMemberCondition, command_id
from tether.core.envelope import CommandRecord
from tether.core.events import CommandSucceeded
from tether.core.kube import ObjectRef
from tether.core.placement.operation_status import outcome_condition

pytestmark = pytest.mark.cluster

GROUP = "fluid-schema.tether.dev"
PROCESSES = Resource(GROUP, "v1alpha1", "dataprocesses", "DataProcess", True)
FLUIDS = {"type": "Processing", "status": "True", "reason": "Fluid", "message": "Fluid's own",
          "lastTransitionTime": "2026-01-01T00:00:00Z"}


async def _setup(kube: KubeEnv, tmp: Path) -> KubeClient:
    source = require_reference("fluid", "data.fluid.io_dataprocesses.yaml")
    await kube.register_crds(crd_under_group(source, group=GROUP, directory=tmp))
    return KubeClient(kube.api_client)


async def _create(client: KubeClient, namespace: str, name: str) -> dict[str, Any]:
    return await client.create(PROCESSES, {
        "apiVersion": PROCESSES.api_version, "kind": "DataProcess", "metadata": {"name": name},
        "spec": {"dataset": {"name": "d", "namespace": namespace, "mountPath": "/data"},
                 "processor": {"script": {"image": "busybox", "source": "true"}}}}, namespace=namespace)


async def _set_condition(client: KubeClient, obj: dict[str, Any], *, message: str = "inherited from x"
                         ) -> CommandSucceeded:
    meta = obj["metadata"]
    command = SetMemberCondition(cluster="m1", target=ObjectRef(
        api_version=PROCESSES.api_version, kind="DataProcess", name=meta["name"], namespace=meta["namespace"],
        uid=meta["uid"]), condition=outcome_condition(reason="AffinityInherited", message=message,
                                                      at="2026-01-02T00:00:00Z"))
    executor = _MemberKube(client, cluster="m1", resources={"DataProcess": PROCESSES})
    [outcome] = await executor.apply(CommandRecord(id=command_id(command), at_ms=0, key="k", command=command,
                                                   causation="0:1"))
    assert isinstance(outcome, CommandSucceeded), outcome  # never a 422
    return outcome


async def test_no_condition_is_written_onto_a_status_fluid_has_not_written(kube: KubeEnv, tmp_path: Path) -> None:
    client = await _setup(kube, tmp_path)
    created = await _create(client, kube.namespace, "unreconciled")
    outcome = await _set_condition(client, created)
    assert outcome.noop
    after = await client.get(PROCESSES, "unreconciled", namespace=kube.namespace)
    assert after is not None and "status" not in after
    assert after["metadata"]["resourceVersion"] == created["metadata"]["resourceVersion"]


async def test_onto_fluids_status_only_the_conditions_change_and_fluids_stay(kube: KubeEnv, tmp_path: Path) -> None:
    client = await _setup(kube, tmp_path)
    await _create(client, kube.namespace, "reconciled")
    written = await client.patch(PROCESSES, "reconciled", {"status": {
        "phase": "Executing", "duration": "Unfinished", "conditions": [FLUIDS]}}, namespace=kube.namespace,
        subresource="status")  # as Fluid's controller would
    outcome = await _set_condition(client, written)
    assert not outcome.noop
    after = await client.get(PROCESSES, "reconciled", namespace=kube.namespace)
    assert after is not None
    status = after["status"]
    assert (status["phase"], status["duration"]) == ("Executing", "Unfinished")
    assert status["conditions"] == [FLUIDS, {"type": "AffinityInherited", "status": "True",
                                             "reason": "AffinityInherited", "message": "inherited from x",
                                             "lastTransitionTime": "2026-01-02T00:00:00Z"}]
    again = await _set_condition(client, after)
    assert again.noop  # in place: nothing more to write
    changed = await _set_condition(client, after, message="inherited from y")  # the same type again: replaced
    assert not changed.noop
    final = await client.get(PROCESSES, "reconciled", namespace=kube.namespace)
    assert final is not None
    assert [(c["type"], c["message"]) for c in final["status"]["conditions"]] == [
        (FLUIDS["type"], FLUIDS["message"]), ("AffinityInherited", "inherited from y")]
