"""``pods/binding`` semantics and a minimal kube-scheduler stand-in (off by default).

``bind_pod`` is what the binding subresource does: refuse a pod that is already bound or still gated (409, the
real message), set ``spec.nodeName`` and a ``PodScheduled=True`` condition in one write.

:class:`Binder` assigns ungated, unbound pods whose ``schedulerName`` is ``default-scheduler`` to a node that is
Ready, schedulable, matches ``nodeSelector`` and the required node affinity (``In``, ``NotIn``, ``Exists``,
``DoesNotExist``, ``Gt``, ``Lt``) and has room for the pod's requests (allocatable minus the requests of the pods
bound to it, in every resource the node declares); among those it takes the node with the highest sum of matching
preferred node-affinity weights, then the fewest bound pods, then the name — kube-scheduler's NodeAffinity filter
and score and NodeResourcesFit filter, without normalisation, taints or preemption: enough to watch tether's gated
pods go from gated to running where their affinity says. It reacts to store events
(pods and nodes), so there is no polling; pods that fit nowhere get ``PodScheduled=False/Unschedulable`` and are
retried whenever a node changes. A gated pod gets ``PodScheduled=False/SchedulingGated``, once, as kube-scheduler
writes it.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Any

from tether.core.quantity import InvalidQuantity, resource_list

from . import errors
from .scheduling_gates import is_gated
from .store import Store, now_rfc3339
from .watch import Event

PODS = ("", "pods")
NODES = ("", "nodes")


async def bind_pod(store: Store, *, namespace: str, name: str, node: str) -> dict[str, Any]:
    rt = store.type_for(*PODS)

    def apply(pod: dict[str, Any]) -> dict[str, Any]:
        spec = pod.setdefault("spec", {})
        if spec.get("nodeName"):
            raise errors.conflict(resource="pods/binding", group="", name=name,
                                  why=f'pod {name} is already assigned to node "{spec["nodeName"]}"')
        if is_gated(pod):
            raise errors.conflict(resource="pods/binding", group="", name=name,
                                  why=f"pod {name} has non-empty .spec.schedulingGates")
        spec["nodeName"] = node
        status = pod.setdefault("status", {})
        conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
        conds.append({"type": "PodScheduled", "status": "True", "lastProbeTime": None,
                      "lastTransitionTime": now_rfc3339()})
        status["conditions"] = conds
        return pod

    return await store.patch(rt, name, apply, namespace=namespace, subresource="binding")


def _expr_ok(labels: dict[str, str], expr: dict[str, Any]) -> bool:
    key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
    if op == "In":
        return labels.get(key) in values
    if op == "NotIn":
        return labels.get(key) not in values
    if op == "Exists":
        return key in labels
    if op == "DoesNotExist":
        return key not in labels
    if op in ("Gt", "Lt") and key in labels and values:
        try:
            a, b = int(labels[key]), int(values[0])
        except ValueError:
            return False
        return a > b if op == "Gt" else a < b
    return False


def node_fits(pod: dict[str, Any], node: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    labels = (node.get("metadata") or {}).get("labels") or {}
    if (node.get("spec") or {}).get("unschedulable"):
        return False
    conds = {c.get("type"): c.get("status") for c in (node.get("status") or {}).get("conditions") or []}
    if conds.get("Ready", "True") != "True":
        return False
    for k, v in (spec.get("nodeSelector") or {}).items():
        if labels.get(k) != v:
            return False
    req = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if req:
        name = node["metadata"]["name"]
        terms = req.get("nodeSelectorTerms") or []

        def term_ok(t: dict[str, Any]) -> bool:
            if not all(_expr_ok(labels, e) for e in t.get("matchExpressions") or []):
                return False
            return all(_expr_ok({"metadata.name": name}, e) for e in t.get("matchFields") or [])

        if not any(term_ok(t) for t in terms):
            return False
    return True


def _requests(pod: dict[str, Any]) -> dict[str, int]:
    total: dict[str, int] = {}
    for container in (pod.get("spec") or {}).get("containers") or []:
        try:
            amounts = resource_list(((container or {}).get("resources") or {}).get("requests"))
        except InvalidQuantity:
            continue
        for name, amount in amounts.items():
            total[name] = total.get(name, 0) + amount
    return total


def _allocatable(node: dict[str, Any]) -> dict[str, int]:
    try:
        return resource_list((node.get("status") or {}).get("allocatable"))
    except InvalidQuantity:
        return {}


def preferred_score(pod: dict[str, Any], node: dict[str, Any]) -> int:
    """The sum of the weights of the pod's preferred node-affinity terms the node matches."""
    preferred = (((pod.get("spec") or {}).get("affinity") or {}).get("nodeAffinity") or {}).get(
        "preferredDuringSchedulingIgnoredDuringExecution") or []
    labels = (node.get("metadata") or {}).get("labels") or {}
    name = node["metadata"]["name"]
    score = 0
    for term in preferred:
        pref = (term or {}).get("preference") or {}
        exprs, fields = pref.get("matchExpressions") or [], pref.get("matchFields") or []
        if (exprs or fields) and all(_expr_ok(labels, e) for e in exprs) and all(
                _expr_ok({"metadata.name": name}, e) for e in fields):
            score += int(term.get("weight") or 0)
    return score


def _marked_gated(pod: dict[str, Any]) -> bool:
    return any(c.get("type") == "PodScheduled" and c.get("reason") == "SchedulingGated"
               for c in (pod.get("status") or {}).get("conditions") or [])


def has_room(pod: dict[str, Any], node: dict[str, Any], used: dict[str, int]) -> bool:
    allocatable = _allocatable(node)
    return all(used.get(name, 0) + amount <= allocatable[name]
               for name, amount in _requests(pod).items() if name in allocatable)


class Binder:
    def __init__(self, store: Store) -> None:
        self.store = store
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self.store.listeners.append(self._on_event)
        self._task = asyncio.create_task(self._run(), name="kube-emulator-binder")
        self._wake.set()

    async def stop(self) -> None:
        if self._on_event in self.store.listeners:
            self.store.listeners.remove(self._on_event)
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task

    def _on_event(self, ev: Event) -> None:
        if ev.key in (PODS, NODES):
            self._wake.set()

    async def _run(self) -> None:
        while True:
            await self._wake.wait()
            self._wake.clear()
            await self._schedule_pending()

    async def _schedule_pending(self) -> None:
        nodes = sorted(self.store.iter_objects(NODES), key=lambda n: n["metadata"]["name"])
        load: dict[str, int] = {}
        used: dict[str, dict[str, int]] = {}
        pending, gated = [], []
        for pod in self.store.iter_objects(PODS):
            spec = pod.get("spec") or {}
            if spec.get("nodeName"):
                load[spec["nodeName"]] = load.get(spec["nodeName"], 0) + 1
                if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    held = used.setdefault(spec["nodeName"], {})
                    for name, amount in _requests(pod).items():
                        held[name] = held.get(name, 0) + amount
            elif (not pod["metadata"].get("deletionTimestamp")
                  and spec.get("schedulerName", "default-scheduler") == "default-scheduler"):
                if not is_gated(pod):
                    pending.append(pod)
                elif not _marked_gated(pod):
                    gated.append(pod)
        for pod in gated:
            with contextlib.suppress(errors.ApiError):  # (changed or deleted meanwhile: the next event retries)
                await self._mark_gated(pod)
        pending.sort(key=lambda p: (p["metadata"].get("namespace", ""), p["metadata"]["name"]))
        for pod in pending:
            meta = pod["metadata"]
            fits = [n for n in nodes if node_fits(pod, n) and has_room(pod, n, used.get(n["metadata"]["name"], {}))]
            try:
                if fits:
                    best = min(fits, key=lambda n: (-preferred_score(pod, n), load.get(n["metadata"]["name"], 0),
                                                    n["metadata"]["name"]))
                    node_name = best["metadata"]["name"]
                    await bind_pod(self.store, namespace=meta["namespace"], name=meta["name"], node=node_name)
                    load[node_name] = load.get(node_name, 0) + 1
                    held = used.setdefault(node_name, {})
                    for name, amount in _requests(pod).items():
                        held[name] = held.get(name, 0) + amount
                else:
                    await self._unschedulable(pod, len(nodes))
            except errors.ApiError:
                continue  # changed or deleted meanwhile; the next event retries

    async def _mark_gated(self, pod: dict[str, Any]) -> None:
        """What kube-scheduler writes of a pod it holds at its scheduling gates (its SchedulingGates plugin), once:
        ``PodScheduled=False/SchedulingGated``, without transition time (``kubectl get pods`` prints it as the pod's
        STATUS)."""
        meta = pod["metadata"]

        def apply(p: dict[str, Any]) -> dict[str, Any]:
            if not is_gated(p) or _marked_gated(p) or (p.get("spec") or {}).get("nodeName"):
                return p
            status = p.setdefault("status", {})
            status["conditions"] = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"] + [
                {"type": "PodScheduled", "status": "False", "lastProbeTime": None, "lastTransitionTime": None,
                 "reason": "SchedulingGated", "message": "Scheduling is blocked due to non-empty scheduling gates"}]
            return p

        await self.store.patch(self.store.type_for(*PODS), meta["name"], apply, namespace=meta["namespace"],
                               subresource="status")

    async def _unschedulable(self, pod: dict[str, Any], total: int) -> None:
        meta = pod["metadata"]
        msg = f"0/{total} nodes are available: {total} node(s) didn't match Pod's node affinity/selector."

        def apply(p: dict[str, Any]) -> dict[str, Any]:
            status = p.setdefault("status", {})
            conds = [c for c in status.get("conditions") or [] if c.get("type") != "PodScheduled"]
            old = next((c for c in status.get("conditions") or [] if c.get("type") == "PodScheduled"), None)
            if old and old.get("reason") == "Unschedulable" and old.get("message") == msg:
                return p
            conds.append({"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": msg,
                          "lastProbeTime": None, "lastTransitionTime": now_rfc3339()})
            status["conditions"] = conds
            return p

        await self.store.patch(self.store.type_for(*PODS), meta["name"], apply, namespace=meta["namespace"],
                               subresource="status")
