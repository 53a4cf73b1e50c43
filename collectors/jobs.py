"""JobCollector: turns the training processes' ring segments into JobSnapshots.

Each tick polls every segment incrementally (no record is read twice), keeps a bounded window of
step rows per job with running sums, and derives rates and shares from that window.  Timestamps
in records are CLOCK_MONOTONIC ns, so ``clock`` must be that clock in seconds (time.monotonic);
tests pass a fake one together with scripted records.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from pathlib import Path
from types import ModuleType

import psutil

from collectors.job_window import JobWindow
from collectors.ring_reader import (
    HotBlock,
    Segment,
    SegmentError,
    discover,
    open_segment,
    remove_stale,
)
from collectors.snapshot import JobSnapshot, WorkerSnapshot

STALL_MIN_S = 5.0
STALL_STEP_FACTOR = 5.0
LIVE_RESOLUTION_NS = 16  # the live word keeps its start time rounded down to 16 ns


class _Job:
    """One segment being followed: its reader, its window and its last known state."""

    def __init__(self, segment: Segment, window_s: float) -> None:
        self.segment = segment
        self.header = segment.header
        self.window = JobWindow(segment.header, window_s)
        self.liveness = "live"
        self.restarted = False
        self.hot: HotBlock | None = None

    def gone(self) -> bool:
        """Unlinked and no longer written: the cleaner (or the writer) removed it."""
        return self.liveness != "live"

    def poll(self) -> None:
        """Read new records; a segment gone bad keeps its last numbers and shows as crashed."""
        if self.segment.closed:
            return
        try:
            result = self.segment.poll()
            self.window.add(result)
            self.window.steps_total = self.segment.next_index
            self.hot = self.segment.hot()
            self.liveness = self.segment.liveness()
        except (SegmentError, OSError):
            self.segment.close()
            self.liveness = "crashed"


class JobCollector:
    """Follows every segment of the current user; call collect() from the sampler thread."""

    def __init__(
        self,
        directory: str | None = None,
        window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        ps: ModuleType = psutil,
        gc_every_s: float = 60.0,
        gc_max_age_s: float = 600.0,
    ) -> None:
        self._directory = directory
        self._window_s = window_s
        self._clock = clock
        self._workers = _WorkerSampler(ps, clock)
        self._jobs: dict[Path, _Job] = {}
        self._gc_every_s, self._gc_max_age_s = gc_every_s, gc_max_age_s
        self._next_gc = clock()
        self.errors: tuple[str, ...] = ()

    def collect(self) -> tuple[JobSnapshot, ...]:
        """Poll all segments and summarise them; never raises for a bad segment."""
        now = self._clock()
        self._collect_garbage(now)
        self._discover()
        for job in self._jobs.values():
            job.poll()
        _mark_restarts(list(self._jobs.values()))
        jobs = sorted(self._jobs.values(), key=lambda j: (j.header.name, j.header.rank))
        return tuple(self._snapshot(job, now) for job in jobs)

    def close(self) -> None:
        for job in self._jobs.values():
            job.segment.close()
        self._jobs.clear()

    def _discover(self) -> None:
        errors = []
        present = set(discover(self._directory))
        for path in present - self._jobs.keys():
            try:
                self._jobs[path] = _Job(open_segment(path), self._window_s)
            except SegmentError as exc:
                errors.append(str(exc))
        for path in [p for p, job in self._jobs.items() if p not in present and job.gone()]:
            self._jobs.pop(path).segment.close()
        self.errors = tuple(errors)

    def _collect_garbage(self, now: float) -> None:
        if now >= self._next_gc:
            self._next_gc = now + self._gc_every_s
            remove_stale(self._directory, self._gc_max_age_s)

    def _snapshot(self, job: _Job, now: float) -> JobSnapshot:
        state = _state(job, now)
        workers = self._workers.sample(job.header.pid) if state in ("live", "stalled") else ()
        snapshot = job.window.snapshot(now, state, workers)
        phase, seconds = live_phase(job, state, now)
        if phase is None:
            return snapshot
        return dataclasses.replace(snapshot, live_phase=phase, live_phase_s=seconds)


def live_phase(job: _Job, state: str, now_s: float) -> tuple[str | None, float | None]:
    """The phase a running trainer is in and for how long, from its live word (None: unknown).

    The writer publishes a phase when it is entered, but a step ending does not rewrite the word
    (that would cost every step a store): a phase entered before the newest recorded step ended
    closed with it, so the trainer has been between phases ("other") since that step's end.
    """
    hot, header = job.hot, job.header
    if state not in ("live", "stalled") or hot is None or not hot.live_start_ns:
        return None, None
    if not header.same_host_clock():  # CLOCK_MONOTONIC of another boot: no age to give
        return None, None
    index, start_ns = hot.live_phase, hot.live_start_ns
    end_ns = job.window.last_end_ns
    if end_ns is not None and start_ns + LIVE_RESOLUTION_NS <= end_ns:
        return "other", max(0.0, now_s - end_ns / 1e9)
    if index >= len(header.phases):
        return None, None
    return header.phases[index], max(0.0, now_s - start_ns / 1e9)


def _state(job: _Job, now: float) -> str:
    if job.restarted:
        return "restarted"
    if job.liveness != "live":
        return job.liveness
    p50 = job.window.step_time_p50_s()
    limit = max(STALL_MIN_S, STALL_STEP_FACTOR * p50) if p50 is not None else STALL_MIN_S
    age = job.window.last_step_age_s(now)
    return "stalled" if age is not None and age > limit else "live"


def _mark_restarts(jobs: list[_Job]) -> None:
    """A dead instance is "restarted" once a newer process took its name and rank."""
    newest: dict[tuple[str, str, int], int] = {}
    for job in jobs:
        key = (job.header.hostname, job.header.name, job.header.rank)
        newest[key] = max(newest.get(key, 0), job.header.created_monotonic_ns)
    for job in jobs:
        key = (job.header.hostname, job.header.name, job.header.rank)
        newer = newest[key] > job.header.created_monotonic_ns
        job.restarted = newer and job.liveness != "live"


class _WorkerSampler:
    """CPU %, RSS and read rate of a trainer's children (DataLoader workers), from deltas."""

    def __init__(self, ps: ModuleType, clock: Callable[[], float]) -> None:
        self._ps = ps
        self._clock = clock
        self._prev: dict[int, tuple[float, float, int | None]] = {}

    def sample(self, pid: int) -> tuple[WorkerSnapshot, ...]:
        try:
            children = self._ps.Process(pid).children(recursive=False)
        except Exception:  # psutil.Error, or a trainer in another pid namespace
            return ()
        return tuple(w for w in (self._one(child) for child in children) if w is not None)

    def _one(self, proc: psutil.Process) -> WorkerSnapshot | None:
        try:
            with proc.oneshot():
                times = proc.cpu_times()
                rss = proc.memory_info().rss
                read = _read_bytes(proc)
        except Exception:  # the worker exited between listing and reading
            return None
        now, cpu = self._clock(), times.user + times.system
        prev = self._prev.get(proc.pid)
        self._prev[proc.pid] = (now, cpu, read)
        if prev is None or now <= prev[0]:
            return WorkerSnapshot(proc.pid, None, rss, None)
        dt = now - prev[0]
        read_rate = (read - prev[2]) / dt if read is not None and prev[2] is not None else None
        return WorkerSnapshot(proc.pid, max(0.0, (cpu - prev[1]) / dt * 100), rss, read_rate)


def _read_bytes(proc: psutil.Process) -> int | None:
    try:
        return proc.io_counters().read_bytes
    except (AttributeError, psutil.AccessDenied):
        return None
