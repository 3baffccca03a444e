"""The views of a member cluster's objects: what tether keeps of a Node, a Pod, a Godel PodGroup and a Fluid data
operation, parsed from an observation (``projections.members`` folds them into a member's state).

Every version of every pod comes here, so a pod's spec and status are decoded into the few fields tether reads
(:func:`parse_pod`); what does not have the expected types is read whole as dictionaries by
:func:`_parse_pod_tolerant`, which gives the same view (a property test checks it on bent pods). A pod's request is
computed once per distinct set of container requests (pods come from a few templates).
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from tether.core.kube import Condition, KubeObject, as_list, object_dict, parse_conditions
from tether.core.placement.dataflow import OPERATION_KINDS, DataFlowSpecError, DataOperation, parse_operation
from tether.core.placement.operation_status import CONDITION_TYPE, accepts_conditions
from tether.core.placement.pod_group_spec import POD_GROUP_ANNOTATION, GroupSpec, InvalidPodGroup, parse_pod_group
from tether.core.quantity import InvalidQuantity, ResourceList, add, resource_list

NODE, POD, POD_GROUP, JOB = "Node", "Pod", "PodGroup", "Job"
MEMBER_KINDS = (NODE, POD, POD_GROUP, JOB, *OPERATION_KINDS)


class MemberNode(msgspec.Struct, frozen=True, gc=False):
    name: str
    labels: dict[str, str] = {}
    allocatable: ResourceList = {}
    resource_version: str = ""


class MemberPod(msgspec.Struct, frozen=True):
    namespace: str
    name: str
    uid: str = ""
    resource_version: str = ""
    creation: str = ""
    node_name: str = ""
    phase: str = ""
    gates: tuple[str, ...] = ()
    request: ResourceList = {}
    group: str = ""  # the PodGroup's name (same namespace), from godel.bytedance.com/pod-group-name
    job: str = ""  # the owning Job's name
    annotations: dict[str, str] = {}
    affinity: dict[str, Any] = {}
    deleting: bool = False
    error: str = ""  # a request tether could not read (the pod is then never gated by tether's decisions)

    @property
    def key(self) -> str:
        return f"{POD}/{self.namespace}/{self.name}"

    @property
    def terminal(self) -> bool:
        return self.phase in ("Succeeded", "Failed")


class MemberGroup(msgspec.Struct, frozen=True):
    namespace: str
    name: str
    uid: str = ""
    spec: GroupSpec | None = None
    error: str = ""


class MemberOperation(msgspec.Struct, frozen=True):
    kind: str
    namespace: str
    name: str
    uid: str = ""
    api_version: str = ""
    operation: DataOperation | None = None
    error: str = ""
    condition: Condition | None = None  # tether's own (CONDITION_TYPE), as observed
    accepts_conditions: bool = False  # Fluid has written its status: tether may add its condition (operation_status)


def _pod_request(spec: dict[str, Any]) -> ResourceList:
    """Kubernetes' effective request: the containers' sum, or the largest init container's when that is more."""
    total: ResourceList = {}
    for container in spec.get("containers") or []:
        total = add(total, resource_list(((container or {}).get("resources") or {}).get("requests")))
    for container in spec.get("initContainers") or []:
        init = resource_list(((container or {}).get("resources") or {}).get("requests"))
        total = {name: max(total.get(name, 0), init.get(name, 0)) for name in sorted({*total, *init})}
    return total


class _Requests(msgspec.Struct, gc=False):
    requests: dict[str, str | int | float] | None = None


class _Container(msgspec.Struct, gc=False):
    resources: _Requests | None = None


class _Gate(msgspec.Struct, gc=False):
    name: str = ""


class _PodSpec(msgspec.Struct, gc=False, rename="camel"):
    """The fields of a pod's spec tether reads (the rest — images, commands, volumes — skipped by the decoder)."""

    node_name: str | None = None
    containers: list[_Container] | None = None
    init_containers: list[_Container] | None = None
    scheduling_gates: list[_Gate] | None = None
    affinity: dict[str, Any] | None = None


class _PodStatus(msgspec.Struct, gc=False):
    phase: str | None = None


_pod_spec = msgspec.json.Decoder(_PodSpec)
_pod_status = msgspec.json.Decoder(_PodStatus)
_Requested = tuple[tuple[tuple[str, str | int | float], ...], ...]


def _requested(containers: list[_Container] | None) -> _Requested:
    """The containers' requests, hashable (in their own order: a key of :func:`_request_of`'s cache)."""
    if not containers:
        return ()
    if len(containers) == 1:  # (most pods)
        resources = containers[0].resources
        return (tuple(resources.requests.items()) if resources is not None and resources.requests else (),)
    return tuple([tuple(c.resources.requests.items()) if c.resources is not None and c.resources.requests else ()
                  for c in containers])


@functools.lru_cache(maxsize=1024)
def _request_of(containers: _Requested, init_containers: _Requested) -> ResourceList:
    """:func:`_pod_request` of these containers' requests, once per distinct set: pods come from a few templates."""
    return _pod_request({"containers": [{"resources": {"requests": dict(c)}} for c in containers],
                         "initContainers": [{"resources": {"requests": dict(c)}} for c in init_containers]})


def parse_pod(obj: KubeObject) -> MemberPod:
    """A pod's view: its spec and status decoded into the few fields tether reads (about a third of the time of
    decoding them whole, on a path every pod version takes), or, when they do not have the expected types, read as
    dictionaries by :func:`_parse_pod_tolerant` — the same view either way."""
    try:
        spec, status = _pod_spec.decode(obj.spec), _pod_status.decode(obj.status)
        requested = (_requested(spec.containers), _requested(spec.init_containers))
    except msgspec.ValidationError:
        return _parse_pod_tolerant(obj)
    meta = obj.metadata
    error = ""
    try:
        request = dict(_request_of(*requested))  # (a copy: the cached one is shared)
    except (InvalidQuantity, AttributeError, TypeError) as exc:
        request, error = {}, f"spec.containers[*].resources.requests: {exc}"
    job = ""
    for owner in meta.owner_references:
        if owner.get("kind") == JOB:
            job = str(owner.get("name", ""))
            break
    return MemberPod(
        namespace=meta.namespace, name=meta.name, uid=meta.uid, resource_version=meta.resource_version,
        creation=meta.creation_timestamp, node_name=spec.node_name or "", phase=status.phase or "",
        request=request, job=job, error=error, gates=tuple(g.name for g in spec.scheduling_gates or ()),
        group=meta.annotations.get(POD_GROUP_ANNOTATION, ""), annotations=dict(meta.annotations),
        affinity=spec.affinity or {}, deleting=obj.deleting)


def _parse_pod_tolerant(obj: KubeObject) -> MemberPod:
    meta = obj.metadata
    spec, status = obj.spec_dict(), obj.status_dict()
    error = ""
    try:
        request = _pod_request(spec)
    except (InvalidQuantity, AttributeError, TypeError) as exc:
        request, error = {}, f"spec.containers[*].resources.requests: {exc}"
    job = next((str(o.get("name", "")) for o in meta.owner_references if o.get("kind") == JOB), "")
    affinity = spec.get("affinity")
    return MemberPod(
        namespace=meta.namespace, name=meta.name, uid=meta.uid, resource_version=meta.resource_version,
        creation=meta.creation_timestamp, node_name=str(spec.get("nodeName") or ""),
        phase=str(status.get("phase") or ""), request=request, job=job, error=error,
        gates=tuple(str(g.get("name", "")) for g in as_list(spec.get("schedulingGates")) if isinstance(g, dict)),
        group=meta.annotations.get(POD_GROUP_ANNOTATION, ""), annotations=dict(meta.annotations),
        affinity=affinity if isinstance(affinity, dict) else {}, deleting=obj.deleting)


def parse_node(obj: KubeObject) -> MemberNode:
    try:
        allocatable = resource_list(obj.status_dict().get("allocatable"))
    except (InvalidQuantity, AttributeError):
        allocatable = {}  # a node whose capacity cannot be read offers nothing to the planner
    return MemberNode(name=obj.metadata.name, labels=dict(obj.metadata.labels), allocatable=allocatable,
                      resource_version=obj.metadata.resource_version)


def _raw(obj: KubeObject) -> dict[str, Any]:
    return {"apiVersion": obj.api_version, "kind": obj.kind,
            "metadata": {"name": obj.metadata.name, "namespace": obj.metadata.namespace},
            "spec": object_dict(obj.spec), "status": object_dict(obj.status)}


def parse_group(obj: KubeObject) -> MemberGroup:
    meta = obj.metadata
    try:
        return MemberGroup(namespace=meta.namespace, name=meta.name, uid=meta.uid, spec=parse_pod_group(_raw(obj)))
    except InvalidPodGroup as exc:
        return MemberGroup(namespace=meta.namespace, name=meta.name, uid=meta.uid, error=str(exc))


def parse_member_operation(obj: KubeObject) -> MemberOperation:
    meta = obj.metadata
    status = obj.status_dict()
    conditions = parse_conditions(status.get("conditions"))
    base = MemberOperation(kind=obj.kind, namespace=meta.namespace, name=meta.name, uid=meta.uid,
                           api_version=obj.api_version,
                           condition=next((c for c in conditions if c.type == CONDITION_TYPE), None),
                           accepts_conditions=accepts_conditions(status))
    try:
        return msgspec.structs.replace(base, operation=parse_operation(_raw(obj)))
    except DataFlowSpecError as exc:
        return msgspec.structs.replace(base, error=str(exc))


__all__ = [
    "JOB", "MEMBER_KINDS", "NODE", "POD", "POD_GROUP", "MemberGroup", "MemberNode", "MemberOperation", "MemberPod",
    "parse_group", "parse_member_operation", "parse_node", "parse_pod",
]
