"""Conformance: a write to a custom resource's status subresource is validated against the **status schema alone**,
as kube-apiserver v1.28 does it — with another project's real schema, Fluid's DataProcess CRD
(``../shared/reference/fluid``), whose status requires ``conditions``, ``duration`` and ``phase``.

A merge patch of ``status.conditions`` onto a DataProcess whose status was never written is refused ``422 Invalid``
with the causes ``duration`` and ``phase`` (relative to ``status``: the server validates the status value against
the status schema); once Fluid's controller has written its status, a merge patch of conditions alone is accepted
and leaves ``phase`` and ``duration`` as they were. That is the rule tether's member executor lives by
(``docs/pod-placement.md``).

The CRD is served under a group of tether's own (``fluid-schema.tether.dev``, ``reference.crd_under_group``): a
shared real cluster already serves ``data.fluid.io`` with some schema, and a test never replaces a CRD it did not
create. The same body passes on the emulator and, with ``TETHER_TEST_KUBECONFIG``, on a real server.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio.client.exceptions import ApiException

from tether.adapters.testing.reference import crd_under_group, require_reference

GROUP, VERSION, PLURAL = "fluid-schema.tether.dev", "v1alpha1", "dataprocesses"
MERGE = "application/merge-patch+json"


def data_process(name: str, namespace: str) -> dict[str, Any]:
    return {"apiVersion": f"{GROUP}/{VERSION}", "kind": "DataProcess", "metadata": {"name": name},
            "spec": {"dataset": {"name": "d", "namespace": namespace, "mountPath": "/data"},
                     "processor": {"script": {"image": "busybox", "command": ["sh"], "source": "true"}}}}


def condition(kind: str) -> dict[str, Any]:
    return {"type": kind, "status": "True", "reason": kind, "message": "m",
            "lastTransitionTime": "2026-01-01T00:00:00Z"}


@pytest.fixture
async def fluid(kube: Any, tmp_path: Path) -> Any:
    source = require_reference("fluid", "data.fluid.io_dataprocesses.yaml")
    await kube.register_crds(crd_under_group(source, group=GROUP, directory=tmp_path))
    return kube.custom


async def test_conditions_alone_onto_an_unwritten_status_are_refused_as_the_real_server_does(kube: Any,
                                                                                            fluid: Any) -> None:
    ns = kube.namespace
    created = await fluid.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, data_process("p", ns))
    assert "status" not in created
    with pytest.raises(ApiException) as refused:
        await fluid.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "p", {
            "status": {"conditions": [condition("AffinityInherited")]}}, _content_type=MERGE)
    body = json.loads(refused.value.body)
    assert refused.value.status == 422 and body["reason"] == "Invalid"
    assert [(c["field"], c["reason"]) for c in body["details"]["causes"]] == [
        ("duration", "FieldValueRequired"), ("phase", "FieldValueRequired")]
    assert body["message"].endswith('"p" is invalid: [duration: Required value, phase: Required value]')


async def test_once_the_owner_wrote_its_status_a_merge_patch_of_conditions_keeps_its_fields(kube: Any,
                                                                                           fluid: Any) -> None:
    ns = kube.namespace
    await fluid.create_namespaced_custom_object(GROUP, VERSION, ns, PLURAL, data_process("p", ns))
    owners = {"phase": "Pending", "duration": "Unfinished", "conditions": [condition("Fluid")]}
    written = await fluid.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "p", {"status": owners},
                                                                _content_type=MERGE)
    ours = await fluid.patch_namespaced_custom_object_status(GROUP, VERSION, ns, PLURAL, "p", {
        "metadata": {"resourceVersion": written["metadata"]["resourceVersion"]},
        "status": {"conditions": [condition("Fluid"), condition("AffinityInherited")]}}, _content_type=MERGE)
    assert ours["status"]["phase"] == "Pending" and ours["status"]["duration"] == "Unfinished"
    assert [c["type"] for c in ours["status"]["conditions"]] == ["Fluid", "AffinityInherited"]
