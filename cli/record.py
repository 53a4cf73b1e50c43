"""`traintop record`: sample, diagnose and record without a terminal, for batch jobs and cron."""

from __future__ import annotations

import signal
import sys
import threading
import time
from pathlib import Path

import psutil

from traintop.store.schema import StoreError
from traintop.store.tap import JobMatch, RecordingTap, summary
from traintop.store.writer import Recorder

EXIT_FAILED = 1


def run_record(path: Path, *, interval_s: float, for_s: float | None,
               match: JobMatch, focus_pid: int | None, watch_pid: int | None) -> int:  # fmt: skip
    """Record until ``for_s`` passes, the watched process exits, or SIGINT/SIGTERM."""
    from traintop.pipeline.live import live_pipeline

    try:
        recorder = Recorder(path, interval_s=interval_s)
    except StoreError as exc:
        print(f"traintop: {exc}", file=sys.stderr)
        return EXIT_FAILED
    pipeline = live_pipeline(interval_s, job_pid=focus_pid)  # the verdict's job, every tick
    tap = pipeline.tap = RecordingTap(recorder, pipeline.jobs, match)
    pipeline.start(lambda snapshot, update: None)  # the tap keeps both
    try:
        _wait(for_s, watch_pid, recorder)
        if watch_pid is not None:  # the job ended: one last tick reads its final records
            pipeline.stop()
            pipeline.tick()
    finally:
        pipeline.stop()
        error = tap.stop()
        pipeline.close()
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
