"""One training job as the check runs it, and everything each side saw of it.

A job runs to steady state; traintop's sampler then watches it for a window (``traintop
diagnose`` beside it on a card), while ``during`` makes checks of its own; the job is stopped
and its own record comes back with traintop's snapshots, the verdict, its ring records and the
probe's facts side file.  A job whose figures arrive late (the probe's sampled profile, the
autocast seen inside forward) is watched until they are there, a bounded while longer.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass
from itertools import pairwise
from typing import Any

from gpucheck.context import Context
from gpucheck.jobs import Diagnose, Job, Watch, facts_document, job_of, ring_records
from traintop.collectors.ring_reader import Record
from traintop.collectors.snapshot import JobSnapshot, Snapshot

WINDOW_S = 12.0  # steady stepping that diagnose and the comparisons look at
CPU_WINDOW_S = 3.0  # the toy CPU job of fake mode: the same path, briefly
UNTIL_MAX_S = 30.0  # the longest a job is watched past its window for a late figure


@dataclass
class Observed:
    """One job as it ran: its own record, traintop's snapshots of it, the verdict, its ring,
    and the probe's facts file as the window ended (None: none written)."""

    pid: int
    ready_s: float
    result: dict[str, Any]
    snapshots: list[Snapshot]
    verdict: dict[str, Any] | None
    records: list[Record]
    facts: dict[str, Any] | None = None

    @property
    def job(self) -> JobSnapshot | None:
        """The job as the monitor last showed it."""
        return job_of(self.snapshots[-1], self.pid) if self.snapshots else None

    def shown(self) -> list[JobSnapshot]:
        """The job in every snapshot of the window that lists it."""
        return [job for s in self.snapshots if (job := job_of(s, self.pid)) is not None]

    @property
    def steady_ns(self) -> int:
        ends, index = self.result["end_ns"], self.result["steady_index"] or 1
        return ends[index - 1]


def median_step_ms(result: dict[str, Any]) -> float:
    """The job's median step while steady and unprofiled, by its own clock."""
    ends = result["end_ns"][(result["steady_index"] or 1) - 1 :]
    return statistics.median(b - a for a, b in pairwise(ends)) / 1e6


def _wait(watch: Watch, pid: int, until: Callable[[JobSnapshot], bool]) -> None:
    deadline = time.monotonic() + UNTIL_MAX_S
    while time.monotonic() < deadline:
        last = watch.snapshots[-1] if watch.snapshots else None
        job = job_of(last, pid) if last else None
        if job is not None and until(job):
            return
        time.sleep(0.25)


def observe(
    ctx: Context,
    name: str,
    mode: str,
    *args: str,
    during: Callable[[Job], None] | None = None,
    env: dict[str, str] | None = None,
    prepare: Callable[[int], None] | None = None,
    until: Callable[[JobSnapshot], bool] | None = None,
) -> Observed:
    """Run a job to steady state, ``prepare`` (its PID) before it is watched, watch it for the
    window (diagnose beside it when on a card, ``during`` meanwhile), and on until ``until``
    holds of the job as shown; stop it, and gather what each side saw."""
    window = CPU_WINDOW_S if ctx.no_cuda else WINDOW_S
    with Job(ctx, name, mode, *args, env=env) as job:
        ready = job.wait_steady()
        if prepare:
            prepare(job.pid)
        watch = Watch(ctx, job.pid)
        diagnose = None if ctx.no_cuda else Diagnose(ctx, job.pid, window)
        try:
            end = time.monotonic() + window
            if during:
                during(job)
            time.sleep(max(0.0, end - time.monotonic()))
            verdict = diagnose.verdict() if diagnose else None
            if until:
                _wait(watch, job.pid, until)
            facts = facts_document(ctx, job.pid)
        finally:
            snapshots = watch.stop()
            if diagnose:
                diagnose.proc.kill()  # a no-op once it answered
        result = job.finish()
    records = ring_records(ctx, job.pid)
    return Observed(job.pid, ready, result, snapshots, verdict, records, facts)
