"""The one background thread that turns collectors into a stream of immutable snapshots.

A single long-lived thread (never the UI thread, never a pool) owns every collector, so their
"previous reading" state needs no locks and ticks can never overlap.  A collector that raises
costs only its own section for that tick: the error lands in ``Snapshot.errors`` and the
collector is called again next tick.
"""

from __future__ import annotations

import math
import os
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol, TypeVar

from traintop.collectors.gpu_truth import with_gpu_truth, with_process_sm
from traintop.collectors.snapshot import (
    CollectorError,
    GpuSnapshot,
    GpuStatus,
    HostInfo,
    JobSnapshot,
    ProcessSnapshot,
    Snapshot,
)

T = TypeVar("T")

MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 60.0


class GpuSource(Protocol):
    """What the sampler needs from ``traintop.collectors.gpu.GpuCollector``."""

    def collect(self) -> tuple[tuple[GpuSnapshot, ...], GpuStatus]: ...

    def close(self) -> None: ...


class ProcessSource(Protocol):
    """What the sampler needs from ``traintop.collectors.processes.ProcessCollector``."""

    total: int | None  # processes the last collect's scan found; None if it failed

    def collect(self, gpu_mem: dict[int, int] | None = None) -> tuple[ProcessSnapshot, ...]: ...


class JobSource(Protocol):
    """What the sampler needs from ``traintop.collectors.jobs.JobCollector``."""

    def collect(self) -> tuple[JobSnapshot, ...]: ...

    def close(self) -> None: ...


@dataclass(frozen=True, slots=True)
class Collectors:
    """Every collector instance one sampler drives; built by ``traintop.collectors.factory``."""

    gpu: GpuSource
    cpu: Any
    memory: Any
    disks: Any
    nics: Any
    processes: ProcessSource
    host: Any
    jobs: JobSource | None = None
    job_nics: Any = None  # traintop.collectors.job_nics: NICs of the jobs' own network namespaces
    pressure: Any = None  # traintop.collectors.pressure: the host's PSI (None: not sampled)

    def close(self) -> None:
        """Release NVML and ring-buffer mappings; host collectors hold nothing to release."""
        for source in (self.gpu, self.jobs):
            if source is not None:
                source.close()


def clamp_interval(value: float) -> float:
    """Keep the interval where sampling is both meaningful and cheap (0.1 s to 60 s)."""
    if not math.isfinite(value):
        raise ValueError(f"interval must be a finite number of seconds, got {value!r}")
    return min(MAX_INTERVAL_S, max(MIN_INTERVAL_S, float(value)))


def gpu_memory_by_pid(gpus: tuple[GpuSnapshot, ...]) -> dict[int, int]:
    """GPU memory each pid holds, summed over GPUs (a DDP rank may touch several)."""
    held: dict[int, int] = {}
    for gpu in gpus:
        for proc in gpu.processes:
            if proc.used_memory_bytes is not None:
                held[proc.pid] = held.get(proc.pid, 0) + proc.used_memory_bytes
    return held


def next_slot(scheduled: float, interval: float, now: float) -> float:
    """First slot after ``now`` on the grid ``scheduled + k * interval``; missed slots are skipped.

    A tick that overran by several intervals is followed by one tick at the next grid point, not
    by a burst of catch-up ticks that would measure near-zero intervals.
    """
    return scheduled + interval * (math.floor(max(0.0, now - scheduled) / interval) + 1)


def _one_line(exc: BaseException) -> str:
    """An exception as one status-line message."""
    text = " ".join(str(exc).split())
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class Sampler:
    """Calls every collector once per interval on one daemon thread and publishes snapshots."""

    def __init__(
        self,
        collectors: Collectors,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
        wall: Callable[[], float] = time.time,
    ):
        self._collectors = collectors
        self._interval_s = clamp_interval(interval_s)
        self._clock = clock
        self._wall = wall
        self._lock = threading.Lock()
        self._tick_lock = threading.Lock()
        self._wake = threading.Event()
        self._stopping = threading.Event()
        self._thread: threading.Thread | None = None
        self._last_host: HostInfo | None = None
        self._callback_errors: list[CollectorError] = []
        self._sampled_at: float | None = None

    @property
    def interval_s(self) -> float:
        """Seconds between ticks."""
        with self._lock:
            return self._interval_s

    @interval_s.setter
    def interval_s(self, value: float) -> None:
        """Change the interval from any thread; the sleeping sampler re-plans at once."""
        with self._lock:
            self._interval_s = clamp_interval(value)
        self._wake.set()

    def start(self, on_snapshot: Callable[[Snapshot], None]) -> None:
        """Start the sampling thread; ``on_snapshot`` is called from it once per tick."""
        if self._thread is not None and self._thread.is_alive():
            raise RuntimeError("sampler already running")
        self._stopping.clear()
        self._thread = threading.Thread(
            target=self._run, args=(on_snapshot,), name="traintop-sampler", daemon=True
        )
        self._thread.start()

    def stop(self, timeout_s: float = 1.0) -> None:
        """Ask the thread to finish and join it; a tick in progress completes first."""
        self._stopping.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout_s)
            self._thread = None

    def sample_once(self) -> Snapshot:
        """One snapshot, taken synchronously (never concurrently with a thread tick)."""
        with self._tick_lock:
            self._sampled_at = self._clock()
            return self._build()

    def sample_first(self) -> Snapshot:
        """The monitor's first frame: the machine and its jobs without the process scan (every
        ``/proc/PID``: the slowest collector at start-up), which the thread's first tick
        brings one interval later, when a process's CPU share can first be told anyway."""
        with self._tick_lock:
            self._sampled_at = self._clock()
            return self._build(scan_processes=False)

    def _run(self, on_snapshot: Callable[[Snapshot], None]) -> None:
        """Tick on a monotonic schedule until stopped; the thread never dies of an error."""
        due = self._clock()
        if self._sampled_at is not None:
            # A sample was taken before start (the monitor's first frame): the first tick comes
            # one interval after the start (the app's mount, after that sample), so its rates
            # span at least an interval and its paint lands clear of the first frame's.
            due = self._sleep_past(due)
        while not self._stopping.is_set():
            snapshot = self.sample_once()
            try:
                on_snapshot(snapshot)
            except Exception as exc:
                self._callback_errors.append(CollectorError("on_snapshot", _one_line(exc)))
            due = self._sleep_past(due)

    def _sleep_past(self, scheduled: float) -> float:
        """Wait for the first slot in the future after ``scheduled``; return that slot.

        Slots lie on a grid of the interval from the previous slot, so slots missed by a slow
        tick are skipped, never run back to back.  An interval change wakes the wait, and the
        slot is recomputed from the same grid origin with the new interval.
        """
        while not self._stopping.is_set():
            self._wake.clear()
            interval = self.interval_s
            now = self._clock()
            due = next_slot(scheduled, interval, now)
            if not self._wake.wait(due - now):
                return due
        return scheduled

    def _build(self, scan_processes: bool = True) -> Snapshot:
        """Call every collector (GPU first: processes need per-pid GPU memory; processes before
        jobs: the job collector takes DataLoader workers from this tick's process scan)."""
        c = self._collectors
        errors, self._callback_errors = self._callback_errors, []
        gpus, gpu_status = self._call(
            "gpu",
            c.gpu.collect,
            ((), GpuStatus(available=False, message="GPU collector failed")),
            errors,
        )
        gpu_mem = gpu_memory_by_pid(gpus)
        processes = (
            self._call("processes", lambda: c.processes.collect(gpu_mem), (), errors)
            if scan_processes
            else ()
        )
        processes = with_process_sm(processes, gpus)  # nvitop's %SM per GPU-holding process
        jobs = self._call("jobs", c.jobs.collect, (), errors) if c.jobs is not None else ()
        jobs = with_gpu_truth(jobs, gpus)  # the card's busy share: needs this tick's GPUs and jobs
        return Snapshot(
            timestamp=self._wall(),
            monotonic=self._clock(),
            interval_s=self.interval_s,
            host=self._host(errors),
            cpu=self._call("cpu", c.cpu.collect, None, errors),
            memory=self._call("memory", c.memory.collect, None, errors),
            disks=self._call("disks", c.disks.collect, (), errors),
            nics=self._nics(jobs, errors),
            gpus=gpus,
            gpu_status=gpu_status,
            processes=processes,
            jobs=jobs,
            errors=tuple(errors),
            process_total=c.processes.total,
            pressure=self._call("pressure", c.pressure.collect, None, errors)
            if c.pressure is not None
            else None,
        )

    def _nics(self, jobs: tuple[JobSnapshot, ...], errors: list[CollectorError]) -> tuple:
        """The monitor's own NICs, then those of jobs living in other network namespaces."""
        c = self._collectors
        nics = self._call("nics", c.nics.collect, (), errors)
        if c.job_nics is None or not jobs:
            return nics
        return nics + self._call("job_nics", lambda: c.job_nics.collect(jobs), (), errors)

    def _host(self, errors: list[CollectorError]) -> HostInfo:
        """Host facts; on failure the last good ones (or the bare minimum) keep the header up."""
        fallback = self._last_host or HostInfo(socket.gethostname(), 0.0, os.cpu_count() or 1)
        self._last_host = self._call("host", self._collectors.host.collect, fallback, errors)
        return self._last_host

    @staticmethod
    def _call(name: str, collect: Callable[[], T], empty: T, errors: list[CollectorError]) -> T:
        """``collect()``, or ``empty`` plus a ``CollectorError`` when it raises."""
        try:
            return collect()
        except Exception as exc:
            errors.append(CollectorError(name, _one_line(exc)))
            return empty
