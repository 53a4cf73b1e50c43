"""What changed between two runs of a job, and what the first run's verdict said it would buy.

The guides' loop is "change one knob, measure again"; traintop closes it.  Each run's settings
are what its probe saw (``JobFacts``: the DataLoader's, autocast, compile, threads...) and the
cgroup quota it ran under; the knobs whose values differ are the change.  Beside the gain
measured (steps/s of B over A, samples/s where the batch size changed), the gain A's verdict
predicted for that knob: its figure where it proposed that value, where it proposed another,
or that it gave none (and why: a kernel change on a CPU is not in the budget).  Used by
``traintop compare`` (two recordings, or a recording and the live job) and by the live monitor
for a job restarted under the same name (its run before it is an ended job of that name).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from traintop.collectors.snapshot import CpuLimit, JobFacts
from traintop.diagnosis.gain_text import gain_words, ratio
from traintop.diagnosis.model import Finding, Gain

UNSEEN = "?"  # a knob one run's probe could not read


@dataclass(frozen=True, slots=True)
class KnobChange:
    """One setting that differs between run A and run B, and A's prediction for it."""

    knob: str
    before: str
    after: str
    predicted: Gain | None  # the prediction A's verdict made for this knob, if any

    @property
    def words(self) -> str:
        return f"{self.knob} {self.before} → {self.after}"


def settings(facts: JobFacts | None, limit: CpuLimit | None) -> dict[str, str]:
    """A run's settings as words, by knob (what its probe could not read is left out)."""
    found: dict[str, str] = {}
    if facts is not None:
        found.update(_loader(facts))
        found.update(_flags(facts))
    if limit is not None and limit.quota_cpus is not None:
        found["cpu_quota"] = f"{limit.quota_cpus:g}"
    return found


def _loader(facts: JobFacts) -> dict[str, str]:
    """The first loader's settings; those of its workers only where it has some (a loader
    loading in the trainer has no prefetch or persistence to change)."""
    if not facts.loaders:
        return {}
    first = facts.loaders[0]
    found = {"num_workers": str(first.num_workers), "pin_memory": str(first.pin_memory)}
    if first.num_workers > 0:
        found["persistent_workers"] = str(first.persistent_workers)
        if first.prefetch_factor is not None:
            found["prefetch_factor"] = str(first.prefetch_factor)
    if first.batch_size is not None:
        found["batch_size"] = str(first.batch_size)
    return found


_FIELDS = {  # knob: the JobFacts field it is read from
    "device": "device",
    "autocast": "autocast",
    "compile": "compiled",
    "cuda_graphs": "cuda_graphs",
    "threads": "threads",
    "channels_last": "channels_last",
    "tf32": "tf32_matmul",
    "attention": "attention",
    "sharing_strategy": "sharing_strategy",
}


def _flags(facts: JobFacts) -> dict[str, str]:
    found = {
        knob: str(v) for knob, name in _FIELDS.items() if (v := getattr(facts, name)) is not None
    }
    if facts.optimizers:
        found["fused_optimizer"] = str(any(o.fused for o in facts.optimizers))
    return found


def changes(
    a: dict[str, str], b: dict[str, str], findings: Sequence[Finding] = ()
) -> tuple[KnobChange, ...]:
    """The knobs whose values differ between ``a`` and ``b`` (seen in both), each with the
    prediction A's ``findings`` made for it."""
    knobs = [k for k in a if k in b and a[k] != b[k]]
    return tuple(KnobChange(k, a[k], b[k], predicted_for(k, findings)) for k in knobs)


def predicted_for(knob: str, findings: Sequence[Finding]) -> Gain | None:
    """The prediction the findings made for ``knob`` (the first, in the order they rank)."""
    return next((g for f in findings for g in f.gains if g.knob == knob), None)


def measured_words(speedup: float | None, samples: float | None, batch_changed: bool) -> str:
    """``1.71× steps/s measured`` (and samples/s, which is what a new batch size changes)."""
    if speedup is None:
        return "no gain measured (no steps/s on one side)"
    text = f"{_times(speedup)} steps/s"
    if batch_changed and samples is not None:
        text += f", {_times(samples)} samples/s"
    return text + " measured"


def _times(value: float) -> str:
    return f"{value:.2f}×"


def predicted_words(change: KnobChange) -> str:
    """``1.8× predicted (≈ 1.8× (1.6×–2.0×)...)``, for another value, or none and why."""
    gain = change.predicted
    if gain is None:
        return "A's verdict predicted nothing for this change"
    if gain.speedup is None and gain.high is None:
        return f"no prediction: {gain.reason or 'not modelled'}"
    other = gain.value is not None and f"{gain.value:g}" != change.after
    value = f" for {change.knob} {gain.value:g}" if other and gain.value is not None else ""
    if gain.speedup is None:  # a bound: its reason, not the bound twice
        why = f" ({gain.reason})" if gain.reason else ""
        return f"up to {ratio(gain.high or 1.0)} predicted{value}{why}"
    return f"{_times(gain.speedup)} predicted{value} ({gain_words(gain)})"


def change_line(change: KnobChange, speedup: float | None, samples: float | None) -> str:
    """``num_workers 2 → 4: 1.71× steps/s measured, 1.80× predicted (...)``."""
    batch = change.knob == "batch_size"
    return f"{change.words}: {measured_words(speedup, samples, batch)}, {predicted_words(change)}"
