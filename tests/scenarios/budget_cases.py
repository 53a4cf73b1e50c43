"""Jobs whose lost time two rules could claim: each must get the cause that explains the most.

Plain PyTorch jobs under `traintop run` (zero code), none of them tuned against the engine:

* a loader whose workers each need 0.48 s for a batch while a step takes a few ms (2 and 4
  workers): batches come in bursts and every other (every fourth) step is long, all of it data
  wait: ``data_starved``, never ``periodic_stall``;
* a 3-rank gloo DDP job whose rank 2 spends 150 ms more per step in its forward, blocked off
  the CPU or burning it: the other ranks wait 95 % of their step on it: ``straggler``, naming
  rank 2 and the phase, whatever its own cause;
* a loader reading 1 MiB samples through the page cache from a disk throttled to 8 MB/s:
  ``data_io`` on every run (it read ``data_starved`` on some, as one tick's read rate went to
  zero while the workers sat blocked).

``CASES`` is the table the scenario matrix runs (tests/test_scenarios_budget.py); ``run_case``
runs one case once.  ``checks`` are what the answer must say beyond its id.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from tests.scenarios.blockdev import throttled_disk, write_dataset
from tests.scenarios.harness import (
    DiagnoseRun,
    Workload,
    free_port,
    rank_env,
    run_diagnose,
    running,
    scenario_env,
    start_workload,
    traintop_run,
    wait_for_segments,
)

WORKLOAD_SECONDS = "35"
DISK_BPS = 8 * 1000 * 1000
DISK_FILES = 320  # 335 MB: more than a 35 s run reads at 8 MB/s, so nothing is read twice
DISK_FILE_BYTES = 1024 * 1024


@dataclass(frozen=True)
class BudgetCase:
    """One job: its script and arguments, how many ranks, what it must read."""

    name: str
    wanted: str
    script: str
    args: tuple[str, ...]
    setup: str
    ranks: int = 1
    disk: bool = False  # reads from the throttled loop device
    checks: tuple[str, ...] = field(default=())  # regexes one evidence line must match each
    deadline_s: float = 15.0


CASES: dict[str, BudgetCase] = {
    case.name: case
    for case in (
        BudgetCase("bursty_2w", "data_starved", "bursty_loader.py", ("--workers", "2"),
                   "2 workers, 30 ms fixed fetch per sample, batch 16, 3-layer MLP",
                   checks=(r"^data wait \d+ % of time, in bursts of 2 batches every ",)),
        BudgetCase("bursty_4w", "data_starved", "bursty_loader.py", ("--workers", "4"),
                   "4 workers, 30 ms fixed fetch per sample, batch 16, 3-layer MLP",
                   checks=(r"^data wait \d+ % of time",)),
        BudgetCase("straggler_offcpu", "straggler", "ddp_slow_rank.py", ("--mode", "offcpu"),
                   "3-rank gloo DDP, rank 2 sleeps 150 ms in forward", ranks=3,
                   checks=(r"^rank 2: \d+ ms a step in forward, off CPU",), deadline_s=25.0),
        BudgetCase("straggler_oncpu", "straggler", "ddp_slow_rank.py", ("--mode", "oncpu"),
                   "3-rank gloo DDP, rank 2 burns 150 ms of CPU in forward", ranks=3,
                   checks=(r"^rank 2: \d+ ms a step in forward, on CPU",), deadline_s=25.0),
        BudgetCase("throttled_disk", "data_io", "disk_loader.py", (),
                   "2 workers, 1 MiB files read through the page cache, loop ext4 capped at "
                   "8 MB/s", disk=True,
                   checks=(r"^2 loading processes blocked reading \d+ % of the time",)),
    )
}  # fmt: skip


def run_case(case: BudgetCase, ring_dir: Path, tmp_path: Path) -> tuple[Workload, DiagnoseRun]:
    """Start the job (every rank), wait for every segment, diagnose the first rank's job.
    A disk case raises ScenarioUnavailable where no throttled loop device can be made."""
    with _data(case, tmp_path) as data, running([]) as jobs:
        args = (*case.args, "--seconds", WORKLOAD_SECONDS, *data.args)
        port = free_port() if case.ranks > 1 else 0
        for r in range(case.ranks):
            env = rank_env(ring_dir, r, case.ranks, port) if case.ranks > 1 else None
            argv = traintop_run(case.script, *args, prefix=data.prefix)
            log = tmp_path / f"{case.name}-{r}.log"
            jobs.append(start_workload(argv, env or scenario_env(ring_dir), log))
        wait_for_segments(ring_dir, case.ranks, jobs, timeout_s=60)
        return jobs[0], run_diagnose(scenario_env(ring_dir), job_pid=jobs[0].pid)


@dataclass(frozen=True)
class _Data:
    args: tuple[str, ...] = ()
    prefix: tuple[str, ...] = ()


@contextmanager
def _data(case: BudgetCase, tmp_path: Path) -> Iterator[_Data]:
    """The throttled dataset a disk case reads (its path and the cgroup prefix), else none."""
    if not case.disk:
        yield _Data()
        return
    size = DISK_FILES * DISK_FILE_BYTES + 256 * 1024 * 1024
    with throttled_disk(tmp_path, size, DISK_BPS) as disk:
        root = disk.mountpoint / "data"
        write_dataset(root, DISK_FILES, DISK_FILE_BYTES)
        yield _Data(("--data-dir", str(root)), tuple(disk.join_prefix()))
