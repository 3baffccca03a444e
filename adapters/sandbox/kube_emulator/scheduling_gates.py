"""Pod update rules around ``spec.schedulingGates`` (Kubernetes 1.27+ semantics).

* Gates can only be set at creation; an update may remove gates but never add one.
* A pod created with gates may not carry ``spec.nodeName``.
* While a pod is gated its scheduling directives may be *tightened*: ``nodeSelector`` only gains keys (existing
  ones keep their values); required node affinity may be added if there was none, otherwise each existing term may
  only gain match expressions (its old expressions stay, in order); preferred terms change freely.
* Everything else in a pod's spec is immutable except container images, ``activeDeadlineSeconds``,
  ``terminationGracePeriodSeconds`` and added tolerations; that includes ``nodeName`` (set through
  ``pods/binding``) and affinity once ungated. The messages mirror the apiserver's.
"""

from __future__ import annotations

import copy
from typing import Any

from .schema import Cause

_FORBIDDEN = (
    "Forbidden: pod updates may not change fields other than `spec.containers[*].image`,"
    "`spec.initContainers[*].image`,`spec.activeDeadlineSeconds`,`spec.tolerations` (only additions to existing "
    "tolerations),`spec.terminationGracePeriodSeconds` (allow it to be set to 1 if it was previously negative)"
)


def validate_pod(new: dict[str, Any], old: dict[str, Any] | None, *, subresource: str | None) -> list[Cause]:
    spec = new.get("spec") or {}
    if old is None:
        if spec.get("schedulingGates") and spec.get("nodeName"):
            return [("spec.nodeName", "FieldValueForbidden",
                     "Forbidden: cannot be set until all schedulingGates have been cleared")]
        return []
    if subresource in ("status", "binding", "delete"):
        return []
    old_spec = old.get("spec") or {}
    causes: list[Cause] = []
    old_gates = [g.get("name") for g in old_spec.get("schedulingGates") or []]
    new_gates = [g.get("name") for g in spec.get("schedulingGates") or []]
    for g in new_gates:
        if g not in old_gates:
            causes.append(("spec.schedulingGates", "FieldValueForbidden",
                           f"Forbidden: only deletion is allowed, but found new scheduling gate '{g}'"))
    if causes:
        return causes
    gated = bool(old_gates)
    a, b = _masked(old_spec), _masked(spec)
    if gated:
        causes.extend(_check_node_selector(old_spec.get("nodeSelector") or {}, spec.get("nodeSelector") or {}))
        causes.extend(_check_affinity(old_spec, spec))
        for s in (a, b):
            s.pop("nodeSelector", None)
            na = (s.get("affinity") or {}).get("nodeAffinity")
            if isinstance(na, dict):
                na.pop("requiredDuringSchedulingIgnoredDuringExecution", None)
                na.pop("preferredDuringSchedulingIgnoredDuringExecution", None)
                if not na:
                    s["affinity"].pop("nodeAffinity")
            if not s.get("affinity"):
                s.pop("affinity", None)
    if a != b:
        causes.append(("spec", "FieldValueForbidden", _FORBIDDEN))
    return causes


def _masked(spec: dict[str, Any]) -> dict[str, Any]:
    s = copy.deepcopy(spec)
    for key in ("containers", "initContainers"):
        for c in s.get(key) or []:
            if isinstance(c, dict):
                c.pop("image", None)
    s.pop("activeDeadlineSeconds", None)
    s.pop("terminationGracePeriodSeconds", None)
    s.pop("schedulingGates", None)
    s["tolerations"] = None  # additions are allowed; removal is rare enough not to model
    return s


def _check_node_selector(old: dict[str, str], new: dict[str, str]) -> list[Cause]:
    for k, v in old.items():
        if new.get(k) != v:
            return [("spec.nodeSelector", "FieldValueInvalid",
                     "Invalid value: only additions to spec.nodeSelector are allowed "
                     "(no mutations or deletions) while the pod is gated")]
    return []


def _required_terms(spec: dict[str, Any]) -> list[dict[str, Any]] | None:
    req = (((spec.get("affinity") or {}).get("nodeAffinity") or {})
           .get("requiredDuringSchedulingIgnoredDuringExecution"))
    if not req:
        return None
    return list(req.get("nodeSelectorTerms") or [])


def _check_affinity(old_spec: dict[str, Any], spec: dict[str, Any]) -> list[Cause]:
    old_terms, new_terms = _required_terms(old_spec), _required_terms(spec)
    if old_terms is None:
        return []
    field = "spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution"
    bad = [(field, "FieldValueInvalid",
            "Invalid value: only additions to spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuring"
            "Execution.nodeSelectorTerms[*].matchExpressions are allowed (no mutations or deletions) while the "
            "pod is gated")]
    if new_terms is None or len(new_terms) != len(old_terms):
        return bad
    for o, n in zip(old_terms, new_terms, strict=True):
        oe, ne = o.get("matchExpressions") or [], n.get("matchExpressions") or []
        if ne[: len(oe)] != oe or (o.get("matchFields") or []) != (n.get("matchFields") or []):
            return bad
    return []


def is_gated(pod: dict[str, Any]) -> bool:
    return bool((pod.get("spec") or {}).get("schedulingGates"))
