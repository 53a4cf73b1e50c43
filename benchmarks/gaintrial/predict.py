"""The prediction a case is judged on: read from A's recording, before B runs.

The recording holds what the monitor showed (`traintop record` judges every tick, as the live
monitor does); the prediction is the one its last verdict on the job made for the case's knob,
in the job's primary finding or in one that also holds.  ``rediagnose`` judges the recording's
last 30 s again with the code as it is now: how the tuning cases were re-read while the model
was being built (never for held-out cases, whose predictions were written at run time).
"""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from traintop.collectors.job_window import RECENT_STEPS as RECENT
from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.diagnosis.context import box_of, context_for
from traintop.diagnosis.engine import diagnose
from traintop.diagnosis.gain_text import gain_words
from traintop.diagnosis.gains import at_value
from traintop.diagnosis.memo import Memo
from traintop.diagnosis.model import Finding, Gain, JobVerdict, Verdict
from traintop.store.reader import RecordedSegment, Recording

WINDOW = 31  # samples: the monitor's 30 s window at 1 s ticks


def prediction(path: str | Path, name: str, knob: str, rediagnose: bool = False,
               value: float | None = None, asked: float | None = None) -> dict:  # fmt: skip
    """What the verdict on job ``name`` predicted for ``knob``: the figure, its range, what
    bounds it then, the value it proposes; ``gain`` None where it made no such prediction.
    Re-diagnosed with a ``value``: what the model says that value buys (the one B ran with).
    Where the verdict offered no remedy on the knob and the case ``asked`` for a value: what
    the model says that value buys, marked ``offered`` False."""
    if rediagnose and value is not None:
        found = _at_value(Path(path), name, knob, value)
        if found is not None:
            return found
    verdict = _verdict(Path(path), rediagnose)
    job = _job(verdict, name) if verdict is not None else None
    gain = None if job is None else next(
        (g for f in (job.primary, *job.also) for g in _gains(f) if g.knob == knob), None
    )  # fmt: skip
    if gain is None and asked is not None:
        found = _at_value(Path(path), name, knob, asked)
        if found is not None and found["gain"] is not None:
            return {**found, "offered": False}
    bottleneck = job.primary.bottleneck if job is not None else None
    return {"bottleneck": bottleneck, "gain": None if gain is None else _row(gain)}


def _at_value(path: Path, name: str, knob: str, value: float) -> dict | None:
    """The model's figure for ``knob`` at ``value`` on the recording's last window (None: a
    knob it gives figures for at any value only through the verdict)."""
    with Recording(path) as rec:
        window = _restored(rec, _live_window(rec, name))
    if not window:
        return None
    jobs = [j for j in window[-1].jobs if j.state == "live"]
    mine = min((j for j in jobs if j.name == name), key=lambda j: j.rank, default=None)
    if mine is None:
        return None
    ctx = context_for(box_of(Memo().window(window), jobs), mine)
    gain = at_value(ctx, knob, value)
    bottleneck = diagnose(window).primary.bottleneck
    return None if gain is None else {"bottleneck": bottleneck, "gain": _row(gain)}


def _verdict(path: Path, rediagnose: bool) -> Verdict | None:
    with Recording(path) as rec:
        count = len(rec.samples)
        if rediagnose:
            return diagnose(_restored(rec, [rec.sample(i)[0] for i in range(count)][-WINDOW:]))
        for index in range(count - 1, -1, -1):
            verdict = rec.sample(index)[1]
            if verdict is not None:
                return verdict
    return None


def _live_window(rec: Recording, name: str) -> list[Snapshot]:
    """The last ``WINDOW`` samples up to the last one in which job ``name`` ran (a recording
    made with ``traintop run --record`` goes on to the job's end)."""
    snaps = [rec.sample(i)[0] for i in range(len(rec.samples))]
    live = [i for i, s in enumerate(snaps) if any(j.name == name and j.state == "live"
                                                   for j in s.jobs)]  # fmt: skip
    return snaps[max(0, live[-1] + 1 - WINDOW) : live[-1] + 1] if live else []


def _restored(rec: Recording, window: list[Snapshot]) -> list[Snapshot]:
    """The snapshots with each job's recent step times put back (a recording leaves them out,
    store/trim.py: its step records hold them, losslessly), as the live monitor judged them."""
    steps = {s.pid: _steps(rec, s) for s in rec.segments()}
    return [replace(snap, jobs=tuple(_with_steps(j, steps.get(j.pid, []), snap.timestamp)
                                     for j in snap.jobs)) for snap in window]  # fmt: skip


def _steps(rec: Recording, seg: RecordedSegment) -> list[tuple[float, tuple[float, ...]]]:
    """(end, phase seconds in the segment's order) of every recorded step of a rank."""
    found = []
    for block in rec.steps(seg):
        phases = list(zip(*(block.phase_ns(i) for i in range(len(seg.phases))), strict=True))
        for t0, ph in zip(block.t_start_ns(), phases, strict=True):
            found.append(((t0 + seg.clock_offset_ns + sum(ph)) / 1e9, tuple(p / 1e9 for p in ph)))
    return found


def _with_steps(job: JobSnapshot, steps: list, at: float) -> JobSnapshot:
    """``job`` with its last ``RECENT`` steps ended by ``at``, split as its phases are."""
    if job.recent_step_times_s or not steps:
        return job
    recent = [ph for end, ph in steps if end <= at][-RECENT:]
    times = tuple(sum(ph) for ph in recent)
    columns = tuple(tuple(ph[i] for ph in recent) for i in range(len(job.phases)))
    return replace(job, recent_step_times_s=times, recent_phase_times_s=columns)


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
