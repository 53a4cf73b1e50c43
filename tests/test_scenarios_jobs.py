"""Multi-process scenarios: a job is all of its ranks, and ended runs are history.

Real PyTorch jobs under `traintop run` (zero-code), diagnosed by `traintop diagnose --json` as a
subprocess, as in tests/test_scenarios.py:

* ``straggler``: two gloo DDP ranks, one with slow input: rank 0 waits on rank 1 for most of
  its step, so the job is ``straggler``, naming rank 1 and its own cause, ``data_starved``
  (it was ``data_starved`` until the straggler claimed the time its peers wait on it), although
  the rank asked about (rank 0) only waits in the collective.
* ``ended_beside_live``: a finished and a crashed run of a starved loader, then a healthy DDP
  job started by ``mp.spawn`` (no torchrun environment): ``compute``, and the ended runs appear
  only in ``per_job``, in the past tense, never under ``jobs``.
* ``offcpu_ranks``: eight ranks whose steps all wait off the CPU in backward, none waiting on
  another: no rule holds (no straggler either), and the answer must say where the steps go and
  what was ruled out, with numbers.
* ``no_live_job``: only ended runs: exit 3 with one line (text) and their final words (JSON).

Setting TRAINTOP_SCENARIO_RESULTS appends one JSON line per scenario (tests/scenarios/matrix.py).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.polling import eventually
from tests.scenarios.harness import (
    NO_LIVE_JOB,
    DiagnoseRun,
    Workload,
    describe,
    free_port,
    in_time,
    rank_env,
    record,
    run_diagnose,
    running,
    scenario_env,
    segment_pids,
    start_workload,
    traintop_cmd,
    traintop_run,
    wait_for_segments,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]

VERDICT_DEADLINE_S = 15.0
OFFCPU_RANKS = 8
OFFCPU_DEADLINE_S = 25.0  # eight torch imports on two shared cores take most of 15 s alone
# mp.spawn starts its ranks as fresh interpreters only after the launcher's own torch import:
# two imports in series before the first step (the matrix saw 3 s to 11 s of "unknown" before
# the first steps, at the same verdict).
SPAWN_DEADLINE_S = 20.0


def _check(scenario: str, wanted: str, job: Workload, run: DiagnoseRun, deadline_s: float) -> dict:
    """Wanted answer, no flip once committed, in time; returns the verdict JSON."""
    ttv = record(scenario, job, run, wanted, deadline_s)
    context = f"{describe(run)}\n--- workload log ---\n{job.log_tail()}"
    assert run.verdict is not None, context
    assert run.label == wanted, context
    assert run.flips == 0, f"verdict flipped: {run.verdict.get('timeline')}\n{context}"
    assert in_time(ttv, deadline_s), f"time-to-verdict {ttv} s\n{context}"
    return run.verdict


def _ranks(script: str, ring_dir: Path, tmp_path: Path, world: int, *args: str) -> list[Workload]:
    """``world`` ranks of one job on this host, each its own `traintop run` (as torchrun's
    workers are), rendezvous on a free loopback port."""
    port = free_port()
    return [
        start_workload(
            traintop_run(script, *args),
            rank_env(ring_dir, rank, world, port),
            tmp_path / f"{Path(script).stem}-rank{rank}.log",
        )
        for rank in range(world)
    ]


@pytest.mark.solo
def test_straggler(ring_dir: Path, tmp_path: Path) -> None:
    with running(_ranks("ddp_straggler.py", ring_dir, tmp_path, 2, "--slow-rank", "1")) as jobs:
        wait_for_segments(ring_dir, 2, jobs)
        run = run_diagnose(scenario_env(ring_dir), job_pid=jobs[0].pid)
        verdict = _check("straggler", "straggler", jobs[0], run, VERDICT_DEADLINE_S)
    assert {j["pid"] for j in verdict["jobs"]} == {job.pid for job in jobs}
    (job,) = verdict["per_job"]
    assert job["straggler"]["rank"] == 1 and job["straggler"]["pid"] == jobs[1].pid
    evidence = verdict["evidence"]
    assert evidence[0].startswith(f"rank 1 (pid {jobs[1].pid}) is the straggler"), evidence
    assert any(e.startswith("its own cause: data_starved (data wait ") for e in evidence), evidence
    assert verdict["also"][0]["bottleneck"] == "data_starved", verdict["also"]


def _named(name: str, *args: str) -> list[str]:
    """The starved loader under `traintop run --name NAME` (two runs of one script under one
    name would be one job restarted, not two experiments)."""
    return traintop_run("data_starved.py", *args, name=name)


def _ended_runs(ring_dir: Path, tmp_path: Path) -> set[int]:
    """One run of the starved loader that finished, one that was killed: their pids."""
    env = scenario_env(ring_dir)
    done = start_workload(_named("earlier-finished", "--seconds", "3"), env, tmp_path / "f.log")
    killed = start_workload(_named("earlier-crashed"), env, tmp_path / "crashed.log")
    with running([done, killed]):
        both = {done.pid, killed.pid}  # (the live job's segments come meanwhile)
        assert eventually(lambda: both <= segment_pids(ring_dir).keys(), 60.0), killed.log_tail()
        done.proc.wait(timeout=60)
        time.sleep(2.0)  # a few more starved steps on the one about to crash
        os.kill(killed.pid, signal.SIGKILL)
    return {done.pid, killed.pid}


@pytest.mark.solo
def test_ended_beside_live(ring_dir: Path, tmp_path: Path) -> None:
    """The live job starts with the two that end (it imports torch while they starve, as a
    sweep's next run does); it is diagnosed once both have ended."""
    argv = traintop_run("ddp_spawn.py", "--port", str(free_port()))
    with running([start_workload(argv, scenario_env(ring_dir), tmp_path / "spawn.log")]) as jobs:
        ended = _ended_runs(ring_dir, tmp_path)
        wait_for_segments(ring_dir, len(ended) + 2, jobs, timeout_s=60)
        run = run_diagnose(scenario_env(ring_dir))
        verdict = _check("ended_beside_live", "compute", jobs[0], run, SPAWN_DEADLINE_S)
    live = {pid for pid in segment_pids(ring_dir) if pid not in ended}
    assert {j["pid"] for j in verdict["jobs"]} == live and len(live) == 2
    past = [j for j in verdict["per_job"] if not j["live"]]
    assert {r["pid"] for j in past for r in j["ranks"]} == ended
    assert {j["state"] for j in past} == {"finished", "gone"}  # the SIGKILL left no word
    assert all(": was " in j["summary"] for j in past), past


@pytest.mark.solo
def test_offcpu_ranks(ring_dir: Path, tmp_path: Path) -> None:
    with running(_ranks("ddp_offcpu.py", ring_dir, tmp_path, OFFCPU_RANKS)) as jobs:
        wait_for_segments(ring_dir, OFFCPU_RANKS, jobs, timeout_s=60)
        run = run_diagnose(scenario_env(ring_dir), job_pid=jobs[0].pid)
        verdict = _check("offcpu_ranks", "unknown", jobs[0], run, OFFCPU_DEADLINE_S)
    summary = verdict["summary"]
    assert summary.startswith("no bottleneck found: steps spend "), summary
    assert " in backward " in summary and "off CPU" in summary, summary
    assert "data wait" in summary and "CPU" in summary and "network" in summary, summary
    assert len(verdict["jobs"]) == OFFCPU_RANKS


# not solo: with no live job, what it asserts (the ended runs, how each ended) holds however the
# CPUs are shared
def test_no_live_job(ring_dir: Path, tmp_path: Path) -> None:
    ended = _ended_runs(ring_dir, tmp_path)
    started = time.monotonic()
    run = run_diagnose(scenario_env(ring_dir), for_s=4.0)
    marker = Workload(subprocess.Popen(["true"]), started, tmp_path / "none.log")
    marker.proc.wait()
    verdict = _check("no_live_job", NO_LIVE_JOB, marker, run, VERDICT_DEADLINE_S)
    assert verdict["jobs"] == [] and verdict["live_jobs"] == 0
    assert {r["pid"] for j in verdict["per_job"] for r in j["ranks"]} == ended
    text = subprocess.run(
        [*traintop_cmd(), "diagnose", "--for", "2"],
        env=scenario_env(ring_dir),
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert text.returncode == 3, text
    (line,) = text.stdout.splitlines()
    assert line.startswith("traintop: no live training job (2 ended runs); earlier-crashed "), line
