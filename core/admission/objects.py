"""What admission reads from Kubernetes objects: a workload's queue name and priority, Volcano Queues, a Karmada
Cluster's capacity.

Plain dictionaries in (as the API returns them), admission's types out; the rules are Volcano Global's (queue name
labels and annotations, a Volcano Job's own fields) and Karmada's (``spec.schedulePriority``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..envelope import parse_rfc3339_ms
from ..keys import QUEUE_NAME_KEY, SCHEDULING_QUEUE_NAME_KEY
from ..kube import as_mapping, dig
from ..quantity import InvalidQuantity, ResourceList, add, resource_list, scale
from ..world.admission_state import AdmissionBinding, AdmissionState, ObservedCluster, Queue
from .model import DEFAULT_QUEUE, ClusterCapacity


def _is_volcano_job(workload: Mapping[str, Any]) -> bool:
    return workload.get("kind") == "Job" and str(workload.get("apiVersion", "")).startswith("batch.volcano.sh/")


def workload_queue_name(workload: Mapping[str, Any]) -> str:
    """The queue of a workload, as Volcano Global resolves it: a Volcano Job's ``spec.queue``; otherwise the pod
    template's label or annotation ``volcano.sh/queue-name``, then the annotation
    ``scheduling.volcano.sh/queue-name`` (pod template, then the workload's own); else ``default``."""
    if _is_volcano_job(workload):
        queue = dig(workload, "spec", "queue")
        return queue if isinstance(queue, str) and queue else DEFAULT_QUEUE
    candidates = (
        dig(workload, "spec", "template", "metadata", "labels", QUEUE_NAME_KEY),
        dig(workload, "spec", "template", "metadata", "annotations", QUEUE_NAME_KEY),
        dig(workload, "spec", "template", "metadata", "annotations", SCHEDULING_QUEUE_NAME_KEY),
        dig(workload, "metadata", "annotations", SCHEDULING_QUEUE_NAME_KEY),
    )
    return next((c for c in candidates if isinstance(c, str) and c), DEFAULT_QUEUE)


def binding_priority(*, binding_spec: Mapping[str, Any] | None, workload: Mapping[str, Any],
                     priority_classes: Mapping[str, int], default_priority: int = 0) -> int:
    """A binding's priority: Karmada's ``spec.schedulePriority.priority`` when set, else the value of the
    workload's PriorityClass (a Volcano Job's ``spec.priorityClassName``, otherwise the pod template's), else
    ``default_priority`` (the cluster's globalDefault PriorityClass value, or 0)."""
    explicit = dig(binding_spec or {}, "schedulePriority", "priority")
    if isinstance(explicit, int) and not isinstance(explicit, bool):
        return explicit
    path = ("spec", "priorityClassName") if _is_volcano_job(workload) else \
        ("spec", "template", "spec", "priorityClassName")
    name = dig(workload, *path)
    if isinstance(name, str) and name in priority_classes:
        return priority_classes[name]
    return default_priority


def queue_from_object(obj: Mapping[str, Any]) -> Queue:
    """A Volcano Queue object (as the API returns it) as a :class:`Queue`; raises ``InvalidQuantity`` for a
    malformed amount."""
    spec = obj.get("spec") or {}
    meta = obj.get("metadata") or {}
    created = parse_rfc3339_ms(str(meta.get("creationTimestamp") or "")) or 0
    weight = spec.get("weight")
    priority = spec.get("priority")
    return Queue(
        name=str(meta.get("name", "")), parent=str(spec.get("parent") or ""),
        priority=priority if isinstance(priority, int) else 0,
        weight=weight if isinstance(weight, int) and weight > 0 else 1,
        capability=resource_list(spec.get("capability")), deserved=resource_list(spec.get("deserved")),
        guarantee=resource_list(dig(spec, "guarantee", "resource")),
        open=dig(obj, "status", "state") in (None, "", "Open"),
        creation_ms=created, uid=str(meta.get("uid", "")), reclaimable=spec.get("reclaimable") is not False,
    )


def binding_request(binding: AdmissionBinding) -> tuple[ResourceList, ResourceList | None]:
    """What one copy of a binding asks: ``(request, whole)``. For a single pod template (the legacy
    ``replicaRequirements``) ``request`` is one replica's and ``whole`` None (the whole is request x replicas); for
    several (Karmada's ``spec.components``) ``whole`` is every component's replicas x request summed, and
    ``request`` one replica of each component — the least that runs the workload at all."""
    if not binding.components:
        return binding.request, None
    request: dict[str, int] = {}
    whole: dict[str, int] = {}
    for component in binding.components:
        for name, amount in component.request.items():
            request[name] = request.get(name, 0) + amount
            whole[name] = whole.get(name, 0) + amount * component.replicas
    return dict(sorted(request.items())), dict(sorted(whole.items()))


def per_copy_request(binding: AdmissionBinding) -> ResourceList:
    """The whole request of one copy of the binding (a Divided placement has one copy; Duplicated one per cluster)."""
    request, whole = binding_request(binding)
    return whole if whole is not None else scale(request, binding.replicas)


def binding_copies(state: AdmissionState, binding: AdmissionBinding, capacities: Mapping[str, ClusterCapacity]) -> int:
    """How many copies of a binding run: 1 for Divided; for Duplicated the clusters it runs on, or may run on
    (ready, not excluded, in its clusterNames when it has some) — every one of them runs all replicas."""
    if binding.divided:
        return 1
    if binding.target_clusters:
        return len(binding.target_clusters)
    names = binding.affinity_names or tuple(sorted(state.clusters))
    excluded = set(binding.affinity_exclude)
    return max(1, sum(1 for n in names if n not in excluded and (c := capacities.get(n)) is not None and c.ready))


def queue_charges(state: AdmissionState) -> dict[str, ResourceList]:
    """What each queue is charged now, as the next cycle will charge it: the whole request of every queue-managed
    binding admitted (or being admitted) and not evicted — its components' sum for several pod templates, x its
    copies — by queue name (``tether status``; the Queue's own ``status.allocated`` is what the last cycle wrote)."""
    capacities = cluster_capacities(state)
    out: dict[str, dict[str, int]] = {}
    for key, binding in sorted(state.bindings.items()):
        if not state.managed.manages(binding.workload_kind, binding.ref.namespace) or key in state.evicting or (
                binding.suspended and key not in state.admitted):
            continue
        workload = state.workloads.get(binding.workload)
        charged = out.setdefault(workload.queue if workload is not None else DEFAULT_QUEUE, {})
        for name, amount in scale(per_copy_request(binding), binding_copies(state, binding, capacities)).items():
            charged[name] = charged.get(name, 0) + amount
    return {queue: dict(sorted(charged.items())) for queue, charged in sorted(out.items())}


def cluster_capacity(cluster: ObservedCluster) -> ClusterCapacity:
    """A Karmada Cluster's readiness and resourceSummary (allocatable; allocated + allocating) in milli-units."""
    try:
        status = as_mapping(msgspec.json.decode(cluster.status)) if cluster.status else {}
    except msgspec.DecodeError:  # (a status the API stored is JSON; a damaged log is not a reason to crash)
        status = {}
    summary = as_mapping(status.get("resourceSummary"))
    ready = any(isinstance(c, dict) and c.get("type") == "Ready" and c.get("status") == "True"
                for c in status.get("conditions") or ())
    try:
        allocatable = resource_list(summary.get("allocatable"))
        allocated = add(resource_list(summary.get("allocated")), resource_list(summary.get("allocating")))
    except InvalidQuantity:  # a cluster whose summary cannot be read offers nothing (never a crash)
        allocatable, allocated = {}, {}
    return ClusterCapacity(name=cluster.name, allocatable=allocatable, allocated=allocated, ready=ready)


def cluster_capacities(state: AdmissionState) -> dict[str, ClusterCapacity]:
    """Every observed Cluster's capacity, by name. Parsed here, when an admission cycle needs it: a Cluster's
    status is rewritten on every heartbeat, and parsing each version in the fold cost a replay a third of its time
    in logs that never use admission."""
    return {name: cluster_capacity(cluster) for name, cluster in sorted(state.clusters.items())}


__all__ = ["binding_copies", "binding_priority", "binding_request", "cluster_capacities", "cluster_capacity",
           "per_copy_request", "queue_charges", "queue_from_object", "workload_queue_name"]
