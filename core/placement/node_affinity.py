"""Node affinity as plain data, evaluated with Kubernetes' rules, and the one merge into a gated pod's affinity.

Both pod-placement capabilities end the same way: a pod held by a scheduling gate gets tighter node affinity, then
loses the gate. The topology planner (``core.placement.topology_planner``) pins a PodGroup's pods to a domain; DataFlow
inheritance (``core.placement.dataflow``) pins an operation's pods near its predecessor's node. They share this
module's vocabulary and, above all, one merge (:func:`tighten_node_affinity`), because what the API server accepts on a
gated pod (1.27+)
does not depend on why tether tightens it:

* ``requiredDuringSchedulingIgnoredDuringExecution`` — if the pod has no required terms, any may be set; if it
  has some, the only change allowed is **appending** requirements (``matchExpressions`` or ``matchFields``) to
  each existing term. Existing requirements are never edited, reordered or de-duplicated.
* ``preferredDuringSchedulingIgnoredDuringExecution`` — free; tether appends its terms after the pod's own.

Terms are ORed and the requirements of a term ANDed, so appending the same requirements to *every* existing term
tightens the pod exactly to "the owner's constraint AND tether's". What cannot always be said by appending is a set
of several ORed terms of tether's own ((A or B) and (C or D) needs new terms): the merge then appends only what all
of tether's terms share and reports ``exact=False``, so the caller can say so.

The merge works on the JSON the API returned, verbatim: what tether does not touch is carried over byte for byte
(unknown fields included), so a patch computed from it changes only what tether adds. It is idempotent —
requirements and preferred terms already present are not added again, and neither are repeats among the additions —
so an executor that retries after a conflict, or re-reads a pod it already patched, computes the same affinity, and a
replay gives the same bytes.

Node selectors are evaluated as Kubernetes does: ``In`` needs the label and one of the values, ``NotIn`` and
``DoesNotExist`` also match a node without the label, ``Gt``/``Lt`` compare integers (a non-integer label does
not match), ``matchFields`` knows ``metadata.name`` only, and a term without requirements matches no node.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from ..integers import parse_int64
from ..kube import (
    PREFERRED,
    REQUIRED,
    NodeAffinity,
    NodeSelectorRequirement,
    NodeSelectorTerm,
    PreferredSchedulingTerm,
    as_json,
)

OPERATORS = frozenset({"In", "NotIn", "Exists", "DoesNotExist", "Gt", "Lt"})
FIELD_OPERATORS = frozenset({"In", "NotIn"})
NODE_NAME_FIELD = "metadata.name"

class InvalidAffinity(ValueError):
    """A node affinity that is not shaped like Kubernetes' (nothing guesses); ``path`` names the field."""

    def __init__(self, path: str, problem: str) -> None:
        super().__init__(f"{path}: {problem}")
        self.path = path
        self.problem = problem


# --- parsing ---------------------------------------------------------------------------------------------------


def _mapping(value: Any, path: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidAffinity(path, f"expected an object, got {type(value).__name__}")
    return value


def _list(value: Any, path: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidAffinity(path, f"expected a list, got {type(value).__name__}")
    return value


def _string(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise InvalidAffinity(path, "is required" if value in (None, "") else
                              f"expected a string, got {type(value).__name__}")
    return value


def _requirements(raw: Any, path: str) -> tuple[NodeSelectorRequirement, ...]:
    out = []
    for i, item in enumerate(_list(raw, path)):
        at = f"{path}[{i}]"
        fields = _mapping(item, at)
        values = []
        for j, v in enumerate(_list(fields.get("values"), f"{at}.values")):
            if not isinstance(v, str):
                raise InvalidAffinity(f"{at}.values[{j}]", f"expected a string, got {type(v).__name__}")
            values.append(v)
        out.append(NodeSelectorRequirement(key=_string(fields.get("key"), f"{at}.key"),
                                           operator=_string(fields.get("operator"), f"{at}.operator"),
                                           values=tuple(values)))
    return tuple(out)


def parse_term(raw: Any, path: str) -> NodeSelectorTerm:
    fields = _mapping(raw, path)
    return NodeSelectorTerm(match_expressions=_requirements(fields.get("matchExpressions"), f"{path}.matchExpressions"),
                            match_fields=_requirements(fields.get("matchFields"), f"{path}.matchFields"))


def parse_node_affinity(raw: Any, *, path: str = "nodeAffinity") -> NodeAffinity:
    """A Kubernetes NodeAffinity dict (or None) as a :class:`NodeAffinity`; raises :class:`InvalidAffinity`."""
    fields = _mapping(raw, path)
    required_path = f"{path}.{REQUIRED}"
    required = _mapping(fields.get(REQUIRED), required_path)
    required_path += ".nodeSelectorTerms"
    terms = tuple(parse_term(t, f"{required_path}[{i}]")
                  for i, t in enumerate(_list(required.get("nodeSelectorTerms"), required_path)))
    preferred_path = f"{path}.{PREFERRED}"
    preferred = []
    for i, item in enumerate(_list(fields.get(PREFERRED), preferred_path)):
        at = f"{preferred_path}[{i}]"
        entry = _mapping(item, at)
        weight = entry.get("weight", 0)
        if isinstance(weight, bool) or not isinstance(weight, int):  # bool is an int to Python, not to the API
            raise InvalidAffinity(f"{at}.weight", f"expected an integer, got {weight!r}")
        preferred.append(PreferredSchedulingTerm(weight=weight, preference=parse_term(entry.get("preference"),
                                                                                      f"{at}.preference")))
    return NodeAffinity(required=terms, preferred=tuple(preferred))


# --- matching --------------------------------------------------------------------------------------------------


def domain_requirements(labels: Sequence[tuple[str, str]]) -> tuple[NodeSelectorRequirement, ...]:
    """``key In [value]`` for every (key, value) of a topology domain."""
    return tuple(NodeSelectorRequirement(key=key, operator="In", values=(value,)) for key, value in labels)


def requirement_matches(requirement: NodeSelectorRequirement, value: str | None) -> bool:
    """Whether a node whose label ``requirement.key`` is ``value`` (None: absent) satisfies the requirement."""
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
    # Gt / Lt: both sides must be integers as Kubernetes reads them (strconv.ParseInt), or the node does not match
    have, bound = parse_int64(value), parse_int64(requirement.values[0])
    if have is None or bound is None:
        return False
    return have > bound if operator == "Gt" else have < bound if operator == "Lt" else False


def term_matches(term: NodeSelectorTerm, *, name: str, labels: Mapping[str, str]) -> bool:
    """Whether a node (its name and labels) satisfies every requirement of the term; an empty term matches none."""
    if not term.match_expressions and not term.match_fields:
        return False
    for requirement in term.match_expressions:
        if not requirement_matches(requirement, labels.get(requirement.key)):
            return False
    return all(requirement_matches(requirement, name if requirement.key == NODE_NAME_FIELD else None)
               for requirement in term.match_fields)


def selector_matches(terms: Sequence[NodeSelectorTerm], *, name: str, labels: Mapping[str, str]) -> bool:
    """Whether a node satisfies any of the ORed terms."""
    return any(term_matches(term, name=name, labels=labels) for term in terms)


def node_affinity_score(affinity: NodeAffinity, *, name: str, labels: Mapping[str, str]) -> tuple[bool, int]:
    """Whether a node passes the required terms (none: every node does), and the sum of the weights of the
    preferred terms it matches — kube-scheduler's NodeAffinity filter and (unnormalised) score."""
    fits = not affinity.required or selector_matches(affinity.required, name=name, labels=labels)
    return fits, sum(t.weight for t in affinity.preferred if term_matches(t.preference, name=name, labels=labels))


# --- the merge -------------------------------------------------------------------------------------------------


class Tightened(msgspec.Struct, frozen=True):
    """A whole NodeAffinity dict after :func:`tighten_node_affinity`; ``exact`` is False when part of the required
    terms could not be expressed by appending (see the module docstring)."""

    node_affinity: dict[str, Any]
    exact: bool


def _identity(requirement: Any, path: str) -> tuple[str, str, tuple[str, ...]]:
    """A requirement dict as a comparable value (``values`` may be missing for Exists)."""
    if not isinstance(requirement, Mapping):
        raise InvalidAffinity(path, f"a node selector requirement must be an object, not {requirement!r}")
    values = requirement.get("values") or ()
    return str(requirement.get("key", "")), str(requirement.get("operator", "")), tuple(str(v) for v in values)


def _preferred_identity(term: Any, path: str) -> tuple[object, ...]:
    """A preferred term dict as a comparable value, whatever the order of its keys."""
    if not isinstance(term, Mapping) or not isinstance(term.get("preference") or {}, Mapping):
        raise InvalidAffinity(path, f"a preferred scheduling term must be an object, not {term!r}")
    preference = term.get("preference") or {}
    return (term.get("weight"),
            tuple(_identity(r, path) for r in _list(preference.get("matchExpressions"), f"{path}.preference")),
            tuple(_identity(r, path) for r in _list(preference.get("matchFields"), f"{path}.preference")))


def _append_missing(term: dict[str, Any], field: str, additions: Sequence[NodeSelectorRequirement],
                    path: str) -> None:
    """Append to ``term[field]`` the requirements it does not have yet (existing entries stay as they are)."""
    existing = _list(term.get(field), f"{path}.{field}")
    have = {_identity(requirement, path) for requirement in existing}
    added = []
    for requirement in additions:
        identity = (requirement.key, requirement.operator, requirement.values)
        if identity not in have:
            have.add(identity)
            added.append(requirement.as_dict())
    if added:
        term[field] = [*existing, *added]


def _common(terms: Sequence[NodeSelectorTerm]) -> NodeSelectorTerm:
    """The requirements every one of the ORed terms has (appending them is implied by all of them)."""
    first = terms[0]
    return NodeSelectorTerm(
        match_expressions=tuple(r for r in first.match_expressions if all(r in t.match_expressions for t in terms)),
        match_fields=tuple(r for r in first.match_fields if all(r in t.match_fields for t in terms)),
    )


def _unique_terms(terms: Sequence[NodeSelectorTerm]) -> list[dict[str, Any]]:
    """Terms set whole on a pod without required terms: repeats of a requirement within a term dropped."""
    return [NodeSelectorTerm(match_expressions=tuple(dict.fromkeys(t.match_expressions)),
                             match_fields=tuple(dict.fromkeys(t.match_fields))).as_dict()
            for t in dict.fromkeys(terms)]


def tighten_node_affinity(node_affinity: Mapping[str, Any] | None, *, required: Sequence[NodeSelectorTerm] = (),
                          preferred: Sequence[PreferredSchedulingTerm] = (),
                          path: str = "nodeAffinity") -> Tightened:
    """``node_affinity`` (a pod's ``spec.affinity.nodeAffinity``, or None) ANDed with the ORed ``required`` terms
    and with ``preferred`` appended, by the gated-pod tightening rules. The input is not modified; raises
    :class:`InvalidAffinity` when it is not shaped like a NodeAffinity."""
    if node_affinity is not None and not isinstance(node_affinity, Mapping):
        raise InvalidAffinity(path, f"must be an object, not {type(node_affinity).__name__}")
    node: dict[str, Any] = as_json(node_affinity or {})  # a deep copy
    exact = True
    if required:
        held = node.get(REQUIRED)
        held = {} if held is None else held
        if not isinstance(held, dict):
            raise InvalidAffinity(f"{path}.{REQUIRED}", "must be an object")
        terms_path = f"{path}.{REQUIRED}.nodeSelectorTerms"
        terms = _list(held.get("nodeSelectorTerms"), terms_path)
        if not terms:  # nothing required yet: tether's terms may be set whole
            held["nodeSelectorTerms"] = _unique_terms(required)
        else:
            additions = required[0] if len(required) == 1 else _common(required)
            exact = additions in required  # all of tether's terms were equal to what is appended
            for i, term in enumerate(terms):
                if not isinstance(term, dict):
                    raise InvalidAffinity(f"{terms_path}[{i}]", f"a nodeSelectorTerm must be an object, not {term!r}")
                _append_missing(term, "matchExpressions", additions.match_expressions, f"{terms_path}[{i}]")
                _append_missing(term, "matchFields", additions.match_fields, f"{terms_path}[{i}]")
        node[REQUIRED] = held
    if preferred:
        preferred_path = f"{path}.{PREFERRED}"
        terms = _list(node.get(PREFERRED), preferred_path)
        have = {_preferred_identity(term, f"{preferred_path}[{i}]") for i, term in enumerate(terms)}
        for term in preferred:
            as_dict = term.as_dict()
            identity = _preferred_identity(as_dict, preferred_path)
            if identity not in have:
                have.add(identity)
                terms.append(as_dict)
        node[PREFERRED] = terms
    return Tightened(node_affinity=node, exact=exact)


__all__ = [
    "FIELD_OPERATORS", "NODE_NAME_FIELD", "OPERATORS", "InvalidAffinity", "Tightened",
    "domain_requirements", "node_affinity_score", "parse_node_affinity", "parse_term", "requirement_matches",
    "selector_matches", "term_matches", "tighten_node_affinity",
]
