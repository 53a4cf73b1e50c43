"""Recording real CPU training jobs: `traintop run --record`, `traintop record`, and SIGKILL.

The job is tests/workloads/train_loop.py under the zero-code shim: 16 steps per epoch, each
waiting about 17 ms for a batch of 16 one-millisecond samples.
"""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.isolation import no_gpu_env
from traintop.store.reader import Recording

ROOT = Path(__file__).resolve().parents[1]
TRAIN = str(ROOT / "tests" / "workloads" / "train_loop.py")
TRAINTOP = [sys.executable, "-m", "traintop.cli.main"]
STEPS_PER_EPOCH = 16

pytest.importorskip("torch")
pytestmark = pytest.mark.slow  # real training jobs under `traintop run`


def _env(tmp_path: Path) -> dict[str, str]:
    return {**os.environ, **no_gpu_env(tmp_path)}


def _all_steps(rec: Recording) -> dict[int, list[int]]:
    """Recorded step numbers per rank."""
    out: dict[int, list[int]] = {}
    for seg in rec.segments():
        for block in rec.steps(seg):
            out.setdefault(seg.rank, []).extend(block.steps())
    return out


def _wait_for_steps(path: Path, timeout_s: float = 90.0) -> None:
    """Until the recording being written holds step records (torch imports slowly on a busy
    machine); WAL lets this reader look while the recorder writes."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        time.sleep(0.5)
        try:
            with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as conn:
                if conn.execute("SELECT COUNT(*) FROM steps").fetchone()[0]:
                    return
        except sqlite3.Error:
            continue
    pytest.fail("the job never recorded a step")


def test_run_record_keeps_every_step_of_the_job(tmp_path):
    """The recorder starts with the job, outlives it just long enough to read its last steps,
    and says where the file is; the job's output and exit code are its own."""
    path = tmp_path / "run.ttrec"
    job = [sys.executable, TRAIN, "--epochs", "6", "--exit-code", "3"]
    out = subprocess.run(
        [*TRAINTOP, "run", "--record", str(path), "--", *job],
        env=_env(tmp_path),
        capture_output=True,
        text=True,
        timeout=120,
        cwd=tmp_path,
    )
    assert out.returncode == 3, out.stderr
    assert f"steps={6 * STEPS_PER_EPOCH}" in out.stdout
    summary = re.search(r"recorded (\d+) samples and (\d+) step records to (\S+)", out.stderr)
    assert summary and summary[3] == str(path), out.stderr
    with Recording(path) as rec:
        assert _all_steps(rec) == {0: list(range(6 * STEPS_PER_EPOCH))}
        assert rec.segments()[0].name == "train_loop"
        assert len(rec.samples) >= 2
        snapshot, verdict = rec.sample(len(rec.samples) - 1)
        assert verdict is not None and snapshot.jobs


def test_run_record_refuses_an_existing_file_before_starting_the_job(tmp_path):
    path = tmp_path / "run.ttrec"
    path.write_text("keep me")
    out = subprocess.run(
        [*TRAINTOP, "run", "--record", str(path), "--", sys.executable, "-c", "print('ran')"],
        env=_env(tmp_path), capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert out.returncode == 2 and "ran" not in out.stdout
    assert out.stderr.count("\n") == 1 and "already exists" in out.stderr
    assert path.read_text() == "keep me"


def test_sigkill_of_the_recorder_loses_at_most_the_last_two_seconds(tmp_path):
    env = _env(tmp_path)
    argv = [*TRAINTOP, "run", "--", sys.executable, TRAIN, "--epochs", "200"]
    job = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    path = tmp_path / "killed.ttrec"
    recorder = subprocess.Popen([*TRAINTOP, "record", "-o", str(path), "--job", str(job.pid)],
                                env=env, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        _wait_for_steps(path)
        time.sleep(3.0)
        recorder.send_signal(signal.SIGKILL)
        killed_at = time.time()
        recorder.wait(10)
    finally:
        job.kill()
        job.wait(10)
    with Recording(path) as rec:
        assert rec.samples[-1].t >= killed_at - 2.0 - 1.0  # one interval may still be in flight
        for i in range(len(rec.samples)):
            rec.sample(i)  # every committed frame decodes
        steps = _all_steps(rec)[0]
        assert steps == list(range(len(steps)))  # no gap: lossless up to the cut
        seg = rec.segments()[0]
        last = max(b.t_start_ns()[-1] for b in rec.steps(seg)) + seg.clock_offset_ns
        assert last / 1e9 >= killed_at - 2.0 - 1.0
