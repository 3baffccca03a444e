"""What the world keeps of a Godel PodGroup: its job-level affinity as typed data (``GroupSpec``).

The member state holds it (``core.world.member_state``), so the type is language; reading and validating a PodGroup
into it is pod placement's (``core.placement.pod_group_spec.parse_pod_group``), and so is planning from it
(``core.placement.topology_planner``).
"""

from __future__ import annotations

from typing import Literal

import msgspec

from ..kube import NodeSelectorTerm

SortResource = Literal["CPU", "Memory", "GPU"]
#: The Kubernetes resource each sort resource reads.
RESOURCE_NAMES: dict[str, str] = {"CPU": "cpu", "Memory": "memory", "GPU": "nvidia.com/gpu"}
class SortRule(msgspec.Struct, frozen=True, gc=False):
    resource: SortResource = "CPU"
    dimension: Literal["Capacity", "Available"] = "Capacity"
    order: Literal["Ascending", "Descending"] = "Ascending"

    @property
    def resource_name(self) -> str:
        return RESOURCE_NAMES[self.resource]


DEFAULT_SORT_RULES = (SortRule(),)


class GroupAffinity(msgspec.Struct, frozen=True):
    """``podGroupAffinity``: required topology keys, preferred keys (largest domain first), sort rules, and the
    node selector (None: every node)."""

    required: tuple[str, ...] = ()
    preferred: tuple[str, ...] = ()
    sort_rules: tuple[SortRule, ...] = ()
    node_selector: tuple[NodeSelectorTerm, ...] | None = None


class GroupSpec(msgspec.Struct, frozen=True):
    min_member: int = 1
    affinity: GroupAffinity = GroupAffinity()
    name: str = ""
    namespace: str = ""


__all__ = ["DEFAULT_SORT_RULES", "RESOURCE_NAMES", "GroupAffinity", "GroupSpec", "SortResource",
           "SortRule"]
