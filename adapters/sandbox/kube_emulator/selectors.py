"""Label and field selectors, parsed once per request and matched per object.

The label selector grammar is the apiserver's: comma-separated requirements ``k=v``, ``k==v``, ``k!=v``,
``k in (a,b)``, ``k notin (a,b)``, ``k`` (exists) and ``!k`` (does not exist). Commas inside parentheses belong
to the set, so the string is tokenised rather than split. Field selectors support ``=``, ``==`` and ``!=`` on a
small per-kind allow-list of dotted paths (the real server rejects anything else with 400, and so do we).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from typing import Any

from .errors import bad_request

Matcher = Callable[[Mapping[str, Any]], bool]

_REQ = re.compile(
    r"""\s*(?:
        (?P<not>!)\s*(?P<nkey>[A-Za-z0-9_./-]+)
      | (?P<skey>[A-Za-z0-9_./-]+)\s+(?P<setop>in|notin)\s*\((?P<vals>[^)]*)\)
      | (?P<key>[A-Za-z0-9_./-]+)\s*(?:(?P<op>==|=|!=)\s*(?P<val>[A-Za-z0-9_.-]*))?
    )\s*(?:,|$)""",
    re.VERBOSE,
)


def parse_label_selector(text: str | None) -> Matcher | None:
    if not text or not text.strip():
        return None
    reqs: list[Callable[[Mapping[str, str]], bool]] = []
    pos = 0
    while pos < len(text):
        m = _REQ.match(text, pos)
        if not m or m.end() == pos:
            raise bad_request(f"unable to parse requirement: found '{text[pos:]}', expected: identifier")
        pos = m.end()
        if m["nkey"]:
            k = m["nkey"]
            reqs.append(lambda labels, k=k: k not in labels)
        elif m["skey"]:
            k, vals = m["skey"], frozenset(v.strip() for v in m["vals"].split(",") if v.strip())
            if m["setop"] == "in":
                reqs.append(lambda labels, k=k, vals=vals: labels.get(k) in vals)
            else:
                reqs.append(lambda labels, k=k, vals=vals: labels.get(k) not in vals)
        elif m["op"]:
            k, v = m["key"], m["val"]
            if m["op"] == "!=":
                reqs.append(lambda labels, k=k, v=v: labels.get(k) != v)
            else:
                reqs.append(lambda labels, k=k, v=v: labels.get(k) == v)
        else:
            k = m["key"]
            reqs.append(lambda labels, k=k: k in labels)

    def match(obj: Mapping[str, Any]) -> bool:
        labels = (obj.get("metadata") or {}).get("labels") or {}
        return all(r(labels) for r in reqs)

    return match


# Field labels the real apiserver accepts per kind (beyond metadata.name / metadata.namespace).
FIELD_LABELS: dict[str, frozenset[str]] = {
    "Pod": frozenset(
        {
            "spec.nodeName",
            "spec.restartPolicy",
            "spec.schedulerName",
            "spec.serviceAccountName",
            "spec.hostNetwork",
            "status.phase",
            "status.podIP",
            "status.nominatedNodeName",
        }
    ),
    "Event": frozenset(
        {
            "involvedObject.kind",
            "involvedObject.namespace",
            "involvedObject.name",
            "involvedObject.uid",
            "involvedObject.apiVersion",
            "involvedObject.resourceVersion",
            "involvedObject.fieldPath",
            "reason",
            "reportingComponent",
            "source",
            "type",
        }
    ),
    "Namespace": frozenset({"status.phase"}),
    "Node": frozenset({"spec.unschedulable"}),
}
_BASE_FIELDS = frozenset({"metadata.name", "metadata.namespace"})


def _field_value(obj: Mapping[str, Any], path: str) -> str:
    cur: Any = obj
    for part in path.split("."):
        if not isinstance(cur, Mapping):
            return ""
        cur = cur.get(part)
    if cur is None:
        return ""
    if isinstance(cur, bool):
        return "true" if cur else "false"
    return str(cur)


def parse_field_selector(text: str | None, *, kind: str) -> Matcher | None:
    if not text or not text.strip():
        return None
    allowed = _BASE_FIELDS | FIELD_LABELS.get(kind, frozenset())
    reqs: list[tuple[str, bool, str]] = []
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        m = re.fullmatch(r"([A-Za-z0-9_.]+)\s*(==|=|!=)\s*(.*)", part)
        if not m:
            raise bad_request(f"invalid selector: '{text}'; can't understand '{part}'")
        key, op, val = m.groups()
        if key not in allowed:
            raise bad_request(f'field label not supported: {key}')
        reqs.append((key, op != "!=", val))

    def match(obj: Mapping[str, Any]) -> bool:
        return all((_field_value(obj, k) == v) == eq for k, eq, v in reqs)

    return match


def match_label_selector_object(selector: Mapping[str, Any] | None, labels: Mapping[str, str]) -> bool:
    """Match a structured ``metav1.LabelSelector`` (matchLabels + matchExpressions). ``None`` matches all."""
    if selector is None:
        return True
    for k, v in (selector.get("matchLabels") or {}).items():
        if labels.get(k) != v:
            return False
    for expr in selector.get("matchExpressions") or []:
        key, op, values = expr.get("key"), expr.get("operator"), expr.get("values") or []
        if op == "In" and labels.get(key) not in values:
            return False
        if op == "NotIn" and key in labels and labels[key] in values:
            return False
        if op == "Exists" and key not in labels:
            return False
        if op == "DoesNotExist" and key in labels:
            return False
    return True
