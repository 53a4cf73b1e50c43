"""Several trainers sharing this box's CPUs: oversubscription and its healthy control.

Each case starts ``trainers`` copies of the same plain PyTorch script (a wide MLP on an
in-memory tensor, ``torch.set_num_threads(threads)``, num_workers=0) at once, each under
`traintop run` with no traintop code in it, and runs `traintop diagnose --json --job PID` on the
first once every trainer has published its ring segment.  On the 2-CPU development VM every
case with more compute threads than CPUs must be named ``oversubscribed``; one trainer whose
threads fit the CPUs must stay ``compute`` (``forbidden``: it must never be called
oversubscribed, whatever else the other engineers' load does to it).

``CASES`` is the table the scenario matrix runs; ``run_case`` runs one case once.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from tests.scenarios.harness import (
    DiagnoseRun,
    Workload,
    run_diagnose,
    running,
    scenario_env,
    start_workload,
    traintop_run,
    wait_for_segments,
)

WORKLOAD_SECONDS = 35.0


@dataclass(frozen=True)
class CpuCase:
    """``trainers`` copies of oversubscribed.py with ``threads`` torch threads each."""

    name: str
    wanted: str
    trainers: int
    threads: int
    forbidden: str | None = None

    @property
    def setup(self) -> str:
        each = f"torch.set_num_threads({self.threads})"
        return f"{self.trainers} wide-MLP trainer(s) under traintop run, {each} each, 2 CPUs"


CASES: dict[str, CpuCase] = {
    case.name: case
    for case in (
        CpuCase("oversubscribed_2x2", "oversubscribed", 2, 2),
        CpuCase("oversubscribed_2x4", "oversubscribed", 2, 4),
        CpuCase("oversubscribed_3x6", "oversubscribed", 3, 6),
        CpuCase("oversubscribed_4x8", "oversubscribed", 4, 8),
        CpuCase("cpu_fits_1x2", "compute", 1, 2, forbidden="oversubscribed"),
    )
}


def run_case(case: CpuCase, ring_dir: Path, log_dir: Path) -> tuple[Workload, DiagnoseRun]:
    """Start every trainer at once, wait for all their segments, diagnose the first."""
    env = scenario_env(ring_dir)
    argv = traintop_run(
        "oversubscribed.py", "--threads", str(case.threads), "--seconds", str(WORKLOAD_SECONDS)
    )
    with running([]) as jobs:
        for copy in range(case.trainers):
            jobs.append(start_workload(argv, env, log_dir / f"{case.name}-{copy}.log"))
        wait_for_segments(ring_dir, case.trainers, jobs)
        return jobs[0], run_diagnose(env, job_pid=jobs[0].pid)
