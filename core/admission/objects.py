"""What admission reads from Kubernetes objects: a workload's queue name and priority, Volcano Queues.

Plain dictionaries in (as the API returns them), admission's types out; the rules are Volcano Global's (queue name
labels and annotations, a Volcano Job's own fields) and Karmada's (``spec.schedulePriority``).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..envelope import parse_rfc3339_ms
from ..kube import dig
from ..quantity import resource_list
from .model import DEFAULT_QUEUE, QUEUE_NAME_KEY, SCHEDULING_QUEUE_NAME_KEY, Queue


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
        creation_ms=created, uid=str(meta.get("uid", "")),
    )


__all__ = ["binding_priority", "queue_from_object", "workload_queue_name"]
