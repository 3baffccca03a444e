"""What the world keeps of a Karmada Cluster besides its readiness: where it is (:class:`ClusterPlace`).

Locality tiers (``core.datadependency.tiers``) group clusters by a topology label (``topology.karmada.io/region``,
say): the ``near-data`` tier is every cluster sharing that label's value with a cluster holding the data. A user's
own cluster-affinity terms select clusters by labels and by ``spec.provider``/``region``/``zone`` (Karmada's
``fieldSelector``), and a tier intersected with such a term may select no cluster at all — then it is left out.
So the world keeps, per Cluster, its labels and those three fields, parsed once per observation; a Cluster's status
(rewritten on every heartbeat) is not read here (readiness is ``World.clusters``, capacity admission's).
"""

from __future__ import annotations

import msgspec

from ..kube import KubeObject


class ClusterPlace(msgspec.Struct, frozen=True, gc=False):
    """A Karmada Cluster's labels and ``spec.provider``, ``region`` and ``zone``."""

    labels: dict[str, str] = {}
    provider: str = ""
    region: str = ""
    zone: str = ""

    def field(self, name: str) -> str:
        """A field Karmada's ``fieldSelector`` may name (provider, region, zone); "" for any other."""
        return {"provider": self.provider, "region": self.region, "zone": self.zone}.get(name, "")


class _Spec(msgspec.Struct, gc=False):
    provider: object = ""
    region: object = ""
    zone: object = ""


_spec = msgspec.json.Decoder(_Spec)
NOWHERE = ClusterPlace()


def cluster_place(obj: KubeObject) -> ClusterPlace:
    """The place of a Cluster as observed (total: a field of another type reads as empty)."""
    try:
        spec = _spec.decode(obj.spec)
    except msgspec.DecodeError:
        spec = _Spec()
    labels = obj.metadata.labels
    fields = [value if isinstance(value, str) else "" for value in (spec.provider, spec.region, spec.zone)]
    if not labels and not any(fields):
        return NOWHERE
    return ClusterPlace(labels=dict(labels), provider=fields[0], region=fields[1], zone=fields[2])


__all__ = ["NOWHERE", "ClusterPlace", "cluster_place"]
