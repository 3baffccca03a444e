"""Applying queue admission's commands (``core.admission.decider``): the same read-compare-write discipline as
every other executor (``executor.py``), mixed into :class:`~.executor.KubeExecutor` so that one ``apply_<command>``
exists per command and they share its retry loop and object cache.

* ``ResumeBinding`` — a JSON merge patch removing ``spec.suspension.scheduling`` (Karmada: absent means "not
  suspended"), recording the admitted request and dropping the hold annotation, guarded by the resourceVersion
  just read. A binding already unsuspended is a no-op, so a retried resume changes nothing and reports success:
  the world counted the binding as admitted when the command was issued, never again.
* ``SetAdmissionHold`` — the hold (or overrun) annotation, written only when it differs.
* ``SetAdmissionChecks`` — the binding's admission checks as the ``tether.dev/admission-checks`` annotation (JSON),
  written only when it differs; none removes it.
* ``UpdateQueueStatus`` — the Volcano Queue's status subresource: ``allocated``, ``pending``, ``running``,
  ``inqueue`` (fields of the Queue CRD), only the ones that differ.
* ``CreateQueue`` — creates ``default`` (weight 1, reclaimable) as Volcano Global does; an existing one is a no-op.
* ``EvictBinding`` — one merge patch guarded by the resourceVersion: ``spec.suspension.scheduling: true`` and
  ``spec.clusters`` cleared (Karmada's scheduler then leaves it unscheduled while suspended, and its binding
  controller withdraws the Works from the members), the hold annotation with the reason, ``tether.dev/evicted-for``,
  and the admitted request dropped (it is admitted again, if ever, with a new one). A binding already suspended
  with no clusters is a no-op.
* ``SuspendDispatching`` — ``spec.suspension.dispatching: true`` with the overrun annotation (the reason); only what
  differs.
* ``AdmitRequest`` — the admitted request recorded; the dispatching suspension lifted and the overrun annotation
  removed when tether had set them (the annotation is its mark); only what differs.
"""

from __future__ import annotations

from typing import Any, Protocol

from tether.core.admission.checks import annotation_text
from tether.core.commands import (
    AdmitRequest,
    CreateQueue,
    EvictBinding,
    ResumeBinding,
    SetAdmissionChecks,
    SetAdmissionHold,
    SuspendDispatching,
    UpdateQueueStatus,
)
from tether.core.keys import (
    ADMISSION_ANNOTATION,
    ADMISSION_CHECKS_ANNOTATION,
    ADMITTED_REQUEST_ANNOTATION,
    EVICTED_FOR_ANNOTATION,
    OVERRUN_ANNOTATION,
)
from tether.core.kube import KubeObject, ObjectRef, trim

from .client import QUEUES, KubeClient, KubeError, Resource

ADMISSION_COMMANDS = (ResumeBinding, SetAdmissionHold, SetAdmissionChecks, UpdateQueueStatus, CreateQueue,
                      EvictBinding, SuspendDispatching, AdmitRequest)


def _request_text(request: tuple[tuple[str, str], ...]) -> str:
    """A request as ``tether.dev/admitted-request`` records it: compact JSON, in the command's order."""
    return "{" + ",".join(f'"{name}":"{amount}"' for name, amount in request) + "}"


class _Reader(Protocol):
    async def __call__(self, ref: ObjectRef, attempt: Any) -> tuple[Resource, dict[str, Any] | None]: ...


class AdmissionCommands:
    """The admission commands' ``apply_*`` methods (see the module doc); needs ``kube`` and ``_read``."""

    kube: KubeClient
    _read: _Reader

    async def apply_resume_binding(self, c: ResumeBinding, attempt: Any) -> tuple[KubeObject | None, bool]:
        res, obj = await self._read(c.binding, attempt)
        if obj is None:
            return None, True  # gone: nothing to admit (the projection forgets it)
        spec = obj.get("spec") or {}
        if (spec.get("suspension") or {}).get("scheduling") is not True:
            return trim(obj), True
        annotations: dict[str, Any] = {ADMISSION_ANNOTATION: None,
                                       ADMITTED_REQUEST_ANNOTATION: _request_text(c.admitted_request)}
        if EVICTED_FOR_ANNOTATION in (obj["metadata"].get("annotations") or {}):
            annotations[EVICTED_FOR_ANNOTATION] = None  # admitted again: no longer waiting for anyone
        body: dict[str, Any] = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"], "annotations": annotations},
            "spec": {"suspension": {"scheduling": None}},
        }
        out = await self.kube.patch(res, c.binding.name, body, namespace=c.binding.namespace)
        return trim(out), False

    async def apply_evict_binding(self, c: EvictBinding, attempt: Any) -> tuple[KubeObject | None, bool]:
        res, obj = await self._read(c.binding, attempt)
        if obj is None:
            return None, True  # gone: nothing to evict
        spec = obj.get("spec") or {}
        evicted = (spec.get("suspension") or {}).get("scheduling") is True and not spec.get("clusters")
        # (suspended already — by a webhook, or an earlier try of this very eviction —: the annotations only)
        return await self._patch_binding(res, c.binding, obj, annotations={
            ADMISSION_ANNOTATION: c.reason, EVICTED_FOR_ANNOTATION: c.for_binding, ADMITTED_REQUEST_ANNOTATION: None},
            spec=None if evicted else {"suspension": {"scheduling": True}, "clusters": None})

    async def apply_suspend_dispatching(self, c: SuspendDispatching,
                                        attempt: Any) -> tuple[KubeObject | None, bool]:
        res, obj = await self._read(c.binding, attempt)
        if obj is None:
            return None, True
        suspended = ((obj.get("spec") or {}).get("suspension") or {}).get("dispatching") is True
        return await self._patch_binding(res, c.binding, obj, annotations={OVERRUN_ANNOTATION: c.reason},
                                         spec=None if suspended else {"suspension": {"dispatching": True}})

    async def apply_admit_request(self, c: AdmitRequest, attempt: Any) -> tuple[KubeObject | None, bool]:
        res, obj = await self._read(c.binding, attempt)
        if obj is None:
            return None, True
        ours = OVERRUN_ANNOTATION in (obj["metadata"].get("annotations") or {})  # (tether's suspension: its mark)
        suspended = ((obj.get("spec") or {}).get("suspension") or {}).get("dispatching") is True
        return await self._patch_binding(res, c.binding, obj, annotations={
            ADMITTED_REQUEST_ANNOTATION: _request_text(c.admitted_request), OVERRUN_ANNOTATION: None},
            spec={"suspension": {"dispatching": None}} if ours and suspended else None)

    async def _patch_binding(self, res: Resource, ref: ObjectRef, obj: dict[str, Any], *,
                             annotations: dict[str, str | None],
                             spec: dict[str, Any] | None) -> tuple[KubeObject | None, bool]:
        """One merge patch of the binding, guarded by the resourceVersion read: the ``annotations`` that differ
        (None: removed) and ``spec``; a no-op when there is nothing to write."""
        current = obj["metadata"].get("annotations") or {}
        changed = {key: value for key, value in annotations.items() if current.get(key) != value}
        if not changed and not spec:
            return trim(obj), True
        body: dict[str, Any] = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}}
        if changed:
            body["metadata"]["annotations"] = changed
        if spec:
            body["spec"] = spec
        return trim(await self.kube.patch(res, ref.name, body, namespace=ref.namespace)), False

    async def apply_set_admission_hold(self, c: SetAdmissionHold, attempt: Any) -> tuple[KubeObject | None, bool]:
        res, obj = await self._read(c.binding, attempt)
        if obj is None:
            return None, True
        annotations = obj["metadata"].get("annotations") or {}
        wanted = c.text or None
        if annotations.get(c.annotation) == wanted:
            return trim(obj), True
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"],
                             "annotations": {c.annotation: wanted}}}
        return trim(await self.kube.patch(res, c.binding.name, body, namespace=c.binding.namespace)), False

    async def apply_set_admission_checks(self, c: SetAdmissionChecks, attempt: Any) -> tuple[KubeObject | None, bool]:
        return await self.apply_set_admission_hold(
            SetAdmissionHold(binding=c.binding, annotation=ADMISSION_CHECKS_ANNOTATION, text=annotation_text(c.checks)),
            attempt)

    async def apply_update_queue_status(self, c: UpdateQueueStatus, attempt: Any) -> tuple[KubeObject | None, bool]:
        obj = await self.kube.get(QUEUES, c.queue.name)
        if obj is None:
            return None, True
        current = obj.get("status") or {}
        wanted: dict[str, Any] = {"allocated": dict(c.allocated), "pending": c.pending, "running": c.running,
                                  "inqueue": c.inqueue}
        patch = {k: v for k, v in wanted.items() if current.get(k) != v}
        if not patch:
            return trim(obj), True
        if "allocated" in patch:  # a merge patch merges maps: a resource no longer allocated is removed by null
            patch["allocated"] = {**{k: None for k in current.get("allocated") or {}}, **wanted["allocated"]}
        body = {"metadata": {"resourceVersion": obj["metadata"]["resourceVersion"]}, "status": patch}
        return trim(await self.kube.patch(QUEUES, c.queue.name, body, subresource="status")), False

    async def apply_create_queue(self, c: CreateQueue, attempt: Any) -> tuple[KubeObject | None, bool]:
        queue = {"apiVersion": QUEUES.api_version, "kind": "Queue", "metadata": {"name": c.name},
                 "spec": {"weight": c.weight, "reclaimable": True}}
        try:
            return trim(await self.kube.create(QUEUES, queue)), False
        except KubeError as exc:
            if exc.status != 409:
                raise
        return None, True  # already there: the watch has it
