"""Kubernetes objects as tether records them: trimmed snapshots, references, conditions.

Every observation of a Kubernetes object is appended to the log as a :class:`KubeObject`, so that a replay
needs nothing but the log. The snapshot keeps the whole object except what only costs space and never
informs a decision: ``metadata.managedFields`` and the ``kubectl.kubernetes.io/last-applied-configuration``
annotation (which repeats the spec). ``spec`` and ``status`` are kept **verbatim, as raw JSON** (``msgspec.Raw``):
a log written today must still be useful to a decider written next year that looks at a field nobody reads yet,
and the fields nobody reads today should cost nothing. Decoding an event therefore stops at the metadata; the
projections decode the raw spec and status straight into typed views of the parts tether reads (and skip the
spec when the generation says it did not change) — on a replay that is most of the decoding work saved.
``spec_dict()`` / ``status_dict()`` give the plain dictionaries to anyone who wants them.

Keys: every object has a :data:`ObjectKey` ``Kind/namespace/name`` (``Kind//name`` when cluster-scoped). That
string is the partitioning key of the log, the key of the projections and the argument of
``tether replay --explain``.
"""

from __future__ import annotations

from typing import Annotated, Any, NewType

import msgspec

from .keys import LAST_APPLIED_ANNOTATION

ObjectKey = NewType("ObjectKey", str)

#: A JSON object kept as its raw bytes (published as ``{"type": "object"}`` in the topic schemas).
RawObject = Annotated[msgspec.Raw, msgspec.Meta(extra_json_schema={"type": "object"})]
EMPTY_OBJECT = msgspec.Raw(b"{}")
_dict_decoder = msgspec.json.Decoder(dict[str, Any])
_json_encoder = msgspec.json.Encoder()


def raw_object(value: dict[str, Any]) -> msgspec.Raw:
    """A dictionary as a :data:`RawObject`."""
    return msgspec.Raw(_json_encoder.encode(value)) if value else EMPTY_OBJECT


def object_dict(raw: msgspec.Raw | bytes) -> dict[str, Any]:
    """A :data:`RawObject` as a dictionary (``{}`` if it is not a JSON object)."""
    try:
        value: dict[str, Any] = _dict_decoder.decode(raw)
    except msgspec.ValidationError:
        return {}
    return value

def as_mapping(value: object) -> dict[str, Any]:
    """``value`` if it is a JSON object, else ``{}``: reading a field of a decoded object that may be malformed."""
    return value if isinstance(value, dict) else {}


def as_list(value: object) -> list[Any]:
    """``value`` if it is a JSON array, else ``[]``."""
    return value if isinstance(value, list) else []


def dig(obj: object, *path: str) -> Any:
    """The value at ``path`` in nested JSON objects, or None where a step is missing or not an object."""
    for part in path:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


def pointer_token(token: str) -> str:
    """One JSON Pointer reference token (RFC 6901: ``~`` → ``~0``, ``/`` → ``~1``) — annotation keys contain "/"."""
    return token.replace("~", "~0").replace("/", "~1")




class ObjectMeta(msgspec.Struct, gc=False, omit_defaults=True, rename="camel"):
    """The metadata tether keeps of an object (everything else in ``metadata`` is dropped)."""

    name: str = ""
    namespace: str = ""
    uid: str = ""
    resource_version: str = ""
    generation: int = 0
    creation_timestamp: str = ""
    deletion_timestamp: str | None = None
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    finalizers: list[str] = []
    owner_references: list[dict[str, Any]] = []
    generate_name: str = ""


class KubeObject(msgspec.Struct, gc=False, omit_defaults=True, rename="camel"):
    """A trimmed snapshot of one Kubernetes object, as observed (or as returned by a write)."""

    api_version: str
    kind: str
    metadata: ObjectMeta
    spec: RawObject = msgspec.field(default_factory=lambda: EMPTY_OBJECT)  # a factory: the schema generator
    status: RawObject = msgspec.field(default_factory=lambda: EMPTY_OBJECT)  # cannot render a Raw default
    data: dict[str, str] = {}

    @property
    def key(self) -> ObjectKey:
        return object_key(self.kind, self.metadata.namespace, self.metadata.name)

    def spec_dict(self) -> dict[str, Any]:
        return object_dict(self.spec)

    def status_dict(self) -> dict[str, Any]:
        return object_dict(self.status)

    @property
    def deleting(self) -> bool:
        return self.metadata.deletion_timestamp is not None


class ObjectRef(msgspec.Struct, gc=False, frozen=True, omit_defaults=True, rename="camel"):
    """A reference to an object; serialised like Kubernetes' ObjectReference."""

    api_version: str
    kind: str
    name: str
    namespace: str = ""
    uid: str = ""

    @property
    def key(self) -> ObjectKey:
        return ObjectKey(f"{self.kind}/{self.namespace}/{self.name}")  # object_key, inlined: a hot path


class Condition(msgspec.Struct, gc=False, frozen=True, omit_defaults=True, rename="camel"):
    """A ``metav1.Condition``: what tether writes on its objects' status and reads on anyone's — the one description.

    ``core.api`` publishes it in tether's CRDs with these descriptions and Kubernetes' value checks (status True,
    False or Unknown; an RFC 3339 ``lastTransitionTime``; a non-negative ``observedGeneration``). The checks are
    schema only (``extra_json_schema``): decoding stays as tolerant as the API server that stored the object, so a
    condition of someone else's is read as it is. Only ``type``, ``status`` and ``reason`` are required, because
    tether omits an empty ``message``."""

    type: Annotated[str, msgspec.Meta(description="What the condition is about, in CamelCase, e.g. Bound.")]
    status: Annotated[str, msgspec.Meta(description="True, False or Unknown.",
                                        extra_json_schema={"enum": ["False", "True", "Unknown"]})]
    reason: Annotated[str, msgspec.Meta(
        description="Why the condition has this status, in CamelCase, e.g. DataSourceNotFound.")]
    message: Annotated[str, msgspec.Meta(description="The reason in words, for people.")] = ""
    last_transition_time: Annotated[str, msgspec.Meta(description="When the status last changed (RFC 3339).",
                                                      extra_json_schema={"format": "date-time"})] = ""
    observed_generation: Annotated[int, msgspec.Meta(
        description="The metadata.generation the condition was computed from.",
        extra_json_schema={"format": "int64", "minimum": 0})] = 0


def as_json(value: object) -> Any:
    """``value`` as the API stores it: JSON types only (lists, not tuples; camelCase names) — comparable with
    what a read returns."""
    return msgspec.json.decode(_json_encoder.encode(value))


def object_key(kind: str, namespace: str, name: str) -> ObjectKey:
    return ObjectKey(f"{kind}/{namespace}/{name}")


def split_key(key: str) -> tuple[str, str, str]:
    """``Kind/namespace/name`` → its three parts; raises ValueError for anything else."""
    kind, namespace, name = key.split("/", 2)
    if not kind or not name:
        raise ValueError(f"not an object key (Kind/namespace/name): {key!r}")
    return kind, namespace, name


def ref_of(obj: KubeObject) -> ObjectRef:
    return ObjectRef(
        api_version=obj.api_version,
        kind=obj.kind,
        name=obj.metadata.name,
        namespace=obj.metadata.namespace,
        uid=obj.metadata.uid,
    )


_meta_decoder = msgspec.json.Decoder(ObjectMeta)


def trim(raw: dict[str, Any]) -> KubeObject:
    """Turn a raw object (as the API returns it) into a :class:`KubeObject`; drops managedFields & co.

    Raises ``msgspec.ValidationError`` when the object is not shaped like a Kubernetes object; callers
    turn that into a dead-letter record rather than crashing.
    """
    if not isinstance(raw, dict):
        raise msgspec.ValidationError(f"Expected `object`, got `{type(raw).__name__}`")
    meta = raw.get("metadata") or {}
    annotations = meta.get("annotations") or {} if isinstance(meta, dict) else {}
    if not isinstance(meta, dict) or not isinstance(annotations, dict):
        raise msgspec.ValidationError("Expected `object` for `$.metadata` and `$.metadata.annotations`")
    if LAST_APPLIED_ANNOTATION in annotations:
        annotations = {k: v for k, v in annotations.items() if k != LAST_APPLIED_ANNOTATION}
    trimmed = {
        "apiVersion": raw.get("apiVersion", ""),
        "kind": raw.get("kind", ""),
        "metadata": {
            k: v
            for k, v in meta.items()
            if k != "managedFields" and k != "annotations" and v is not None
        }
        | ({"annotations": annotations} if annotations else {}),
        "data": raw.get("data") or {},
    }
    obj = msgspec.convert(trimmed, KubeObject, strict=False)
    spec, status = raw.get("spec") or {}, raw.get("status") or {}
    if trimmed["kind"] == "PriorityClass" and not spec:  # its value and globalDefault sit at the top level: kept
        spec = {k: raw[k] for k in ("value", "globalDefault") if k in raw}  # under spec (admission reads them)
    if not isinstance(spec, dict) or not isinstance(status, dict):
        raise msgspec.ValidationError("Expected `object` for `$.spec` and `$.status`")
    obj.spec, obj.status = raw_object(spec), raw_object(status)
    return obj


def set_condition(
    conditions: list[Condition] | tuple[Condition, ...], new: Condition
) -> tuple[Condition, ...]:
    """Insert or replace the condition of ``new.type``, keeping lastTransitionTime if the status is unchanged."""
    out: list[Condition] = []
    replaced = False
    for c in conditions:
        if c.type != new.type:
            out.append(c)
            continue
        replaced = True
        if c.status == new.status:
            new = msgspec.structs.replace(new, last_transition_time=c.last_transition_time)
        out.append(new)
    if not replaced:
        out.append(new)
    return tuple(out)


def parse_conditions(raw: object) -> tuple[Condition, ...]:
    """Conditions from a status dict; malformed entries are skipped (they are someone else's bug)."""
    if not isinstance(raw, list):
        return ()
    try:  # the common case, in one C call
        return msgspec.convert(raw, tuple[Condition, ...], strict=False)
    except msgspec.ValidationError:
        pass
    out = []
    for item in raw:
        try:
            out.append(msgspec.convert(item, Condition, strict=False))
        except msgspec.ValidationError:
            continue
    return tuple(out)


# --- node affinity, as the API has it (pods, PodGroups, Fluid operations; tether.core.placement evaluates and
# merges it) -------------------------------------------------------------------------------------------

REQUIRED = "requiredDuringSchedulingIgnoredDuringExecution"
PREFERRED = "preferredDuringSchedulingIgnoredDuringExecution"


class NodeSelectorRequirement(msgspec.Struct, frozen=True, gc=False, omit_defaults=True):
    """``{key, operator, values}`` of a term's matchExpressions or matchFields (``values`` omitted when empty, as
    Kubernetes wants it for Exists / DoesNotExist)."""

    key: str
    operator: str
    values: tuple[str, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = as_json(self)
        return out


class NodeSelectorTerm(msgspec.Struct, frozen=True, omit_defaults=True, rename="camel"):
    """Requirements that must all hold; a list of terms holds when any term does."""

    match_expressions: tuple[NodeSelectorRequirement, ...] = ()
    match_fields: tuple[NodeSelectorRequirement, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = as_json(self)
        return out


class PreferredSchedulingTerm(msgspec.Struct, frozen=True):
    weight: int
    preference: NodeSelectorTerm

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = as_json(self)
        return out


class NodeAffinity(msgspec.Struct, frozen=True):
    """A pod's ``spec.affinity.nodeAffinity`` as data."""

    required: tuple[NodeSelectorTerm, ...] = ()  # ORed; none and an empty list mean the same to the scheduler
    preferred: tuple[PreferredSchedulingTerm, ...] = ()

    def as_dict(self) -> dict[str, Any]:
        """The Kubernetes form; a section appears only when it has terms."""
        out: dict[str, Any] = {}
        if self.required:
            out[REQUIRED] = {"nodeSelectorTerms": [t.as_dict() for t in self.required]}
        if self.preferred:
            out[PREFERRED] = [t.as_dict() for t in self.preferred]
        return out
