"""The verdict over time: one small point per computed verdict, for the details screen.

A verdict alone says what is wrong now; the history says whether it is getting better.  Points
are built on the verdict thread from the newest snapshot and travel to the UI as an immutable
tuple, so no thread ever mutates state that the UI reads.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.diagnosis.api import Verdict
from traintop.diagnosis.model import LIVE_STATES

HISTORY_POINTS = 120


@dataclass(frozen=True, slots=True)
class VerdictPoint:
    """The shown verdict and the key metrics at one sample; ``None`` = not measured."""

    monotonic: float
    bottleneck: str
    severity: str
    confidence: float
    data_wait_pct: float | None
    gpu_util_pct: float | None
    steps_per_s: float | None
    cpu_busy_pct: float | None


@dataclass(frozen=True, slots=True)
class Metric:
    """One row of the history table: how to read it from a point and how to print it."""

    label: str
    read: Callable[[VerdictPoint], float | None]
    unit: str
    top: float | None  # sparkline full scale; None scales to the largest value seen


METRICS: tuple[Metric, ...] = (
    Metric("data wait", lambda p: p.data_wait_pct, "%", 100.0),
    Metric("GPU util", lambda p: p.gpu_util_pct, "%", 100.0),
    Metric("steps/s", lambda p: p.steps_per_s, "", None),
    Metric("CPU busy", lambda p: p.cpu_busy_pct, "%", 100.0),
)


def _mean(values: Sequence[float | None]) -> float | None:
    known = [v for v in values if v is not None]
    return sum(known) / len(known) if known else None


def _verdict_job(snapshot: Snapshot, verdict: Verdict, job_pid: int | None) -> JobSnapshot | None:
    """The rank the verdict is about: its job's straggler, else the rank asked for, else the
    lowest; never an ended run."""
    pids = {j.pid for j in verdict.jobs if j.state in LIVE_STATES}
    mine = [j for j in snapshot.jobs if j.pid in pids]
    wanted = _straggler_pid(verdict) or job_pid
    mine = [j for j in mine if j.pid == wanted] or mine
    return min(mine, key=lambda j: (j.rank, j.pid), default=None)


def _straggler_pid(verdict: Verdict) -> int | None:
    focus = next((j for j in verdict.per_job if j.job_id == verdict.job_id), None)
    return focus.straggler.pid if focus is not None and focus.straggler else None


def point_from(snapshot: Snapshot, verdict: Verdict, job_pid: int | None) -> VerdictPoint:
    """Reduce the newest snapshot to the numbers that explain most verdicts."""
    job = _verdict_job(snapshot, verdict, job_pid)
    wait = job.data_wait_share if job is not None else None
    primary = verdict.primary
    return VerdictPoint(
        monotonic=snapshot.monotonic,
        bottleneck=primary.bottleneck,
        severity=primary.severity,
        confidence=primary.confidence,
        data_wait_pct=None if wait is None else wait * 100.0,
        gpu_util_pct=_mean([g.util_gpu_pct for g in snapshot.gpus if not g.lost]),
        steps_per_s=job.steps_per_s if job is not None else None,
        cpu_busy_pct=snapshot.cpu.total.busy_pct if snapshot.cpu else None,
    )


def extend(
    history: tuple[VerdictPoint, ...], point: VerdictPoint, limit: int = HISTORY_POINTS
) -> tuple[VerdictPoint, ...]:
    """A new history ending with ``point``; a clock that went back (a replay restarted)
    starts it over rather than drawing two timelines on top of each other."""
    if history and point.monotonic < history[-1].monotonic:
        return (point,)
    return (*history[-(limit - 1) :], point) if limit > 1 else (point,)


@dataclass(frozen=True, slots=True)
class Run:
    """A stretch of consecutive points with the same primary bottleneck."""

    bottleneck: str
    severity: str
    duration_s: float


def runs(history: Sequence[VerdictPoint]) -> list[Run]:
    """The verdict timeline, newest first: "data_cpu for 40 s, before that unknown 3 s"."""
    out: list[Run] = []
    start = 0
    for i in range(1, len(history) + 1):
        if i == len(history) or history[i].bottleneck != history[start].bottleneck:
            end = history[i] if i < len(history) else history[i - 1]
            first = history[start]
            out.append(Run(first.bottleneck, first.severity, end.monotonic - first.monotonic))
            start = i
    return out[::-1]


def stats(values: Sequence[float | None]) -> tuple[float, float, float] | None:
    """(min, mean, max) of the measured values, ``None`` when nothing was measured."""
    known = [v for v in values if v is not None]
    if not known:
        return None
    return min(known), sum(known) / len(known), max(known)
