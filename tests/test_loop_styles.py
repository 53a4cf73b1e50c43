"""Zero-code on the loops people really write, end to end under the installed ``traintop run``.

Each workload (tests/workloads/loops/) is an ordinary training script with no traintop in it
that times its own iterations and phases (``loop_clock.py``) and writes that account at exit.
traintop's account, read back with ``traintop jobs --json`` and ``traintop snapshot --json``,
must match it: steps/s within 10 % of the loop's own iteration rate (over the same last steps),
samples per step within 10 % of its batch, each phase share within 8 points of the loop's own,
and every rank listed once with its own rank, local rank and world size under one job id.
Each job must also be listed live while it runs, within 5 s of the loop's first iteration (its
own wall clock: a loop with no optimizer writes its first record only once its step is
confirmed).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.isolation import private_dir
from tests.ring_helpers import without_token
from traintop.collectors.jobs import JobCollector
from traintop.ring_shrink import KEEP_RECORDS

LOOPS = Path(__file__).parent / "workloads" / "loops"
BIN = Path(sys.executable).parent
SHARE_TOLERANCE = 0.08
RATE_TOLERANCE = 0.10
LOOP_SECONDS = "5"
LISTED_WITHIN_S = 5  # from the loop's own first iteration to `traintop jobs` listing every rank

pytestmark = pytest.mark.solo  # rates and phase shares against the loop's own, and a 5 s listing


@dataclass
class LoopRun:
    """The loop's own reports (by rank) and traintop's views of the finished job."""

    reports: dict[int, dict]
    jobs: list[dict]  # `traintop jobs --json`
    snapshot_jobs: list[dict]  # `traintop snapshot --json`["jobs"]
    live: list[dict]  # `traintop snapshot --json`["jobs"] once every rank was listed live
    listed_at: float  # time.time() when `traintop jobs --json` had first listed them all live


def _env(tmp_path: Path, port: int, seconds: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINTOP", "MASTER_"))}
    env.update(TRAINTOP_RING_DIR=str(tmp_path / "ring"), LOOP_REPORT=str(tmp_path / "report"),
               LOOP_SECONDS=seconds, MASTER_PORT=str(port),
               PYTHONWARNINGS="ignore")  # fmt: skip
    return env


def _traintop_json(env: dict[str, str], *args: str) -> object:
    out = subprocess.run([str(BIN / "traintop"), *args], env=env, capture_output=True,
                         text=True, timeout=120, check=True)  # fmt: skip
    return json.loads(out.stdout)


def _wait_live(proc: subprocess.Popen, env: dict[str, str], world: int) -> tuple[float, list]:
    """Poll the rings until all ranks are live: when they were, and `snapshot --json`'s jobs then.

    The poll reads the ring directory in this process with the collector `traintop jobs` runs
    (a `traintop jobs` subprocess every 0.3 s cost a third of a CPU second each, beside the job
    it measures); the command itself is run on the finished job below."""
    collector = JobCollector(env["TRAINTOP_RING_DIR"])
    try:
        while proc.poll() is None:
            if sum(job.state == "live" for job in collector.collect()) == world:
                return time.time(), _traintop_json(env, "snapshot", "--json")["jobs"]
            time.sleep(0.2)
    finally:
        collector.close()
    pytest.fail(f"the job ended before {world} rank(s) were listed live")


def run_loop(tmp_path: Path, script: str, *args: str, world: int = 1, port: int = 0,
             seconds: str | None = None, launcher: tuple[str, ...] = (sys.executable,),
             extra_env: dict[str, str] | None = None) -> LoopRun:  # fmt: skip
    """Run ``script`` with ``launcher`` under `traintop run` for ``seconds`` (LOOP_SECONDS) of
    training."""
    private_dir(tmp_path / "ring")
    env = {**_env(tmp_path, port, seconds or LOOP_SECONDS), **(extra_env or {})}
    command = [str(BIN / "traintop"), "run", "--", *launcher, str(LOOPS / script), *args]
    with subprocess.Popen(command, env=env, cwd=tmp_path, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as proc:  # fmt: skip
        try:
            listed_at, live = _wait_live(proc, env, world)
            err = proc.communicate(timeout=240)[1]
        finally:
            proc.kill()
    assert proc.returncode == 0, err[-3000:]
    reports = {r: json.loads(Path(f"{env['LOOP_REPORT']}{'.' + str(r) if r else ''}").read_text())
               for r in range(world)}  # fmt: skip
    snapshot = _traintop_json(env, "snapshot", "--json")
    jobs = _traintop_json(env, "jobs", "--json")
    return LoopRun(reports, jobs, snapshot["jobs"], live, listed_at)


def tail_rate(report: dict) -> float:
    """The loop's own iteration rate over the steps a finished job's figures cover: its ring
    keeps the newest ``KEEP_RECORDS - 1``, so a longer run is compared over its last ones
    (the whole run's average would differ whenever the machine's load changed meanwhile)."""
    starts = report["starts"][-KEEP_RECORDS:]
    return (len(starts) - 1) / (starts[-1] - starts[0])


def shares(job: dict) -> dict[str, float]:
    return {p["name"]: p["share"] for p in job["phases"]}


def assert_matches(run: LoopRun, name: str, phases: dict[tuple[str, ...], tuple[str, ...]]) -> None:
    """Rates, samples, ranks and phase shares of every rank against the loop's own report."""
    world = len(run.reports)
    assert {j["name"] for j in run.live} == {name}, run.live
    first = min(report["first_wall"] for report in run.reports.values())
    assert run.listed_at - first < LISTED_WITHIN_S, (run.listed_at, run.reports)
    for listing in (run.jobs, run.snapshot_jobs):
        mine = sorted((j for j in listing if j["name"] == name), key=lambda j: j["rank"])
        assert [(j["rank"], j["local_rank"], j["world_size"]) for j in mine] == [
            (r, r, world) for r in range(world)
        ], mine
        assert len({j["job_id"] for j in mine}) == 1
        assert world == 1 or mine[0]["job_id"].startswith("run:")
        for job in mine:
            report = run.reports[job["rank"]]
            assert job["steps_per_s"] == pytest.approx(tail_rate(report), rel=RATE_TOLERANCE)
            per_step = job["samples_per_s"] / job["steps_per_s"]
            assert per_step == pytest.approx(report["batch"], rel=RATE_TOLERANCE)
    for job in (j for j in run.snapshot_jobs if j["name"] == name):
        ours, theirs = shares(job), run.reports[job["rank"]]["shares"]
        for probe_names, loop_names in phases.items():
            got = sum(ours.get(n, 0.0) for n in probe_names)
            want = sum(theirs.get(n, 0.0) for n in loop_names)
            assert got == pytest.approx(want, abs=SHARE_TOLERANCE), (probe_names, ours, theirs)


def test_hand_written_sgd_with_no_loader_and_no_optimizer(tmp_path: Path) -> None:
    """word_language_model: a step per backward, the batch from the model's (seq, batch) input."""
    run = run_loop(tmp_path, "word_language_model/main.py")
    assert_matches(run, "word_language_model/main", {
        ("forward",): ("forward",), ("backward",): ("backward",),
        ("other", "data"): ("data", "update"),
    })  # fmt: skip
    # The model it saved (whole, pickled) loads where traintop is not, with no hook of ours.
    load = (f"import sys, torch; sys.path.insert(0, {str(LOOPS / 'word_language_model')!r}); "
            "from main import RNNModel; m = torch.load('model.pt', weights_only=False); "
            "print(len(m._forward_pre_hooks), 'traintop' in sys.modules)")  # fmt: skip
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    loaded = subprocess.run([sys.executable, "-c", load], cwd=tmp_path, env=env, text=True,
                            capture_output=True, timeout=120)  # fmt: skip
    assert loaded.stdout == "0 False\n", loaded.stderr


def test_gan_two_optimizers_make_one_step(tmp_path: Path) -> None:
    run = run_loop(tmp_path, "gan.py")
    assert_matches(run, "gan", {
        ("data",): ("data",), ("forward",): ("forward",), ("backward",): ("backward",),
        ("optimizer",): ("optimizer",),
    })  # fmt: skip


def test_lbfgs_closure_is_booked_as_forward_and_backward(tmp_path: Path) -> None:
    run = run_loop(tmp_path, "lbfgs.py")
    assert_matches(run, "lbfgs", {
        ("forward",): ("forward",), ("backward",): ("backward",), ("optimizer",): ("optimizer",),
    })  # fmt: skip


def test_gradient_accumulation_is_one_step_per_update(tmp_path: Path) -> None:
    run = run_loop(tmp_path, "grad_accum.py")
    assert_matches(run, "grad_accum", {
        ("data",): ("data",), ("forward",): ("forward",), ("backward",): ("backward",),
        ("optimizer",): ("optimizer",),
    })  # fmt: skip


def assert_no_rank_is_a_worker(run: LoopRun) -> None:
    """A rank is never listed as another rank's DataLoader worker (a launcher's child ranks)."""
    ranks = {j["pid"] for j in run.live}
    workers = {w["pid"] for j in run.live for w in j["workers"]}
    assert not ranks & workers, run.live


# "comm" is every wait on peers (traintop/comm_hooks.py): DDP's tail of backward, and blocking
# collectives anywhere: the scripts' own stop vote ("sync"), Lightning's per-step broadcasts
# (which its hooks, the reference, see as "other").
DDP_PHASES = {("forward",): ("forward",), ("optimizer",): ("optimizer",)}


def test_mp_spawn_ranks_come_from_the_process_group(tmp_path: Path) -> None:
    run = run_loop(tmp_path, "spawn_ddp.py", "29531", world=2)
    assert_matches(run, "spawn_ddp", {
        **DDP_PHASES, ("backward", "comm", "other"): ("backward", "sync"),
    })  # fmt: skip
    assert without_token(run.jobs[0]["job_id"]) == "run:tcp://127.0.0.1:29531/2"


def test_lightning_ddp_launcher_two_ranks(tmp_path: Path) -> None:
    # Longer: the first step holds Lightning's setup after the loader's iterator is made.
    run = run_loop(tmp_path, "lightning_ddp.py", world=2, port=29541, seconds="8")
    assert_matches(run, "lightning_ddp", {
        **DDP_PHASES, ("backward", "comm", "other"): ("backward", "other"),
    })  # fmt: skip
    assert_no_rank_is_a_worker(run)


# `accelerate launch --cpu` starts one process (several only through mpirun), so two CPU ranks
# are its torchrun launcher (`--multi_gpu`), with the CPU chosen the way a config file's
# `use_cpu` does: ACCELERATE_USE_CPU.  No config file, no hub: nothing asks or reaches out.
ACCELERATE = ("launch", "--multi_gpu", "--num_processes", "2", "--num_machines", "1",
              "--mixed_precision", "no", "--dynamo_backend", "no")  # fmt: skip


def run_accelerate(tmp_path: Path, port: int) -> LoopRun:
    """accelerate_ddp.py under `traintop run -- accelerate launch ...`, 2 CPU ranks."""
    launcher = (str(BIN / "accelerate"), *ACCELERATE, "--main_process_port", str(port))
    # An empty HF_HOME holds no default_config.yaml: the flags are the whole configuration.
    env = {"ACCELERATE_USE_CPU": "true", "HF_HUB_OFFLINE": "1", "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HOME": str(tmp_path / "hf")}  # fmt: skip
    return run_loop(tmp_path, "accelerate_ddp.py", world=2, launcher=launcher, extra_env=env)


def test_accelerate_launch_two_cpu_ranks(tmp_path: Path) -> None:
    """Ranks from the group accelerate makes, one job id from torchrun's store address."""
    port = 29811
    run = run_accelerate(tmp_path, port)
    assert [(r["local_rank"], r["world_size"]) for r in run.reports.values()] == [(0, 2), (1, 2)]
    assert_matches(run, "accelerate_ddp", {
        **DDP_PHASES, ("backward", "comm", "other"): ("backward", "sync"),
    })  # fmt: skip
    assert without_token(run.jobs[0]["job_id"]) == f"run:tcp://127.0.0.1:{port}/2"
    assert_no_rank_is_a_worker(run)
