"""Typed views of the objects tether reads, parsed once per observation from the trimmed snapshots.

The log keeps whole objects (``core.kube.KubeObject``: ``spec`` and ``status`` stay dictionaries, so a future
decider can read a field nobody reads today); the projections work on these views instead. Parsing is total: a
malformed claim becomes a :class:`Claim` with ``problem`` set (the decider turns that into an ``InvalidSpec``
condition), never an exception. The namespace of a claim's workload is defaulted here, and nowhere else.
"""

from __future__ import annotations

from typing import Any

import msgspec

from tether.core.commands import LOCATION_ANNOTATION, PLACEMENT_INJECTED_ANNOTATION
from tether.core.identity import DataIdentity, identity_problem, make_identity
from tether.core.kube import Condition, KubeObject, ObjectRef, parse_conditions, ref_of
from tether.core.placement import added_exclusions

CLAIM = "DataSourceClaim"
DATASOURCE = "DataSource"
BINDING = "ResourceBinding"
CLUSTER = "Cluster"
CONFIGMAP = "ConfigMap"


class Claim(msgspec.Struct):
    """A DataSourceClaim as observed."""

    ref: ObjectRef
    resource_version: str
    generation: int
    identity: DataIdentity | None  # None when the spec cannot name a data source
    problem: str  # why the spec is invalid ("" when valid)
    workload: str  # workload key (see workload_key); "" when the spec has none
    finalizers: tuple[str, ...]
    deleting: bool
    phase: str
    bound_data_source: str
    conditions: tuple[Condition, ...]


class Source(msgspec.Struct):
    """A DataSource as observed."""

    ref: ObjectRef
    resource_version: str
    identity: DataIdentity | None
    cluster_names: tuple[str, ...]
    location: str
    reclaim_policy: str
    finalizers: tuple[str, ...]
    deleting: bool
    claim_refs: tuple[ObjectRef, ...]
    bound_claims: int
    released: bool = False  # its claimRefs went from non-empty to empty (reclaimPolicy Delete applies)


class Binding(msgspec.Struct):
    """A ResourceBinding as observed (only what tether reads; the executor re-reads the rest)."""

    ref: ObjectRef
    resource_version: str
    workload: str
    placement: dict[str, Any]
    annotations: dict[str, str]
    injected: bool
    added: tuple[str, ...]
    scheduled_clusters: tuple[str, ...]


def workload_key(api_version: str, kind: str, namespace: str, name: str) -> str:
    """Workloads are matched by API group (not version), kind, namespace and name."""
    group = api_version.rsplit("/", 1)[0] if "/" in api_version else ""
    return f"{group}/{kind}/{namespace}/{name}"


def _str_map(value: object) -> tuple[dict[str, str] | None, str]:
    if value is None:
        return {}, ""
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) for k, v in value.items()):
        return None, "spec.attributes must map strings to strings"
    return value, ""


def parse_claim(obj: KubeObject, previous: Claim | None = None) -> Claim:
    """The typed view of a claim. When ``previous`` is the same object at the same generation, its spec did not
    change (the API bumps generation on every spec change of a resource with a status subresource), so the
    parsed spec is reused: most observations of a claim are status writes."""
    meta = obj.metadata
    status = obj.status
    if previous is not None and meta.generation > 0 and previous.generation == meta.generation and \
            previous.ref.uid == meta.uid:
        phase = status.get("phase")
        bound = status.get("boundDataSource")
        return Claim(ref=previous.ref, resource_version=meta.resource_version, generation=meta.generation,
                     identity=previous.identity, problem=previous.problem, workload=previous.workload,
                     finalizers=tuple(meta.finalizers), deleting=obj.deleting,
                     phase=phase if isinstance(phase, str) and phase else "Pending",
                     bound_data_source=bound if isinstance(bound, str) else "",
                     conditions=parse_conditions(status.get("conditions")))
    spec = obj.spec
    problem = ""
    identity: DataIdentity | None = None
    fields = [spec.get("system"), spec.get("dataSourceType"), spec.get("dataSourceName")]
    attributes, attr_problem = _str_map(spec.get("attributes"))
    if not all(isinstance(f, str) for f in fields):
        problem = "spec.system, spec.dataSourceType and spec.dataSourceName must be strings"
    elif attributes is None:
        problem = attr_problem
    else:
        system, type_, name = (str(f) for f in fields)
        identity = make_identity(system, type_, name, attributes)
        problem = identity_problem(identity) or ""
        if problem:
            identity = None
    workload = ""
    w = spec.get("workload")
    if isinstance(w, dict) and all(isinstance(w.get(f), str) and w.get(f) for f in ("apiVersion", "kind", "name")):
        ns = w.get("namespace") or meta.namespace  # empty namespace = the claim's (defaulted here, once)
        workload = workload_key(w["apiVersion"], w["kind"], ns if isinstance(ns, str) else meta.namespace, w["name"])
    else:  # no workload to inject into: the claim cannot be served (VG marks the field required)
        problem = problem or "spec.workload must give apiVersion, kind and name"
        identity = None
    phase = status.get("phase")
    bound = status.get("boundDataSource")
    return Claim(
        ref=ref_of(obj),
        resource_version=meta.resource_version,
        generation=meta.generation,
        identity=identity,
        problem=problem,
        workload=workload,
        finalizers=tuple(meta.finalizers),
        deleting=obj.deleting,
        phase=phase if isinstance(phase, str) and phase else "Pending",
        bound_data_source=bound if isinstance(bound, str) else "",
        conditions=parse_conditions(status.get("conditions")),
    )


class _RawRef(msgspec.Struct, gc=False, rename="camel"):
    name: str
    api_version: str = ""
    kind: str = CLAIM
    namespace: str = ""
    uid: str = ""


def _claim_refs(raw: object) -> tuple[ObjectRef, ...]:
    if not isinstance(raw, list):
        return ()
    try:  # the common case, in one C call
        return tuple(ObjectRef(api_version=r.api_version, kind=r.kind, name=r.name, namespace=r.namespace, uid=r.uid)
                     for r in msgspec.convert(raw, tuple[_RawRef, ...], strict=False))
    except msgspec.ValidationError:
        pass
    refs = []
    for item in raw:
        if isinstance(item, dict) and isinstance(item.get("name"), str):
            refs.append(
                ObjectRef(
                    api_version=str(item.get("apiVersion", "")),
                    kind=str(item.get("kind", CLAIM)),
                    name=item["name"],
                    namespace=str(item.get("namespace", "")),
                    uid=str(item.get("uid", "")),
                )
            )
    return tuple(refs)


def parse_source(obj: KubeObject) -> Source:
    spec = obj.spec
    identity: DataIdentity | None = None
    fields = (spec.get("system"), spec.get("type"), spec.get("name"))
    attributes, _ = _str_map(spec.get("attributes"))
    if all(isinstance(f, str) and f for f in fields) and attributes is not None:
        identity = make_identity(str(fields[0]), str(fields[1]), str(fields[2]), attributes)
    locality = spec.get("locality")
    names = locality.get("clusterNames") if isinstance(locality, dict) else None
    clusters = tuple(sorted({c for c in names if isinstance(c, str)})) if isinstance(names, list) else ()
    bound = obj.status.get("boundClaims")
    reclaim = spec.get("reclaimPolicy")
    return Source(
        ref=ref_of(obj),
        resource_version=obj.metadata.resource_version,
        identity=identity,
        cluster_names=clusters,
        location=obj.metadata.annotations.get(LOCATION_ANNOTATION, ""),
        reclaim_policy=reclaim if reclaim in ("Retain", "Delete") else "Retain",  # VG's documented default
        finalizers=tuple(obj.metadata.finalizers),
        deleting=obj.deleting,
        claim_refs=_claim_refs(obj.status.get("claimRefs")),
        bound_claims=bound if isinstance(bound, int) else 0,
    )


def parse_binding(obj: KubeObject) -> Binding:
    spec = obj.spec
    resource = spec.get("resource")
    workload = ""
    if isinstance(resource, dict):
        workload = workload_key(
            str(resource.get("apiVersion", "")),
            str(resource.get("kind", "")),
            str(resource.get("namespace") or obj.metadata.namespace),
            str(resource.get("name", "")),
        )
    placement = spec.get("placement")
    clusters = spec.get("clusters")
    scheduled = (
        tuple(sorted({c["name"] for c in clusters if isinstance(c, dict) and isinstance(c.get("name"), str)}))
        if isinstance(clusters, list)
        else ()
    )
    annotations = obj.metadata.annotations
    return Binding(
        ref=ref_of(obj),
        resource_version=obj.metadata.resource_version,
        workload=workload,
        placement=placement if isinstance(placement, dict) else {},
        annotations=dict(annotations),
        injected=annotations.get(PLACEMENT_INJECTED_ANNOTATION) == "true",
        added=tuple(sorted(added_exclusions(annotations))),
        scheduled_clusters=scheduled,
    )


def cluster_ready(obj: KubeObject) -> bool:
    for c in parse_conditions(obj.status.get("conditions")):
        if c.type == "Ready":
            return c.status == "True"
    return False
