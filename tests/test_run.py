"""``traintop run``: real training processes under the launcher and its sitecustomize shim.

Records are read back with the monitor's own reader (traintop.collectors.ring_reader).
"""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.isolation import private_dir
from traintop.collectors.ring_reader import discover, open_segment
from traintop.launcher import SHIM_DIR, instrumented_env, job_name

WORKLOADS = Path(__file__).parent / "workloads"
REPO = Path(__file__).resolve().parents[1]
LAUNCH = [sys.executable, "-m", "traintop.launcher"]


@pytest.fixture
def ring_dir(tmp_path: Path) -> Path:
    return private_dir(tmp_path / "ring")


# CPython's resource tracker (its own process) now and then reports the semaphores of torch's
# DataLoader queues as leaked when a spawn/forkserver job exits, with or without traintop.
# Silencing that one warning keeps `stderr == ""` meaning "the shim printed nothing".
TRACKER_NOISE = "ignore::UserWarning:multiprocessing.resource_tracker"


def run(argv: list[str], ring: Path, extra_path: str = "") -> subprocess.CompletedProcess:
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TRAINTOP")}
    environ.update(TRAINTOP_RING_DIR=str(ring), PYTHONPATH=extra_path or str(REPO),
                   PYTHONWARNINGS=TRACKER_NOISE)  # fmt: skip
    return subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=240,
                          cwd=ring.parent)  # fmt: skip


def records(ring: Path) -> list:
    (path,) = discover(ring)
    with open_segment(path) as segment:
        return [segment.header, list(segment.last(4096))]


@pytest.mark.slow
def test_unmodified_script_is_measured_and_computes_the_same(ring_dir: Path) -> None:
    script = [sys.executable, str(WORKLOADS / "train_loop.py"), "--workers", "2"]
    plain = run(script, ring_dir)
    shimmed = run([*LAUNCH, "--name", "loop", "--", *script], ring_dir)
    assert plain.returncode == shimmed.returncode == 0, shimmed.stderr
    assert shimmed.stdout == plain.stdout and "final_loss=" in plain.stdout  # bit-identical
    assert shimmed.stderr == plain.stderr == ""
    header, recs = records(ring_dir)
    assert header.name == "loop" and header.phases[:5] == (
        "data", "forward", "backward", "optimizer", "other"
    )  # fmt: skip
    assert [r.step for r in recs] == list(range(32))
    assert all(r.samples == 16 for r in recs)
    assert all(r.phase_ns[0] > 0 and r.phase_ns[2] > 0 and r.phase_ns[3] > 0 for r in recs)


@pytest.mark.slow
@pytest.mark.parametrize("method", ["fork", "spawn", "forkserver"])
def test_workers_stay_silent_and_main_process_records(ring_dir: Path, method: str) -> None:
    script = [sys.executable, str(WORKLOADS / "train_loop.py"), "--workers", "2",
              "--start-method", method, "--epochs", "1"]  # fmt: skip
    result = run([*LAUNCH, "--", *script], ring_dir)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    header, recs = records(ring_dir)  # exactly one segment: workers wrote nothing
    assert header.name == "train_loop" and len(recs) == 16
    assert [r.seq for r in recs] == list(range(1, 17)) and [r.step for r in recs] == list(range(16))
    assert sum(r.samples for r in recs) == 256 and all(r.samples == 16 for r in recs)


@pytest.mark.slow
def test_explicit_api_records_custom_phases(ring_dir: Path) -> None:
    result = run([sys.executable, str(WORKLOADS / "train_explicit.py")], ring_dir)
    assert result.returncode == 0, result.stderr
    header, recs = records(ring_dir)
    assert header.name == "explicit-job" and header.phases[5] == "logging"
    assert len(recs) == 8 and all(r.samples == 12 for r in recs)


@pytest.mark.slow
def test_explicit_api_under_the_shim_is_not_counted_twice(ring_dir: Path) -> None:
    """The segment made at start-up still takes the script's name and its custom phase: the
    header is rewritten until the first step."""
    result = run([*LAUNCH, "--", sys.executable, str(WORKLOADS / "train_explicit.py")], ring_dir)
    assert result.returncode == 0, result.stderr
    header, recs = records(ring_dir)
    assert len(recs) == 8 and all(r.samples == 12 for r in recs)
    assert header.name == "explicit-job" and header.phases[5] == "logging"
    assert all(r.phase_ns[5] > 0 for r in recs)


def test_the_segment_exists_from_start_up_and_a_run_without_steps_leaves_none(
    ring_dir: Path,
) -> None:
    code = "import os; print(sorted(os.listdir(os.environ['TRAINTOP_RING_DIR'])))"
    result = run([*LAUNCH, "--", sys.executable, "-c", code], ring_dir)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    listed = ast.literal_eval(result.stdout)  # the segment and its helper's files, no torch
    assert [name for name in listed if name.endswith(".ring")], listed
    assert discover(ring_dir) == [] and os.listdir(ring_dir) == []


def test_exit_code_pid_and_output_pass_through(ring_dir: Path) -> None:
    code = "import os, sys; print(os.getpid()); print('err', file=sys.stderr); sys.exit(3)"
    proc = subprocess.Popen([*LAUNCH, "--", sys.executable, "-c", code], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, cwd=REPO)  # fmt: skip
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 3 and int(out) == proc.pid and err == "err\n"


def test_users_sitecustomize_still_runs(ring_dir: Path) -> None:
    code = "import os; print(os.environ.get('USER_SITECUSTOMIZE_RAN'))"
    result = run([*LAUNCH, "--", sys.executable, "-c", code], ring_dir,
                 extra_path=f"{REPO}{os.pathsep}{WORKLOADS / 'user_site'}")  # fmt: skip
    assert (result.returncode, result.stdout, result.stderr) == (0, "yes\n", "")


def test_shim_failure_warns_once_and_the_script_runs(ring_dir: Path) -> None:
    code = "import torch; print(torch.answer())"
    result = run([*LAUNCH, "--", sys.executable, "-c", code], ring_dir,
                 extra_path=str(WORKLOADS / "fake_torch"))  # fmt: skip
    assert result.returncode == 0 and result.stdout == "42\n"
    lines = result.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("traintop: instrumentation disabled")
    assert discover(ring_dir) == []


@pytest.mark.parametrize(
    ("argv", "code", "message"),
    [
        (["--", "no-such-command-xyz"], 127, "no-such-command-xyz: command not found"),
        (["--"], 2, "no command given"),
        (["--name", " ", "--", "true"], 2, "--name must not be empty"),
        (["--", "/dev/null"], 126, "permission denied"),
    ],
)
def test_bad_commands_give_one_line(argv: list[str], code: int, message: str) -> None:
    result = subprocess.run([*LAUNCH, *argv], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert result.returncode == code and result.stdout == ""
    assert result.stderr.count("\n") == 1 and message in result.stderr


def test_env_puts_shim_first_once_and_names_the_job() -> None:
    env = instrumented_env({"PYTHONPATH": f"/a{os.pathsep}{SHIM_DIR}"}, "job")
    assert env["PYTHONPATH"] == f"{SHIM_DIR}{os.pathsep}/a" and env["TRAINTOP_RUN_NAME"] == "job"
    assert job_name(["python", "-u", "pretrain.py"]) == "pretrain"
    assert job_name(["python", "/src/word_language_model/main.py"]) == "word_language_model/main"
    assert job_name(["torchrun", "--nproc-per-node=2", "gpt/train.py"]) == "gpt/train"
    assert job_name(["python", "-m", "pkg.train"]) == "pkg.train"
    assert job_name(["python", "-m", "torch.distributed.run", "--nproc_per_node=2", "t.py"]) == "t"
    assert job_name(["/usr/bin/torchrun", "--nproc=2"]) == "torchrun"
