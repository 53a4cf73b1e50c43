"""A rank killed by a plain SIGKILL reads otherwise than one the OOM killer took: real jobs
under `traintop run`, `kill -9` from outside, read by a `traintop diagnose` that watched it die
(its counters unchanged) and by a `traintop jobs` that came after (the kernel log, readable by
root here, reaches back past the end and names no OOM victim).  The OOM-killed run is
tests/test_scenarios_killers.py's ``host_memory_oom``."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.scenarios.harness import (
    run_diagnose,
    running,
    scenario_env,
    start_workload,
    traintop_cmd,
    traintop_run,
    wait_for_segments,
)

pytestmark = [pytest.mark.slow, pytest.mark.timeout(180)]
SIGKILL = "killed (SIGKILL), not by the OOM killer"


def test_kill_9_reads_sigkill_not_the_oom_killer(ring_dir: Path, tmp_path: Path) -> None:
    env = scenario_env(ring_dir)
    argv = traintop_run("gil_thread.py", "--thread", "none", "--seconds", "60")
    with running([]) as jobs:
        jobs.append(start_workload(argv, env, tmp_path / "victim.log"))
        wait_for_segments(ring_dir, 1, jobs, timeout_s=90)
        watched: list = []
        watcher = threading.Thread(target=lambda: watched.append(run_diagnose(env, for_s=8.0)))
        watcher.start()
        time.sleep(4.0)
        os.kill(jobs[0].pid, signal.SIGKILL)
        watcher.join(timeout=60)
    (run,) = watched
    assert run.verdict is not None, run.stderr
    (job,) = run.verdict["per_job"]
    kill = (job.get("ending") or {}).get("kill")
    assert kill is not None and kill["by"] == "sigkill" and kill["text"] == SIGKILL, job
    assert job["summary"].startswith("gone by SIGKILL"), job["summary"]
    after = subprocess.run([*traintop_cmd(), "jobs"], env=env, capture_output=True, text=True,
                           timeout=60)  # fmt: skip
    assert SIGKILL in after.stdout, after.stdout + after.stderr
    listed = subprocess.run([*traintop_cmd(), "jobs", "--json"], env=env, capture_output=True,
                            text=True, timeout=60)  # fmt: skip
    (rank,) = json.loads(listed.stdout)
    assert rank["state"] == "gone" and rank["ending"]["kill"]["by"] == "sigkill", rank
