"""The one-knob loop on real jobs: num_workers=0 against 2 is a real gain, a rerun is not.

tests/workloads/slow_loader.py waits 4 ms for each of 8 samples per step; two DataLoader
workers overlap those waits, so at 2 workers the trainer waits about half as long.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.isolation import no_gpu_env

ROOT = Path(__file__).resolve().parents[1]
TRAIN = str(ROOT / "tests" / "workloads" / "slow_loader.py")
TRAINTOP = [sys.executable, "-m", "traintop.cli.main"]

pytest.importorskip("torch")
pytestmark = pytest.mark.solo  # real jobs under `traintop run --record`, a measured gain


def _start(tmp_path: Path, name: str, workers: int) -> tuple[Path, subprocess.Popen]:
    path = tmp_path / f"{name}.ttrec"
    job = [sys.executable, TRAIN, "--steps", "150", "--workers", str(workers)]
    env = {**os.environ, **no_gpu_env(tmp_path / name)}
    argv = [*TRAINTOP, "run", "--record", str(path), "--", *job]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True)  # fmt: skip
    return path, proc


def _compare(a: Path, b: Path) -> dict:
    out = subprocess.run([*TRAINTOP, "compare", str(a), str(b), "--json"], capture_output=True,
                         text=True, timeout=120)  # fmt: skip
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    """The three runs at the same time: on a shared machine the load changes from one minute to
    the next, and runs that share it differ only by what the test changes."""
    tmp = tmp_path_factory.mktemp("compare")
    started = {}
    for name, workers in (("w0", 0), ("w0-again", 0), ("w2", 2)):
        (tmp / name).mkdir()
        started[name] = _start(tmp, name, workers)
    for _, proc in started.values():
        _, err = proc.communicate(timeout=240)  # returns once the recorder closed stderr too
        assert proc.returncode == 0 and "and 150 step records" in err, err
    return {name: path for name, (path, _) in started.items()}


def test_more_workers_is_a_significant_gain(runs):
    doc = _compare(runs["w0"], runs["w2"])
    assert set(doc) == {"a", "b", "metrics", "changes"}
    (change,) = doc["changes"]
    assert (change["knob"], change["a"], change["b"]) == ("num_workers", "0", "2"), change
    rows = {m["name"]: m for m in doc["metrics"]}
    assert all(set(m) >= {"name", "a", "b", "change_pct", "significant"} for m in doc["metrics"])
    assert doc["a"]["job"] == doc["b"]["job"] == "slow_loader"
    assert rows["steps_per_s"]["significant"] is True, rows["steps_per_s"]
    assert rows["steps_per_s"]["change_pct"] > 20
    assert rows["samples_per_s"]["significant"] is True
    assert rows["data_wait_share"]["b"] < rows["data_wait_share"]["a"]


def test_the_same_settings_twice_is_not_significant(runs):
    rows = {m["name"]: m for m in _compare(runs["w0"], runs["w0-again"])["metrics"]}
    for name in ("steps_per_s", "samples_per_s", "step_p50_s", "data_wait_share"):
        assert rows[name]["significant"] is False, rows[name]


def test_two_ranges_of_one_recording(runs):
    doc = _compare(Path(f"{runs['w0']}@0..3s"), Path(f"{runs['w0']}@3s.."))
    assert doc["a"]["label"].endswith("@0s..3s") and doc["b"]["steps"] > 0
