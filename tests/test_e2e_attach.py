"""Attach mode end to end: real CPU training jobs, the monitor in tmux, `jobs` and `attach`.

Every test gets its own ring directory, so jobs of other tests or other engineers never show.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from tests.isolation import no_gpu_env
from tests.tmux import TmuxSession, kill_all

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parents[1]
TRAIN_LOOP = REPO / "tests" / "workloads" / "train_loop.py"
DDP_TRAIN = REPO / "tests" / "workloads" / "ddp_train.py"
STARTUP_S = 90.0  # importing torch and Textual on a loaded 2-core machine
Start = Callable[..., TmuxSession]


@pytest.fixture
def ring_env(tmp_path: Path) -> dict[str, str]:
    """A private ring directory and no NVML: the jobs, not the GPUs, are under test here."""
    return no_gpu_env(tmp_path)


@pytest.fixture
def start(ring_env: dict[str, str]) -> Iterator[Start]:
    """Open a command in tmux at 200x50; every session and its processes die at teardown."""
    sessions: list[TmuxSession] = []

    def open_session(*argv: str) -> TmuxSession:
        session = TmuxSession(list(argv), width=200, height=50, env=ring_env, cwd=str(REPO))
        sessions.append(session)
        return session

    yield open_session
    for session in sessions:
        session.kill()


def traintop(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("traintop") or pytest.skip("the traintop console script is not installed")
    return subprocess.run([exe, *args], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=120, stdin=subprocess.DEVNULL)  # fmt: skip


def listed_jobs(env: dict[str, str]) -> list[dict]:
    done = traintop(env, "jobs", "--json")
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def wait_for_job(env: dict[str, str], check: Callable[[dict], bool], timeout: float) -> dict:
    """Poll `traintop jobs --json` until one job satisfies `check`."""
    deadline = time.monotonic() + timeout
    found: list[dict] = []
    while time.monotonic() < deadline:
        found = listed_jobs(env)
        match = next((job for job in found if check(job)), None)
        if match is not None:
            return match
        time.sleep(0.5)
    raise AssertionError(f"no matching job after {timeout}s; listed: {found}")


@pytest.fixture
def training_job(start: Start, ring_env: dict[str, str]) -> dict:
    """`traintop run -- python train_loop.py` in its own tmux session, listed and stepping."""
    start("traintop", "run", "--", sys.executable, str(TRAIN_LOOP), "--epochs", "1000")
    return wait_for_job(ring_env, lambda j: bool(j["steps_per_s"]), STARTUP_S)


def cell(screen: str, label: str, header: str = "STEPS/S") -> str:
    """The text under a right-aligned column ``label`` in the first row below the table
    header holding ``header`` (the focused job's row in the jobs table)."""
    lines = screen.splitlines()
    at = next((i for i, line in enumerate(lines) if header in line and label in line), None)
    assert at is not None, f"no header with {label!r} on screen:\n{screen}"
    end = lines[at].index(label) + len(label)
    return lines[at + 1][:end].split("│")[-1].split()[-1]


def number_in(screen: str, label: str, header: str = "STEPS/S") -> float:
    text = cell(screen, label, header)
    return float(text.replace(",", "").rstrip("%")) if text[0].isdigit() else 0.0


def shows_training(screen: str) -> bool:
    return "7 Training" in screen and "8 DataLoader" in screen and "SAMPLES/S" in screen


def test_demo_shows_training_and_dataloader(start: Start) -> None:
    session = start("traintop", "demo", "--bottleneck", "data", "--seconds", "40")
    session.wait_for(shows_training, STARTUP_S)
    screen = session.wait_for(lambda s: number_in(s, "STEPS/S") > 0, 30)
    assert number_in(screen, "SAMPLES/S") > 0
    assert re.fullmatch(r"\d+%", cell(screen, "DATA WAIT"))
    assert re.search(r"[├└]─\s+\d+\s", screen), "no DataLoader worker rows"
    job = psutil.Process(session.app_pid()).children(recursive=True)
    assert job, "the demo job is not a child of the monitor"
    session.send("q")
    assert session.exit_code(timeout=30) == 0
    assert not session.alternate_screen()
    _, alive = psutil.wait_procs(job, timeout=15)
    assert not alive, f"demo job outlived the monitor: {alive}"


def test_run_job_appears_in_monitor_and_jobs(
    start: Start, ring_env: dict[str, str], training_job: dict
) -> None:
    assert training_job["name"] == "train_loop"
    assert training_job["state"] == "live"
    assert training_job["steps_per_s"] > 0
    assert psutil.Process(training_job["pid"]).cmdline()[1:2] == [str(TRAIN_LOOP)]
    monitor = start("traintop")
    screen = monitor.wait_for(lambda s: shows_training(s) and "train_loop" in s, STARTUP_S)
    assert str(training_job["pid"]) in screen


def test_attach_by_pid_opens_focused(start: Start, training_job: dict) -> None:
    pid = training_job["pid"]
    session = start("traintop", "attach", str(pid))
    focused = f"▶ {training_job['name']}"
    session.wait_for(lambda s: shows_training(s) and focused in s and str(pid) in s, STARTUP_S)
    os.kill(session.app_pid(), signal.SIGTERM)
    assert session.exit_code(timeout=30) == 0
    assert not session.alternate_screen()


def test_attach_unknown_pid_lists_jobs(ring_env: dict[str, str], training_job: dict) -> None:
    unused = next(p for p in range(12345, 99999) if not psutil.pid_exists(p))
    done = traintop(ring_env, "attach", str(unused))
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert f"{training_job['pid']} (train_loop, live)" in done.stderr
    assert "Traceback" not in done.stdout + done.stderr


def test_attach_to_another_users_process_is_refused(ring_env: dict[str, str]) -> None:
    if os.getuid() != 0 or shutil.which("setpriv") is None:
        pytest.skip("needs root and setpriv to start a process as nobody")
    other = psutil.Popen(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups",
                          "sleep", "60"])  # fmt: skip
    try:
        done = traintop(ring_env, "attach", str(other.pid))
    finally:
        kill_all([other])
    assert done.returncode == 1
    assert done.stderr.count("\n") == 1
    assert "belongs to user" in done.stderr


def test_killed_job_stays_listed_as_gone(ring_env: dict[str, str], training_job: dict) -> None:
    """SIGKILL leaves no word: the job is listed as gone, with its last numbers."""
    os.kill(training_job["pid"], signal.SIGKILL)
    pid = training_job["pid"]
    crashed = wait_for_job(ring_env, lambda j: j["pid"] == pid and j["state"] == "gone", 30)
    assert crashed["ending"]["kind"] == "gone"
    assert crashed["name"] == "train_loop"
    assert crashed["steps_total"] >= training_job["steps_total"]
    assert crashed["started_at"] < crashed["ended_at"] <= time.time()  # its last sign of life


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_multi_rank_job_is_one_job_and_attach_by_name_takes_every_rank(
    start: Start, ring_env: dict[str, str]
) -> None:
    torchrun = str(Path(sys.executable).with_name("torchrun"))
    start("traintop", "run", "--name", "ddp2", "--", torchrun, "--nproc_per_node=2",
          f"--master_port={free_port()}", str(DDP_TRAIN), "--steps", "100000",
          "--pause-ms", "20")  # fmt: skip
    deadline = time.monotonic() + STARTUP_S
    ranks: list[dict] = []
    while time.monotonic() < deadline and len([r for r in ranks if r["steps_per_s"]]) < 2:
        time.sleep(0.5)
        ranks = listed_jobs(ring_env)
    assert sorted(r["rank"] for r in ranks) == [0, 1], ranks
    assert len({r["job"] for r in ranks}) == 1  # one object per rank, grouped by `job`
    listing = traintop(ring_env, "jobs").stdout.splitlines()
    assert len(listing) == 2 and listing[1].split()[1:3] == ["ddp2", "2"], listing
    expanded = traintop(ring_env, "jobs", "--ranks").stdout
    assert "rank 0" in expanded and "rank 1" in expanded
    session = start("traintop", "attach", "ddp2")
    pids = [str(r["pid"]) for r in ranks]
    screen = session.wait_for(
        lambda s: "▶ ddp2" in s and all(p in s for p in pids) and " RANK " in s, STARTUP_S
    )
    assert cell(screen, "RANKS") == "2"
    session.send("q")
    assert session.exit_code(timeout=30) == 0
