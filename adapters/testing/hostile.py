"""Hostile input for the fuzz tests (``tests/hostile/``): JSON of every shape, valid objects bent out of shape.

What tether reads from outside — a claim's spec, a ConfigMap, a pushed notification, an AdmissionReview, a
member's PodGroup or Fluid operation, a log record — is written by someone else, and any of it may be wrong in
any way. These strategies draw the wrong ways:

* :func:`json_values` — any JSON value: scalars of every type (huge integers, long and odd strings), lists,
  objects, nested;
* :func:`bent` — a valid object with a few of its fields replaced by such values, deleted, or wrapped in a list,
  so that the examples reach past the first type check into the code that trusts what it already checked;
* :data:`ODD_STRINGS` — strings that break naive code: empty, whitespace, control characters, path tricks, very
  long ones, markup of other languages.

The budget is per test: ``fuzz_settings()`` gives each property :data:`DEFAULT_EXAMPLES` examples unless
``TETHER_FUZZ_EXAMPLES`` asks for more (a longer run by hand: ``TETHER_FUZZ_EXAMPLES=2000 bash ops/test.sh
tests/hostile``). Whether the examples are drawn afresh or replayed is the suite's hypothesis profile's business.
"""

from __future__ import annotations

import copy
import os
from typing import Any

from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

#: Examples per property in CI: the whole hostile-input suite stays well under a minute on a loaded runner.
DEFAULT_EXAMPLES = 60


def fuzz_settings(examples: int | None = None, **overrides: Any) -> settings:
    """Settings of a fuzz property: ``examples`` (default :data:`DEFAULT_EXAMPLES`, scaled by
    ``TETHER_FUZZ_EXAMPLES``), no deadline (a loaded runner is slow, not wrong), fixtures shared by examples
    (a server started once per test is the point)."""
    scale = int(os.environ.get("TETHER_FUZZ_EXAMPLES", "0") or 0)
    count = scale if scale > 0 else (examples or DEFAULT_EXAMPLES)
    return settings(max_examples=count, deadline=None,
                    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                           HealthCheck.data_too_large, HealthCheck.filter_too_much], **overrides)


ODD_STRINGS: tuple[str, ...] = (
    "", " ", "\t", "\n", "a\nb", " padded ", "\x00", "\u200b", "é", "日本", "🦀", "../../etc/passwd", "%2e%2e/",
    "a/b", "a:b", "a b", "A_B", "-", ".", "..", "x" * 300, "null", "true", "0", "-1", "1e309",
    "{}", "[]", "\"", "\\", "${HOME}", "$(id)", "<script>", "' OR 1=1 --", "%s%s%s", "{{.}}",
)

_integers = st.one_of(st.integers(min_value=-10, max_value=10), st.integers(min_value=-(2**70), max_value=2**70),
                      st.sampled_from([0, -1, 2**31, 2**63 - 1, 2**63, -(2**63) - 1, 2**64]))
_strings = st.one_of(st.sampled_from(ODD_STRINGS), st.text(max_size=20),
                     st.integers(min_value=1_000, max_value=70_000).map(lambda n: "y" * n))  # long: past every limit
_scalars = st.one_of(st.none(), st.booleans(), _integers,
                     st.floats(allow_nan=False, allow_infinity=False), _strings)


def json_values(*, max_leaves: int = 12) -> st.SearchStrategy[Any]:
    """Any JSON value (what a JSON decoder can return): scalars, lists and objects, nested."""
    return st.recursive(
        _scalars,
        lambda children: st.one_of(st.lists(children, max_size=4),
                                   st.dictionaries(_strings, children, max_size=4)),
        max_leaves=max_leaves)


def _places(value: Any, path: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """The paths of every field and element of ``value`` (a path is a tuple of keys and indexes)."""
    out: list[tuple[Any, ...]] = []
    if isinstance(value, dict):
        for key in sorted(value, key=str):
            out.append((*path, key))
            out.extend(_places(value[key], (*path, key)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            out.append((*path, index))
            out.extend(_places(item, (*path, index)))
    return out


def _parent(value: Any, path: tuple[Any, ...]) -> Any:
    for step in path[:-1]:
        value = value[step]
    return value


@st.composite
def bent(draw: st.DrawFn, base: Any, *, max_changes: int = 3, keep: tuple[tuple[Any, ...], ...] = ()) -> Any:
    """``base`` (a valid object) with up to ``max_changes`` of its fields replaced by any JSON value, deleted,
    or wrapped in a list. Paths in ``keep`` (and what is under them) are left alone — e.g. ``("metadata",)``,
    where the API server itself guarantees the shape."""
    value = copy.deepcopy(base)
    for _ in range(draw(st.integers(min_value=0, max_value=max_changes))):
        places = [p for p in _places(value) if not any(p[: len(k)] == k for k in keep)]
        if not places:
            break
        path = draw(st.sampled_from(places))
        parent = _parent(value, path)
        how = draw(st.sampled_from(("replace", "replace", "delete", "wrap")))
        if how == "replace":
            parent[path[-1]] = draw(json_values())
        elif how == "delete":
            del parent[path[-1]]
        else:
            parent[path[-1]] = [parent[path[-1]]]
    return value


def nested(depth: int) -> bytes:
    """A JSON document nested exactly ``depth`` levels deep (arrays inside objects inside arrays …)."""
    opening = [b"[" if level % 2 == 0 else b'{"a":' for level in range(depth)]
    closing = [b"]" if level % 2 == 0 else b"}" for level in reversed(range(depth))]
    return b"".join(opening) + b"0" + b"".join(closing)
