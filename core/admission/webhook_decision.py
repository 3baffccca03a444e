"""The ResourceBinding admission webhook's decision: a pure function of the world and the request.

Karmada's scheduler places a new binding within tens of milliseconds, and Karmada's detector rewrites a
binding's ``placement`` on every policy apply. Watching and re-patching afterwards always leaves a window in
which the binding is scheduled without tether's data constraint (measured on a real karmada-scheduler: placed
first anywhere, then again on the data's clusters). Deciding *in the write* closes it: the API server stores the
binding only with what this function adds.

For a CREATE or an UPDATE of a ResourceBinding, :func:`decide_binding_admission` returns a JSON Patch:

* **the data constraint** — when the workload has bound claims (or claims whose DataSource is being created from
  a resolved lookup), the exclusions and annotations the data-dependency decider would write, computed by the
  very same code (``DecisionPass.plan_view``: the exclusions, or the locality tiers of a workload that prefers its
  data's clusters), so the webhook and the decider can never disagree. On an UPDATE this undoes a detector revert
  of ``placement`` in the same request;
* **a hold** — on CREATE, when the data of a claim of the workload is on its way (:func:`waiting_for_data`: its
  lookup or DataSource creation is under way, or its lookup failed transiently — the catalog unavailable, a
  timeout, its circuit open, a 5xx), or when the binding's workload kind and namespace are queue-managed (the
  admission ConfigMap), the binding is created with ``spec.suspension.scheduling: true`` and the
  ``tether.dev/admission`` annotation saying why. Karmada then does not schedule it at all; the admission decider
  (``core.admission.decider``) resumes it when it may go — for its data, at the latest ``--max-hold`` after its
  creation (``core.admission.data_hold``). Only a CREATE is suspended: Karmada forbids suspending a binding that was
  scheduled, and an UPDATE of a binding still suspended keeps its suspension. A binding someone else already
  suspended is left so.

A claim that cannot resolve (not in the catalog, an unknown system, an unmapped location, an invalid spec, a
refused authentication …) does not hold its binding: the data-dependency decider leaves such a workload's binding
alone, and so does admission — holding it would block the workload on an error that has its own condition on the
claim and that waiting does not fix.

Nothing here reads a clock or calls out; the same (world, request) gives the same patch, which is what lets
``tether replay --diff`` re-derive every recorded decision.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

import msgspec

from ..datadependency.decider import DecisionPass
from ..datadependency.tiers import Keep, TierPlan
from ..envelope import EventRecord
from ..keys import ADMISSION_ANNOTATION
from ..kube import as_mapping, pointer_token, trim
from ..world import World
from ..world.views import parse_binding
from .data_hold import Waiting, hold_text

#: Pending reasons of a claim that will settle by themselves soon: its binding is held until they do.
RESOLVING_REASONS = frozenset({"Resolving", "CreatingDataSource"})
#: The last answers of a lookup that failed (``expired``: its retry is due or under way).
_FAILED_LOOKUPS = frozenset({"failed", "expired"})


class BindingVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """The answer: ``patch`` (JSON Patch ops, empty: unchanged), why, whether it suspends the binding, and the
    clusters tether excludes (empty when no data constraint applies)."""

    patch: tuple[dict[str, Any], ...] = ()
    reason: str
    suspended: bool = False
    excluded: tuple[str, ...] = ()


class _At:
    """The decision's time, as the data-dependency pass reads it from an event (the world's last event time)."""

    def __init__(self, at_ms: int) -> None:
        self.at_ms = at_ms


def _annotation_ops(current: Mapping[str, str] | None, wanted: Mapping[str, str | None]) -> list[dict[str, Any]]:
    """JSON Patch ops making ``metadata.annotations`` agree with ``wanted`` (None: remove the key)."""
    changes = {k: v for k, v in sorted(wanted.items()) if (current or {}).get(k) != v}
    if not changes:
        return []
    if current is None:  # no annotations at all: one op adds the whole map (a path into it would not exist)
        added = {k: v for k, v in changes.items() if v is not None}
        return [{"op": "add", "path": "/metadata/annotations", "value": added}] if added else []
    ops: list[dict[str, Any]] = []
    for key, value in changes.items():
        path = f"/metadata/annotations/{pointer_token(key)}"
        if value is None:
            if key in current:
                ops.append({"op": "remove", "path": path})
        else:
            ops.append({"op": "add", "path": path, "value": value})
    return ops


def waiting_for_data(decide: DecisionPass, world: World, workload: str) -> list[Waiting]:
    """The workload's claims whose data is on its way, by claim key: no DataSource and none being created from a
    resolved lookup, and a lookup or creation under way (``Resolving``, ``CreatingDataSource``) or a lookup that
    failed transiently (``LookupFailed``, retried on a timer). A permanent failure is not waited for (module doc).
    ``detail`` is what a release at the bound reports: the failure, or the lookup's last answer while it is asked
    again."""
    out = []
    for key in sorted(world.claims_by_workload.get(workload, ()) if workload else ()):
        claim = world.claims[key]
        if claim.deleting or claim.identity is None or decide.source_for(key, claim) is not None:
            continue
        if decide.anticipated(claim) is not None:
            continue  # its DataSource is being created: already counted in the exclusions
        why = decide.why_pending(claim)
        if why.reason not in RESOLVING_REASONS and not why.transient:
            continue
        detail = why.message
        lookup = world.lookups.get(claim.identity.key)
        if not why.transient and lookup is not None and lookup.kind in _FAILED_LOOKUPS and lookup.message:
            detail = f"{why.message}; its last answer: {lookup.message}"
        out.append(Waiting(claim=key.split("/", 1)[1], reason=why.reason, transient=why.transient, detail=detail))
    return out


def _workload_kind(spec: Mapping[str, Any]) -> str:
    resource = spec.get("resource")
    if not isinstance(resource, dict):
        return ""
    api_version = str(resource.get("apiVersion", ""))
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    return f"{group}/{resource.get('kind', '')}"


def decide_binding_admission(*, world: World, operation: str, obj: Mapping[str, Any]) -> BindingVerdict:
    """What tether adds to a ResourceBinding being written (module doc). Never raises on a malformed binding:
    it is admitted unchanged, and the reason says why."""
    if operation not in ("CREATE", "UPDATE"):
        return BindingVerdict(reason=f"{operation or 'no operation'}: nothing to decide")
    raw = dict(obj)
    raw.setdefault("kind", "ResourceBinding")
    try:
        kube_object = trim(raw)
    except (msgspec.ValidationError, TypeError, AttributeError) as error:
        return BindingVerdict(reason=f"malformed binding admitted unchanged: {error}")
    view = parse_binding(kube_object)
    metadata = as_mapping(obj.get("metadata"))
    current_annotations = metadata.get("annotations") if isinstance(metadata.get("annotations"), dict) else None
    annotations: dict[str, str] = dict(current_annotations or {})
    spec = as_mapping(obj.get("spec"))
    decide = DecisionPass(world, cast(EventRecord, _At(world.last_at_ms)))
    ops: list[dict[str, Any]] = []
    wanted: dict[str, str | None] = {}
    reasons: list[str] = []
    plan, desired = decide.plan_view(view, annotations)
    excluded: tuple[str, ...] = ()
    if desired is not None and plan.changed:  # tether's placement, as the data-dependency decider would write it
        if plan.placement != (spec.get("placement") or {}):
            ops.append({"op": "replace" if "placement" in spec else "add", "path": "/spec/placement",
                        "value": plan.placement})
        wanted.update(plan.annotations)
    if isinstance(desired, TierPlan | Keep):
        reasons.append(f"workload {view.workload} prefers its data's clusters: locality tiers {desired.summary}"
                       if isinstance(desired, TierPlan) else f"{desired.reason}: its locality tiers are kept")
    elif desired is not None:
        excluded = tuple(sorted(desired))
        reasons.append(f"workload {view.workload} must run where its data is: excluding "
                       f"{','.join(excluded) or '<none>'}" if plan.changed else
                       f"the data constraint is in place (excluding {','.join(excluded) or '<none>'})")
    max_hold_ms = world.admission.max_hold_ms
    waiting = waiting_for_data(decide, world, view.workload) if max_hold_ms > 0 else []  # 0: the hold is off
    namespace = kube_object.metadata.namespace
    managed = world.admission.managed.manages(_workload_kind(spec), namespace)
    suspension = spec.get("suspension") if isinstance(spec.get("suspension"), dict) else None
    already = suspension is not None and suspension.get("scheduling") is True
    suspend = False
    if operation == "CREATE" and (waiting or managed):
        hold = hold_text(waiting, max_hold_ms=max_hold_ms) if waiting else "queue-managed: waiting for admission"
        if already:
            reasons.append(f"already suspended ({hold})")
        else:
            suspend = True
            ops.append({"op": "add", "path": "/spec/suspension/scheduling", "value": True} if suspension is not None
                       else {"op": "add", "path": "/spec/suspension", "value": {"scheduling": True}})
            wanted[ADMISSION_ANNOTATION] = hold
            reasons.append(f"suspended: {hold}")
    ops.extend(_annotation_ops(current_annotations, wanted))
    if not reasons:
        reasons.append("no claim and not queue-managed: admitted unchanged")
    return BindingVerdict(patch=tuple(ops), reason="; ".join(reasons), suspended=suspend, excluded=excluded)


__all__ = ["RESOLVING_REASONS", "BindingVerdict", "decide_binding_admission", "waiting_for_data"]
