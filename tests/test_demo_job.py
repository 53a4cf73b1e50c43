"""The demo job: a real CPU training run whose built-in bottleneck shows in its ring records."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.isolation import private_dir
from traintop.collectors.ring_reader import discover, open_segment

REPO = Path(__file__).resolve().parents[1]


def start(ring: Path, *args: str) -> subprocess.Popen:
    env = {**os.environ, "TRAINTOP_RING_DIR": str(ring), "PYTHONPATH": str(REPO)}
    return subprocess.Popen([sys.executable, "-m", "traintop.demo_job", *args], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip


def data_share(ring: Path) -> float:
    (path,) = discover(ring)
    with open_segment(path) as segment:
        recs = list(segment.last(4096))
    assert recs and all(r.samples > 0 for r in recs)
    return sum(r.phase_ns[0] for r in recs) / sum(sum(r.phase_ns) for r in recs)


@pytest.fixture
def ring(tmp_path: Path) -> Path:
    return private_dir(tmp_path / "ring")


@pytest.mark.solo  # how much of a step is data wait depends on the CPU the workers get
@pytest.mark.parametrize(("bottleneck", "data_bound"), [("data", True), ("compute", False)])
def test_bottleneck_shows_in_the_data_wait_share(ring: Path, bottleneck: str, data_bound: bool):
    proc = start(ring, "--bottleneck", bottleneck, "--seconds", "3")
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0 and err == "" and f"demo_job: {bottleneck}:" in out
    share = data_share(ring)
    assert share > 0.5 if data_bound else share < 0.2


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
def test_stops_cleanly_on_signal(ring: Path, signum: int) -> None:
    proc = start(ring, "--bottleneck", "data", "--seconds", "600")
    while not discover(ring):  # the first step has been recorded
        assert proc.poll() is None, proc.stderr.read()  # type: ignore[union-attr]
        time.sleep(0.2)
    proc.send_signal(signum)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0 and "steps in" in out and "Traceback" not in err


def test_bad_arguments_give_one_line(ring: Path) -> None:
    proc = start(ring, "--seconds", "-1")
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and "--seconds must be a positive number" in err
    assert "Traceback" not in err
