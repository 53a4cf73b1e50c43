"""`traintop compare`: the guides' one-knob loop made concrete, from two recordings (or ranges).

Each metric is computed over the chosen span of each recording, and its change is judged from
the per-step (or per-sample) distributions behind it with :mod:`traintop.store.stats`.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from traintop.diagnosis.knob_diff import KnobChange, changes, settings
from traintop.store.ranges import Span
from traintop.store.reader import Recording
from traintop.store.run_data import RunData, load_run
from traintop.store.stats import beyond_noise, change_pct, mean, quantile


@dataclass(frozen=True, slots=True)
class Metric:
    """One row of the comparison; ``significant`` is None where no test applies."""

    name: str
    a: float | str | None
    b: float | str | None
    change_pct: float | None
    significant: bool | None
    unit: str = ""


def compare(a: Span, b: Span, job: str | None) -> tuple[RunData, RunData, list[Metric]]:
    with Recording(a.path) as rec_a, Recording(b.path) as rec_b:
        run_a, run_b = load_run(rec_a, a, job), load_run(rec_b, b, job)
    return run_a, run_b, metrics(run_a, run_b)


def knob_changes(a: RunData, b: RunData) -> tuple[KnobChange, ...]:
    """The settings that differ between the two runs, with A's predictions for them."""
    before, after = settings(a.facts, a.cpu_limit), settings(b.facts, b.cpu_limit)
    return changes(before, after, a.findings)


def measured(a: RunData, b: RunData) -> tuple[float | None, float | None]:
    """B over A: steps/s and samples/s (None where a side has no rate)."""
    return _ratio(a.steps_per_s, b.steps_per_s), _ratio(a.samples_per_s, b.samples_per_s)


def _ratio(a: float | None, b: float | None) -> float | None:
    return b / a if a and b is not None else None


def metrics(a: RunData, b: RunData) -> list[Metric]:
    rows = [
        _rate("steps_per_s", a, b, lambda r: r.steps_per_s, lambda r: r.step_s, "steps/s"),
        _rate("samples_per_s", a, b, lambda r: r.samples_per_s, lambda r: r.sample_s, "/s"),
        _dist("step_p50_s", a.step_s, b.step_s, lambda v: quantile(v, 0.5), "s"),
        _dist("step_p95_s", a.step_s, b.step_s, lambda v: quantile(v, 0.95), "s"),
        _dist("data_wait_share", a.data_wait, b.data_wait, mean, "share"),
    ]
    for phase in [p for p in a.phase_shares if p in b.phase_shares]:
        va, vb = a.phase_shares[phase], b.phase_shares[phase]
        rows.append(_dist(f"phase_share.{phase}", va, vb, mean, "share"))
    rows += [
        _dist("gpu_util_pct", a.gpu_util, b.gpu_util, mean, "%"),
        _dist("gpu_power_w", a.gpu_power, b.gpu_power, mean, "W"),
        _dist("gpu_sm_clock_mhz", a.gpu_clock, b.gpu_clock, mean, "MHz"),
        _dist("throttled_share", a.throttled, b.throttled, mean, "share"),
        _verdict(a, b),
    ]
    return rows + _verdict_shares(a, b)


def _dist(name: str, a: Sequence[float], b: Sequence[float],
          stat: Callable[[Sequence[float]], float], unit: str) -> Metric:  # fmt: skip
    va = stat(a) if a else None
    vb = stat(b) if b else None
    change = change_pct(va, vb)
    return Metric(name, va, vb, change, beyond_noise(a, b, stat, change), unit)


def _rate(name: str, a: RunData, b: RunData, value: Callable[[RunData], float | None],
          per_step: Callable[[RunData], Sequence[float]], unit: str) -> Metric:  # fmt: skip
    """A rate over the whole span, judged by the per-step distribution it comes from."""
    change = change_pct(value(a), value(b))
    return Metric(name, value(a), value(b), change,
                  beyond_noise(per_step(a), per_step(b), mean, change), unit)  # fmt: skip


def _verdict(a: RunData, b: RunData) -> Metric:
    """The verdict that held longest in each span."""
    top_a, top_b = _dominant(a.verdicts), _dominant(b.verdicts)
    known = top_a is not None and top_b is not None
    return Metric("verdict", top_a, top_b, None, top_a != top_b if known else None)


def _dominant(verdicts: Sequence[str]) -> str | None:
    return Counter(verdicts).most_common(1)[0][0] if verdicts else None


def _verdict_shares(a: RunData, b: RunData) -> list[Metric]:
    """Share of samples each bottleneck was the verdict, for every bottleneck either run saw."""
    rows = []
    for name in sorted(set(a.verdicts) | set(b.verdicts)):
        ia = [float(v == name) for v in a.verdicts]
        ib = [float(v == name) for v in b.verdicts]
        rows.append(_dist(f"verdict_share.{name}", ia, ib, mean, "share"))
    return rows
