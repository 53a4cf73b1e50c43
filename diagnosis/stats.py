"""Small numeric helpers over windows of optional values (``None`` = not measured)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from statistics import median
from typing import TypeVar, cast

T = TypeVar("T")  # a column's values: numbers mostly, state letters too
Number = TypeVar("Number", bound=float)  # int or float, kept as it is (bytes stay int)


def present(values: Iterable[T | None]) -> Sequence[T]:
    """The measured values only: a missing sample must never count as a zero.  A list or
    tuple with none missing (a window's column) is returned as it is: the views summarise
    dozens of columns per tick, and copying each one cost as much as the sums."""
    if isinstance(values, (list, tuple)) and None not in values:
        return cast(Sequence[T], values)
    return [v for v in values if v is not None]


def mean_of(values: Iterable[float | None]) -> float | None:
    """Mean of the measured values, ``None`` when nothing was measured."""
    got = present(values)
    return sum(got) / len(got) if got else None


def std_of(values: Iterable[float | None]) -> float | None:
    """Population standard deviation; needs two samples to say anything about variability."""
    got = present(values)
    if len(got) < 2:
        return None
    # Plain floats: statistics.pstdev works in exact fractions, which cost more than the
    # rest of a diagnosis put together, for digits no threshold looks at.
    mean = math.fsum(got) / len(got)
    return math.sqrt(math.fsum((v - mean) ** 2 for v in got) / len(got))


def max_of(values: Iterable[Number | None]) -> Number | None:
    """Largest measured value, ``None`` when nothing was measured."""
    got = present(values)
    return max(got) if got else None


def median_of(values: Iterable[float | None]) -> float | None:
    """Median of the measured values, ``None`` when nothing was measured."""
    got = present(values)
    return median(got) if got else None


def share_true(flags: Iterable[bool]) -> float:
    """Fraction of samples for which a condition held (0 when there are no samples)."""
    got = list(flags)
    return sum(got) / len(got) if got else 0.0


def clamp01(value: float) -> float:
    """Confidences and shares live in 0..1 whatever the arithmetic produced."""
    return min(1.0, max(0.0, value))
