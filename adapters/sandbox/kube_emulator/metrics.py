"""``apiserver_request_total``, as kube-apiserver counts and exposes it on ``GET /metrics``.

tether counts its writes on a real cluster from the API server's own counter (``ops/bench/e2e.py``, the write
economy tests), so the emulator keeps the same counter with the same labels, and one reader serves both:

* ``verb`` is the request's as the real server cleans it: ``GET`` of one object, ``LIST`` and ``WATCH`` of a
  collection, ``POST``, ``PUT``, ``PATCH`` (``APPLY`` when the body is a server-side apply), ``DELETE`` and
  ``DELETECOLLECTION``;
* ``group``, ``version``, ``resource``, ``subresource`` name what was asked for; ``scope`` is ``resource`` for one
  object, ``namespace`` for a namespace's collection and ``cluster`` for a cluster-wide one;
* ``code`` is the HTTP status answered, errors included (a 409 is a request the server paid for, not a write);
* ``component`` is ``apiserver`` and ``dry_run`` the request's ``dryRun`` (``All``, or empty).

Only resource requests are counted (discovery, ``/openapi`` and the emulator's ``/_emulator`` routes are not).
"""

from __future__ import annotations

from collections import Counter

#: The label names, in the order the real server prints them (alphabetical), ``code`` last in the key.
LABELS = ("component", "dry_run", "group", "resource", "scope", "subresource", "verb", "version")
APPLY_PATCH = "application/apply-patch+yaml"


def request_labels(method: str, verb: str, *, group: str, version: str, resource: str, subresource: str,
                   scope: str, content_type: str, dry_run: str) -> tuple[str, ...]:
    """The labels of one request but its code, in :data:`LABELS` order. ``verb`` is the emulator's (get, list,
    watch, create, …), ``method`` the HTTP method."""
    if verb in ("list", "watch", "deletecollection"):
        cleaned = verb.upper()
    elif method == "PATCH" and content_type.split(";")[0].strip() == APPLY_PATCH:
        cleaned = "APPLY"
    else:
        cleaned = method
    return ("apiserver", dry_run, group, resource, scope, subresource, cleaned, version)


def _quote(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def request_total_text(counts: Counter[tuple[str, ...]]) -> str:
    """The Prometheus text exposition of ``apiserver_request_total``; a key is :data:`LABELS` then ``code``."""
    lines = ["# HELP apiserver_request_total [STABLE] Counter of apiserver requests broken out for each verb, dry "
             "run value, group, version, resource, scope, component, and HTTP response code.",
             "# TYPE apiserver_request_total counter"]
    for key, count in sorted(counts.items()):
        *labels, code = key
        pairs = [("code", code), *zip(LABELS, labels, strict=True)]
        body = ",".join(f'{name}="{_quote(value)}"' for name, value in sorted(pairs))
        lines.append(f"apiserver_request_total{{{body}}} {count}")
    return "\n".join(lines) + "\n"
