"""A recorder fed from a sampler: the one place that wires a
:class:`~traintop.store.writer.Recorder` to the snapshots, verdicts and step records a sampler
produces.

`traintop record`, the monitor's `R` key and `traintop run --record` all record through
:class:`RecordingTap`, so every recording holds the same things: each snapshot, the verdict shown
with it, and every step record the job collector read.
"""

from __future__ import annotations

import time
from pathlib import Path

import psutil

from traintop.collectors.ring_header import SegmentHeader
from traintop.collectors.ring_reader import PollResult
from traintop.store.schema import SUFFIX
from traintop.store.writer import Recorder


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
