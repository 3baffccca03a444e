"""Server-side printing: an object read ``as=Table``, as ``kubectl get`` asks for it.

``kubectl get`` sends ``Accept: application/json;as=Table;v=v1;g=meta.k8s.io, …, application/json`` and prints
the columns the server chooses. For a custom resource a real server (apiextensions-apiserver's table convertor)
answers a ``meta.k8s.io/v1`` Table: a ``Name`` column, then the version's ``additionalPrinterColumns`` — or, when
the CRD declares none, an ``Age`` column — each cell read with the column's JSONPath. Without it ``kubectl get
datasourceclaims`` on the emulator showed NAME and AGE only, where a real cluster shows tether's Phase, DataSource,
System and Table.

What this module reproduces of that convertor, each checked against kube-apiserver 1.28 here:

* a cell is ``null`` where the path finds nothing; a ``string`` column prints a string as it is, and a list or map
  as compact JSON (``["member1","member2"]``, as Go's ``json.Marshal``); an ``integer`` column gives a number;
  a ``date`` column the time since then, in apimachinery's ``HumanDuration`` (``0s``, ``5m10s``, ``3h``, ``2d4h``);
* each row's ``object`` is the item's PartialObjectMetadata (``includeObject=Metadata``, the default), the whole
  item (``Object``) or ``null`` (``None``);
* a list's Table carries the list's ``resourceVersion``, ``continue`` and ``remainingItemCount``.

A built-in kind is printed with columns of its own (``printers.py``: Events, Pods, Nodes, Deployments, Jobs,
Leases, ConfigMaps and Namespaces); the others are answered with their plain list, and kubectl prints NAME and AGE
for them itself.

A watch read ``as=Table`` (``kubectl get --watch``) gets a one-row Table per event, with the column definitions in
the first event only, as a real server sends them.
"""

from __future__ import annotations

import json
import re
from datetime import UTC, datetime
from typing import Any

from .errors import bad_request
from .printers import AGE_DESCRIPTION, BUILTIN_PRINTERS, NAME_DESCRIPTION, Printer, age, column
from .resources import ResourceType

_DEFAULT_COLUMNS = [{"name": "Age", "type": "date", "description": AGE_DESCRIPTION,
                     "jsonPath": ".metadata.creationTimestamp"}]
_STEP = re.compile(r"\.([^.\[\]]+)|\[(\d+)\]|\['([^']*)'\]|\[\?\(@\.([\w.-]+)\s*==\s*[\"']([^\"']*)[\"']\)\]")


def table_version(accept: str) -> str | None:
    """The ``meta.k8s.io`` version of the Table an ``Accept`` header asks for (v1 first), None for none."""
    offered = [{k.strip(): v.strip() for k, _, v in (p.partition("=") for p in part.split(";")[1:])}
               for part in accept.split(",")]
    for version in ("v1", "v1beta1"):
        if any(o.get("as") == "Table" and o.get("g") == "meta.k8s.io" and o.get("v") == version for o in offered):
            return version
    return None


def check_include_object(value: str) -> None:
    """Refuse an ``includeObject`` a real server does not know, before anything is answered: a list, a get or a watch
    (400, the real server's message)."""
    if value not in ("", "Metadata", "Object", "None"):
        raise bad_request(f'Unable to convert to Table as requested: includeObject: Invalid value: "{value}": '
                          "must be 'Metadata', 'Object', 'None', or empty")


def columns(rt: ResourceType, version: str) -> list[dict[str, Any]]:
    """The version's printer columns as the CRD declares them, or the default ``Age``."""
    return rt.printer_columns.get(version) or _DEFAULT_COLUMNS


def _find(obj: Any, path: str) -> tuple[bool, Any]:
    """(found, value) of a simple JSONPath (``.a.b``, ``.a[0]``, ``.a['b.c']``, and the equality filter of
    Karmada's and Fluid's condition columns, ``.status.conditions[?(@.type=="Ready")].status``, which takes the
    first item that matches); a missing key is not found."""
    at, value = 0, obj
    path = path.strip()
    if path.startswith("{") and path.endswith("}"):
        path = path[1:-1]
    while at < len(path):
        step = _STEP.match(path, at)
        if step is None:
            return False, None
        key, index, quoted, field, wanted = step.groups()
        if field is not None:
            matches = [item for item in value if isinstance(item, dict) and item.get(field) == wanted] \
                if isinstance(value, list) else []
            if not matches:
                return False, None
            value = matches[0]
        elif index is not None:
            if not isinstance(value, list) or int(index) >= len(value):
                return False, None
            value = value[int(index)]
        else:
            key = quoted if quoted is not None else key
            if not isinstance(value, dict) or key not in value:
                return False, None
            value = value[key]
        at = step.end()
    return True, value


def _go_json(value: Any) -> str:
    """``json.Marshal``'s text: compact, map keys sorted, ``<``, ``>`` and ``&`` escaped."""
    text = json.dumps(value, separators=(",", ":"), sort_keys=True, ensure_ascii=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")


def _go_text(value: Any) -> str:
    """What a JSONPath prints of a scalar (``fmt.Fprint``)."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, float) and value.is_integer() and abs(value) < 1e21:
        return str(int(value))
    return str(value)


def cell(column: dict[str, Any], obj: dict[str, Any], now: datetime) -> Any:
    """One column's cell of ``obj`` (module doc)."""
    found, value = _find(obj, column.get("jsonPath", ""))
    if not found or value is None:
        return None
    kind = column.get("type", "string")
    if kind == "string":
        return value if isinstance(value, str) else _go_json(value) if isinstance(value, dict | list) \
            else _go_text(value)
    if kind == "integer":
        return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if kind == "number":
        return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None
    if kind == "boolean":
        return value if isinstance(value, bool) else None
    if kind == "date":
        return age(value, now)
    return None

def crd_printer(rt: ResourceType, version: str) -> Printer:
    """A custom resource's columns: Name, then the version's printer columns (module doc)."""
    crd_columns = columns(rt, version)
    definitions = [column("Name", NAME_DESCRIPTION, format="name")]
    definitions += [{"name": c["name"], "type": c.get("type", "string"), "format": c.get("format", ""),
                     "description": c.get("description") or
                     f"Custom resource definition column (in JSONPath format): {c.get('jsonPath', '')}",
                     "priority": c.get("priority", 0)} for c in crd_columns]
    return Printer(definitions, lambda obj, now: [obj["metadata"]["name"], *(cell(c, obj, now) for c in crd_columns)])


def printed(rt: ResourceType) -> bool:
    """Whether the emulator prints ``rt`` as a Table: every custom resource, and the built-in kinds of
    :data:`BUILTIN_PRINTERS`."""
    return not rt.builtin or (rt.group, rt.kind) in BUILTIN_PRINTERS


def _row_object(obj: dict[str, Any], include: str) -> dict[str, Any] | None:
    if include == "None":
        return None
    if include == "Object":
        return obj
    return {"kind": "PartialObjectMetadata", "apiVersion": "meta.k8s.io/v1", "metadata": obj.get("metadata", {})}


def object_table(rt: ResourceType, version: str, obj: dict[str, Any], *, table_api: str,
                 include_object: str) -> dict[str, Any]:
    """The Table of one object (a get, or a watch's event): its ``resourceVersion`` is the Table's."""
    return table(rt, version, [obj], table_api=table_api, include_object=include_object,
                 metadata={"resourceVersion": obj["metadata"].get("resourceVersion", "")})


def table(rt: ResourceType, version: str, items: list[dict[str, Any]], *, metadata: dict[str, Any],
          table_api: str, include_object: str, now: datetime | None = None) -> dict[str, Any]:
    """The Table of ``items`` (the objects of one list or get, already in ``version``)."""
    now = now or datetime.now(UTC)
    printer = BUILTIN_PRINTERS.get((rt.group, rt.kind)) if rt.builtin else None
    if printer is None:
        printer = crd_printer(rt, version)
    rows = [{"cells": printer.cells(o, now), "object": _row_object(o, include_object)} for o in items]
    if printer.conditions is not None:
        for row, o in zip(rows, items, strict=True):
            if conditions := printer.conditions(o):
                row["conditions"] = conditions
    return {"kind": "Table", "apiVersion": f"meta.k8s.io/{table_api}", "metadata": metadata,
            "columnDefinitions": printer.columns, "rows": rows}
