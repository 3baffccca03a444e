"""What tether keeps of the member clusters: Nodes, Pods, Godel PodGroups, Fluid operations and their Jobs.

Pods, Nodes, PodGroups and Fluid's data operations live in the member clusters, not in Karmada's API server. The
world holds them in one :class:`MemberState` per cluster (``World.members``), never in the control plane's maps: a
pod ``default/p`` in two members is two objects, and the keys the decider and the log use are
``<cluster>:Kind/ns/name`` (``core.events.member_key``). The fold fills it (``projections.member_fold``, which
says what each field is for); pod placement (``core.placement``) reads it.

Every version of every pod is parsed into its view, so a pod's spec and status are decoded into the few fields
tether reads (:func:`parse_pod`); what does not have the expected types is read whole as dictionaries by
:func:`_parse_pod_tolerant`, which gives the same view (a property test checks it on bent pods). A pod's request is
computed once per distinct set of container requests (pods come from a few templates). A PodGroup's spec and a
Fluid operation are parsed by pod placement's own readers (``core.placement.pod_group_spec``,
``core.placement.dataflow``) into the types the world keeps (:mod:`.pod_group`, :mod:`.data_operation`).
"""

from __future__ import annotations

import functools
from typing import Any

import msgspec

from ..keys import POD_GROUP_ANNOTATION
from ..kube import Condition, KubeObject, NodeSelectorTerm, as_list
from ..quantity import InvalidQuantity, ResourceList, add, resource_list
from .data_operation import OPERATION_KINDS, DataOperation, RecordedPlacement
from .pod_group import GroupSpec

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


class MemberState(msgspec.Struct):
    """One member cluster: its objects by ``Kind/ns/name`` key (nodes by name) and its indexes."""

    nodes: dict[str, MemberNode] = {}
    pods: dict[str, MemberPod] = {}
    groups: dict[str, MemberGroup] = {}
    operations: dict[str, MemberOperation] = {}
    job_owner: dict[str, str] = {}  # Job key → operation key
    pods_by_group: dict[str, set[str]] = {}  # PodGroup key → pod keys
    pods_by_job: dict[str, set[str]] = {}  # Job key → pod keys
    successors: dict[str, set[str]] = {}  # operation key → keys of the operations inheriting from it
    recorded: dict[str, RecordedPlacement] = {}  # operation key → where its succeeded pod ran
    recorded_from: dict[str, tuple[str, str]] = {}  # operation key → (creation, pod name) of the pod recorded
    lists_pending: set[str] = set()
    jobs: set[str] = set()  # every Job key known, owned by an operation or not (a pod's Job is known or not yet)
    reported: dict[str, str] = {}  # PodGroup key → reason of the last Event tether issued on it (transitions only)
    # pod key → (command id, required terms) of tether's ReleasePod in flight (the pod still gated here)
    releasing: dict[str, tuple[str, tuple[NodeSelectorTerm, ...]]] = {}
    outcomes: dict[str, Condition] = {}  # operation key → the outcome tether reported on it (its last Event's)
    position: str = ""  # ``partition:offset`` of the last event about this member folded (what the webhook records)


class Members(msgspec.Struct):
    clusters: dict[str, MemberState] = {}

    def state(self, cluster: str) -> MemberState:
        held = self.clusters.get(cluster)
        if held is None:
            held = self.clusters[cluster] = MemberState()
        return held


__all__ = [
    "JOB", "MEMBER_KINDS", "NODE", "POD", "POD_GROUP", "MemberGroup", "MemberNode", "MemberOperation", "MemberPod",
    "MemberState", "Members", "parse_node", "parse_pod",
]
