"""The quiet killers as real jobs (issue 43): plain PyTorch under `traintop run`, zero code.

* ``host_memory_oom``: persistent DataLoader workers copy a dataset of Python objects
  (object_dataset.py) inside a v1 memory cgroup of 1.2 GB: ``host_memory`` with the time left
  while it lives, then "killed by the OOM killer" once the kernel ends it;
* ``gil_hog`` / ``gil_logger`` / ``gil_io`` / ``gil_waiters`` (gil_thread.py): a thread holding
  the GIL half the time is ``gil_contention``, named with its frame; an idle logger, a reader in
  the kernel, waiting threads and a thread in C without the GIL are not;
* ``straggler_quota`` (ddp_quota.py): three gloo ranks of equal work, rank 2 in a CFS quota of
  0.3 CPU: ``straggler``, rank 2, its throttling said;
* ``checkpoint_barrier`` (ddp_checkpoint.py): rank 0 writes a 30 s checkpoint while ranks 1-2
  wait in a barrier: read inside the pause (a stall limit of 20 s for `diagnose`, so the pause
  reading, from half that limit, lasts long enough to be judged on its own), ``straggler``
  naming rank 0 and save_checkpoint, never ``network``.

``CASES`` is the table the scenario matrix runs (tests/test_scenarios_killers.py); ``run_case``
runs one case once and returns what the test checks.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tests.scenarios import harness
from tests.scenarios.budget_cases import BudgetCase
from tests.scenarios.cpu_quota import cpu_quota
from tests.scenarios.harness import DiagnoseRun, ScenarioUnavailable, Workload, scenario_env

MEMORY_ROOT = Path("/sys/fs/cgroup/memory")
MEMORY_LIMIT = 1200 * 1024 * 1024
QUOTA_CPUS = 0.3


@dataclass(frozen=True)
class KillerCase(BudgetCase):
    """A budget case's fields, and what it must never read and how long its job runs."""

    forbidden: str | None = None
    seconds: str = "35"


CASES: dict[str, KillerCase] = {
    case.name: case
    for case in (
        KillerCase("host_memory_oom", "host_memory", "object_dataset.py", ("--sample-ms", "4"),
                   "3 persistent workers copy 9,600 samples of 1,000 Python floats (300 MB), "
                   "4 ms a sample; v1 memory cgroup of 1.2 GB",
                   checks=(r"^the job's cgroup \(.*\) holds .* limit; at \+.*/min, the cgroup's "
                           r"1\.2 GiB limit is reached in about ",),
                   deadline_s=60.0, seconds="240"),
        KillerCase("gil_hog", "gil_contention", "gil_thread.py", ("--thread", "hog"),
                   "a thread aggregating in pure Python 50 ms of every 100 ms",
                   checks=(r"^thread 'stats-aggregator' \(tid \d+\) .* needs the GIL: .* at "
                           r"gil_thread\.py:\d+ in aggregate",)),
        KillerCase("gil_logger", "compute", "gil_thread.py", ("--thread", "logger"),
                   "a thread logging one line a second", forbidden="gil_contention"),
        KillerCase("gil_io", "compute", "gil_thread.py", ("--thread", "io"),
                   "a thread reading the shards a producer streams through a pipe",
                   forbidden="gil_contention"),
        KillerCase("gil_waiters", "compute", "gil_thread.py", ("--thread", "waiters"),
                   "three threads waiting on queues and events, one in 768x768 torch matmuls",
                   forbidden="gil_contention"),
        KillerCase("straggler_quota", "straggler", "ddp_quota.py", (),
                   "3 gloo ranks of equal work, rank 2 in a CFS quota of 0.3 CPU", ranks=3,
                   checks=(r"rank 2's cgroup quota of 0\.3 CPU \(the other ranks': none\) "
                           r"throttled it in \d+ % of its periods",), deadline_s=25.0),
        KillerCase("checkpoint_barrier", "straggler", "ddp_checkpoint.py",
                   ("--every", "400", "--save-s", "30"),
                   "3 gloo ranks; rank 0 writes a 30 s checkpoint while ranks 1-2 wait in a "
                   "barrier", ranks=3, forbidden="network",
                   checks=(r"rank 0 is in .* save_checkpoint",), deadline_s=60.0),
    )
}  # fmt: skip


@dataclass
class Outcome:
    """What a case gave: its first rank's workload, the diagnose run, and for the OOM case the
    time left it predicted (and when diagnose finished) and how the job ended."""

    workload: Workload
    run: DiagnoseRun
    predicted_left_s: float | None = None
    ended_after_s: float | None = None  # from diagnose's end to the job's end
    jobs_text: str = ""


@dataclass(frozen=True)
class MemoryLimit:
    cgroup: Path

    def join_prefix(self) -> list[str]:
        procs = self.cgroup / "cgroup.procs"
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]


@contextmanager
def memory_limit(limit: int, name: str) -> Iterator[MemoryLimit]:
    """A fresh v1 memory cgroup limited to ``limit`` bytes, removed after."""
    if os.geteuid() != 0 or not (MEMORY_ROOT / "memory.limit_in_bytes").exists():
        raise ScenarioUnavailable(f"a memory cgroup needs root and {MEMORY_ROOT}")
    cgroup = MEMORY_ROOT / f"{name}-{os.getpid()}"
    try:
        cgroup.mkdir()
        (cgroup / "memory.limit_in_bytes").write_text(str(limit))
    except OSError as exc:
        raise ScenarioUnavailable(f"could not make a memory cgroup: {exc}") from exc
    try:
        yield MemoryLimit(cgroup)
    finally:
        deadline = time.monotonic() + 10.0
        while (cgroup / "cgroup.procs").read_text().strip() and time.monotonic() < deadline:
            time.sleep(0.1)
        with suppress(OSError):
            cgroup.rmdir()


def run_case(case: KillerCase, ring_dir: Path, tmp_path: Path) -> Outcome:
    if case.name == "host_memory_oom":
        return _oom(case, ring_dir, tmp_path)
    if case.name == "straggler_quota":
        with cpu_quota(QUOTA_CPUS, "tt-quota") as quota:
            return _ranks(case, ring_dir, tmp_path, {2: tuple(quota.join_prefix())})
    if case.name == "checkpoint_barrier":
        return _checkpoint(case, ring_dir, tmp_path)
    return _ranks(case, ring_dir, tmp_path, {})


def _start(case: KillerCase, ring_dir: Path, tmp_path: Path,
           prefixes: dict[int, tuple[str, ...]], jobs: list[Workload]) -> None:  # fmt: skip
    port = harness.free_port() if case.ranks > 1 else 0
    for r in range(case.ranks):
        alone = case.ranks == 1
        env = scenario_env(ring_dir) if alone else harness.rank_env(ring_dir, r, case.ranks, port)
        args = (*case.args, "--seconds", case.seconds)
        argv = harness.traintop_run(case.script, *args, prefix=prefixes.get(r, ()))
        jobs.append(harness.start_workload(argv, env, tmp_path / f"{case.name}-{r}.log"))
    harness.wait_for_segments(ring_dir, case.ranks, jobs, timeout_s=90)


def _ranks(case: KillerCase, ring_dir: Path, tmp_path: Path,
           prefixes: dict[int, tuple[str, ...]]) -> Outcome:  # fmt: skip
    with harness.running([]) as jobs:
        _start(case, ring_dir, tmp_path, prefixes, jobs)
        return Outcome(jobs[0], harness.run_diagnose(scenario_env(ring_dir), job_pid=jobs[0].pid))


def _oom(case: KillerCase, ring_dir: Path, tmp_path: Path) -> Outcome:
    """Diagnose once the workers' copies are under way (the group two thirds full: at half, the
    trend still held the dataset's build and the workers' start, steeper than the copying that
    follows, and the time left read 15 s for 34), then wait for its end and read it as
    `traintop jobs` does."""
    with memory_limit(MEMORY_LIMIT, "tt-oom") as limit, harness.running([]) as jobs:
        _start(case, ring_dir, tmp_path, {0: tuple(limit.join_prefix())}, jobs)
        _wait_for_usage(limit.cgroup, MEMORY_LIMIT * 2 // 3, jobs[0])
        run = harness.run_diagnose(scenario_env(ring_dir), job_pid=jobs[0].pid)
        left = _left_s(run)
        jobs[0].proc.wait(timeout=float(case.seconds))
        ended = time.monotonic()
        text = _jobs_text(ring_dir)
        return Outcome(jobs[0], run, left, ended - run.finished, text)


def _wait_for_usage(cgroup: Path, usage: int, job: Workload, timeout_s: float = 90.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline and job.proc.poll() is None:
        if int((cgroup / "memory.usage_in_bytes").read_text()) >= usage:
            return
        time.sleep(0.5)


def _left_s(run: DiagnoseRun) -> float | None:
    """The time left the verdict predicted ("... is reached in about 1m25s"), where it did."""
    text = " ".join((run.verdict or {}).get("evidence") or ())
    found = re.search(r"reached in about (?:(\d+)h)?(?:(\d+)m)?(?:(\d+)s)?", text)
    if found is None or not any(found.groups()):
        return None
    hours, minutes, secs = (int(g or 0) for g in found.groups())
    return hours * 3600 + minutes * 60 + secs


def _jobs_text(ring_dir: Path) -> str:
    done = subprocess.run([*harness.traintop_cmd(), "jobs"], env=scenario_env(ring_dir),
                          capture_output=True, text=True, timeout=60)  # fmt: skip
    return done.stdout + done.stderr


def _checkpoint(case: KillerCase, ring_dir: Path, tmp_path: Path) -> Outcome:
    """Judge the pause: `diagnose --for 6` from 11 s into the checkpoint, with a stall limit
    of 20 s (its pause reading begins at half the limit, 10 s, and the hang at the limit)."""
    with harness.running([]) as jobs:
        _start(case, ring_dir, tmp_path, {}, jobs)
        began = _checkpoint_start(jobs[0])
        time.sleep(max(0.0, began + 11.0 - time.monotonic()))
        env = scenario_env(ring_dir, TRAINTOP_STALL_AFTER="5x,20s")
        return Outcome(jobs[0], harness.run_diagnose(env, job_pid=jobs[0].pid, for_s=6.0))


def _checkpoint_start(job: Workload, timeout_s: float = 120.0) -> float:
    """When rank 0 began its checkpoint (CLOCK_MONOTONIC, as its log says)."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = re.search(r"checkpoint start ([\d.]+)", job.log_tail(100_000))
        if found:
            return float(found.group(1))
        time.sleep(0.2)
    raise AssertionError(f"no checkpoint began:\n{job.log_tail()}")
