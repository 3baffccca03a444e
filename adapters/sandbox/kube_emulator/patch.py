"""The three PATCH dialects the apiserver speaks over JSON.

* JSON merge patch (RFC 7386): objects merge recursively, ``null`` deletes, lists are replaced whole.
* JSON patch (RFC 6902): ``add/remove/replace/move/copy/test``; a failed ``test`` or a missing path is a 422
  like the real server; a body that is not a list is a 400.
* Strategic merge patch, built-in kinds only (custom resources answer 415 like a real server). We implement the
  common subset: merge semantics plus lists of objects merged by their merge key for the well-known fields
  (``containers``, ``env``, ``volumes``, ``conditions``...), and the ``$patch: delete|replace`` directives.
  Lists without a known merge key are replaced, which is also what the real server does for atomic lists.
"""

from __future__ import annotations

import copy
from typing import Any

from tether.core.integers import decimal_digits

from .errors import ApiError, bad_request

MERGE_PATCH = "application/merge-patch+json"
JSON_PATCH = "application/json-patch+json"
STRATEGIC_PATCH = "application/strategic-merge-patch+json"
APPLY_PATCH = "application/apply-patch+yaml"


def merge_patch(target: Any, patch: Any) -> Any:
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if v is None:
            out.pop(k, None)
        else:
            out[k] = merge_patch(out.get(k), v)
    return out


def _unprocessable(message: str) -> ApiError:
    return ApiError(code=422, reason="Invalid", message=message)


def _parse_pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise _unprocessable(f"invalid JSON pointer: {path!r}")
    return [p.replace("~1", "/").replace("~0", "~") for p in path[1:].split("/")]


def _walk(doc: Any, parts: list[str], path: str) -> Any:
    cur = doc
    for p in parts:
        if isinstance(cur, dict) and p in cur:
            cur = cur[p]
        elif isinstance(cur, list) and (index := decimal_digits(p)) is not None and index < len(cur):
            cur = cur[index]
        else:
            raise _unprocessable(f"doc is missing path: \"{path}\": missing value")
    return cur


def json_patch(doc: Any, ops: Any) -> Any:
    if not isinstance(ops, list):
        raise bad_request("json: cannot unmarshal object into Go value of type jsonpatch.Patch")
    doc = copy.deepcopy(doc)
    for op in ops:
        if not isinstance(op, dict) or "op" not in op:
            raise bad_request("Unexpected kind: <nil>")
        kind, path = op["op"], op.get("path", "")
        parts = _parse_pointer(path)
        if kind == "test":
            actual = _walk(doc, parts, path)
            if actual != op.get("value"):
                raise _unprocessable(f"the server rejected our request due to an error in our request: testing value "
                                     f"{path} failed: test failed")
            continue
        if kind in ("move", "copy"):
            src = _parse_pointer(op.get("from", ""))
            value = copy.deepcopy(_walk(doc, src, op.get("from", "")))
            if kind == "move":
                doc = _remove(doc, src, op.get("from", ""))
            doc = _add(doc, parts, value, path)
        elif kind == "add":
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), path)
        elif kind == "remove":
            doc = _remove(doc, parts, path)
        elif kind == "replace":
            _walk(doc, parts, path)  # must exist
            doc = _remove(doc, parts, path)
            doc = _add(doc, parts, copy.deepcopy(op.get("value")), path)
        else:
            raise bad_request(f"Unexpected kind: {kind}")
    return doc


def _add(doc: Any, parts: list[str], value: Any, path: str) -> Any:
    if not parts:
        return value
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        if last == "-":
            parent.append(value)
        elif (index := decimal_digits(last)) is not None and index <= len(parent):
            parent.insert(index, value)
        else:
            raise _unprocessable(f"add operation does not apply: doc is missing path: \"{path}\": missing value")
    else:
        raise _unprocessable(f"add operation does not apply: doc is missing path: \"{path}\": missing value")
    return doc


def _remove(doc: Any, parts: list[str], path: str) -> Any:
    if not parts:
        raise _unprocessable("unable to remove the whole document")
    parent = _walk(doc, parts[:-1], path)
    last = parts[-1]
    if isinstance(parent, dict) and last in parent:
        del parent[last]
    elif isinstance(parent, list) and (index := decimal_digits(last)) is not None and index < len(parent):
        del parent[index]
    else:
        raise _unprocessable(f"remove operation does not apply: doc is missing path: \"{path}\": missing value")
    return doc


# Merge keys of the list fields tether and the demo touch (from the Kubernetes API's patchMergeKey tags).
_MERGE_KEYS = {
    "containers": "name",
    "initContainers": "name",
    "ephemeralContainers": "name",
    "env": "name",
    "volumes": "name",
    "volumeMounts": "mountPath",
    "ports": "containerPort",
    "conditions": "type",
    "imagePullSecrets": "name",
    "ownerReferences": "uid",
    "tolerations": None,
    "finalizers": "",  # primitive list merged as a set
}


def strategic_merge_patch(target: Any, patch: Any, field_name: str = "") -> Any:
    if not isinstance(patch, dict):
        if isinstance(patch, list) and isinstance(target, list) and field_name in _MERGE_KEYS:
            return _merge_list(target, patch, _MERGE_KEYS[field_name])
        return copy.deepcopy(patch)
    if patch.get("$patch") == "replace":
        return {k: v for k, v in patch.items() if k != "$patch"}
    out = dict(target) if isinstance(target, dict) else {}
    for k, v in patch.items():
        if k.startswith("$"):
            continue
        if v is None:
            out.pop(k, None)
        else:
            out[k] = strategic_merge_patch(out.get(k), v, k)
    return out


def _merge_list(target: list[Any], patch: list[Any], key: str | None) -> list[Any]:
    if key is None:
        return copy.deepcopy(patch)
    if key == "":
        return list(target) + [v for v in patch if v not in target]
    out = [copy.deepcopy(t) for t in target]
    for item in patch:
        if not isinstance(item, dict):
            continue
        idx = next((i for i, t in enumerate(out) if isinstance(t, dict) and t.get(key) == item.get(key)), None)
        if item.get("$patch") == "delete":
            if idx is not None:
                del out[idx]
        elif idx is None:
            out.append({k: v for k, v in item.items() if k != "$patch"})
        else:
            out[idx] = strategic_merge_patch(out[idx], item)
    return out
