"""Kubernetes resource quantities (``"500m"``, ``"4Gi"``, ``"1.5"``, ``"2e3"``) as exact integers.

Admission (queue capacity, gang requests) and pod placement (node allocatable, sort rules) compare and add
resource amounts. Floats would make those sums depend on the order they are added in, and a decider must give
the same answer byte for byte on every replay, so every amount is held as an integer count of **milli-units**,
as Kubernetes' own ``Quantity.MilliValue()``: ``"500m"`` CPU is 500, ``"2"`` is 2000, ``"1Ki"`` of memory is
1_024_000. A fraction below one milli-unit rounds up, as Kubernetes rounds a request up rather than down.

A malformed quantity raises :class:`InvalidQuantity` with the text it could not read; callers turn it into a
condition on the object that carried it.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from fractions import Fraction
from typing import Any

from .integers import parse_int64

_PATTERN = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(?:([eE][+-]?\d+)|(Ki|Mi|Gi|Ti|Pi|Ei|n|u|m|k|M|G|T|P|E))?$",
                      re.ASCII)  # (\d would otherwise match any script's digits; the API takes 0-9 only)

_SUFFIX: dict[str, Fraction] = {
    "": Fraction(1),
    "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 10**3),
    "k": Fraction(10**3), "M": Fraction(10**6), "G": Fraction(10**9), "T": Fraction(10**12),
    "P": Fraction(10**15), "E": Fraction(10**18),
    "Ki": Fraction(2**10), "Mi": Fraction(2**20), "Gi": Fraction(2**30), "Ti": Fraction(2**40),
    "Pi": Fraction(2**50), "Ei": Fraction(2**60),
}

#: The most digits a quantity's number may have, and the largest power of ten its exponent may name. Kubernetes caps a
#: quantity at 2^63-1 (19 digits); past this bound a quantity is refused rather than computed, since the work (and
#: the integer it gives) grows with the exponent, and ``int()`` refuses text of more than 4300 digits outright.
_MAX_DIGITS = 1000

ResourceList = dict[str, int]
"""Resource name → amount in milli-units (``{"cpu": 2000, "memory": 4294967296000}``)."""


class InvalidQuantity(ValueError):
    """A quantity that is not in Kubernetes' syntax."""


#: Integer multipliers to milli-units of the suffixes that need no fraction (all but n and u): the fast path.
_WHOLE_MILLI: dict[str, int] = {suffix: int(factor * 1000) for suffix, factor in _SUFFIX.items()
                                if (factor * 1000).denominator == 1}


def milli_value(quantity: Any) -> int:
    """The quantity in milli-units, rounded up. Accepts the API's strings and plain numbers."""
    if isinstance(quantity, bool):
        raise InvalidQuantity(f"quantity {quantity!r} is not a number")
    if isinstance(quantity, int):
        return quantity * 1000
    if isinstance(quantity, float):
        text = repr(quantity)
    elif isinstance(quantity, str):
        text = quantity.strip()
    else:
        raise InvalidQuantity(f"quantity {quantity!r} is not a string or a number")
    # Fast path, exact: an integer with an optional suffix whose factor is a whole number of milli-units ("64",
    # "500m", "256Gi") — nearly every quantity a cluster reports. Fractions cost ~25 µs a quantity, and a replay
    # reads every Cluster's resourceSummary.
    digits = text.rstrip("KMGTPEimk")
    if digits.isdigit() and digits.isascii() and len(digits) <= _MAX_DIGITS:
        multiplier = _WHOLE_MILLI.get(text[len(digits):])
        if multiplier is not None:
            return int(digits) * multiplier
    match = _PATTERN.match(text)
    if match is None:
        raise InvalidQuantity(f"quantity {quantity!r} is not a Kubernetes quantity")
    number, exponent, suffix = match.groups()
    power = parse_int64(exponent[1:]) if exponent else 0
    if len(number) > _MAX_DIGITS or power is None or abs(power) > _MAX_DIGITS:
        raise InvalidQuantity(f"quantity {quantity!r} is out of range: more than {_MAX_DIGITS} digits, or a power "
                              f"of ten beyond ±{_MAX_DIGITS}")
    value = Fraction(number)
    if exponent:
        value *= Fraction(10) ** power
    else:
        value *= _SUFFIX[suffix or ""]
    milli = value * 1000
    whole = milli.numerator // milli.denominator
    return whole if whole == milli else whole + 1


def resource_list(resources: Mapping[str, Any] | None) -> ResourceList:
    """A ``{name: quantity}`` map (requests, allocatable, capability) in milli-units; ``None`` is empty."""
    return {name: milli_value(amount) for name, amount in (resources or {}).items()}


def add(left: Mapping[str, int], right: Mapping[str, int]) -> ResourceList:
    """The sum of two resource lists, resource by resource."""
    total = dict(left)
    for name, amount in right.items():
        total[name] = total.get(name, 0) + amount
    return total


def subtract(left: Mapping[str, int], right: Mapping[str, int]) -> ResourceList:
    """``left - right`` resource by resource, never below zero (Godel's and Volcano's "available")."""
    result = dict(left)
    for name, amount in right.items():
        result[name] = max(result.get(name, 0) - amount, 0)
    return result


def scale(resources: Mapping[str, int], factor: int) -> ResourceList:
    """A per-replica request times the number of replicas."""
    return {name: amount * factor for name, amount in resources.items()}


def fits(request: Mapping[str, int], limit: Mapping[str, int]) -> bool:
    """Whether every resource the request names fits under the limit. A resource the limit does not name is
    unlimited (a Queue's capability lists only what it caps)."""
    return all(amount <= limit[name] for name, amount in request.items() if name in limit)


def format_milli(amount: int) -> str:
    """A milli-unit amount in the API's shortest exact form (``1500`` → ``"1500m"``, ``2000`` → ``"2"``)."""
    return str(amount // 1000) if amount % 1000 == 0 else f"{amount}m"
