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
"""

from __future__ import annotations

from typing import Any, Protocol

from tether.core.admission.checks import annotation_text
from tether.core.commands import CreateQueue, ResumeBinding, SetAdmissionChecks, SetAdmissionHold, UpdateQueueStatus
from tether.core.keys import ADMISSION_ANNOTATION, ADMISSION_CHECKS_ANNOTATION, ADMITTED_REQUEST_ANNOTATION
from tether.core.kube import KubeObject, ObjectRef, trim

from .client import QUEUES, KubeClient, KubeError, Resource

ADMISSION_COMMANDS = (ResumeBinding, SetAdmissionHold, SetAdmissionChecks, UpdateQueueStatus, CreateQueue)


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
        admitted = "{" + ",".join(f'"{name}":"{amount}"' for name, amount in c.admitted_request) + "}"
        body: dict[str, Any] = {
            "metadata": {"resourceVersion": obj["metadata"]["resourceVersion"],
                         "annotations": {ADMISSION_ANNOTATION: None, ADMITTED_REQUEST_ANNOTATION: admitted}},
            "spec": {"suspension": {"scheduling": None}},
        }
        out = await self.kube.patch(res, c.binding.name, body, namespace=c.binding.namespace)
        return trim(out), False

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
