"""The pod webhook's decision: does a pod being created in a member cluster get tether's scheduling gate?

A pod is placed by tether (``core.placement.decider``) only if it is created gated: Kubernetes lets a scheduling gate be
removed after creation, never added. So the member's MutatingWebhookConfiguration sends pod CREATEs to tether,
and this function decides, from the member as the world holds it — in memory, no call out, on the API server's
write path — whether to add :data:`~tether.core.keys.PLACEMENT_GATE`:

* a pod naming a Godel PodGroup (annotation ``godel.bytedance.com/pod-group-name``) is gated, whether or not the
  PodGroup is known yet: the decider waits for it (and releases the pods, with an Event, if it never comes);
* a pod of a Fluid data operation — through the Job that owns it, as ``projections.member_fold`` links them — is
  gated when the operation has a ``runAfter`` affinity strategy (one that inherits a placement: Require/Prefer,
  or a policy tether does not know, which the decider reports); an operation without one places nothing;
* a pod whose Job tether has **not seen yet** is gated *in doubt* when an operation of its namespace with a runAfter
  affinity strategy is still running and has no Job known: the Job controller creates pods right after the Job,
  and tether's watch may not have delivered that Job yet. Gating in doubt costs an unrelated pod one round trip
  (the decider releases it unchanged as soon as its Job is known to be no operation's); not gating would let an
  inheriting operation's pods schedule without their placement, silently;
* everything else is admitted unchanged: no PodGroup, no Job, a Job that is no inheriting operation's, a pod
  created bound (``spec.nodeName``: a bound pod cannot be gated), a pod already gated (a reinvocation), and any
  operation other than CREATE (gates cannot be added later).

The patch adds the gate and the annotation :data:`~tether.core.keys.ADMISSION_ANNOTATION` (the AdmissionReview's uid): a
CREATE rarely has a name yet (``generateName``), so the annotation is how ``tether replay --explain`` finds, from the
pod, the :class:`~tether.core.events.PodGateDecided` this decision is recorded as.

Malformed input never raises: a request that is not shaped like a pod is admitted unchanged with a reason saying
what was wrong (the API server validates the pod; tether has nothing to place).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..keys import ADMISSION_ANNOTATION, PLACEMENT_GATE, POD_GROUP_ANNOTATION
from ..kube import pointer_token
from ..world.member_state import JOB, MemberState
from .dataflow import PHASE_COMPLETE, PHASE_FAILED, inheritance_source


class PodGate(msgspec.Struct, frozen=True):
    """The answer: ``gated`` with the JSON Patch that gates, or admitted unchanged; ``reason`` in plain words."""

    gated: bool
    reason: str
    patch: tuple[dict[str, Any], ...] = ()


def _gate_patch(pod: Mapping[str, Any], request_uid: str) -> tuple[dict[str, Any], ...]:
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    ops: list[dict[str, Any]] = []
    if isinstance(spec.get("schedulingGates"), list) and spec["schedulingGates"]:
        ops.append({"op": "add", "path": "/spec/schedulingGates/-", "value": {"name": PLACEMENT_GATE}})
    else:
        ops.append({"op": "add", "path": "/spec/schedulingGates", "value": [{"name": PLACEMENT_GATE}]})
    if isinstance(meta.get("annotations"), dict) and meta["annotations"]:
        ops.append({"op": "add", "path": f"/metadata/annotations/{pointer_token(ADMISSION_ANNOTATION)}",
                    "value": request_uid})
    else:
        ops.append({"op": "add", "path": "/metadata/annotations", "value": {ADMISSION_ANNOTATION: request_uid}})
    return tuple(ops)


def _job_of(meta: Mapping[str, Any]) -> str:
    owners = meta.get("ownerReferences")
    for owner in owners if isinstance(owners, list) else ():
        if isinstance(owner, dict) and owner.get("kind") == JOB and owner.get("name"):
            return str(owner["name"])
    return ""


def _inherits(state: MemberState, op_key: str) -> tuple[bool, str]:
    held = state.operations.get(op_key)
    if held is None or held.operation is None:
        return False, (f"{op_key} is not known" if held is None else f"{op_key} does not parse ({held.error})")
    source = inheritance_source(held.operation)
    if source is None:
        return False, f"{op_key} has no runAfter affinity strategy"
    assert held.operation.run_after is not None
    return True, (f"{op_key} runs after {source.key} with the {held.operation.run_after.strategy.policy} "
                  "affinity strategy")


def _waiting_for_a_job(state: MemberState, namespace: str) -> list[str]:
    """The running operations of ``namespace`` that inherit a placement and have no Job known yet."""
    owned = set(state.job_owner.values())
    out = []
    for key, held in sorted(state.operations.items()):
        op = held.operation
        if (op is None or op.ref.namespace != namespace or key in owned or inheritance_source(op) is None
                or op.phase in (PHASE_COMPLETE, PHASE_FAILED)):
            continue
        out.append(key)
    return out


def decide_pod_gate(*, state: MemberState, operation: str, namespace: str, pod: Mapping[str, Any] | None,
                    request_uid: str) -> PodGate:
    """Whether the pod of an admission request in a member gets tether's gate (module doc). ``state`` is the
    member as the world holds it; ``namespace`` the request's (a CREATE's body may omit it)."""
    if operation != "CREATE":
        return PodGate(gated=False, reason=f"{operation or 'an unnamed operation'}: a scheduling gate can only be "
                                           "added when a pod is created")
    if not isinstance(pod, Mapping) or not isinstance(pod.get("metadata") or {}, Mapping) or not isinstance(
            pod.get("spec") or {}, Mapping):
        return PodGate(gated=False, reason="the request's object is not shaped like a pod; admitted unchanged")
    meta, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    gates = spec.get("schedulingGates")
    if isinstance(gates, list) and any(isinstance(g, dict) and g.get("name") == PLACEMENT_GATE for g in gates):
        return PodGate(gated=False, reason=f"already carries the gate {PLACEMENT_GATE}")
    if spec.get("nodeName"):
        return PodGate(gated=False, reason=f"created bound to {spec['nodeName']}: a bound pod cannot be gated")
    annotations = meta.get("annotations")
    group = annotations.get(POD_GROUP_ANNOTATION) if isinstance(annotations, Mapping) else None
    if group:
        known = "" if f"PodGroup/{namespace}/{group}" in state.groups else " (not known yet: the decider waits for it)"
        return PodGate(gated=True, reason=f"member of PodGroup {namespace}/{group}{known}",
                       patch=_gate_patch(pod, request_uid))
    job = _job_of(meta)
    if not job:
        return PodGate(gated=False, reason="names no PodGroup and is owned by no Job: nothing for tether to place")
    job_key = f"{JOB}/{namespace}/{job}"
    op_key = state.job_owner.get(job_key)
    if op_key is not None:
        inherits, why = _inherits(state, op_key)
        return PodGate(gated=inherits, reason=f"Job {job} of {why}", patch=_gate_patch(pod, request_uid)
                       if inherits else ())
    if job_key in state.jobs:
        return PodGate(gated=False, reason=f"Job {job} belongs to no Fluid operation")
    waiting = _waiting_for_a_job(state, namespace)
    if waiting:
        return PodGate(gated=True, reason=f"in doubt: Job {job} is not known yet while {', '.join(waiting)} "
                                          "waits for its Job (released unchanged if the Job is nobody's)",
                       patch=_gate_patch(pod, request_uid))
    return PodGate(gated=False, reason=f"Job {job} is not known, and no operation in {namespace} that inherits a "
                                       "placement waits for a Job")


__all__ = ["PodGate", "decide_pod_gate"]
