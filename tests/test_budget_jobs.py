"""Two real jobs whose lost time another rule could claim, judged side by side in one run.

The suite's share of tests/test_scenarios_budget.py (the matrix repeats each case alone): a
burst-fed loader (2 workers, each 0.48 s per batch, steps of a few ms) and a 3-rank gloo DDP
job whose rank 2 sleeps 150 ms in its forward run at once under `traintop run`, and one
`traintop diagnose --json` must give each job its own answer: the loader ``data_starved`` with
the bursts in its evidence (its long steps are data wait, not a periodic stall), the DDP job
``straggler``, naming rank 2, the phase it spends its time in and that it is off the CPU, and
where in the code that phase goes (its stack, sampled by its helper thread while diagnose ran).
Both jobs sleep rather than compute, so sharing two cores changes neither answer.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.scenarios.harness import (
    describe,
    free_port,
    rank_env,
    run_diagnose,
    running,
    scenario_env,
    start_workload,
    traintop_run,
    wait_for_segments,
)

pytestmark = [pytest.mark.solo, pytest.mark.timeout(180)]

SECONDS = ("--seconds", "30")


def _start(ring_dir: Path, tmp_path: Path) -> list:
    """The loader, then the three ranks; returns every started process."""
    loader = traintop_run("bursty_loader.py", "--workers", "2", *SECONDS)
    jobs = [start_workload(loader, scenario_env(ring_dir), tmp_path / "bursty.log")]
    port = free_port()
    for r in range(3):
        argv = traintop_run("ddp_slow_rank.py", "--mode", "offcpu", *SECONDS)
        jobs.append(start_workload(argv, rank_env(ring_dir, r, 3, port), tmp_path / f"r{r}.log"))
    return jobs


def test_burst_fed_loader_and_off_cpu_straggler(ring_dir: Path, tmp_path: Path) -> None:
    with running(_start(ring_dir, tmp_path)) as jobs:
        wait_for_segments(ring_dir, 4, jobs, timeout_s=60)
        run = run_diagnose(scenario_env(ring_dir), for_s=10.0)
    context = describe(run)
    assert run.verdict is not None, context
    by_name = {job["name"]: job for job in run.verdict["per_job"]}
    loader, ddp = by_name["bursty_loader"], by_name["ddp_slow_rank"]
    assert loader["bottleneck"] == "data_starved", context
    assert loader["evidence"][0].startswith("data wait "), context
    assert ", in bursts of 2 batches every " in loader["evidence"][0], context
    assert "periodic_stall" not in {a["bottleneck"] for a in loader["also"]}, context
    assert ddp["bottleneck"] == "straggler" and ddp["straggler"]["rank"] == 2, context
    assert ddp["evidence"][0].startswith(f"rank 2 (pid {jobs[3].pid}) is the straggler"), context
    assert ddp["evidence"][1].startswith("rank 2: "), context
    assert ddp["evidence"][1].split(" a step ")[1].startswith("in forward, off CPU"), context
    assert ddp["share"] >= 0.5, context
    # where rank 2's forward goes, from its stack sampled while diagnose watched: the sleep
    stacks = [e for e in ddp["evidence"] if e.startswith("rank 2 in forward (")]
    assert stacks and "ddp_slow_rank.py:" in stacks[0] and " in forward" in stacks[0], context
    assert not any("py-spy" in r for r in ddp["remedies"]), context
