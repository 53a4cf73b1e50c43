"""Is a difference between two runs beyond noise?  Mann–Whitney U, stdlib only, deterministic.

Why Mann–Whitney U rather than a t-test or a bootstrap: step times are skewed and heavy-tailed
(a checkpoint step is 100x the median), which a rank test does not mind; it needs no random
resampling, so the same two files always give the same answer; and it costs one sort.

Two honest corrections, both from how training runs behave:
- consecutive steps are not independent (a slow stretch lasts many steps), so the test uses an
  effective sample size from the lag-1 autocorrelation, n·(1−r)/(1+r), instead of n;
- with 100 000 steps a rank test finds even 0.1 % "significant", so a change must also exceed
  the noise floor: the larger of 2 % (the run-to-run spread that benchmarking tools such as
  criterion.rs treat as noise) and how much each run disagrees with itself between its halves.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

ALPHA = 0.01
NOISE_FLOOR_PCT = 2.0


def mann_whitney_p(a: Sequence[float], b: Sequence[float]) -> float | None:
    """Two-sided p-value of U (normal approximation, ties corrected, autocorrelation-adjusted)."""
    n1, n2 = len(a), len(b)
    if n1 < 2 or n2 < 2:
        return None
    ranks, tie_term = _ranks([*a, *b])
    n = n1 + n2
    u = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    var = n1 * n2 / 12 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0:
        return 1.0
    z = abs(u - n1 * n2 / 2) / math.sqrt(var)
    z *= math.sqrt(min(_independence(a), _independence(b)))
    return math.erfc(z / math.sqrt(2))


def _ranks(values: list[float]) -> tuple[list[float], float]:
    """Mid-ranks of ``values`` (1-based) and the tie correction sum(t³ − t)."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks = [0.0] * len(values)
    tie_term, i = 0.0, 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        tie_term += (j - i + 1) ** 3 - (j - i + 1)
        i = j + 1
    return ranks, tie_term


def _independence(values: Sequence[float]) -> float:
    """n_eff / n for an AR(1) series: (1 − r) / (1 + r), r the lag-1 autocorrelation (≥ 0)."""
    n = len(values)
    mean = sum(values) / n
    dev = [v - mean for v in values]
    denom = sum(d * d for d in dev)
    if denom == 0:
        return 1.0
    r = max(0.0, sum(dev[i] * dev[i + 1] for i in range(n - 1)) / denom)
    return max((1 - r) / (1 + r), 1 / n)


def change_pct(a: float | None, b: float | None) -> float | None:
    if a is None or b is None or a == 0:
        return None
    return (b - a) / abs(a) * 100.0


def self_disagreement_pct(
    values: Sequence[float], stat: Callable[[Sequence[float]], float]
) -> float:
    """How much ``stat`` differs between the first and second half of one run, in percent."""
    half = len(values) // 2
    if half < 2:
        return 0.0
    change = change_pct(stat(values[:half]), stat(values[half:]))
    return abs(change) if change is not None else 0.0


def beyond_noise(a: Sequence[float], b: Sequence[float], stat: Callable[[Sequence[float]], float],
                 change: float | None) -> bool | None:  # fmt: skip
    """Significant: U rejects at ``ALPHA`` and the change exceeds both runs' noise floor."""
    p = mann_whitney_p(a, b)
    if p is None or change is None:
        return None
    floor = max(NOISE_FLOOR_PCT, self_disagreement_pct(a, stat), self_disagreement_pct(b, stat))
    return p < ALPHA and abs(change) > floor


def mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def quantile(values: Sequence[float], q: float) -> float:
    """Linear-interpolated quantile (numpy's default)."""
    ordered = sorted(values)
    pos = (len(ordered) - 1) * q
    lo = math.floor(pos)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (ordered[hi] - ordered[lo]) * (pos - lo)
