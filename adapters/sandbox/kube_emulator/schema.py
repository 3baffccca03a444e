"""Structural-schema pruning, defaulting and validation for custom resources.

A real apiserver handles a custom resource's body in this order: decode, **prune** unknown fields (unless
``x-kubernetes-preserve-unknown-fields``), drop ``null`` for non-nullable fields, apply **defaults**, then
**validate** against the OpenAPI v3 schema; failures become one ``422 Invalid`` with one cause per field. We do the
same, in one recursive walk per phase over plain dicts, so cost is linear in the size of the object and independent
of how many objects are stored.

Covered: ``type`` (incl. ``x-kubernetes-int-or-string``), ``required``, ``enum``, ``pattern``, ``min/maxLength``,
``minimum``/``maximum`` (+ exclusive), ``min/maxItems``, ``min/maxProperties``, ``format: date-time``,
``nullable``, ``default``, ``properties``/``additionalProperties``/``items``, ``allOf``/``anyOf``/``oneOf``/``not``,
``x-kubernetes-list-type: set|map`` duplicates, ``x-kubernetes-embedded-resource``. Not covered (deliberately):
CEL ``x-kubernetes-validations`` (would need a CEL interpreter; tether's CRDs have none) and ratcheting.

A write to the **status subresource** is validated as kube-apiserver does it (:func:`validate_status_and_default`):
the whole body is pruned and defaulted, but only ``status`` is validated, against the status schema alone, so a
cause names its field relative to ``status``. Measured on kube-apiserver v1.28 with Fluid's DataProcess CRD (status
requires ``conditions``, ``duration`` and ``phase``): a merge patch of ``status.conditions`` onto an object without
status is ``422 Invalid``, ``DataProcess.data.fluid.io "p" is invalid: [duration: Required value, phase: Required
value]``, causes ``duration`` and ``phase`` — not ``status.duration``, as a create's causes (``spec.dataset``) would
read.
"""

from __future__ import annotations

import copy
import re
from typing import Any

# ObjectMeta fields that survive pruning of ``metadata`` on a custom resource (the server drops the rest).
OBJECT_META_FIELDS = frozenset(
    {
        "name",
        "generateName",
        "namespace",
        "selfLink",
        "uid",
        "resourceVersion",
        "generation",
        "creationTimestamp",
        "deletionTimestamp",
        "deletionGracePeriodSeconds",
        "labels",
        "annotations",
        "ownerReferences",
        "finalizers",
        "managedFields",
    }
)

Cause = tuple[str, str, str]  # (field path, reason, message)

_DATE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})$")
_PATTERN_CACHE: dict[str, re.Pattern[str]] = {}


def _preserve(schema: dict[str, Any]) -> bool:
    return bool(schema.get("x-kubernetes-preserve-unknown-fields"))


def prune(value: Any, schema: dict[str, Any] | None, *, root: bool = False) -> Any:
    """Return ``value`` without fields the schema does not know and without non-nullable ``null`` members."""
    if schema is None:
        return value
    if isinstance(value, dict):
        props = schema.get("properties")
        addl = schema.get("additionalProperties")
        embedded = root or schema.get("x-kubernetes-embedded-resource")
        out: dict[str, Any] = {}
        for k, v in value.items():
            if embedded and k in ("apiVersion", "kind"):
                out[k] = v
                continue
            if embedded and k == "metadata" and isinstance(v, dict):
                out[k] = {mk: mv for mk, mv in v.items() if mk in OBJECT_META_FIELDS} if root else v
                continue
            sub: dict[str, Any] | None
            if props is not None and k in props:
                sub = props[k]
            elif isinstance(addl, dict):
                sub = addl
            elif addl is True or _preserve(schema):
                out[k] = v
                continue
            else:
                continue  # unknown field: pruned
            if v is None and not sub.get("nullable"):
                continue  # null for a non-nullable field is dropped before defaulting
            out[k] = prune(v, sub)
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(v, schema["items"]) for v in value]
    return value


def apply_defaults(value: Any, schema: dict[str, Any] | None) -> Any:
    """Fill ``default`` for absent properties of objects that exist (defaults never create parents)."""
    if schema is None:
        return value
    if isinstance(value, dict):
        props = schema.get("properties") or {}
        for k, sub in props.items():
            if k not in value and "default" in sub:
                value[k] = copy.deepcopy(sub["default"])
            if k in value:
                value[k] = apply_defaults(value[k], sub)
        addl = schema.get("additionalProperties")
        if isinstance(addl, dict):
            for k in value:
                if k not in props:
                    value[k] = apply_defaults(value[k], addl)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [apply_defaults(v, schema["items"]) for v in value]
    return value


def _type_ok(value: Any, typ: str) -> bool:
    if typ == "object":
        return isinstance(value, dict)
    if typ == "array":
        return isinstance(value, list)
    if typ == "string":
        return isinstance(value, str)
    if typ == "boolean":
        return isinstance(value, bool)
    if typ == "integer":
        return (isinstance(value, int) and not isinstance(value, bool)) or (
            isinstance(value, float) and value.is_integer()
        )
    if typ == "number":
        return isinstance(value, int | float) and not isinstance(value, bool)
    return True


def _go_repr(value: Any) -> str:
    if isinstance(value, str):
        return f'"{value}"'
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "null"
    if isinstance(value, dict | list):
        return '"object"' if isinstance(value, dict) else '"array"'
    return str(value)


def validate(value: Any, schema: dict[str, Any] | None, path: str = "") -> list[Cause]:
    """Validate ``value``; return causes in the apiserver's wording (empty list = valid)."""
    causes: list[Cause] = []
    if schema is not None:
        _validate(value, schema, path, causes)
    return causes


def _validate(value: Any, schema: dict[str, Any], path: str, causes: list[Cause]) -> None:
    where = path or "<root>"
    r = _go_repr(value)

    def bad(reason: str, msg: str) -> None:
        causes.append((where, reason, msg))

    if value is None:
        if not schema.get("nullable") and schema.get("type"):
            bad("FieldValueTypeInvalid", f'Invalid value: "null": {where} in body must be of type '
                f'{schema["type"]}: "null"')
        return
    typ = schema.get("type")
    if schema.get("x-kubernetes-int-or-string"):
        if not (isinstance(value, str) or _type_ok(value, "integer")):
            bad("FieldValueTypeInvalid", f"Invalid value: {r}: {where} in body must be of type integer,string: {r}")
            return
    elif typ and not _type_ok(value, typ):
        shown = {dict: "object", list: "array", str: "string", bool: "boolean"}.get(type(value), "number")
        bad("FieldValueTypeInvalid", f'Invalid value: "{shown}": {where} in body must be of type {typ}: "{shown}"')
        return
    if "enum" in schema and value not in schema["enum"]:
        allowed = ", ".join(_go_repr(v) for v in schema["enum"])
        bad("FieldValueNotSupported", f"Unsupported value: {r}: supported values: {allowed}")
    if isinstance(value, str):
        _validate_string(value, schema, where, r, bad)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        lo, hi = schema.get("minimum"), schema.get("maximum")
        if lo is not None and (value < lo or (schema.get("exclusiveMinimum") and value == lo)):
            bad("FieldValueInvalid", f"Invalid value: {value}: {where} in body should be greater than or equal to {lo}")
        if hi is not None and (value > hi or (schema.get("exclusiveMaximum") and value == hi)):
            bad("FieldValueInvalid", f"Invalid value: {value}: {where} in body should be less than or equal to {hi}")
    elif isinstance(value, list):
        if "maxItems" in schema and len(value) > schema["maxItems"]:
            bad("FieldValueTooMany", f"Too many: {len(value)}: must have at most {schema['maxItems']} items")
        if "minItems" in schema and len(value) < schema["minItems"]:
            bad("FieldValueInvalid",
                f"Invalid value: {len(value)}: {where} in body should have at least {schema['minItems']} items")
        _list_type(value, schema, where, causes)
        items = schema.get("items")
        if isinstance(items, dict):
            for i, item in enumerate(value):
                _validate(item, items, f"{path}[{i}]", causes)
    elif isinstance(value, dict):
        for req in schema.get("required") or []:
            if req not in value:
                causes.append((f"{path}.{req}" if path else req, "FieldValueRequired", "Required value"))
        if "maxProperties" in schema and len(value) > schema["maxProperties"]:
            bad("FieldValueTooMany", f"Too many: {len(value)}: must have at most {schema['maxProperties']} items")
        if "minProperties" in schema and len(value) < schema["minProperties"]:
            bad("FieldValueInvalid", f"Invalid value: {len(value)}: {where} in body should have at least "
                f"{schema['minProperties']} properties")
        props = schema.get("properties") or {}
        addl = schema.get("additionalProperties")
        for k, v in value.items():
            sub = props.get(k)
            if sub is None and isinstance(addl, dict):
                sub = addl
            if sub is not None and not (path == "" and k == "metadata"):
                _validate(v, sub, f"{path}.{k}" if path else k, causes)
    for sub in schema.get("allOf") or []:
        _validate(value, sub, path, causes)
    any_of = schema.get("anyOf")
    if any_of and not schema.get("x-kubernetes-int-or-string") and all(validate(value, s, path) for s in any_of):
        bad("FieldValueInvalid", f"Invalid value: {r}: {where} in body must match at least one schema in anyOf")
    if schema.get("oneOf") and sum(1 for s in schema["oneOf"] if not validate(value, s, path)) != 1:
        bad("FieldValueInvalid", f"Invalid value: {r}: {where} in body must validate one and only one schema (oneOf)")
    if isinstance(schema.get("not"), dict) and not validate(value, schema["not"], path):
        bad("FieldValueInvalid", f"Invalid value: {r}: {where} in body should not validate the schema (not)")


def _validate_string(value: str, schema: dict[str, Any], where: str, r: str, bad: Any) -> None:
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        bad("FieldValueTooLong", f"Too long: may not be more than {schema['maxLength']} bytes")
    if "minLength" in schema and len(value) < schema["minLength"]:
        bad("FieldValueInvalid", f"Invalid value: {r}: {where} in body should be at least {schema['minLength']} "
            "chars long")
    pat = schema.get("pattern")
    if pat:
        rx = _PATTERN_CACHE.get(pat) or _PATTERN_CACHE.setdefault(pat, re.compile(pat))
        if not rx.search(value):
            bad("FieldValueInvalid", f"Invalid value: {r}: {where} in body should match '{pat}'")
    if schema.get("format") == "date-time" and not _DATE_TIME.match(value):
        bad("FieldValueInvalid", f"Invalid value: {r}: {where} in body must be of type date-time: {r}")


def _list_type(value: list[Any], schema: dict[str, Any], where: str, causes: list[Cause]) -> None:
    lt = schema.get("x-kubernetes-list-type")
    if lt == "set":
        seen: list[Any] = []
        for i, item in enumerate(value):
            if item in seen:
                causes.append((f"{where}[{i}]", "FieldValueDuplicate", f"Duplicate value: {_go_repr(item)}"))
            seen.append(item)
    elif lt == "map":
        keys = schema.get("x-kubernetes-list-map-keys") or []
        seen_keys: set[tuple[Any, ...]] = set()
        for i, item in enumerate(value):
            if not isinstance(item, dict):
                continue
            k = tuple(repr(item.get(key)) for key in keys)
            if k in seen_keys:
                shown = ", ".join(f'"{key}":{_go_repr(item.get(key))}' for key in keys)
                causes.append((f"{where}[{i}]", "FieldValueDuplicate",
                               f"Duplicate value: map[string]interface {{}}{{{shown}}}"))
            seen_keys.add(k)


def validate_and_default(
    obj: dict[str, Any], schema: dict[str, Any] | None
) -> tuple[dict[str, Any], list[Cause]]:
    """The full pipeline for a custom resource body: prune, default, validate."""
    if schema is None:
        return obj, []
    out = prune(obj, schema, root=True)
    out = apply_defaults(out, schema)
    return out, validate(out, schema)


def validate_status_and_default(
    obj: dict[str, Any], schema: dict[str, Any] | None
) -> tuple[dict[str, Any], list[Cause]]:
    """The pipeline for a write to the status subresource (module doc): prune and default the whole body, validate
    ``status`` alone against the status schema, causes relative to it. No status, or no status schema: valid."""
    if schema is None:
        return obj, []
    out = prune(obj, schema, root=True)
    out = apply_defaults(out, schema)
    status_schema = (schema.get("properties") or {}).get("status")
    if not isinstance(status_schema, dict) or "status" not in out:
        return out, []
    return out, validate(out["status"], status_schema)
