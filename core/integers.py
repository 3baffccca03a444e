"""Integers read from text as Kubernetes and tether's own records write them — not as Python's ``int()`` reads them.

``int()`` takes more than a decimal number: any Unicode decimal digit (``int('١٢') == 12``), surrounding
whitespace and underscores between digits (``int(' 1_000 ') == 1000``); and ``str.isdigit()``, the usual guard
before it, is also true of digits ``int()`` refuses (``'²'.isdigit()``, then ``int('²')`` raises). On text from
outside — a label value, a resourceVersion, a record's causation, a command-line option — the first gives a
different answer from Kubernetes' ``strconv.ParseInt``, and the second an exception where a clear "not a number"
belongs. Both functions here answer None for anything but the plain ASCII form.
"""

from __future__ import annotations

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1


def decimal_digits(text: str) -> int | None:
    """The non-negative integer ``text`` spells in ASCII digits alone (an offset, a resourceVersion, a port, a JSON
    patch index); None for anything else, the empty string included, and for more digits than ``int()`` converts
    (``sys.get_int_max_str_digits()``, 4300 by default: far past any number tether reads, all within 64 bits)."""
    if not (text.isascii() and text.isdigit()):
        return None
    try:
        return int(text)
    except ValueError:  # (the digit limit: int() refuses such text in time quadratic in its length)
        return None


def parse_int64(text: str) -> int | None:
    """``text`` as Go's ``strconv.ParseInt(text, 10, 64)`` reads it — an optional ``+`` or ``-``, then ASCII digits,
    within int64 — which is how Kubernetes reads a ``Gt``/``Lt`` node selector's value and the label it compares
    with; None where that fails."""
    value = decimal_digits(text[1:] if text[:1] in ("+", "-") else text)
    if value is not None and text[:1] == "-":
        value = -value
    return value if value is not None and _INT64_MIN <= value <= _INT64_MAX else None
