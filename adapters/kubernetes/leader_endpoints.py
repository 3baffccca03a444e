"""The leader's address in the EndpointSlices of leader-only Services (``tether run --leader-service NAME``).

Only the leader acts: a pushed table-moved notification or a webhook call that reaches a standby can only be
answered 503 (a standby has no world to decide from). Kubernetes routes a Service by *pod* readiness, so the only
way readiness could keep a standby out of the push and webhook Services is for a standby to be not ready — and a
replica that is never ready stalls every StatefulSet rollout (each pod must be Ready before the next is replaced),
makes a PodDisruptionBudget block every eviction of the leader, and leaves the Deployment forever "not available".

So, as kube-apiserver does for the ``kubernetes`` Service: the Services that must reach the leader have no
selector, and the leader writes their EndpointSlice itself — this pod's address and the ports it serves (the
HTTP port: health, metrics, push; the webhook port) — when it takes the Lease (or at start without leader
election), and empties it when it stops leading gracefully. A takeover overwrites the slice with the new leader's
address; a leader that dies without a word leaves its address there until then (the lease duration, ~15 s, the
same window as a readiness probe failing). Every replica stays Ready while healthy; standbys are simply not in
these Services.

The slices live in the cluster tether *runs* in (the host cluster, the pod's service account) — not on Karmada's
API server, where every other object tether touches lives. RBAC there: ``get``/``update`` on these slices by
name and ``create`` on endpointslices in the pod's namespace (``ops/chart/templates/rbac-host.yaml``).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from tether.core.keys import ENDPOINTSLICE_MANAGED_BY_LABEL, SERVICE_NAME_LABEL

from .client import KubeClient, KubeError, Resource

log = structlog.get_logger("tether.leader")

ENDPOINT_SLICES = Resource("discovery.k8s.io", "v1", "endpointslices", "EndpointSlice", True)
MANAGED_BY = "leader-endpoints.tether.dev"  # endpointslice.kubernetes.io/managed-by (a label value: no "/")


def slice_name(service: str) -> str:
    return f"{service}-leader"


class LeaderEndpoints:
    """The EndpointSlice ``<service>-leader`` of each leader-only Service, in ``namespace`` (module doc)."""

    def __init__(self, kube: KubeClient, *, namespace: str, services: Sequence[str], address: str,
                 ports: Mapping[str, int], pod_name: str = "") -> None:
        self.kube = kube
        self.namespace = namespace
        self.services = tuple(services)
        self.address = address
        self.ports = dict(ports)
        self.pod_name = pod_name
        self.address_type = "IPv6" if ipaddress.ip_address(address).version == 6 else "IPv4"

    def body(self, service: str, *, leading: bool) -> dict[str, Any]:
        endpoint: dict[str, Any] = {"addresses": [self.address], "conditions": {"ready": True}}
        if self.pod_name:
            endpoint["targetRef"] = {"kind": "Pod", "name": self.pod_name, "namespace": self.namespace}
        return {
            "apiVersion": "discovery.k8s.io/v1", "kind": "EndpointSlice",
            "metadata": {"name": slice_name(service), "namespace": self.namespace,
                         "labels": {SERVICE_NAME_LABEL: service, ENDPOINTSLICE_MANAGED_BY_LABEL: MANAGED_BY}},
            "addressType": self.address_type,
            "endpoints": [endpoint] if leading else [],
            "ports": [{"name": name, "port": port, "protocol": "TCP"} for name, port in sorted(self.ports.items())],
        }

    def _names_me(self, current: dict[str, Any]) -> bool:
        return any(self.address in (e.get("addresses") or []) for e in current.get("endpoints") or [])

    async def publish(self) -> None:
        """This replica leads: its address in every slice (created, or replaced whatever it named)."""
        for service in self.services:
            await self._write(service, leading=True)
        log.info("leader endpoints published", services=list(self.services), address=self.address)

    async def withdraw(self) -> None:
        """This replica stops leading: empty the slices that still name it (a successor's are left alone).
        Best effort: a failure is logged, the successor overwrites the slice anyway."""
        for service in self.services:
            try:
                current = await self.kube.get(ENDPOINT_SLICES, slice_name(service), namespace=self.namespace)
                if current is not None and self._names_me(current):
                    await self._write(service, leading=False, current=current)
            except KubeError as exc:
                log.warning("could not withdraw the leader endpoints", service=service, status=exc.status,
                            message=exc.message[:200])

    async def _write(self, service: str, *, leading: bool, current: dict[str, Any] | None = None) -> None:
        name = slice_name(service)
        for _ in range(5):  # a conflict is another writer between our read and write: read again
            if current is None:
                current = await self.kube.get(ENDPOINT_SLICES, name, namespace=self.namespace)
            body = self.body(service, leading=leading)
            try:
                if current is None:
                    await self.kube.create(ENDPOINT_SLICES, body, namespace=self.namespace)
                else:
                    body["metadata"]["resourceVersion"] = current["metadata"]["resourceVersion"]
                    await self.kube.replace(ENDPOINT_SLICES, name, body, namespace=self.namespace)
                return
            except KubeError as exc:
                if exc.status != 409:
                    raise
                current = None
        raise KubeError(409, "Conflict", f"EndpointSlice {self.namespace}/{name}: a conflict on every attempt")
