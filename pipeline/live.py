"""One session's pipeline: the sampler, the job collector, the job in focus, the verdict runner.

On the sampler thread a snapshot is taken, the runner judges it (a millisecond with one 8-rank
job, 5 with 64 ranks: benchmarks/bench_diagnose.py, time the UI thread should not spend), a
recording tap (`R`, `traintop record`) keeps both, and the surface gets both in one call: the
monitor posts them to its UI thread as one message (one tick, one frame), `record` only
records, `diagnose` keeps the window, the exporter publishes.  The surfaces used to assemble
these parts each in its own way; made here, they are configured alike everywhere: the job of
``--job`` (or the one on screen) summarised on every tick, and a rank's stacks sampled when a
verdict asks where its time goes.

The runner is thread-confined: only the thread that delivers snapshots judges them (the
sampler thread once :meth:`Pipeline.start` ran; the caller before that and after
:meth:`Pipeline.stop`), so its window and history need no locks.  It is made at its first
verdict, so `snapshot --json`, which judges nothing, never loads the diagnosis.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Protocol

from traintop.collectors.sampler import Collectors, Sampler
from traintop.collectors.snapshot import Snapshot
from traintop.pipeline.job_source import JobsWhenPresent
from traintop.pipeline.source import RecordedSource, SnapshotSource

if TYPE_CHECKING:
    from traintop.collectors.jobs import JobCollector
    from traintop.diagnosis.api import Verdict
    from traintop.diagnosis.verdict_runner import VerdictRunner, VerdictUpdate

Deliver = Callable[[Snapshot, "VerdictUpdate"], None]
"""What a surface is handed on the sampler thread: each snapshot and its verdict."""

SETTLE_S = 0.25
"""`snapshot --json`: the gap between its two samples, so that every rate is a number."""


class Tap(Protocol):
    """A recording fed on the sampler thread (``traintop.store.tap.RecordingTap``)."""

    def add(self, snapshot: Snapshot, verdict: Verdict) -> None: ...


class Pipeline:
    """Snapshots from ``source``, each judged and handed on; owns the collectors it samples."""

    def __init__(
        self,
        source: SnapshotSource,
        *,
        collectors: Collectors | None = None,
        jobs: JobCollector | JobsWhenPresent | None = None,
        job_pid: int | None = None,
        ask_stacks: bool = True,
        first: Snapshot | None = None,
    ) -> None:
        """``jobs``: the live job collector, told the job in focus and asked for stacks
        (``ask_stacks``: the verdicts' wishes, see ``VerdictRunner``); ``job_pid``: the job
        the verdict is about (attach mode, ``--job``); ``first``: a snapshot taken before the
        source starts, shown in the first frame (tests, the screenshots; else the sampler's)."""
        self.source = source
        self.sampler = source if isinstance(source, Sampler) else None
        self.collectors = collectors
        self._jobs = jobs
        self.job_pid = job_pid
        self.tap: Tap | None = None  # swapped from any thread, read once per tick
        self._ask = self._sample_phase if jobs is not None and ask_stacks else None
        self._recorded = source if isinstance(source, RecordedSource) else None
        self._first = first
        self._unjudged: Snapshot | None = None  # shown in the first frame, not judged yet
        self._runner: VerdictRunner | None = None

    @property
    def runner(self) -> VerdictRunner:
        """The verdict runner, made (and the diagnosis imported) at its first use."""
        if self._runner is None:
            from traintop.diagnosis.verdict_runner import VerdictRunner

            self._runner = VerdictRunner(job_pid=self.job_pid, sample=self._ask)
        return self._runner

    @runner.setter
    def runner(self, runner: VerdictRunner) -> None:
        self._runner = runner

    @property
    def jobs(self) -> JobCollector | None:
        """The live job collector (made now if the pipeline waited for a segment)."""
        jobs = self._jobs
        return jobs.collector if isinstance(jobs, JobsWhenPresent) else jobs

    def _sample_phase(self, pid: int, phase: str | None) -> None:
        """A verdict's wish for a rank's stack samples, passed to the job collector."""
        if (jobs := self.jobs) is not None:
            jobs.sample_phase(pid, phase)

    @property
    def interval_s(self) -> float:
        """Seconds between ticks."""
        return self.source.interval_s

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        self.source.interval_s = value

    def focus_job(self, job_id: str | None) -> None:
        """The job on screen: the job collector summarises its ranks on every tick."""
        if self.jobs is not None:
            self.jobs.focus = job_id

    def first(self) -> Snapshot | None:
        """The first frame's snapshot, before the source starts: the one given, else the
        sampler's (without the process scan: ``Sampler.sample_first``).  It is judged on the
        sampler thread, just before the first tick: its verdict could only say that data is
        being collected (one snapshot spans no time), and the diagnosis it needs (the engine
        and every rule, 0.05 s to import) would hold up the first frame."""
        snapshot = self._first
        if snapshot is None and self.sampler is not None:
            snapshot = self.sampler.sample_first()
        self._unjudged = snapshot
        return snapshot

    def judge(self, snapshot: Snapshot) -> VerdictUpdate:
        """The verdict on ``snapshot`` (a replay's recorded one), kept by a recording in
        progress; runs on the thread that delivers snapshots."""
        recorded = self._recorded.verdict_for(snapshot) if self._recorded is not None else None
        if recorded is None and self._unjudged is not None:
            self.runner.update(self._unjudged)  # the first frame's, in the window before this
            self._unjudged = None
        update = recorded or self.runner.update(snapshot)
        tap = self.tap
        if tap is not None:
            tap.add(snapshot, update.verdict)
        return update

    def start(self, deliver: Deliver) -> None:
        """Start the source: ``deliver`` gets each snapshot and its verdict on its thread."""
        self.source.start(lambda snapshot: deliver(snapshot, self.judge(snapshot)))

    def tick(self) -> tuple[Snapshot, VerdictUpdate]:
        """One snapshot taken and judged now, on the caller's thread (never during a tick)."""
        snapshot = self._sampler().sample_once()
        return snapshot, self.judge(snapshot)

    def settled(self, settle_s: float = SETTLE_S) -> Snapshot:
        """Two samples ``settle_s`` apart, the second: a single sample has no rates (they need
        a previous reading), and a short settle keeps `snapshot --json` quick while giving
        counters time to move."""
        sampler = self._sampler()
        sampler.sample_once()
        time.sleep(settle_s)
        return sampler.sample_once()

    def stop(self) -> None:
        """Stop the source's thread; a tick in progress completes first."""
        self.source.stop()

    def close(self) -> None:
        """Stop, then release NVML and the ring mappings."""
        self.stop()
        if self.collectors is not None:
            self.collectors.close()

    def __enter__(self) -> Pipeline:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def _sampler(self) -> Sampler:
        if self.sampler is None:
            raise RuntimeError("this pipeline replays a source: it takes no samples itself")
        return self.sampler


def live_pipeline(
    interval_s: float = 1.0,
    *,
    job_pid: int | None = None,
    ask_stacks: bool = True,
    reply_wait_s: float | None = None,
) -> Pipeline:
    """The machine and every job of this user, sampled every ``interval_s``: what the monitor,
    `record`, `diagnose`, `snapshot` and the exporter all run.  ``job_pid``: the job summarised
    on every tick and judged first; ``reply_wait_s``: how long a stalled rank's stack helper
    is waited for before its faulthandler is signalled (``JobCollector``)."""
    from traintop.collectors.factory import build_collectors

    def make_jobs() -> JobCollector:
        from traintop.collectors.jobs import JobCollector

        jobs = JobCollector()
        if reply_wait_s is not None:
            jobs.reply_wait_s = reply_wait_s
        jobs.focus_pid = job_pid  # until the jobs table's cursor moves (the monitor)
        return jobs

    jobs = JobsWhenPresent(make_jobs)
    collectors = build_collectors(jobs=jobs)
    return Pipeline(Sampler(collectors, interval_s=interval_s), collectors=collectors, jobs=jobs,
                    job_pid=job_pid, ask_stacks=ask_stacks)  # fmt: skip
