"""Node-affinity terms as plain data: node selectors, what the topology planner gives a pod, and the merge into a
gated pod's own affinity.

The planner (``core.topology``) decides *where* a gang goes; this module says it in Kubernetes' vocabulary and
keeps it inside what the API server accepts on a pod that still carries a scheduling gate (1.27+):

* ``requiredDuringSchedulingIgnoredDuringExecution`` — if the pod has no required terms, any may be set; if it
  has some, the only change allowed is **appending** requirements (``matchExpressions`` or ``matchFields``) to
  each existing term. Existing requirements are never edited or reordered.
* ``preferredDuringSchedulingIgnoredDuringExecution`` — free; tether appends its terms after the pod's own.

Terms are ORed and the requirements of a term ANDed, so appending the chosen domain's requirements to *every*
existing term tightens the pod exactly to "the user's constraint AND the domain". What cannot always be said by
appending is a PodGroup ``nodeSelector`` with several ORed terms: (A or B) and (C or D) needs new terms. The merge
then appends only what all of tether's terms share (the domain) and reports ``exact=False``, so the caller can
record that the group's nodeSelector was honoured by the planner's choice of domain but is not enforced on the
pod itself.

Merging is idempotent: requirements and preferred terms already present are not added twice, so an executor that
retries after a conflict, or re-reads a pod it already patched, computes the same affinity.

Node selectors are evaluated with Kubernetes' rules: ``In`` needs the label and one of the values, ``NotIn`` and
``DoesNotExist`` also match a node without the label, ``Gt``/``Lt`` compare integers (a non-integer label does
not match), ``matchFields`` knows ``metadata.name`` only, and a term without requirements matches no node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

HOSTNAME_LABEL = "kubernetes.io/hostname"
OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
FIELD_OPERATORS = frozenset({"In", "NotIn"})
NODE_NAME_FIELD = "metadata.name"

_REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
_PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


_encoder = msgspec.json.Encoder()


def _json(value: object) -> Any:
    """``value`` in JSON types (lists, camelCase keys), as the API server returns it."""
    return msgspec.json.decode(_encoder.encode(value))


class InvalidAffinity(ValueError):
    """A pod affinity that is not shaped like Kubernetes' (the merge refuses to guess)."""


class NodeSelectorRequirement(msgspec.Struct, frozen=True, gc=False):
    """``{key, operator, values}`` of a term's matchExpressions or matchFields."""

    key: str
    operator: str
    values: tuple[str, ...] = ()


class NodeSelectorTerm(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """Requirements that must all hold; a list of terms holds when any term does."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()


class PreferredSchedulingTerm(msgspec.Struct, frozen=True):
    weight: int
    preference: NodeSelectorTerm


class PodPlacement(msgspec.Struct, frozen=True):
    """The node affinity the planner gives one pod of a group.

    ``required`` are ORed terms pinning the pod to the group's domain (empty: no constraint); ``preferred`` lists
    the domain's circles, the pod's own circle first, with decreasing weights; ``circle`` is the key of the circle
    the planner counted the pod in (empty when the domain had no room left for it: it waits there)."""

    pod: str
    circle: str
    required: tuple[NodeSelectorTerm, ...]
    preferred: tuple[PreferredSchedulingTerm, ...]

    def to_node_affinity(self) -> dict[str, Any]:
        """The ``spec.affinity.nodeAffinity`` dictionary these terms make (JSON types, camelCase)."""
        affinity: dict[str, Any] = {}
        if self.required:
            affinity[_REQUIRED] = {"nodeSelectorTerms": _json(self.required)}
        if self.preferred:
            affinity[_PREFERRED] = _json(self.preferred)
        return affinity


class MergedAffinity(msgspec.Struct, frozen=True):
    """A pod's whole ``spec.affinity`` after the merge; ``exact`` is False when part of tether's required terms
    could not be expressed by appending (see the module docstring)."""

    affinity: dict[str, Any]
    exact: bool


def domain_requirements(labels: Sequence[tuple[str, str]]) -> tuple[NodeSelectorRequirement, ...]:
    """``key In [value]`` for every (key, value) of a topology domain."""
    return tuple(NodeSelectorRequirement(key=key, operator="In", values=(value,)) for key, value in labels)


def _requirement_matches(requirement: NodeSelectorRequirement, value: str | None) -> bool:
    operator = requirement.operator
    if operator == "In":
        return value is not None and value in requirement.values
    if operator == "NotIn":
        return value is None or value not in requirement.values
    if operator == "Exists":
        return value is not None
    if operator == "DoesNotExist":
        return value is None
    if value is None or len(requirement.values) != 1:
        return False
    try:  # Gt / Lt: both sides must be integers, or the node does not match (as Kubernetes)
        have, bound = int(value), int(requirement.values[0])
    except ValueError:
        return False
    return have > bound if operator == "Gt" else have < bound if operator == "Lt" else False


def term_matches(term: NodeSelectorTerm, *, name: str, labels: Mapping[str, str]) -> bool:
    """Whether a node (its name and labels) satisfies every requirement of the term; an empty term matches none."""
    if not term.match_expressions and not term.match_fields:
        return False
    for requirement in term.match_expressions:
        if not _requirement_matches(requirement, labels.get(requirement.key)):
            return False
    return all(_requirement_matches(requirement, name if requirement.key == NODE_NAME_FIELD else None)
               for requirement in term.match_fields)


def selector_matches(terms: Sequence[NodeSelectorTerm], *, name: str, labels: Mapping[str, str]) -> bool:
    """Whether a node satisfies any of the ORed terms."""
    return any(term_matches(term, name=name, labels=labels) for term in terms)


# --- merging into a pod's affinity -------------------------------------------------------------------------------


def _identity(requirement: Any) -> tuple[str, str, tuple[str, ...]]:
    """A requirement dict as a comparable value (``values`` may be missing for Exists)."""
    if not isinstance(requirement, Mapping):
        raise InvalidAffinity(f"a node selector requirement must be an object, not {requirement!r}")
    values = requirement.get("values") or ()
    return str(requirement.get("key", "")), str(requirement.get("operator", "")), tuple(str(v) for v in values)


def _preferred_identity(term: Any) -> tuple[object, ...]:
    """A preferred term dict as a comparable value, whatever the order of its keys."""
    if not isinstance(term, Mapping) or not isinstance(term.get("preference") or {}, Mapping):
        raise InvalidAffinity(f"a preferred scheduling term must be an object, not {term!r}")
    preference = term.get("preference") or {}
    return (term.get("weight"),
            tuple(_identity(r) for r in _list(preference, "matchExpressions", "preference")),
            tuple(_identity(r) for r in _list(preference, "matchFields", "preference")))


def _list(container: Mapping[str, Any], key: str, where: str) -> list[Any]:
    value = container.get(key)
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidAffinity(f"{where}.{key} must be a list, not {type(value).__name__}")
    return value


def _append_missing(term: dict[str, Any], field: str, additions: Sequence[NodeSelectorRequirement]) -> None:
    """Append to ``term[field]`` the requirements it does not have yet (existing entries stay as they are)."""
    if not additions:
        return
    existing = _list(term, field, "nodeSelectorTerm")
    have = {_identity(requirement) for requirement in existing}
    added = [_json(r) for r in additions if (r.key, r.operator, r.values) not in have]
    if added:
        term[field] = [*existing, *added]


def _common(terms: Sequence[NodeSelectorTerm]) -> NodeSelectorTerm:
    """The requirements every one of the ORed terms has (appending them is implied by all of them)."""
    first = terms[0]
    return NodeSelectorTerm(
        match_expressions=tuple(r for r in first.match_expressions if all(r in t.match_expressions for t in terms)),
        match_fields=tuple(r for r in first.match_fields if all(r in t.match_fields for t in terms)),
    )


def merge_node_affinity(affinity: Mapping[str, Any] | None, placement: PodPlacement) -> MergedAffinity:
    """``affinity`` (a pod's ``spec.affinity``, or None) with the placement's node affinity merged in by the
    gated-pod tightening rules. The input is not modified; pod (anti-)affinity is carried over untouched."""
    if affinity is not None and not isinstance(affinity, Mapping):
        raise InvalidAffinity(f"spec.affinity must be an object, not {type(affinity).__name__}")
    merged: dict[str, Any] = _json(affinity or {})  # a deep copy
    node = merged.get("nodeAffinity")
    node = {} if node is None else node
    if not isinstance(node, dict):
        raise InvalidAffinity("spec.affinity.nodeAffinity must be an object")
    exact = True
    if placement.required:
        required = node.get(_REQUIRED)
        required = {} if required is None else required
        if not isinstance(required, dict):
            raise InvalidAffinity(f"nodeAffinity.{_REQUIRED} must be an object")
        terms = _list(required, "nodeSelectorTerms", f"nodeAffinity.{_REQUIRED}")
        if not terms:  # nothing required yet: tether's terms may be set whole
            required["nodeSelectorTerms"] = _json(placement.required)
        else:
            additions = placement.required[0] if len(placement.required) == 1 else _common(placement.required)
            exact = additions in placement.required  # all of tether's terms were equal to what is appended
            for term in terms:
                if not isinstance(term, dict):
                    raise InvalidAffinity(f"a nodeSelectorTerm must be an object, not {term!r}")
                _append_missing(term, "matchExpressions", additions.match_expressions)
                _append_missing(term, "matchFields", additions.match_fields)
        node[_REQUIRED] = required
    if placement.preferred:
        preferred = _list(node, _PREFERRED, "nodeAffinity")
        have = {_preferred_identity(term) for term in preferred}
        for term in placement.preferred:
            as_dict = _json(term)
            if _preferred_identity(as_dict) not in have:
                preferred.append(as_dict)
        node[_PREFERRED] = preferred
    if node:
        merged["nodeAffinity"] = node
    return MergedAffinity(affinity=merged, exact=exact)
