"""Fluid DataFlow affinity inheritance (seed 001): a data operation runs where the operation before it ran.

Fluid chains its data operations (``data.fluid.io/v1alpha1`` DataLoad, DataMigrate, DataProcess, DataBackup) with
``spec.runAfter``; ``runAfter.affinityStrategy`` asks that an operation's pod land on the node (zone, region, any
node label) of its predecessor's — required (``Require``) or preferred with a weight (``Prefer``). Fluid does it in
its controllers while rendering each operation; tether does it from outside, on the pods Fluid creates: a webhook
gates them, the decider asks this module what their node affinity becomes, an executor tightens it and removes the
gate. This module is the pure part: objects in, decisions out; no I/O, no clock (time is an argument), no randomness.

* **Recording** (:func:`record_placement`): when a single-pod operation completes, its succeeded pod's node gives
  ``kubernetes.io/hostname``, ``topology.kubernetes.io/{region,zone}`` and the labels named in the pod annotation
  ``affinity.dataflow.fluid.io/labels``. All four kinds record (Fluid misses DataProcess and DataBackup). A
  distributed (``parallelism > 1``) or cron operation ran on many nodes: it records "distributed", no node term.
  What Fluid wrote in ``status.nodeAffinity`` is read as a fallback (:func:`placement_from_status`).
* **Inheritance** (:func:`decide_inheritance`): source = ``dependOn``, else the runAfter reference, in the
  operation's namespace unless one is given. Default keys ``[kubernetes.io/hostname]`` (Require) and
  ``[{kubernetes.io/hostname, 100}]`` (Prefer); one ``In [value]`` expression per key. A key the predecessor's node
  lacks is skipped, as Fluid skips it — zone, region and custom labels are optional on nodes, and refusing to run
  for want of a ``rack`` label would turn a locality hint into an outage — but it is reported in the outcome.
  Fluid may drop the operation's own required terms; tether ANDs the inherited expressions into **every** one of
  them (terms are ORed, so that is the merge that keeps both), and rejects (``AffinityConflict``) a Require that
  every own term excludes, which would leave the pod unschedulable.
* **Outcomes**, a tagged union: :class:`Unchanged` (release as is), :class:`Wait` (keep gated), :class:`Inject`
  (tighten, then release), :class:`Reject` (release as is, Warning condition and Event). Fluid errors and requeues
  while the predecessor is not Complete — a wait, said as such here; a ``Failed`` predecessor never completes, so
  it is a Reject. A distributed or cron predecessor gives no node term whatever its phase, so nothing waits for
  it. The policy is checked first (spelled ``Require`` / ``Prefer`` as Fluid's code does; other spellings,
  including the design document's lower case, are rejected as Fluid rejects them).
* **Release** (:func:`gate_decision`): pods are never gated for ever. Every outcome but Wait releases at once; a
  Wait holds until ``gated_since_ms + timeout_ms`` (default :data:`DEFAULT_WAIT_TIMEOUT_MS`, 10 minutes; the
  decider arms a timer for :attr:`Hold.until_ms`), then releases unchanged with a Warning. An operation that does
  not parse (:class:`DataFlowSpecError`, with the field path) is released the same way (:func:`invalid_spec`).
* **Tightening** (:func:`merge_node_affinity`): the merge of ``core.placement.node_affinity``, shared with the topology
  planner — a gated pod may gain required terms only if it has none, otherwise only expressions appended to its terms;
  preferred terms are free. What is there stays verbatim and in order, what is new is appended in the strategy's
  order and what is present skipped, so a second application changes nothing (idempotent executors) and replays
  give the same bytes.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, TypeVar

import msgspec

from ..integers import parse_int64
from ..keys import FLUID_LABELS_ANNOTATION, HOSTNAME_LABEL, REGION_LABEL, ZONE_LABEL
from ..kube import NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm
from ..world.data_operation import (
    FLUID_GROUP,
    FLUID_GROUP_VERSION,
    OPERATION_KINDS,
    POLICY_DEFAULT,
    POLICY_PREFER,
    POLICY_REQUIRE,
    AffinityStrategy,
    DataOperation,
    OperationRef,
    Prefer,
    RecordedPlacement,
    RunAfter,
)
from .node_affinity import InvalidAffinity, tighten_node_affinity
from .node_affinity import parse_node_affinity as _parse_node_affinity
from .operation_status import REASON_INHERITED

RECORDED_LABELS = (HOSTNAME_LABEL, REGION_LABEL, ZONE_LABEL)
PHASE_COMPLETE = "Complete"
PHASE_FAILED = "Failed"
DEFAULT_PREFER_WEIGHT = 100
DEFAULT_WAIT_TIMEOUT_MS = 10 * 60 * 1000

# Condition / Event reasons of the outcomes (the condition itself, and when it may be written: operation_status).
REASON_NOT_INHERITED = "NoAffinityInherited"
REASON_WAITING = "WaitingForPrecedingOperation"
REASON_WAIT_TIMEOUT = "PrecedingOperationTimeout"
REASON_MISSING = "PrecedingOperationNotFound"
REASON_FAILED = "PrecedingOperationFailed"
REASON_UNKNOWN_POLICY = "UnknownAffinityPolicy"
REASON_CONFLICT = "AffinityConflict"
REASON_INVALID = "InvalidSpec"


class DataFlowSpecError(ValueError):
    """A Fluid object tether cannot read; ``path`` is the offending field (``spec.runAfter.kind``)."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


# --- node affinity ---------------------------------------------------------------------------------------

#: Fluid's names for the shared node-affinity vocabulary (``core.placement.node_affinity``).
MatchExpression = NodeSelectorRequirement
PreferredTerm = PreferredSchedulingTerm


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise DataFlowSpecError(path, f"expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise DataFlowSpecError(path, f"expected a list, got {type(value).__name__}")
    return value


def _string(value: Any, path: str, *, required: bool = False) -> str:
    if value is None:
        value = ""
    if not isinstance(value, str):
        raise DataFlowSpecError(path, f"expected a string, got {type(value).__name__}")
    if required and not value:
        raise DataFlowSpecError(path, "is required")
    return value


def _int(value: Any, path: str, *, default: int) -> int:
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):  # bool is an int to Python, not to the API
        raise DataFlowSpecError(path, f"expected an integer, got {value!r}")
    return value


def parse_node_affinity(raw: Any, *, path: str = "nodeAffinity") -> NodeAffinity:
    """A Kubernetes NodeAffinity dict (or None) as a :class:`NodeAffinity`; raises :class:`DataFlowSpecError`."""
    try:
        return _parse_node_affinity(raw, path=path)
    except InvalidAffinity as error:
        raise DataFlowSpecError(error.path, error.problem) from None


def merge_node_affinity(*, existing: NodeAffinity | Mapping[str, Any] | None,
                        required: Sequence[MatchExpression] = (),
                        preferred: Sequence[PreferredTerm] = ()) -> dict[str, Any]:
    """``existing`` (a pod's ``spec.affinity.nodeAffinity``, as a dict or a :class:`NodeAffinity`) tightened by
    ``required`` expressions (ANDed into every required term, or one new term when there is none) and ``preferred``
    terms (appended), as a Kubernetes NodeAffinity dict:
    :func:`tether.core.placement.node_affinity.tighten_node_affinity`, the merge the topology planner's placements use
    too. Raises :class:`DataFlowSpecError` on a malformed dict."""
    base = existing.as_dict() if isinstance(existing, NodeAffinity) else existing
    terms = (NodeSelectorTerm(match_expressions=tuple(required)),) if required else ()
    try:
        return tighten_node_affinity(base, required=terms, preferred=preferred).node_affinity
    except InvalidAffinity as error:
        raise DataFlowSpecError(error.path, error.problem) from None


_T = TypeVar("_T")


def _unique(items: Iterable[_T]) -> tuple[_T, ...]:
    """``items`` without repeats, first occurrence kept (dict keys keep insertion order)."""
    return tuple(dict.fromkeys(items))


def _admits(term: NodeSelectorTerm, expression: MatchExpression) -> bool:
    """Whether a node whose label ``expression.key`` is ``expression.values[0]`` can still satisfy ``term``."""
    value = expression.values[0]
    for own in term.match_expressions:
        if own.key != expression.key:
            continue
        if own.operator in ("Gt", "Lt"):
            wanted, actual = parse_int64(own.values[0]) if own.values else None, parse_int64(value)
            if wanted is None or actual is None:
                return False  # the scheduler does not match a non-integer label with Gt / Lt either (ParseInt)
            ok = actual > wanted if own.operator == "Gt" else actual < wanted
        else:
            ok = {"In": value in own.values, "NotIn": value not in own.values,
                  "Exists": True, "DoesNotExist": False}.get(own.operator, True)  # unknown: assume no conflict
        if not ok:
            return False
    return True


# --- Fluid operations ------------------------------------------------------------------------------------


#: Where each kind keeps its pods' affinity (DataBackup has none; a DataProcess script processor has none).
_AFFINITY_PATH: dict[str, tuple[str, ...]] = {
    "DataLoad": ("affinity",), "DataMigrate": ("affinity",), "DataProcess": ("processor", "job", "podSpec", "affinity"),
}


def _ref(raw: Any, path: str, *, namespace: str) -> OperationRef:
    fields = _mapping(raw, path)
    kind = _string(fields.get("kind"), f"{path}.kind", required=True)
    if kind not in OPERATION_KINDS:
        raise DataFlowSpecError(f"{path}.kind", f"{kind!r} is not one of {', '.join(OPERATION_KINDS)}")
    return OperationRef(kind=kind, name=_string(fields.get("name"), f"{path}.name", required=True),
                        namespace=_string(fields.get("namespace"), f"{path}.namespace") or namespace,
                        api_version=_string(fields.get("apiVersion"), f"{path}.apiVersion") or FLUID_GROUP_VERSION)


def _run_after(raw: Any, *, namespace: str) -> RunAfter | None:
    if raw is None:
        return None
    ref = _ref(raw, "spec.runAfter", namespace=namespace)
    path = "spec.runAfter.affinityStrategy"
    fields = _mapping(_mapping(raw, "spec.runAfter").get("affinityStrategy"), path)
    requires = tuple(_string(_mapping(r, f"{path}.requires[{i}]").get("name"), f"{path}.requires[{i}].name",
                             required=True) for i, r in enumerate(_list(fields.get("requires"), f"{path}.requires")))
    prefers = []
    for i, item in enumerate(_list(fields.get("prefers"), f"{path}.prefers")):
        at = f"{path}.prefers[{i}]"
        entry = _mapping(item, at)
        if entry.get("weight") is None:
            raise DataFlowSpecError(f"{at}.weight", "is required")
        weight = _int(entry.get("weight"), f"{at}.weight", default=0)
        if not 1 <= weight <= 100:  # the API refuses such a preferred term on the pod: say so here, with the path
            raise DataFlowSpecError(f"{at}.weight", f"{weight} is not within 1..100")
        prefers.append(Prefer(name=_string(entry.get("name"), f"{at}.name", required=True), weight=weight))
    depend_on = fields.get("dependOn")
    return RunAfter(ref=ref, strategy=AffinityStrategy(
        policy=_string(fields.get("policy"), f"{path}.policy"), requires=requires, prefers=tuple(prefers),
        depend_on=None if depend_on is None else _ref(depend_on, f"{path}.dependOn", namespace=namespace)))


def parse_operation(obj: Mapping[str, Any]) -> DataOperation:
    """A Fluid data operation object (as the API returns it) → :class:`DataOperation`.

    Raises :class:`DataFlowSpecError` naming the field when the object is not one tether can decide on."""
    api_version = _string(obj.get("apiVersion"), "apiVersion", required=True)
    if api_version.split("/", 1)[0] != FLUID_GROUP:
        raise DataFlowSpecError("apiVersion", f"{api_version!r} is not in group {FLUID_GROUP}")
    kind = _string(obj.get("kind"), "kind", required=True)
    if kind not in OPERATION_KINDS:
        raise DataFlowSpecError("kind", f"{kind!r} is not one of {', '.join(OPERATION_KINDS)}")
    meta = _mapping(obj.get("metadata"), "metadata")
    namespace = _string(meta.get("namespace"), "metadata.namespace", required=True)  # the ops are namespaced
    name = _string(meta.get("name"), "metadata.name", required=True)
    spec = _mapping(obj.get("spec"), "spec")
    status = _mapping(obj.get("status"), "status")
    path, holder = "spec", spec
    for step in _AFFINITY_PATH.get(kind, ()):
        path += f".{step}"
        holder = _mapping(holder.get(step), path)
    own = parse_node_affinity(holder.get("nodeAffinity"), path=f"{path}.nodeAffinity") if kind in _AFFINITY_PATH \
        else NodeAffinity()
    parallelism = _int(spec.get("parallelism"), "spec.parallelism", default=1)
    if parallelism < 1:
        raise DataFlowSpecError("spec.parallelism", f"{parallelism} is below 1")
    cron = _string(spec.get("policy"), "spec.policy") == "Cron" or bool(_string(spec.get("schedule"), "spec.schedule"))
    status_affinity = status.get("nodeAffinity")
    return DataOperation(
        ref=OperationRef(kind=kind, name=name, namespace=namespace, api_version=api_version),
        run_after=_run_after(spec.get("runAfter"), namespace=namespace), node_affinity=own,
        phase=_string(status.get("phase"), "status.phase"), distributed=parallelism > 1, cron=cron,
        recorded=None if status_affinity is None else placement_from_status(status_affinity),
        dataset=_dataset(spec.get("dataset"), namespace) if kind == "DataLoad" else "")


def _dataset(raw: object, namespace: str) -> str:
    """A DataLoad's ``spec.dataset`` as ``namespace/name`` (the namespace defaults to the DataLoad's); "" when it
    names none."""
    if not isinstance(raw, dict) or not isinstance(raw.get("name"), str) or not raw["name"]:
        return ""
    other = raw.get("namespace")
    return f"{other if isinstance(other, str) and other else namespace}/{raw['name']}"


# --- recording -------------------------------------------------------------------------------------------


def label_keys(annotation: str | None) -> tuple[str, ...]:
    """The label names of an ``affinity.dataflow.fluid.io/labels`` value: comma-separated, blanks ignored."""
    return _unique(k for k in (part.strip() for part in (annotation or "").split(",")) if k)


def succeeded_pod(pods: Iterable[Mapping[str, Any]]) -> Mapping[str, Any] | None:
    """The operation's pod whose placement is recorded: the earliest-created ``Succeeded`` one (name breaks
    ties, so the answer does not depend on the order the pods were listed in)."""
    done = [p for p in pods if _mapping(p.get("status"), "status").get("phase") == "Succeeded"]
    if not done:
        return None

    def created(pod: Mapping[str, Any]) -> tuple[str, str]:
        meta = _mapping(pod.get("metadata"), "metadata")
        return str(meta.get("creationTimestamp") or ""), str(meta.get("name") or "")

    return min(done, key=created)


def record_placement(*, operation: DataOperation, pod_annotations: Mapping[str, str],
                     node_labels: Mapping[str, str]) -> RecordedPlacement:
    """The placement of a completed operation, from its succeeded pod's annotations and its node's labels."""
    if operation.distributed or operation.cron:
        return RecordedPlacement(distributed=True)
    keys = _unique((*RECORDED_LABELS, *label_keys(pod_annotations.get(FLUID_LABELS_ANNOTATION))))
    return RecordedPlacement(labels={k: node_labels[k] for k in keys if k in node_labels})


def placement_from_status(raw: Any) -> RecordedPlacement | None:
    """A placement Fluid recorded in ``status.nodeAffinity``: the single-valued ``In`` expressions of its first
    required term (Fluid writes exactly one). None when it holds no such term."""
    affinity = parse_node_affinity(raw, path="status.nodeAffinity")
    if not affinity.required:
        return None
    return RecordedPlacement(labels={e.key: e.values[0] for e in affinity.required[0].match_expressions
                                     if e.operator == "In" and len(e.values) == 1})


# --- inheritance -----------------------------------------------------------------------------------------


class Unchanged(msgspec.Struct, frozen=True, tag="unchanged"):
    """Nothing to inherit: release the pods as they are."""

    reason: str
    message: str


class Wait(msgspec.Struct, frozen=True, tag="wait"):
    """The predecessor has not completed: keep the pods gated (see :func:`gate_decision` for how long)."""

    reason: str
    message: str


class Inject(msgspec.Struct, frozen=True, tag="inject"):
    """Tighten the pods' node affinity, then release them. ``node_affinity`` is the operation's own affinity
    merged with the inherited terms; ``missing_keys`` the strategy's keys the predecessor's node did not carry."""

    reason: str
    message: str
    required: tuple[MatchExpression, ...]
    preferred: tuple[PreferredTerm, ...]
    node_affinity: dict[str, Any]
    missing_keys: tuple[str, ...] = ()


class Reject(msgspec.Struct, frozen=True, tag="reject"):
    """Inheritance is impossible: release the pods as they are, with a Warning condition and Event."""

    reason: str
    message: str


InheritanceResult = Unchanged | Wait | Inject | Reject


def inheritance_source(operation: DataOperation) -> OperationRef | None:
    """The operation whose placement ``operation`` inherits: ``dependOn``, else the runAfter reference; None when
    the operation inherits nothing (no runAfter, or the default policy)."""
    run_after = operation.run_after
    if run_after is None or run_after.strategy.policy == POLICY_DEFAULT:
        return None
    return run_after.strategy.depend_on or run_after.ref


def invalid_spec(error: DataFlowSpecError) -> Reject:
    """The outcome for an operation whose spec does not parse: its pods are released, and the condition says why."""
    return Reject(reason=REASON_INVALID, message=str(error))


def decide_inheritance(*, operation: DataOperation, predecessor: DataOperation | None,
                       placement: RecordedPlacement | None = None) -> InheritanceResult:
    """What ``operation``'s pods inherit from ``predecessor`` (the object :func:`inheritance_source` names, None
    when it does not exist). ``placement`` is tether's record of the predecessor; without one, the placement
    Fluid recorded in the predecessor's status is used."""
    source = inheritance_source(operation)
    if source is None:
        return Unchanged(reason=REASON_NOT_INHERITED, message=f"{operation.key} has no affinity strategy")
    assert operation.run_after is not None  # (inheritance_source returned a source)
    strategy = operation.run_after.strategy
    if strategy.policy not in (POLICY_REQUIRE, POLICY_PREFER):
        return Reject(reason=REASON_UNKNOWN_POLICY, message=f"unknown affinity policy {strategy.policy!r} "
                      f"(one of {POLICY_REQUIRE!r}, {POLICY_PREFER!r}, or empty)")
    if predecessor is None:
        return Reject(reason=REASON_MISSING, message=f"preceding operation {source.key} does not exist")
    if predecessor.distributed or predecessor.cron:
        return Unchanged(reason=REASON_NOT_INHERITED,
                         message=f"preceding operation {source.key} is distributed or cron: no single node to follow")
    if predecessor.phase == PHASE_FAILED:
        return Reject(reason=REASON_FAILED, message=f"preceding operation {source.key} failed")
    if predecessor.phase != PHASE_COMPLETE:
        return Wait(reason=REASON_WAITING,
                    message=f"preceding operation {source.key} is {predecessor.phase or 'not started'}, not Complete")
    recorded = placement if placement is not None else predecessor.recorded
    if recorded is None or recorded.distributed or not recorded.labels:
        return Unchanged(reason=REASON_NOT_INHERITED,
                         message=f"preceding operation {source.key} has no recorded single-node placement")
    labels = recorded.labels
    if strategy.policy == POLICY_REQUIRE:
        keys = _unique(strategy.requires or (HOSTNAME_LABEL,))
        missing = tuple(k for k in keys if k not in labels)
        required = tuple(MatchExpression(key=k, operator="In", values=(labels[k],)) for k in keys if k in labels)
        preferred: tuple[PreferredTerm, ...] = ()
        own = operation.node_affinity.required
        if required and own and not any(all(_admits(t, e) for e in required) for t in own):
            return Reject(reason=REASON_CONFLICT, message=f"every required node term of {operation.key} excludes "
                          f"the node of {source.key} ({_describe(required)})")
    else:
        prefers = _unique(strategy.prefers or (Prefer(name=HOSTNAME_LABEL, weight=DEFAULT_PREFER_WEIGHT),))
        missing = tuple(_unique(p.name for p in prefers if p.name not in labels))
        required = ()
        preferred = tuple(PreferredTerm(weight=p.weight, preference=NodeSelectorTerm(match_expressions=(
            MatchExpression(key=p.name, operator="In", values=(labels[p.name],)),))) for p in prefers
            if p.name in labels)
    skipped = f"; skipped (not on the node): {', '.join(missing)}" if missing else ""
    if not required and not preferred:
        return Unchanged(reason=REASON_NOT_INHERITED,
                         message=f"the node of preceding operation {source.key} has none of the labels{skipped}")
    inherited = _describe(required) if required else ", ".join(
        f"{_describe(t.preference.match_expressions)} (weight {t.weight})" for t in preferred)
    how = "required" if required else "preferred"
    return Inject(reason=REASON_INHERITED, message=f"inherited from {source.key} ({how}): {inherited}{skipped}",
                  required=required, preferred=preferred, missing_keys=missing,
                  node_affinity=merge_node_affinity(existing=operation.node_affinity, required=required,
                                                    preferred=preferred))


def _describe(expressions: Iterable[MatchExpression]) -> str:
    return ", ".join(f"{e.key}={','.join(e.values)}" for e in expressions)


# --- release policy --------------------------------------------------------------------------------------


class Hold(msgspec.Struct, frozen=True, tag="hold"):
    """Keep the pods gated; decide again at ``until_ms`` at the latest (the decider arms a timer)."""

    until_ms: int
    reason: str
    message: str


class Release(msgspec.Struct, frozen=True, tag="release"):
    """Remove the gate, after setting ``node_affinity`` when it is not None. ``warning``: the condition and Event
    are Warnings (something kept the inheritance from happening)."""

    node_affinity: dict[str, Any] | None
    reason: str
    message: str
    warning: bool = False


def gate_decision(*, result: InheritanceResult, gated_since_ms: int, now_ms: int,
                  timeout_ms: int = DEFAULT_WAIT_TIMEOUT_MS) -> Hold | Release:
    """What to do with gated pods given the inheritance outcome and the time (all times in epoch milliseconds)."""
    if timeout_ms < 0:
        raise ValueError(f"timeout_ms must not be negative, got {timeout_ms}")
    if isinstance(result, Inject):
        return Release(node_affinity=result.node_affinity, reason=result.reason, message=result.message,
                       warning=bool(result.missing_keys and result.required))  # a requirement came out weaker
    if isinstance(result, Unchanged):
        return Release(node_affinity=None, reason=result.reason, message=result.message)
    if isinstance(result, Reject):
        return Release(node_affinity=None, reason=result.reason, message=result.message, warning=True)
    deadline = gated_since_ms + timeout_ms
    if now_ms < deadline:
        return Hold(until_ms=deadline, reason=result.reason, message=result.message)
    return Release(node_affinity=None, reason=REASON_WAIT_TIMEOUT, warning=True,
                   message=f"released without inherited affinity after waiting {timeout_ms // 1000}s: "
                           f"{result.message}")


__all__ = [
    "DEFAULT_WAIT_TIMEOUT_MS", "DataFlowSpecError", "Hold", "InheritanceResult", "Inject",
    "MatchExpression", "PreferredTerm", "Reject", "Release", "Unchanged", "Wait", "decide_inheritance",
    "gate_decision", "inheritance_source", "invalid_spec", "label_keys", "merge_node_affinity", "parse_node_affinity",
    "parse_operation", "placement_from_status", "record_placement", "succeeded_pod",
]
