"""Training jobs as the check runs them, and what traintop says about them meanwhile.

A job is ``train_job.py`` in a session of its own, plain or under ``traintop run`` (which
keeps its PID).  While it runs, traintop's own sampler watches at the monitor's 1 s interval
(``Watch``) and ``traintop diagnose`` runs as a user runs it (``Diagnose``); when it stops, its
own record of every step comes back as JSON.  Without CUDA the job is the toy model on the CPU,
so the same path runs in CI.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from contextlib import suppress
from pathlib import Path
from typing import Any

from gpucheck.context import HERE, Context
from traintop.collectors.factory import build_collectors
from traintop.collectors.jobs import JobCollector
from traintop.collectors.ring_reader import Record, open_segment
from traintop.collectors.sampler import Sampler
from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.facts_file import facts_path

TRAIN_JOB = HERE / "workloads" / "train_job.py"
STEADY_TIMEOUT_S = 150.0  # the first CUDA start on a fresh machine loads kernels for a while


class JobFailed(RuntimeError):
    """The job died or never got steady; the message ends with its log's tail."""


class Job:
    """One ``train_job.py`` process; killed with its DataLoader workers on leaving ``with``."""

    def __init__(self, ctx: Context, name: str, mode: str, *args: str, traintop: bool = True,
                 env: dict[str, str] | None = None):  # fmt: skip
        self.ctx, self.name = ctx, name
        self.out = ctx.work / f"{name}.json"
        self.log = ctx.work / f"{name}.log"
        toy = ("--tiny", "--warmup-steps", "3", "--settle-s", "0.5") if ctx.no_cuda else ()
        argv = [sys.executable, str(TRAIN_JOB), mode, "--out", str(self.out),
                "--device", ctx.device, *toy, *args]  # fmt: skip
        if traintop:
            argv = ctx.traintop("run", "--name", f"check-{name}", "--", *argv)
        for stale in (self.out, *(self.out.with_suffix(s) for s in (".steady", ".phase"))):
            stale.unlink(missing_ok=True)  # a kept work folder holds the last run's files
        self.started = time.monotonic()
        with open(self.log, "wb") as sink:  # its own session: killed with its workers
            self.proc = ctx.start(
                argv, env, stdout=sink, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def pid(self) -> int:
        return self.proc.pid

    def __enter__(self) -> Job:
        return self

    def __exit__(self, *_exc: object) -> None:
        with suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait()

    def log_tail(self, chars: int = 1500) -> str:
        try:
            return self.log.read_text(errors="replace")[-chars:]
        except OSError as exc:
            return f"(no log: {exc})"

    def wait_file(self, suffix: str, timeout: float = STEADY_TIMEOUT_S) -> str:
        """The content of FILE<suffix> once the job writes it (atomically); JobFailed if it
        dies first."""
        path, deadline = self.out.with_suffix(suffix), time.monotonic() + timeout
        while time.monotonic() < deadline:
            if path.exists():
                return path.read_text()
            if self.proc.poll() is not None:
                raise JobFailed(f"{self.name} exited {self.proc.returncode}:\n{self.log_tail()}")
            time.sleep(0.1)
        raise JobFailed(f"{self.name}: no {suffix} after {timeout:.0f} s:\n{self.log_tail()}")

    def wait_for(self, suffix: str, content: str, timeout: float = STEADY_TIMEOUT_S) -> None:
        """Until FILE<suffix> holds ``content`` (the copy job's direction)."""
        deadline = time.monotonic() + timeout
        while self.wait_file(suffix, timeout) != content:
            if time.monotonic() > deadline:
                raise JobFailed(f"{self.name}: {suffix} never read {content!r}:\n{self.log_tail()}")
            time.sleep(0.05)

    def wait_steady(self) -> float:
        """Seconds from start to steady stepping."""
        self.wait_file(".steady")
        return time.monotonic() - self.started

    def finish(self, stop: bool = True, timeout: float = 120.0) -> dict[str, Any]:
        """Stop the job (SIGTERM ends its loop cleanly), or let it end by itself, and read its
        own record as soon as it is written: torch takes seconds to tear down after that, and
        every step is already in the ring."""
        if stop and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        return json.loads(self.wait_file(self.out.suffix, timeout))


class Watch:
    """traintop's sampler (the monitor's collectors, 1 s apart) following one job."""

    def __init__(self, ctx: Context, pid: int) -> None:
        jobs = JobCollector(directory=str(ctx.ring_dir))
        jobs.focus_pid = pid
        self.pid = pid
        self.collectors = build_collectors(jobs=jobs)
        self.sampler = Sampler(self.collectors, interval_s=1.0)
        self.snapshots: list[Snapshot] = []
        self.sampler.start(self.snapshots.append)

    def stop(self) -> list[Snapshot]:
        self.sampler.stop()
        self.collectors.close()
        return list(self.snapshots)


def job_of(snapshot: Snapshot, pid: int) -> JobSnapshot | None:
    return next((job for job in snapshot.jobs if job.pid == pid), None)


class Diagnose:
    """``traintop diagnose --for S --json --job PID`` started now, read when asked."""

    def __init__(self, ctx: Context, pid: int, for_s: float) -> None:
        argv = ctx.traintop("diagnose", "--for", str(for_s), "--json", "--job", str(pid))
        self.for_s = for_s
        self.proc = ctx.start(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)

    def verdict(self) -> dict[str, Any]:
        out, err = self.proc.communicate(timeout=self.for_s + 60)
        if not out.strip():
            raise RuntimeError(
                f"diagnose exited {self.proc.returncode} without JSON: {err.strip()}"
            )
        return json.loads(out)


def segment_path(ctx: Context, pid: int) -> Path:
    """The job's newest ring segment (it outlives the job)."""
    paths = sorted(Path(ctx.ring_dir).glob(f"{pid}-r*.ring"))
    if not paths:
        raise RuntimeError(f"no ring segment of pid {pid} in {ctx.ring_dir}")
    return paths[-1]


def ring_records(ctx: Context, pid: int) -> list[Record]:
    """Every record still in the job's ring segment."""
    with open_segment(segment_path(ctx, pid)) as segment:
        return list(segment.last(segment.header.capacity - 1))


def facts_document(ctx: Context, pid: int) -> dict[str, Any] | None:
    """The probe's facts side file of the job as it stands (docs/ring-format.md), raw: what
    the snapshot does not carry (the profile's share of kernels joined to their launch)."""
    try:
        return json.loads(facts_path(segment_path(ctx, pid)).read_text())
    except (OSError, RuntimeError, ValueError):
        return None
