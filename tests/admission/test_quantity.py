"""Kubernetes quantities as exact milli-units (core.quantity): the integer fast path agrees with exact arithmetic."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tether.core.quantity import InvalidQuantity, add, fits, format_milli, milli_value, scale, subtract

FACTORS = {"": 1, "n": Fraction(1, 10**9), "u": Fraction(1, 10**6), "m": Fraction(1, 1000), "k": 10**3,
           "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18, "Ki": 2**10, "Mi": 2**20,
           "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def exact(number: str, suffix: str) -> int:
    """What Kubernetes' MilliValue gives: the amount times 1000, rounded up."""
    return math.ceil(Fraction(number) * FACTORS[suffix] * 1000)


@given(st.integers(min_value=0, max_value=10**12), st.sampled_from(sorted(FACTORS)))
def test_integers_with_any_suffix(n: int, suffix: str) -> None:
    assert milli_value(f"{n}{suffix}") == exact(str(n), suffix)


@given(st.decimals(min_value=0, max_value=10**6, places=4, allow_nan=False, allow_infinity=False),
       st.sampled_from(sorted(FACTORS)))
def test_decimals_with_any_suffix(number: object, suffix: str) -> None:
    text = f"{number:f}"
    assert milli_value(f"{text}{suffix}") == exact(text, suffix)


@pytest.mark.parametrize("text", ["", "Gi", "64i", "1iM", "1.2.3", "5 Gi", "-", "0x10", "1e", "abc", "١٢"])
def test_malformed_quantities_are_refused_with_the_text(text: str) -> None:
    with pytest.raises(InvalidQuantity, match="quantity"):
        milli_value(text)


def test_numbers_and_exponents() -> None:
    assert milli_value(3) == 3000
    assert milli_value(0.25) == 250
    assert milli_value("2e3") == 2_000_000
    assert milli_value("1E-3") == 1
    with pytest.raises(InvalidQuantity):
        milli_value(True)


def test_resource_lists_add_subtract_scale_and_fit_resource_by_resource() -> None:
    cpu_mem, cpu_gpu = {"cpu": 1500, "memory": 2000}, {"cpu": 500, "nvidia.com/gpu": 1000}
    assert add(cpu_mem, cpu_gpu) == {"cpu": 2000, "memory": 2000, "nvidia.com/gpu": 1000}
    assert cpu_mem == {"cpu": 1500, "memory": 2000}  # (the operands are left as they were)
    assert subtract(cpu_mem, {"cpu": 2000, "memory": 500}) == {"cpu": 0, "memory": 1500}  # never below zero
    assert scale(cpu_gpu, 3) == {"cpu": 1500, "nvidia.com/gpu": 3000}
    assert fits({"cpu": 1000, "memory": 10**9}, {"cpu": 1000}) and not fits({"cpu": 1001}, {"cpu": 1000})
    assert (format_milli(1500), format_milli(2000), format_milli(0)) == ("1500m", "2", "0")
