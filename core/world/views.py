"""Typed views of the objects tether reads, parsed once per observation from the trimmed snapshots.

The log keeps whole objects (``core.kube.KubeObject``: ``spec`` and ``status`` stay raw JSON, so a future
decider can read a field nobody reads today); the fold (``projections.fold``) puts these views in the world, and
the deciders and the webhook decisions read them. A view and its parser are one description, so both live here.

A view decodes **eagerly only what the fold needs** to key and index the object (its reference, resourceVersion,
data identity, workload, finalizers, deletion, claimRefs) and keeps the raw JSON of the rest; what only the
decider reads (a claim's phase and conditions, a binding's placement and tether's exclusions) is decoded on first
use and memoised on the view (:class:`lazy` — views are ``dict=True`` structs, and the memo is
never serialised). A replay that only rebuilds state never pays for conditions and placements; the decider pays
for them once per observation, as before.

Parsing has two paths. The fast one decodes the raw spec and status straight into small typed structs of just
the fields tether reads (one C call each, unknown fields skipped unparsed). When a field has an unexpected type
the typed decode fails and the tolerant path runs on plain dictionaries, field by field — so parsing is total: a
malformed claim becomes a :class:`Claim` with ``problem`` set (the decider turns that into an ``InvalidSpec``
condition), never an exception. Both paths give the same view for every well-typed object. The namespace of a
claim's workload is defaulted here, and nowhere else.

The typed structs are a projection of the kinds' one description, ``core.api`` (:data:`READS` pairs each with the
kind's struct it reads, and a test fails when a field is not the kind's): they decode only what tether reads, the
rest skipped unparsed; they keep sequences as tuples, which the decider compares with what it builds; and they are
lenient where the published types are strict (a claim without a workload is read, and reported), since a reader
must take whatever the API server stored.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Mapping
from typing import Any

import msgspec

from .. import api
from ..commands import DATA_GROUP_VERSION
from ..identity import DataIdentity, identity_problem, make_identity
from ..keys import (
    ADDED_BY_TERM_ANNOTATION,
    CLAIM_FINALIZER,
    DATASET_ANNOTATION,
    DATASOURCE_FINALIZER,
    EXCLUDED_CLUSTERS_ANNOTATION,
    LOCALITY_TIERS_ANNOTATION,
    LOCATION_ANNOTATION,
    PLACEMENT_INJECTED_ANNOTATION,
)
from ..kube import Condition, KubeObject, ObjectRef, object_dict, parse_conditions
from ..lazy import lazy
from ..locality import LocalitySetting, parse_setting

CLAIM = "DataSourceClaim"
DATASOURCE = "DataSource"
BINDING = "ResourceBinding"
CLUSTER = "Cluster"
CONFIGMAP = "ConfigMap"
BINDING_GROUP_VERSION = "work.karmada.io/v1alpha2"


class Claim(msgspec.Struct, dict=True):
    """A DataSourceClaim as observed. ``status`` stays raw until the decider reads it (module docstring)."""

    ref: ObjectRef
    resource_version: str
    generation: int
    identity: DataIdentity | None  # None when the spec cannot name a data source
    problem: str  # why the spec is invalid ("" when valid)
    workload: str  # workload key (see workload_key); "" when the spec has none
    finalizers: tuple[str, ...]
    deleting: bool
    status: bytes  # raw JSON; bytes (not msgspec.Raw): snapshots are msgpack, and a copy frees the record
    locality: LocalitySetting | None = None  # spec.locality (None: absent; a refused one carries its problem)
    dataset: str = ""  # spec.dataset as namespace/name (the namespace defaulted to the workload's); "" when absent

    @lazy
    def _status(self) -> _ClaimStatus:
        return _claim_status_of(self.status)

    # cached too: after the first read each is a plain instance-dictionary hit (the decider reads them often)
    @lazy
    def phase(self) -> str:
        return self._status.phase or "Pending"

    @lazy
    def bound_data_source(self) -> str:
        return self._status.bound_data_source

    @lazy
    def conditions(self) -> tuple[Condition, ...]:
        return self._status.conditions


class Source(msgspec.Struct, dict=True):
    """A DataSource as observed. (``dict=True``: the raw claimRefs array of this observation is kept in its
    ``__dict__`` so that the next observation can reuse the refs parsed here; see ``_source_status_of``.)
    ``generation`` lets the next observation reuse the parsed spec when it did not change."""

    ref: ObjectRef
    resource_version: str
    generation: int
    identity: DataIdentity | None
    cluster_names: tuple[str, ...]
    location: str
    reclaim_policy: str
    finalizers: tuple[str, ...]
    deleting: bool
    claim_refs: tuple[ObjectRef, ...]
    claim_keys: tuple[str, ...]  # the object keys of claim_refs, computed once (the indexes use them)
    bound_claims: int
    released: bool = False  # its claimRefs went from non-empty to empty (reclaimPolicy Delete applies)


class Binding(msgspec.Struct, dict=True):
    """A ResourceBinding as observed (only what tether reads; the executor re-reads the rest).

    ``placement_json`` is the raw JSON of ``spec.placement`` alone (the rest of the spec is read once, at parse):
    ``placement`` is decoded when the decider first plans this binding (module docstring). ``dict=True`` also lets
    the decider memoise its placement plan for this very observation in the instance's ``__dict__`` (never
    serialised; a new observation is a new view, so the memo cannot go stale).

    ``annotations`` holds tether's own annotations of the binding, the only ones anything reads (placement
    injected, the exclusions it added, per term): Karmada's (``policy.karmada.io/applied-placement``: a copy of
    the placement) and the users' stay in the log. The dictionary is shared between views with the same ones
    (:func:`_tether_annotations`), so it is never mutated."""

    ref: ObjectRef
    resource_version: str
    workload: str
    annotations: dict[str, str]
    injected: bool
    scheduled_clusters: tuple[str, ...]
    placement_json: bytes  # raw JSON of spec.placement, b"" when absent (see Claim.status)
    observed_affinity: str = ""  # status.schedulerObservingAffinityName: the group karmada-scheduler placed it by

    @lazy
    def placement(self) -> dict[str, Any]:
        return object_dict(self.placement_json) if self.placement_json else {}  # ({} unless a JSON object)

    @lazy
    def added(self) -> tuple[str, ...]:
        """The clusters tether's own exclusions added (from its annotation)."""
        return tuple(sorted(added_exclusions(self.annotations)))


def added_exclusions(annotations: Mapping[str, str]) -> frozenset[str]:
    """The clusters tether's exclusions added to a binding, as its annotation records them (the union over its
    terms: ``core.datadependency.exclusions``)."""
    raw = annotations.get(EXCLUDED_CLUSTERS_ANNOTATION, "")
    return frozenset(c for c in (p.strip() for p in raw.split(",")) if c)


# --- sharing what many views hold alike ----------------------------------------------------------------------
# A view keeps strings decoded from its record, each its own copy: the API version, kind and namespace of every
# reference, every finalizer, the annotation names. They come from a small vocabulary, so they are interned (a
# bounded set of strings: never a name or a uid, which would grow with the objects ever seen). Per object that was
# about a quarter of the world's memory (ops/bench/memory.py); interning costs a dictionary lookup per string, once
# per parse.

_intern = sys.intern
#: Bounds of the caches below: they hold what many objects share; a long tail of distinct values is not kept.
_SHARED_LIMIT = 1024
_FINALIZERS: dict[tuple[str, ...], tuple[str, ...]] = {(): ()}
_CLAIM = (DATA_GROUP_VERSION, CLAIM)
_SOURCE = (DATA_GROUP_VERSION, DATASOURCE)
_BINDING = (BINDING_GROUP_VERSION, BINDING)
_CLAIM_FINALIZERS = (CLAIM_FINALIZER,)
_SOURCE_FINALIZERS = (DATASOURCE_FINALIZER,)


def _ref(obj: KubeObject, usual: tuple[str, str]) -> ObjectRef:
    """``kube.ref_of`` with its shared strings interned; ``usual`` is the (API version, kind) the caller expects,
    taken as they are when the object's equal them (a comparison costs less than interning)."""
    meta, (api_version, kind) = obj.metadata, usual
    if obj.api_version != api_version:
        api_version = _intern(obj.api_version)
    if obj.kind != kind:
        kind = _intern(obj.kind)
    return ObjectRef(api_version=api_version, kind=kind, name=meta.name, namespace=_intern(meta.namespace),
                     uid=meta.uid)


def _finalizers(finalizers: list[str], usual: tuple[str]) -> tuple[str, ...]:
    """The finalizers as a tuple shared by every view with the same ones (``usual``: the common case, compared)."""
    if not finalizers:
        return ()
    if len(finalizers) == 1 and finalizers[0] == usual[0]:
        return usual
    held = tuple(finalizers)
    shared = _FINALIZERS.get(held)
    if shared is None:
        shared = tuple(map(_intern, held))
        if len(_FINALIZERS) < _SHARED_LIMIT:
            _FINALIZERS[shared] = shared
    return shared


#: The annotations tether reads on a binding (its own): :func:`tether.core.datadependency.exclusions.plan_placement`.
_TETHER_ANNOTATIONS = (PLACEMENT_INJECTED_ANNOTATION, EXCLUDED_CLUSTERS_ANNOTATION, ADDED_BY_TERM_ANNOTATION,
                       LOCALITY_TIERS_ANNOTATION)
_NO_ANNOTATIONS: dict[str, str] = {}
_ANNOTATION_SETS: dict[tuple[str | None, ...], dict[str, str]] = {(None, None, None, None): _NO_ANNOTATIONS}


def _tether_annotations(annotations: Mapping[str, str]) -> dict[str, str]:
    """tether's own annotations of a binding, as a dictionary shared by the views with the same ones: a binding
    carries one of a few sets (its exclusions are one of a few lists of clusters)."""
    if not annotations:
        return _NO_ANNOTATIONS
    values = (annotations.get(PLACEMENT_INJECTED_ANNOTATION), annotations.get(EXCLUDED_CLUSTERS_ANNOTATION),
              annotations.get(ADDED_BY_TERM_ANNOTATION), annotations.get(LOCALITY_TIERS_ANNOTATION))
    shared = _ANNOTATION_SETS.get(values)
    if shared is None:
        shared = {k: v for k, v in zip(_TETHER_ANNOTATIONS, values, strict=True) if v is not None}
        if len(_ANNOTATION_SETS) < _SHARED_LIMIT:
            _ANNOTATION_SETS[values] = shared
    return shared


def _shared_refs(refs: tuple[ObjectRef, ...], claims: Mapping[str, Claim] | None,
                 keys: tuple[str, ...]) -> tuple[ObjectRef, ...]:
    """A DataSource's claimRefs, each the reference the claim itself holds where it is equal (every string of it
    shared): a ref to a claim the world does not hold (gone, or not observed yet) keeps its own strings."""
    if claims is None:
        return refs
    get = claims.get
    return tuple([c.ref if (c := get(key)) is not None and c.ref == ref else ref
                  for ref, key in zip(refs, keys, strict=True)])


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


class _Workload(msgspec.Struct, gc=False, rename="camel"):
    api_version: str = ""
    kind: str = ""
    name: str = ""
    namespace: str | None = None


class _ClaimSpec(msgspec.Struct, gc=False, rename="camel"):
    system: str
    data_source_type: str
    data_source_name: str
    attributes: dict[str, str] | None = None
    workload: _Workload | None = None


class _ClaimStatus(msgspec.Struct, gc=False, rename="camel"):
    phase: str = ""
    bound_data_source: str = ""
    conditions: tuple[Condition, ...] = ()


_claim_spec = msgspec.json.Decoder(_ClaimSpec)
_claim_status = msgspec.json.Decoder(_ClaimStatus, strict=False)  # strict=False: as parse_conditions


def _claim_status_of(raw: bytes) -> _ClaimStatus:
    try:
        return _claim_status.decode(raw)
    except msgspec.ValidationError:
        status = object_dict(raw)
        phase, bound = status.get("phase"), status.get("boundDataSource")
        return _ClaimStatus(phase=phase if isinstance(phase, str) else "",
                            bound_data_source=bound if isinstance(bound, str) else "",
                            conditions=parse_conditions(status.get("conditions")))


@functools.lru_cache(maxsize=4096)
def _identity_and_problem(system: str, type_: str, name: str,
                          attributes: tuple[tuple[str, str], ...]) -> tuple[DataIdentity, str]:
    """One identity object per distinct identity among the claims seen lately, with its problem ("" when none).

    Thousands of claims name a few hundred tables: sharing the (immutable) identity saves building and checking
    it per claim, and its key, memoised on the object, is computed once for all the claims that name it. It also
    lets a re-parsed claim keep the very identity object it had (``projections.fold._put_claim`` tests that first)."""
    identity = DataIdentity(system=system, type=type_, name=name, attributes=attributes)
    return identity, identity_problem(identity) or ""


def _claim_spec_of(obj: KubeObject) -> tuple[DataIdentity | None, str, str]:
    """(identity, problem, workload key) of a claim's spec."""
    try:
        typed = _claim_spec.decode(obj.spec)
    except msgspec.ValidationError:
        return _claim_spec_tolerant(obj.spec_dict(), obj.metadata.namespace)
    attributes = tuple(sorted(typed.attributes.items())) if typed.attributes else ()
    parsed, problem = _identity_and_problem(typed.system, typed.data_source_type, typed.data_source_name, attributes)
    identity = None if problem else parsed
    w = typed.workload
    if w is None or not (w.api_version and w.kind and w.name):
        return None, problem or "spec.workload must give apiVersion, kind and name", ""
    return identity, problem, workload_key(w.api_version, w.kind, w.namespace or obj.metadata.namespace, w.name)


def _claim_spec_tolerant(spec: dict[str, Any], namespace: str) -> tuple[DataIdentity | None, str, str]:
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
    w = spec.get("workload")
    if isinstance(w, dict) and all(isinstance(w.get(f), str) and w.get(f) for f in ("apiVersion", "kind", "name")):
        ns = w.get("namespace") or namespace  # empty namespace = the claim's (defaulted here, once)
        return identity, problem, workload_key(w["apiVersion"], w["kind"], ns if isinstance(ns, str) else namespace,
                                               w["name"])
    # no workload to inject into: the claim cannot be served (VG marks the field required)
    return None, problem or "spec.workload must give apiVersion, kind and name", ""


def parse_claim(obj: KubeObject, previous: Claim | None = None) -> Claim:
    """The typed view of a claim. When ``previous`` is the same object at the same generation, its spec did not
    change (the API bumps generation on every spec change of a resource with a status subresource), so the
    parsed spec is reused without decoding it: most observations of a claim are status writes."""
    meta = obj.metadata
    if previous is not None and meta.generation > 0 and previous.generation == meta.generation and \
            previous.ref.uid == meta.uid:
        ref, identity, problem, workload = previous.ref, previous.identity, previous.problem, previous.workload
        locality, dataset = previous.locality, previous.__dict__.get("spec_dataset", "")
    else:
        ref = _ref(obj, _CLAIM)
        identity, problem, workload = _claim_spec_of(obj)
        locality, dataset = _claim_extras(obj, workload)
    spec_dataset = dataset
    if not dataset and meta.annotations:  # (metadata: no generation of its own, read every time)
        dataset = _named_dataset(meta.annotations.get(DATASET_ANNOTATION, ""), workload, meta.namespace)
    claim = Claim(
        ref=ref,
        resource_version=meta.resource_version,
        generation=meta.generation,
        identity=identity,
        problem=problem,
        workload=workload,
        finalizers=_finalizers(meta.finalizers, _CLAIM_FINALIZERS),
        deleting=meta.deletion_timestamp is not None,
        status=bytes(obj.status),
        locality=locality,
        dataset=dataset,
    )
    if spec_dataset:
        claim.__dict__["spec_dataset"] = spec_dataset  # (a later status write reuses it)
    return claim


def _named_dataset(value: str, workload: str, namespace: str) -> str:
    """``[namespace/]name`` of the ``tether.dev/dataset`` annotation as ``namespace/name`` (the workload's namespace
    by default); "" when it names none."""
    value = value.strip()
    if not value:
        return ""
    if "/" in value:
        return value
    return f"{workload.split('/')[2] if workload.count('/') >= 3 else namespace}/{value}"


class _Dataset(msgspec.Struct, gc=False):
    name: str = ""
    namespace: str = ""


class _ClaimExtras(msgspec.Struct, gc=False):
    """The optional fields of a claim's spec that Volcano Global's CRD does not have (read only when present)."""

    locality: msgspec.Raw | None = None  # parsed by core.locality.parse_setting (which says what is wrong)
    dataset: _Dataset | None = None


_claim_extras_decoder = msgspec.json.Decoder(_ClaimExtras)


def _claim_extras(obj: KubeObject, workload: str) -> tuple[LocalitySetting | None, str]:
    """A claim's ``spec.locality`` and ``spec.dataset`` (namespace/name, the namespace defaulted to the workload's).
    A claim without them — every claim Volcano Global's CRD stores — costs two byte searches."""
    spec = bytes(obj.spec)
    if b'"locality"' not in spec and b'"dataset"' not in spec:
        return None, ""
    try:
        extras = _claim_extras_decoder.decode(spec)
    except msgspec.ValidationError:
        raw = obj.spec_dict()
        found = raw.get("dataset")
        name = found.get("name") if isinstance(found, dict) else None
        namespace = found.get("namespace") if isinstance(found, dict) else None
        extras = _ClaimExtras(
            locality=msgspec.Raw(msgspec.json.encode(raw["locality"])) if raw.get("locality") is not None else None,
            dataset=_Dataset(name=name if isinstance(name, str) else "",
                             namespace=namespace if isinstance(namespace, str) else "") if found is not None else None)
    locality: LocalitySetting | None = None
    if extras.locality is not None:
        try:
            locality = parse_setting(msgspec.json.decode(extras.locality), "spec.locality")
        except ValueError as error:
            locality = LocalitySetting(problem=str(error))
    dataset = ""
    if extras.dataset is not None and extras.dataset.name:
        namespace = extras.dataset.namespace or (workload.split("/")[2] if workload.count("/") >= 3 else
                                                 obj.metadata.namespace)
        dataset = f"{namespace}/{extras.dataset.name}"
    return locality, dataset


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


class _Locality(msgspec.Struct, gc=False, rename="camel"):
    cluster_names: list[str] | None = None


class _SourceSpec(msgspec.Struct, gc=False, rename="camel"):
    system: str = ""
    type: str = ""
    name: str = ""
    attributes: dict[str, str] | None = None
    locality: _Locality | None = None
    reclaim_policy: str = ""


class _SourceStatus(msgspec.Struct, gc=False, rename="camel"):
    bound_claims: int = 0
    claim_refs: msgspec.Raw = msgspec.Raw(b"[]")  # the whole array, unparsed: see _source_status_of


#: Each reader struct and the struct of ``core.api`` it reads: a reader reads a projection of the kind's one
#: description (its fields, by their wire names) — ``tests/ops/test_resource_descriptions.py`` holds them together.
READS: dict[type[msgspec.Struct], type[msgspec.Struct]] = {
    _ClaimSpec: api.DataSourceClaimSpec, _Workload: api.WorkloadReference, _ClaimStatus: api.DataSourceClaimStatus,
    _SourceSpec: api.DataSourceSpec, _Locality: api.Locality, _SourceStatus: api.DataSourceStatus,
    _RawRef: api.ClaimReference, ObjectRef: api.ClaimReference, _ClaimExtras: api.DataSourceClaimSpec,
    _Dataset: api.DatasetReference,
}

_source_spec = msgspec.json.Decoder(_SourceSpec)
_source_status = msgspec.json.Decoder(_SourceStatus, strict=False)  # strict=False: as _claim_refs
_object_refs = msgspec.json.Decoder(tuple[ObjectRef, ...], strict=False)  # as tether writes refs (partial ones:
#                                                                           the tolerant path)


def _source_status_of(status: msgspec.Raw, previous: Source | None,
                      claims: Mapping[str, Claim] | None = None) -> _ParsedRefs:
    """A DataSource's claimRefs (and their keys) and boundClaims; raises ``msgspec.ValidationError`` for the
    tolerant path.

    claimRefs grows with every claim of the table and is rewritten whole at each claim's binding, so decoding it
    anew each time would make the fold O(claims) per write — most of it allocating, then freeing, five strings
    per ref. So the array is taken raw (one copy of its bytes, kept in the view's ``__dict__``, never serialised:
    after a snapshot the first write parses it all), and when it begins with exactly the refs of ``previous``
    (the common case: a claim bound, and tether keeps claimRefs sorted) the refs and keys already made are
    reused and only the elements after them are parsed. Comparing bytes is exact: the previous array ``[r1,…,rk]``
    parsed as k JSON objects, whose extent is fixed by their content, so an array starting with ``[r1,…,rk``
    starts with those k refs and goes on with ``,`` and the others, or ``]``. Any other change parses all.

    A ref parsed is the claim's own reference when ``claims`` holds the claim with an equal one
    (:func:`_shared_refs`)."""
    split = _source_status.decode(status)
    array = bytes(split.claim_refs)
    memo: bytes | None = previous.__dict__.get("refs_json") if previous is not None else None
    if memo is not None and previous is not None and previous.claim_refs and \
            array.startswith(memoryview(memo)[:-1]):  # the previous array without its closing bracket
        rest = array[len(memo) - 1:].lstrip()
        if rest.startswith(b"]"):
            return _ParsedRefs(refs=previous.claim_refs, keys=previous.claim_keys, bound=split.bound_claims,
                               array=array, extends=previous.claim_keys)
        if rest.startswith(b","):
            added = _object_refs.decode(b"[" + rest[1:])
            added_keys = tuple([f"{r.kind}/{r.namespace}/{r.name}" for r in added])
            return _ParsedRefs(refs=previous.claim_refs + _shared_refs(added, claims, added_keys),
                               keys=previous.claim_keys + added_keys,
                               bound=split.bound_claims, array=array, extends=previous.claim_keys)
    refs = _object_refs.decode(array)
    keys = tuple([f"{r.kind}/{r.namespace}/{r.name}" for r in refs])  # object_key, inlined: hot
    refs = _shared_refs(refs, claims, keys)
    return _ParsedRefs(refs=refs, keys=keys, bound=split.bound_claims, array=array)


class _ParsedRefs(msgspec.Struct, gc=False):
    refs: tuple[ObjectRef, ...]
    keys: tuple[str, ...]
    bound: int
    array: bytes | None = None  # the refs' raw JSON array (the memo for the next observation)
    extends: tuple[str, ...] | None = None  # the previous view's keys when ``keys`` begins with them


def _source_spec_of(obj: KubeObject) -> _SourceSpec | None:
    """The typed spec of a DataSource; None when its identity is malformed."""
    try:
        return _source_spec.decode(obj.spec)
    except msgspec.ValidationError:
        pass
    spec = obj.spec_dict()  # the tolerant path: keep what is well-typed
    fields = (spec.get("system"), spec.get("type"), spec.get("name"))
    attributes, _ = _str_map(spec.get("attributes"))
    locality = spec.get("locality")
    names = locality.get("clusterNames") if isinstance(locality, dict) else None
    clusters = [c for c in names if isinstance(c, str)] if isinstance(names, list) else None
    reclaim = spec.get("reclaimPolicy")
    ok = all(isinstance(f, str) for f in fields) and attributes is not None
    return _SourceSpec(system=str(fields[0]) if ok else "", type=str(fields[1]) if ok else "",
                       name=str(fields[2]) if ok else "", attributes=attributes,
                       locality=_Locality(cluster_names=clusters), reclaim_policy=reclaim if isinstance(reclaim, str)
                       else "")


def parse_source(obj: KubeObject, previous: Source | None = None, claims: Mapping[str, Claim] | None = None
                 ) -> Source:
    """The typed view of a DataSource; ``previous`` (the view it replaces) lets its claimRefs be reused, and its
    spec too when the generation says the spec did not change (most observations are claimRefs writes).
    ``claims`` (the world's, by key) lend their references to the claimRefs that equal them."""
    meta = obj.metadata
    same = previous is not None and previous.ref.uid == meta.uid
    if same and previous is not None and meta.generation > 0 and previous.generation == meta.generation:
        identity, clusters, reclaim = previous.identity, previous.cluster_names, previous.reclaim_policy
    else:
        identity, clusters, reclaim = _source_spec_fields(obj)
    try:
        parsed = _source_status_of(obj.status, previous, claims)
    except msgspec.ValidationError:
        raw = obj.status_dict()
        refs = _claim_refs(raw.get("claimRefs"))
        bound_raw = raw.get("boundClaims")
        parsed = _ParsedRefs(refs=refs, keys=tuple([f"{r.kind}/{r.namespace}/{r.name}" for r in refs]),
                             bound=bound_raw if isinstance(bound_raw, int) else 0)
    source = Source(
        ref=previous.ref if same and previous is not None else _ref(obj, _SOURCE),
        resource_version=meta.resource_version,
        generation=meta.generation,
        identity=identity,
        cluster_names=clusters,
        location=meta.annotations.get(LOCATION_ANNOTATION, ""),
        reclaim_policy=reclaim,
        finalizers=_finalizers(meta.finalizers, _SOURCE_FINALIZERS),
        deleting=meta.deletion_timestamp is not None,
        claim_refs=parsed.refs,
        claim_keys=parsed.keys,
        bound_claims=parsed.bound,
    )
    if parsed.array is not None:
        source.__dict__["refs_json"] = parsed.array
    if parsed.extends is not None:  # read (and dropped) by the fold's index update
        source.__dict__["extends"] = parsed.extends
    return source


def _source_spec_fields(obj: KubeObject) -> tuple[DataIdentity | None, tuple[str, ...], str]:
    """(identity, sorted locality cluster names, reclaim policy) of a DataSource's spec."""
    spec = _source_spec_of(obj)
    identity: DataIdentity | None = None
    if spec is not None and spec.system and spec.type and spec.name:
        identity = make_identity(spec.system, spec.type, spec.name, spec.attributes)
    names = spec.locality.cluster_names if spec is not None and spec.locality is not None else None
    reclaim = spec.reclaim_policy if spec is not None else ""
    return (identity, tuple(sorted(set(names))) if names else (),
            reclaim if reclaim in ("Retain", "Delete") else "Retain")  # VG's documented default


class _Resource(msgspec.Struct, gc=False, rename="camel"):
    api_version: str = ""
    kind: str = ""
    namespace: str = ""
    name: str = ""


class _TargetCluster(msgspec.Struct, gc=False):
    name: str


class _BindingSpec(msgspec.Struct, gc=False):
    resource: _Resource | None = None
    clusters: list[_TargetCluster] | None = None
    placement: msgspec.Raw = msgspec.Raw(b"")  # kept raw (see Binding.placement); empty when absent


_binding_spec = msgspec.json.Decoder(_BindingSpec)


def parse_binding(obj: KubeObject, previous: Binding | None = None) -> Binding:
    """The typed view of a binding. ``previous`` (the view it replaces, at the same key) lends its workload key
    and scheduled clusters when they are unchanged (most writes of a binding change its placement or its
    annotations, not what it binds or where), so that the views of one binding share them."""
    meta = obj.metadata
    typed: _BindingSpec | None = None
    try:
        typed = _binding_spec.decode(obj.spec)
    except msgspec.ValidationError:
        spec = obj.spec_dict()
        workload, scheduled = _binding_spec_tolerant(spec, meta.namespace)
        placement_json = msgspec.json.encode(spec["placement"]) if spec.get("placement") is not None else b""
    if typed is not None:
        resource, clusters = typed.resource, typed.clusters
        workload = "" if resource is None else workload_key(resource.api_version, resource.kind,
                                                            resource.namespace or meta.namespace, resource.name)
        scheduled = tuple(sorted({_intern(c.name) for c in clusters})) if clusters else ()
        placement_json = bytes(typed.placement)
    if previous is not None:
        if workload == previous.workload:
            workload = previous.workload
        if scheduled == previous.scheduled_clusters:
            scheduled = previous.scheduled_clusters
    annotations = _tether_annotations(meta.annotations)
    same = previous is not None and previous.ref.uid == meta.uid
    return Binding(
        ref=previous.ref if same and previous is not None else _ref(obj, _BINDING),
        resource_version=meta.resource_version,
        workload=workload,
        annotations=annotations,
        injected=annotations.get(PLACEMENT_INJECTED_ANNOTATION) == "true",
        scheduled_clusters=scheduled,
        placement_json=placement_json,
        observed_affinity=observed_affinity(obj),
    )


class _BindingStatus(msgspec.Struct, gc=False, rename="camel"):
    scheduler_observing_affinity_name: object = ""


_binding_status = msgspec.json.Decoder(_BindingStatus)


def observed_affinity(obj: KubeObject) -> str:
    """A binding's ``status.schedulerObservingAffinityName`` (karmada-scheduler writes it only for a placement with
    ``clusterAffinities``: a byte search spares every other binding the decoding)."""
    status = bytes(obj.status)
    if b"schedulerObservingAffinityName" not in status:
        return ""
    try:
        name = _binding_status.decode(status).scheduler_observing_affinity_name
    except msgspec.DecodeError:
        return ""
    return _intern(name) if isinstance(name, str) else ""


def _binding_spec_tolerant(spec: dict[str, Any], namespace: str) -> tuple[str, tuple[str, ...]]:
    resource = spec.get("resource")
    workload = ""
    if isinstance(resource, dict):
        workload = workload_key(
            str(resource.get("apiVersion", "")),
            str(resource.get("kind", "")),
            str(resource.get("namespace") or namespace),
            str(resource.get("name", "")),
        )
    clusters = spec.get("clusters")
    scheduled = (
        tuple(sorted({c["name"] for c in clusters if isinstance(c, dict) and isinstance(c.get("name"), str)}))
        if isinstance(clusters, list)
        else ()
    )
    return workload, scheduled


class _ClusterStatus(msgspec.Struct, gc=False):
    conditions: tuple[Condition, ...] = ()


_cluster_status = msgspec.json.Decoder(_ClusterStatus, strict=False)


def cluster_ready(obj: KubeObject) -> bool:
    try:
        conditions = _cluster_status.decode(obj.status).conditions
    except msgspec.ValidationError:
        conditions = parse_conditions(obj.status_dict().get("conditions"))
    for c in conditions:
        if c.type == "Ready":
            return c.status == "True"
    return False
