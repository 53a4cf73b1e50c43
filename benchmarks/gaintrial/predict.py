"""The prediction a case is judged on: read from A's recording, before B runs.

The recording holds what the monitor showed (`traintop record` judges every tick, as the live
monitor does); the prediction is the one its last verdict on the job made for the case's knob,
in the job's primary finding or in one that also holds.  ``rediagnose`` judges the recording's
last 30 s again with the code as it is now: how the tuning cases were re-read while the model
was being built (never for held-out cases, whose predictions were written at run time).
"""

from __future__ import annotations

from pathlib import Path

from traintop.diagnosis.engine import diagnose
from traintop.diagnosis.gain_text import gain_words
from traintop.diagnosis.model import Finding, Gain, JobVerdict, Verdict
from traintop.store.reader import Recording

WINDOW = 31  # samples: the monitor's 30 s window at 1 s ticks


def prediction(path: str | Path, name: str, knob: str, rediagnose: bool = False) -> dict:
    """What the verdict on job ``name`` predicted for ``knob``: the figure, its range, what
    bounds it then, the value it proposes; ``gain`` None where it made no such prediction."""
    verdict = _verdict(Path(path), rediagnose)
    job = _job(verdict, name) if verdict is not None else None
    if job is None:
        return {"bottleneck": None, "gain": None}
    gain = next((g for f in (job.primary, *job.also) for g in _gains(f) if g.knob == knob), None)
    return {"bottleneck": job.primary.bottleneck, "gain": None if gain is None else _row(gain)}


def _verdict(path: Path, rediagnose: bool) -> Verdict | None:
    with Recording(path) as rec:
        count = len(rec.samples)
        if rediagnose:
            return diagnose([rec.sample(i)[0] for i in range(max(0, count - WINDOW), count)])
        for index in range(count - 1, -1, -1):
            verdict = rec.sample(index)[1]
            if verdict is not None:
                return verdict
    return None


def _job(verdict: Verdict, name: str) -> JobVerdict | None:
    return next((j for j in verdict.per_job if j.name == name and j.live), None)


def _gains(finding: Finding) -> tuple[Gain, ...]:
    return finding.gains


def _row(g: Gain) -> dict:
    return {
        "remedy": g.remedy,
        "speedup": g.speedup,
        "low": g.low,
        "high": g.high,
        "bound_by": g.bound_by,
        "value": g.value,
        "steps_per_s": g.steps_per_s,
        "change": g.change,
        "words": gain_words(g),
    }
