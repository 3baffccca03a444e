"""What the topology planner gives a pod of a group, and its merge into the pod's own ``spec.affinity``.

The planner (``core.placement.topology_planner``) decides *where* a gang goes; :class:`PodPlacement` says it in
Kubernetes' vocabulary (``core.placement.node_affinity``) and :func:`merge_node_affinity` writes it into a gated pod's
affinity with the one merge every placement capability shares
(:func:`tether.core.placement.node_affinity.tighten_node_affinity`: the gated-pod tightening rules, idempotent, the
pod's own terms kept verbatim). A PodGroup ``nodeSelector`` with several ORed terms cannot always be said by appending;
the merge then reports ``exact=False``, so the caller can record that the group's nodeSelector was honoured by the
planner's choice of domain but is not enforced on the pod itself.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import msgspec

from ..kube import PREFERRED, REQUIRED, NodeSelectorRequirement, NodeSelectorTerm, PreferredSchedulingTerm, as_json
from .node_affinity import (
    FIELD_OPERATORS,
    NODE_NAME_FIELD,
    OPERATORS,
    InvalidAffinity,
    domain_requirements,
    selector_matches,
    term_matches,
    tighten_node_affinity,
)


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
            affinity[REQUIRED] = {"nodeSelectorTerms": as_json(self.required)}
        if self.preferred:
            affinity[PREFERRED] = as_json(self.preferred)
        return affinity


class MergedAffinity(msgspec.Struct, frozen=True):
    """A pod's whole ``spec.affinity`` after the merge; ``exact`` is False when part of tether's required terms
    could not be expressed by appending (see the module docstring)."""

    affinity: dict[str, Any]
    exact: bool


def merge_node_affinity(affinity: Mapping[str, Any] | None, placement: PodPlacement) -> MergedAffinity:
    """``affinity`` (a pod's ``spec.affinity``, or None) with the placement's node affinity merged in by the
    gated-pod tightening rules. The input is not modified; pod (anti-)affinity is carried over untouched."""
    if affinity is not None and not isinstance(affinity, Mapping):
        raise InvalidAffinity("spec.affinity", f"must be an object, not {type(affinity).__name__}")
    merged: dict[str, Any] = as_json(affinity or {})  # a deep copy
    tightened = tighten_node_affinity(merged.get("nodeAffinity"), required=placement.required,
                                      preferred=placement.preferred, path="spec.affinity.nodeAffinity")
    if tightened.node_affinity:
        merged["nodeAffinity"] = tightened.node_affinity
    return MergedAffinity(affinity=merged, exact=tightened.exact)


__all__ = [
    "FIELD_OPERATORS", "NODE_NAME_FIELD", "OPERATORS", "InvalidAffinity", "MergedAffinity",
    "NodeSelectorRequirement", "NodeSelectorTerm", "PodPlacement", "PreferredSchedulingTerm", "domain_requirements",
    "merge_node_affinity", "selector_matches", "term_matches",
]
