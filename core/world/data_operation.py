"""What the world keeps of a Fluid data operation (``data.fluid.io/v1alpha1``): :class:`DataOperation`.

The member state holds it (``core.world.member_state``), so the type is language; reading an operation into it,
recording where one ran and deciding what its successor inherits are pod placement's
(``core.placement.dataflow``).
"""

from __future__ import annotations

import msgspec

from ..kube import NodeAffinity, NodeSelectorRequirement, NodeSelectorTerm, ObjectKey, object_key

FLUID_GROUP = "data.fluid.io"
FLUID_GROUP_VERSION = "data.fluid.io/v1alpha1"
OPERATION_KINDS = ("DataLoad", "DataMigrate", "DataProcess", "DataBackup")
POLICY_DEFAULT, POLICY_REQUIRE, POLICY_PREFER = "", "Require", "Prefer"


class OperationRef(msgspec.Struct, frozen=True):
    """A reference to a Fluid data operation; the namespace is always filled in (defaulted by the parser)."""

    kind: str
    name: str
    namespace: str
    api_version: str = FLUID_GROUP_VERSION

    @property
    def key(self) -> ObjectKey:
        return object_key(self.kind, self.namespace, self.name)


class Prefer(msgspec.Struct, frozen=True):
    name: str
    weight: int


class AffinityStrategy(msgspec.Struct, frozen=True):
    policy: str = POLICY_DEFAULT
    requires: tuple[str, ...] = ()
    prefers: tuple[Prefer, ...] = ()
    depend_on: OperationRef | None = None


class RunAfter(msgspec.Struct, frozen=True):
    ref: OperationRef
    strategy: AffinityStrategy = AffinityStrategy()


class RecordedPlacement(msgspec.Struct, frozen=True):
    """Where a completed operation ran: node labels (single-pod), or only that it ran on many nodes."""

    labels: dict[str, str] = {}
    distributed: bool = False

    def as_node_affinity(self) -> NodeAffinity:
        """As Fluid records it in ``status.nodeAffinity``: one required term, one ``In`` per label (sorted)."""
        if self.distributed or not self.labels:
            return NodeAffinity()
        return NodeAffinity(required=(NodeSelectorTerm(match_expressions=tuple(
            NodeSelectorRequirement(key=k, operator="In", values=(self.labels[k],)) for k in sorted(self.labels))),))


class DataOperation(msgspec.Struct, frozen=True):
    """What tether reads of a Fluid data operation."""

    ref: OperationRef
    run_after: RunAfter | None
    node_affinity: NodeAffinity  # its own (spec.affinity, or the DataProcess job's pod spec; none for DataBackup)
    phase: str
    distributed: bool  # parallelism > 1
    cron: bool  # policy Cron or a schedule
    recorded: RecordedPlacement | None  # read from status.nodeAffinity, where Fluid recorded one
    dataset: str = ""  # a DataLoad's spec.dataset as namespace/name (admission's data-loaded check reads it)

    @property
    def key(self) -> ObjectKey:
        return self.ref.key


__all__ = [
    "FLUID_GROUP", "FLUID_GROUP_VERSION", "OPERATION_KINDS", "POLICY_DEFAULT", "POLICY_PREFER", "POLICY_REQUIRE",
    "AffinityStrategy", "DataOperation", "OperationRef", "Prefer", "RecordedPlacement", "RunAfter",
]
