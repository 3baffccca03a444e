"""OpenAPI v3 for kubectl: enough for ``kubectl apply`` to validate, without ``--validate=false``.

What kubectl (1.27 and later) does before it writes a manifest, with validation on (its default, ``strict``):

1. it reads ``/openapi/v3``, the index of the served group versions, each with the URL of its document;
2. it fetches the document of the manifest's group version and looks there for the PATCH operation of the
   manifest's kind (the operation's ``x-kubernetes-group-version-kind``);
3. if that operation declares the ``fieldValidation`` query parameter, the server validates: kubectl sends the
   write with ``?fieldValidation=Strict`` and reports what the server refuses. Otherwise kubectl validates itself,
   against the OpenAPI **v2** document, which it reads as protobuf.

Without any of it, kubectl stops at step 1 ("failed to download openapi"). So the emulator serves step 1 and 2 —
documents whose paths carry, like a real server's, the kind and the write parameters (``dryRun``,
``fieldManager``, ``fieldValidation``) — and does the validation of step 3 itself (:func:`strict_unknown_fields`):
with ``fieldValidation=Strict``, a field that a custom resource's schema does not know (one that pruning would
drop) is refused with the real server's 400 "strict decoding error: unknown field". The other checks (types,
required fields, enums, patterns) are the emulator's schema validation, which runs on every write anyway.

kubectl 1.28 (the real control plane's version here; 1.32 no longer does) reads the **v2** document first, whatever
it then does: it builds its validator from it, and stops with "the server could not find the requested resource"
when ``/openapi/v2`` answers 404. It asks for protobuf (gnostic's ``openapi_v2.Document``). The emulator answers
with a document that names the API and defines nothing (:func:`document_v2`, encoded by :func:`v2_protobuf`; JSON to
anyone who does not ask for protobuf). That is all such a kubectl reads of it on a server that validates: with
``fieldValidation`` found in step 2 it skips its own validation, and a kind it cannot find in v2 is patched as a
real server's custom resources are (a JSON merge patch) and a built-in kind with the types compiled into kubectl.

The documents also carry the schemas (``components.schemas``): a custom resource's ``openAPIV3Schema`` as its CRD
declares it, so ``kubectl explain`` works on tether's kinds; a built-in kind gets an open object (the emulator has
no schemas for them, and neither strict checking nor ``explain`` applies to them).

Each document's URL carries a hash of its content, as on a real server: kubectl caches documents by that URL, and a
CRD registered or changed gives its group version a new hash.

This module only reads the store; :func:`register` adds its routes to the emulator's application, ahead of the
catch-all resource route.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import msgspec
import yaml
from aiohttp import web

from . import patch
from .errors import ApiError
from .resources import ResourceType
from .schema import prune

if TYPE_CHECKING:
    from .store import Store

_ENC = msgspec.json.Encoder(order="deterministic")
_JSON = "application/json"
#: What kubectl (client-go's ``DiscoveryClient.OpenAPISchema``) asks ``/openapi/v2`` for, and the Content-Type a
#: real server answers it with (the ``@`` is no valid character of a media type: Go's parser refuses it).
V2_PROTOBUF = "application/com.github.proto-openapi.spec.v2@v1.0+protobuf"
V2_PROTOBUF_TYPE = "application/com.github.proto-openapi.spec.v2.v1.0+protobuf"
_TITLE, _VERSION = "Kubernetes (tether emulator)", "v1.30.0"
FIELD_VALIDATION = "fieldValidation"


def _gv_path(group: str, version: str) -> str:
    return f"apis/{group}/{version}" if group else f"api/{version}"


def schema_name(rt: ResourceType, version: str) -> str:
    """The schema's name in ``components.schemas``, as a real server names it: ``io.k8s.api.core.v1.ConfigMap``
    for a built-in kind, the reversed group for a custom one (``sh.volcano.datadependency.v1alpha1.DataSource``)."""
    if rt.builtin:
        return f"io.k8s.api.{rt.group.split('.')[0] or 'core'}.{version}.{rt.kind}"
    return ".".join(reversed(rt.group.split("."))) + f".{version}.{rt.kind}"


def _gvk(rt: ResourceType, version: str) -> dict[str, str]:
    return {"group": rt.group, "version": version, "kind": rt.kind}


def _param(name: str, where: str = "query") -> dict[str, Any]:
    return {"name": name, "in": where, "schema": {"type": "string", "uniqueItems": True},
            **({"required": True} if where == "path" else {})}


_WRITE_PARAMS = [_param("dryRun"), _param("fieldManager"), _param(FIELD_VALIDATION)]


def _operation(rt: ResourceType, version: str, action: str, *, writes: bool, ref: str) -> dict[str, Any]:
    body = {"content": {_JSON: {"schema": {"$ref": ref}}}}
    operation: dict[str, Any] = {
        "operationId": f"{action}{rt.kind}", "tags": [_gv_path(rt.group, version)],
        "x-kubernetes-action": action, "x-kubernetes-group-version-kind": _gvk(rt, version),
        "parameters": list(_WRITE_PARAMS) if writes else [], "responses": {"200": {"description": "OK", **body}}}
    if action in ("post", "put"):
        operation["requestBody"] = {"required": True, **body}
    elif action == "patch":
        operation["requestBody"] = {"required": True, "content": {
            media: {"schema": {"type": "object"}} for media in (patch.JSON_PATCH, patch.MERGE_PATCH,
                                                               patch.APPLY_PATCH)}}
    return operation


def _paths(rt: ResourceType, version: str) -> Iterator[tuple[str, dict[str, Any]]]:
    base = "/" + _gv_path(rt.group, version)
    ref = f"#/components/schemas/{schema_name(rt, version)}"
    collection = f"{base}/namespaces/{{namespace}}/{rt.plural}" if rt.namespaced else f"{base}/{rt.plural}"
    scope = [_param("namespace", "path")] if rt.namespaced else []
    yield collection, {"parameters": scope,
                       "get": _operation(rt, version, "list", writes=False, ref=ref),
                       "post": _operation(rt, version, "post", writes=True, ref=ref)}
    yield f"{collection}/{{name}}", {"parameters": [_param("name", "path"), *scope],
                                     "get": _operation(rt, version, "get", writes=False, ref=ref),
                                     "put": _operation(rt, version, "put", writes=True, ref=ref),
                                     "patch": _operation(rt, version, "patch", writes=True, ref=ref),
                                     "delete": _operation(rt, version, "delete", writes=False, ref=ref)}
    if rt.status_subresource:
        yield f"{collection}/{{name}}/status", {"parameters": [_param("name", "path"), *scope],
                                                "get": _operation(rt, version, "get", writes=False, ref=ref),
                                                "put": _operation(rt, version, "put", writes=True, ref=ref),
                                                "patch": _operation(rt, version, "patch", writes=True, ref=ref)}
    if rt.namespaced:  # the list across namespaces
        yield f"{base}/{rt.plural}", {"get": _operation(rt, version, "list", writes=False, ref=ref)}


def _schema(rt: ResourceType, version: str) -> dict[str, Any]:
    declared = rt.schema(version)
    schema: dict[str, Any] = dict(declared) if declared else {"type": "object",
                                                              "x-kubernetes-preserve-unknown-fields": True}
    schema["x-kubernetes-group-version-kind"] = [_gvk(rt, version)]
    return schema


def document(store: Store, group: str, version: str) -> dict[str, Any] | None:
    """The OpenAPI v3 document of ``group/version`` (module doc), None when nothing is served there."""
    types = sorted(store.by_gv.get((group, version), {}).values(), key=lambda r: r.plural)
    if not types:
        return None
    paths: dict[str, Any] = {}
    schemas: dict[str, Any] = {}
    for rt in types:
        paths.update(_paths(rt, version))
        schemas[schema_name(rt, version)] = _schema(rt, version)
    return {"openapi": "3.0.0", "info": {"title": _TITLE, "version": _VERSION},
            "paths": paths, "components": {"schemas": schemas}}


def _encoded(store: Store, group: str, version: str) -> bytes | None:
    found = document(store, group, version)
    return None if found is None else _ENC.encode(found)


def index(store: Store) -> dict[str, Any]:
    """``/openapi/v3``: each served group version and the URL of its document (with its content's hash)."""
    paths: dict[str, Any] = {}
    for group, version in sorted(store.by_gv):
        body = _encoded(store, group, version)
        if body is not None:
            digest = hashlib.sha512(body).hexdigest()[:32].upper()
            paths[_gv_path(group, version)] = {"serverRelativeURL": f"/openapi/v3/{_gv_path(group, version)}"
                                                                    f"?hash={digest}"}
    return {"paths": paths}


def document_v2() -> dict[str, Any]:
    """``/openapi/v2``: the API's name and version, no definitions (module doc)."""
    return {"swagger": "2.0", "info": {"title": _TITLE, "version": _VERSION}}


def _varint(value: int) -> bytes:
    out = bytearray()
    while value > 0x7F:
        out.append(value & 0x7F | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _field(number: int, payload: bytes) -> bytes:
    """One length-delimited protobuf field (wire type 2: strings and messages)."""
    return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def v2_protobuf(document: dict[str, Any]) -> bytes:
    """:func:`document_v2` as gnostic's ``openapi_v2.Document`` in protobuf: ``swagger`` is field 1, ``info``
    field 2, and in ``Info`` ``title`` 1 and ``version`` 2 (gnostic-models' ``OpenAPIv2.proto``)."""
    info = document["info"]
    return _field(1, document["swagger"].encode()) + _field(
        2, _field(1, info["title"].encode()) + _field(2, info["version"].encode()))


def _unknown(before: Any, after: Any, path: str) -> Iterator[str]:
    """The fields of ``before`` that pruning left out of ``after`` (nulls excepted: they are dropped, not unknown)."""
    if isinstance(before, dict) and isinstance(after, dict):
        for key, value in before.items():
            where = f"{path}.{key}" if path else str(key)
            if key not in after:
                if value is not None:
                    yield where
            else:
                yield from _unknown(value, after[key], where)
    elif isinstance(before, list) and isinstance(after, list) and len(before) == len(after):
        for i, (old, new) in enumerate(zip(before, after, strict=True)):
            yield from _unknown(old, new, f"{path}[{i}]")


def unknown_fields(body: Any, schema: dict[str, Any] | None) -> list[str]:
    """The paths (``spec.tabel``) of the fields of ``body`` that ``schema`` does not know."""
    if schema is None or not isinstance(body, dict):
        return []
    return list(_unknown(body, prune(body, schema, root=True), ""))


async def strict_unknown_fields(request: web.Request, rt: ResourceType, version: str, verb: str) -> None:
    """With ``?fieldValidation=Strict``, refuse a write to a custom resource that names a field its schema does not
    know, as a real server does (400, "strict decoding error"). A JSON patch names paths, not fields: not checked."""
    if request.query.get(FIELD_VALIDATION) != "Strict" or rt.builtin or verb not in ("create", "update", "patch"):
        return
    ctype = (request.content_type or "").lower()
    if verb == "patch" and ctype not in (patch.MERGE_PATCH, patch.APPLY_PATCH):
        return
    raw = await request.read()
    try:
        body = yaml.safe_load(raw) if ctype == patch.APPLY_PATCH else msgspec.json.decode(raw)
    except (msgspec.DecodeError, yaml.YAMLError):
        return  # the write itself answers the decoding error
    unknown = unknown_fields(body, rt.schema(version))
    if unknown:
        fields = ", ".join(f'unknown field "{f}"' for f in unknown)
        raise ApiError(code=400, reason="BadRequest", message=(
            f'{rt.kind} in version "{version}" cannot be handled as a {rt.kind}: strict decoding error: {fields}'))


def register(app: web.Application, store: Store, *, respond: Callable[[Any, int], web.Response]) -> None:
    """Serve ``GET /openapi/v2``, ``GET /openapi/v3`` and ``GET /openapi/v3/{api/v1 | apis/<group>/<version>}`` on
    ``app``."""

    async def serve_v2(request: web.Request) -> web.Response:
        accept = request.headers.get("Accept", "")
        if V2_PROTOBUF in accept or V2_PROTOBUF_TYPE in accept:
            return web.Response(body=v2_protobuf(document_v2()), headers={"Content-Type": V2_PROTOBUF_TYPE})
        return respond(document_v2(), 200)

    async def serve_index(request: web.Request) -> web.Response:
        return respond(index(store), 200)

    async def serve_document(request: web.Request) -> web.Response:
        parts = request.match_info["path"].strip("/").split("/")
        if parts[:1] == ["api"] and len(parts) == 2:
            group, version = "", parts[1]
        elif parts[:1] == ["apis"] and len(parts) == 3:
            group, version = parts[1], parts[2]
        else:
            group = version = ""
        body = _encoded(store, group, version) if version else None
        if body is None:
            return respond({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                            "message": "the server could not find the requested resource", "reason": "NotFound",
                            "code": 404}, 404)
        return web.Response(body=body, content_type=_JSON)

    app.router.add_route("GET", "/openapi/v2", serve_v2)
    app.router.add_route("GET", "/openapi/v3", serve_index)
    app.router.add_route("GET", "/openapi/v3/{path:.*}", serve_document)
