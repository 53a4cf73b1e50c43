"""One run of a case: the job under `traintop run`, recorded once warm, its rate, and the load
other processes put on the box meanwhile (a run they disturbed is rejected and run again).

The box's busy time comes from ``/proc/stat``, the run's own (the job's processes, the recorder)
from each process's ``/proc/PID/stat``; what is left is other work.  It is sampled at the
recording's two ends and every second between (the most any second saw is kept too).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import psutil

from tests.scenarios.blockdev import throttled_disk, write_dataset
from tests.scenarios.cpu_quota import cpu_quota
from tests.scenarios.harness import (
    Workload,
    free_port,
    kill_tree,
    rank_env,
    scenario_env,
    start_workload,
    traintop_cmd,
    wait_for_segments,
)

JOB = Path(__file__).with_name("job.py")
TICK = os.sysconf("SC_CLK_TCK")


@dataclass(frozen=True)
class Setting:
    """How one run is started: the job's arguments, its quota, where its data lies."""

    args: tuple[str, ...]
    quota: float | None = None
    data: Path | None = None  # the dataset directory (the throttled disk, or its RAM copy)
    throttled: bool = False  # the job reads through the blkio limit


@dataclass
class Run:
    """What one run measured."""

    recording: str
    steps_per_s: float | None
    others_cpus: float  # mean CPUs other processes took while it was recorded
    others_peak: float  # the most of any second
    seconds: float
    log_tail: str = ""
    loads: list[float] = field(default_factory=list)


def _busy_ticks() -> tuple[int, int]:
    """(busy, total) jiffies of the whole box from ``/proc/stat``."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    idle = fields[3] + fields[4]  # idle, iowait
    return sum(fields[:8]) - idle, sum(fields[:8])


def _own_ticks(roots: Sequence[int]) -> int:
    """CPU jiffies used so far by ``roots`` and every descendant alive now."""
    pids: set[int] = set()
    for root in roots:
        try:
            proc = psutil.Process(root)
            pids.add(root)
            pids.update(child.pid for child in proc.children(recursive=True))
        except psutil.Error:
            continue
    return sum(_ticks(pid) for pid in pids)


def _ticks(pid: int) -> int:
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except OSError:
        return 0
    return int(fields[11]) + int(fields[12])  # utime, stime


class LoadWatch:
    """Other processes' CPU, per second, while the run's own processes (``roots``) run."""

    def __init__(self, roots: list[int]) -> None:
        self.roots = roots
        self.seconds: list[float] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._watch, daemon=True)

    def __enter__(self) -> LoadWatch:
        self._first = self._reading()
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._stop.set()
        self._thread.join()
        self._last = self._reading()

    def _reading(self) -> tuple[float, int, int, int]:
        busy, total = _busy_ticks()
        return time.monotonic(), busy, total, _own_ticks(self.roots)

    def _watch(self) -> None:
        before = self._reading()
        while not self._stop.wait(1.0):
            now = self._reading()
            self.seconds.append(_others(before, now))
            before = now

    @property
    def mean(self) -> float:
        return _others(self._first, self._last)


def _others(a: tuple[float, int, int, int], b: tuple[float, int, int, int]) -> float:
    """CPUs of other work between two readings: the box's busy time less the run's own."""
    elapsed = b[0] - a[0]
    if elapsed <= 0:
        return 0.0
    busy = (b[1] - a[1]) - max(0, b[3] - a[3])
    return max(0.0, busy / TICK / elapsed)


def _argv(name: str, setting: Setting) -> list[str]:
    data = ("--data-dir", str(setting.data)) if setting.data else ()
    job = [sys.executable, str(JOB), *setting.args, *data, "--seconds", "600"]
    return [*traintop_cmd(), "run", "--name", name, "--", *job]


def _env(ring: Path, rank: int = 0, world: int = 1, port: int = 0) -> dict[str, str]:
    return rank_env(ring, rank, world, port) if world > 1 else scenario_env(ring)


@contextmanager
def started(
    name: str, setting: Setting, ranks: int, trainers: int, work: Path, prefix: list[str]
) -> Iterator[list[Workload]]:
    """The job's processes, started and stepping; killed on the way out."""
    ring = work / "ring"
    ring.mkdir(mode=0o700, exist_ok=True)
    jobs: list[Workload] = []
    try:
        port = free_port() if ranks > 1 else 0
        for copy in range(trainers):
            for rank in range(ranks):
                env = _env(ring, rank, ranks, port)
                log = work / f"job-{copy}-{rank}.log"
                jobs.append(start_workload([*prefix, *_argv(name, setting)], env, log))
        wait_for_segments(ring, ranks * trainers, jobs, timeout_s=120)
        yield jobs
    finally:
        for job in jobs:
            job.stop()


def record(name: str, work: Path, jobs: list[Workload], warm_s: float, for_s: float) -> Run:
    """Let the job warm up, then record it for ``for_s`` while watching the box's load."""
    time.sleep(warm_s)
    path = work / "run.ttrec"
    argv = [*traintop_cmd(), "record", "-o", str(path), "--for", str(for_s), "--job", name]
    env = _env(work / "ring")
    with open(work / "record.log", "wb") as log:
        recorder = subprocess.Popen(
            argv, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        roots = [j.pid for j in jobs] + [recorder.pid]
        with LoadWatch(roots) as watch:
            try:
                recorder.wait(timeout=for_s + 120)
            except subprocess.TimeoutExpired:
                kill_tree(recorder)
    rate = steps_per_s(path, name)
    tail = jobs[0].log_tail(600) if rate is None else ""
    return Run(
        str(path), rate, watch.mean, max(watch.seconds, default=0.0), for_s, tail, watch.seconds
    )


def steps_per_s(path: Path, name: str) -> float | None:
    """The job's steps/s over the recording (its ranks' rates averaged)."""
    from traintop.store.ranges import Span
    from traintop.store.reader import Recording
    from traintop.store.run_data import load_run
    from traintop.store.schema import StoreError

    try:
        with Recording(path) as rec:
            return load_run(rec, Span(str(path), None, None), name).steps_per_s
    except (StoreError, OSError):
        return None


@contextmanager
def environment(
    case_quota: float | None, disk_bps: int | None, files: int, kib: int, work: Path
) -> Iterator[dict]:
    """What a case needs around its runs: the throttled disk with its files and their RAM copy
    (made once, kept for every run)."""
    with ExitStack() as stack:
        found: dict = {}
        if disk_bps is not None:
            disk = stack.enter_context(
                throttled_disk(work, files * kib * 1024 * 2 + (64 << 20), disk_bps)
            )
            data = disk.mountpoint / "data"
            write_dataset(data, files, kib * 1024)
            ram = Path("/dev/shm") / f"gaintrial-{os.getpid()}"
            shutil.copytree(data, ram, dirs_exist_ok=True)
            stack.callback(shutil.rmtree, ram, True)
            found.update(disk=disk, data=data, ram=ram)
        yield found


def uncache(folder: Path) -> None:
    """Drop a dataset's pages from the page cache, so that a run reads it from the device."""
    for path in folder.glob("*.bin"):
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def prefix_for(stack: ExitStack, setting: Setting, env: dict, name: str) -> list[str]:
    """The command prefix that puts the job in its cgroups: the blkio group of the throttled
    disk, a cpu group with the setting's quota."""
    prefix: list[str] = []
    if setting.throttled and "disk" in env:
        prefix += env["disk"].join_prefix()
    if setting.quota is not None:
        quota = stack.enter_context(cpu_quota(setting.quota, f"gaintrial-{name}"))
        prefix += quota.join_prefix()
    return prefix
