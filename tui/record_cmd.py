"""`traintop record`: sample, diagnose and record without a terminal, for batch jobs and cron.

Also the one place that wires a :class:`store.writer.Recorder` to a sampler: the monitor's `R`
key and `traintop run --record` use :class:`RecordingTap` too, so every recording holds the same
things: each snapshot, the verdict shown with it, and every step record the job collector read.
"""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from collectors.ring_header import SegmentHeader
from collectors.ring_reader import PollResult
from store.schema import SUFFIX, StoreError
from store.writer import Recorder

EXIT_FAILED = 1


def default_path(now: float | None = None) -> Path:
    """``traintop-YYYYmmdd-HHMMSS.ttrec`` in the working directory."""
    return Path(time.strftime("traintop-%Y%m%d-%H%M%S", time.localtime(now)) + SUFFIX)


class JobMatch:
    """Which segments to record steps of: a job named NAME, or PID and its descendants
    (``torchrun`` is the process `traintop run` starts; the ranks are its children)."""

    def __init__(self, *, pid: int | None = None, name: str | None = None) -> None:
        self._pid, self._name = pid, name
        self._seen: dict[tuple[int, int], bool] = {}

    def __call__(self, header: SegmentHeader) -> bool:
        if self._name is not None:
            return header.name == self._name
        if self._pid is None or header.pid == self._pid:
            return True
        key = (header.pid, header.created_monotonic_ns)
        if key not in self._seen:
            self._seen[key] = _descends_from(header.pid, self._pid)
        return self._seen[key]


def _descends_from(pid: int, ancestor: int) -> bool:
    try:
        return any(p.pid == ancestor for p in psutil.Process(pid).parents())
    except psutil.Error:
        return False


class RecordingTap:
    """A recorder fed from the sampler thread: snapshots with verdicts, and step records."""

    def __init__(self, recorder: Recorder, jobs, match: JobMatch | None = None) -> None:
        self.recorder = recorder
        self._jobs = jobs
        self._match = match or JobMatch()
        if jobs is not None:
            jobs.on_records = self._records

    def _records(self, header: SegmentHeader, result: PollResult) -> None:
        if self._match(header):
            self.recorder.add_records(header, result)

    def add(self, snapshot, verdict) -> None:
        self.recorder.add_sample(snapshot, verdict)

    def stop(self) -> str | None:
        """Detach and finish the file; the error that ended it early, if any."""
        if self._jobs is not None and self._jobs.on_records == self._records:
            self._jobs.on_records = None
        self.recorder.stop()
        return self.recorder.error


def summary(recorder: Recorder) -> str:
    size = recorder.path.stat().st_size if recorder.path.exists() else 0
    return (f"recorded {recorder.samples} samples and {recorder.records} step records to "
            f"{recorder.path} ({size / 1e6:.1f} MB)")  # fmt: skip


def run_record(path: Path, *, interval_s: float, for_s: float | None,
               match: JobMatch, focus_pid: int | None, watch_pid: int | None) -> int:  # fmt: skip
    """Record until ``for_s`` passes, the watched process exits, or SIGINT/SIGTERM."""
    from collectors.sampler import Sampler
    from tui.commands import monitor_collectors
    from tui.verdict_runner import VerdictRunner

    try:
        recorder = Recorder(path, interval_s=interval_s)
    except StoreError as exc:
        print(f"traintop: {exc}", file=sys.stderr)
        return EXIT_FAILED
    collectors = monitor_collectors()
    collectors.jobs.focus_pid = focus_pid  # the verdict's job: summarised on every tick
    tap = RecordingTap(recorder, collectors.jobs, match)
    runner = VerdictRunner(job_pid=focus_pid)
    sampler = Sampler(collectors, interval_s=interval_s)
    sampler.start(lambda snap: tap.add(snap, runner.update(snap).verdict))
    try:
        _wait(for_s, watch_pid, recorder)
        if watch_pid is not None:  # the job ended: one last tick reads its final records
            snap = sampler.sample_once()
            tap.add(snap, runner.update(snap).verdict)
    finally:
        sampler.stop()
        error = tap.stop()
        collectors.close()
    print(f"traintop: {error}" if error else summary(recorder), file=sys.stderr)
    return EXIT_FAILED if error else 0


def _wait(for_s: float | None, watch_pid: int | None, recorder: Recorder) -> None:
    """Block until it is time to stop; SIGTERM and SIGINT end the wait cleanly."""
    done = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: done.set())
    end = None if for_s is None else time.monotonic() + for_s
    watched = _process(watch_pid)
    while not done.wait(0.2):
        if (end is not None and time.monotonic() >= end) or recorder.error:
            return
        if watch_pid is not None and (watched is None or not _alive(watched)):
            return


def _process(pid: int | None) -> psutil.Process | None:
    if pid is None:
        return None
    try:
        return psutil.Process(pid)
    except psutil.Error:
        return None


def _alive(proc: psutil.Process) -> bool:
    """Running and not a zombie (an exited child of ours stays a zombie until reaped)."""
    try:
        return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def start_tap(app, jobs) -> tuple[RecordingTap | None, tuple[str, bool] | None]:
    """The monitor's `R`: a recording to a new time-stamped file, or the one-line reason not."""
    path = default_path()
    try:
        recorder = Recorder(path, interval_s=app.source.interval_s)
    except StoreError as exc:
        app.notify(str(exc), severity="error", timeout=10)
        return None, (str(exc), True)
    app.notify(f"recording to {path.resolve()} (R stops)")
    return RecordingTap(recorder, jobs), None


def stop_tap(app, tap: RecordingTap) -> None:
    """Runs in a worker thread: finishing the file may take a second."""
    error = tap.stop()
    message, severity = (error, "error") if error else (summary(tap.recorder), "information")
    app.call_from_thread(app.notify, message, severity=severity, timeout=8)
