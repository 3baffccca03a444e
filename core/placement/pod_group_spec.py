"""A Godel PodGroup's job-level affinity as typed, validated data (``scheduling.godel.kubewharf.io/v1alpha1``).

``parse_pod_group`` reads the object dict a watch delivers and either returns a
:class:`~tether.core.world.pod_group.GroupSpec` (the type the world keeps) or raises :class:`InvalidPodGroup`
naming the field and what is wrong with it. Validation is strict where a lenient reading
would place pods against the owner's intent: an empty ``topologyKey`` (Godel's API forbids it), a key listed twice,
an unknown sort resource, order or dimension, a node selector Kubernetes itself would reject, and
``podGroupAntiAffinity`` (Godel's, which tether does not implement — ignoring it would silently co-locate what the
owner asked to keep apart). The caller turns the error into a condition on the PodGroup; its pods stay gated.

Defaults follow Godel: a missing ``minMember`` (or 0) means a group of one; an empty ``dimension`` means
``Capacity``; no ``sortRules`` means CPU / Capacity / Ascending (the planner applies it).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..integers import parse_int64
from ..world.pod_group import GroupAffinity, GroupSpec, SortRule
from .group_affinity import FIELD_OPERATORS, NODE_NAME_FIELD, OPERATORS, NodeSelectorRequirement, NodeSelectorTerm

GROUP = "scheduling.godel.kubewharf.io"
API_VERSION = f"{GROUP}/v1alpha1"
KIND = "PodGroup"

_INT32_MAX = 2**31 - 1


class InvalidPodGroup(ValueError):
    """A PodGroup whose spec cannot be planned; the message names the field."""


def _mapping(value: Any, where: str) -> Mapping[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidPodGroup(f"{where}: must be an object, not {type(value).__name__}")
    return value


def _items(value: Any, where: str) -> list[Any]:
    if value is None:
        return []
    if not isinstance(value, list):
        raise InvalidPodGroup(f"{where}: must be a list, not {type(value).__name__}")
    return value


def _topology_keys(value: Any, where: str) -> tuple[str, ...]:
    keys = []
    for index, term in enumerate(_items(value, where)):
        key = _mapping(term, f"{where}[{index}]").get("topologyKey")
        if not isinstance(key, str) or not key:
            raise InvalidPodGroup(f"{where}[{index}].topologyKey: must be a non-empty string")
        keys.append(key)
    return tuple(keys)


def _choice(value: Any, allowed: tuple[str, ...], where: str) -> str:
    if value not in allowed:
        raise InvalidPodGroup(f"{where}: {value!r} is not one of {', '.join(allowed)}")
    return str(value)


def _sort_rules(value: Any, where: str) -> tuple[SortRule, ...]:
    rules = []
    for index, raw in enumerate(_items(value, where)):
        rule = _mapping(raw, f"{where}[{index}]")
        checked = {
            "resource": _choice(rule.get("resource"), ("CPU", "Memory", "GPU"), f"{where}[{index}].resource"),
            "dimension": _choice(rule.get("dimension") or "Capacity", ("Capacity", "Available"),
                                 f"{where}[{index}].dimension"),
            "order": _choice(rule.get("order"), ("Ascending", "Descending"), f"{where}[{index}].order"),
        }
        rules.append(msgspec.convert(checked, SortRule))  # checked above: convert only narrows the types
    return tuple(rules)


def _requirement(raw: Any, where: str, *, field: bool) -> NodeSelectorRequirement:
    requirement = _mapping(raw, where)
    key, operator, values = requirement.get("key"), requirement.get("operator"), _items(requirement.get("values"),
                                                                                        f"{where}.values")
    if not isinstance(key, str) or not key:
        raise InvalidPodGroup(f"{where}.key: must be a non-empty string")
    if not all(isinstance(v, str) for v in values):
        raise InvalidPodGroup(f"{where}.values: must be strings")
    if field:  # Kubernetes: matchFields select by metadata.name, In/NotIn, exactly one value
        if key != NODE_NAME_FIELD:
            raise InvalidPodGroup(f"{where}.key: only {NODE_NAME_FIELD} is supported in matchFields")
        _choice(operator, tuple(sorted(FIELD_OPERATORS)), f"{where}.operator")
        if len(values) != 1:
            raise InvalidPodGroup(f"{where}.values: must have exactly one element")
    else:
        _choice(operator, tuple(sorted(OPERATORS)), f"{where}.operator")
        if operator in ("In", "NotIn") and not values:
            raise InvalidPodGroup(f"{where}.values: must be non-empty for {operator}")
        if operator in ("Exists", "DoesNotExist") and values:
            raise InvalidPodGroup(f"{where}.values: must be empty for {operator}")
        if operator in ("Gt", "Lt") and (len(values) != 1 or parse_int64(values[0]) is None):
            raise InvalidPodGroup(f"{where}.values: must be one integer for {operator}")  # (strconv.ParseInt's)
    return NodeSelectorRequirement(key=key, operator=str(operator), values=tuple(values))


def _node_selector(value: Any, where: str) -> tuple[NodeSelectorTerm, ...] | None:
    if value is None:
        return None
    raw_terms = _items(_mapping(value, where).get("nodeSelectorTerms"), f"{where}.nodeSelectorTerms")
    if not raw_terms:
        raise InvalidPodGroup(f"{where}.nodeSelectorTerms: must have at least one term")
    terms = []
    for index, raw in enumerate(raw_terms):
        at = f"{where}.nodeSelectorTerms[{index}]"
        term = _mapping(raw, at)
        terms.append(NodeSelectorTerm(
            match_expressions=tuple(_requirement(r, f"{at}.matchExpressions[{i}]", field=False)
                                    for i, r in enumerate(_items(term.get("matchExpressions"),
                                                                 f"{at}.matchExpressions"))),
            match_fields=tuple(_requirement(r, f"{at}.matchFields[{i}]", field=True)
                               for i, r in enumerate(_items(term.get("matchFields"), f"{at}.matchFields"))),
        ))
    return tuple(terms)


def _min_member(value: Any) -> int:
    if value is None:
        return 1
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= _INT32_MAX:
        raise InvalidPodGroup(f"spec.minMember: must be an integer between 0 and {_INT32_MAX}, not {value!r}")
    return max(value, 1)


def parse_pod_group(obj: Mapping[str, Any]) -> GroupSpec:
    """The :class:`GroupSpec` of a PodGroup object dict; raises :class:`InvalidPodGroup`."""
    if not isinstance(obj, Mapping):
        raise InvalidPodGroup(f"a PodGroup must be an object, not {type(obj).__name__}")
    if obj.get("apiVersion") != API_VERSION or obj.get("kind", KIND) != KIND:
        raise InvalidPodGroup(f"not a {API_VERSION} {KIND}: {obj.get('apiVersion')!r} {obj.get('kind')!r}")
    metadata = _mapping(obj.get("metadata"), "metadata")
    spec = _mapping(obj.get("spec"), "spec")
    affinity = _mapping(spec.get("affinity"), "spec.affinity")
    if _mapping(affinity.get("podGroupAntiAffinity"), "spec.affinity.podGroupAntiAffinity"):
        raise InvalidPodGroup("spec.affinity.podGroupAntiAffinity: not supported by tether's planner")
    where = "spec.affinity.podGroupAffinity"
    group = _mapping(affinity.get("podGroupAffinity"), where)
    required = _topology_keys(group.get("required"), f"{where}.required")
    preferred = _topology_keys(group.get("preferred"), f"{where}.preferred")
    keys = required + preferred
    if len(set(keys)) != len(keys):
        twice = sorted({key for key in keys if keys.count(key) > 1})
        raise InvalidPodGroup(f"{where}: topology key(s) listed more than once: {', '.join(twice)}")
    return GroupSpec(
        min_member=_min_member(spec.get("minMember")),
        affinity=GroupAffinity(required=required, preferred=preferred,
                               sort_rules=_sort_rules(group.get("sortRules"), f"{where}.sortRules"),
                               node_selector=_node_selector(group.get("nodeSelector"), f"{where}.nodeSelector")),
        name=str(metadata.get("name") or ""),
        namespace=str(metadata.get("namespace") or ""),
    )
