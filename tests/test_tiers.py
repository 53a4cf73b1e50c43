"""The tiers mark themselves, and the quick tier refuses what would slow it (tests/tiers.py).

Each test runs a small suite of its own in a pytest subprocess, with the environment this test
was started with minus the guard's own variables, so that only the inner run's guard acts.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests import tiers

ROOT = Path(__file__).resolve().parents[1]

INNER = '''
import os, subprocess, sys
import pytest

def _python_importing_torch(fake_torch_dir):
    """A Python that imports torch: a harmless fake one, unless the refusing one comes first."""
    path = os.pathsep.join(filter(None, (os.environ.get("PYTHONPATH"), fake_torch_dir)))
    subprocess.run([sys.executable, "-c", "import torch"], check=True,
                   env={**os.environ, "PYTHONPATH": path})

def test_quick_tmux(tmux):
    subprocess.run([tmux, "-V"], check=True)

def test_quick_torch(fake_torch_dir):
    _python_importing_torch(fake_torch_dir)

def test_quick_prometheus_in_a_shell(tmux):
    prometheus = os.path.join(os.path.dirname(tmux), "prometheus")
    subprocess.run(f"cd / && {prometheus} --version", shell=True, check=True)

def test_quick_plain_python():
    subprocess.run([sys.executable, "-c", "import json"], check=True)

@pytest.mark.slow
def test_slow_tmux(tmux):
    subprocess.run([tmux, "-V"], check=True)

@pytest.mark.slow
def test_slow_torch(fake_torch_dir):
    _python_importing_torch(fake_torch_dir)

@pytest.mark.e2e
def test_e2e_torch(fake_torch_dir):
    _python_importing_torch(fake_torch_dir)
'''

CONFTEST = '''
import pytest

pytest_plugins = ("tests.tiers",)

@pytest.fixture
def tmux(tmp_path):
    """A harmless program that is called tmux (and one called prometheus beside it)."""
    for name in ("tmux", "prometheus"):
        (tmp_path / name).write_text("#!/bin/sh\\nexit 0\\n")
        (tmp_path / name).chmod(0o755)
    return str(tmp_path / "tmux")

@pytest.fixture
def fake_torch_dir(tmp_path):
    (tmp_path / "torch").mkdir()
    (tmp_path / "torch" / "__init__.py").write_text("")
    return str(tmp_path)
'''


def _inner_suite(tmp_path: Path, *args: str) -> str:
    (tmp_path / "test_inner.py").write_text(INNER)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text("[pytest]\nmarkers =\n    slow\n    e2e\n    quick\n")
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", tiers.REPORTS_ENV)}
    env["PYTHONPATH"] = str(ROOT)
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    return done.stdout + done.stderr


def _outcomes(output: str) -> dict[str, str]:
    found = re.findall(r"^(PASSED|FAILED) \S+::(\w+)", output, re.M)
    return {name: outcome for outcome, name in found}


def test_the_quick_tier_refuses_tmux_and_a_python_importing_torch(tmp_path: Path) -> None:
    output = _inner_suite(tmp_path)
    assert _outcomes(output) == {
        "test_quick_tmux": "FAILED",
        "test_quick_torch": "FAILED",
        "test_quick_prometheus_in_a_shell": "FAILED",
        "test_quick_plain_python": "PASSED",
        "test_slow_tmux": "PASSED",
        "test_slow_torch": "PASSED",
        "test_e2e_torch": "PASSED",
    }, output
    assert "RuntimeError: a quick test started tmux: mark it @pytest.mark.slow" in output
    assert "RuntimeError: a quick test started prometheus: mark it @pytest.mark.slow" in output
    assert "a quick test started a training process (-c): mark it @pytest.mark.slow" in output


def test_every_test_not_marked_slow_or_e2e_is_quick(tmp_path: Path) -> None:
    output = _inner_suite(tmp_path, "-m", "quick", "--collect-only", "-q")
    assert sorted(re.findall(r"::(\w+)", output)) == [
        "test_quick_plain_python", "test_quick_prometheus_in_a_shell", "test_quick_tmux",
        "test_quick_torch",
    ], output  # fmt: skip


def test_the_quick_tier_runs_on_workers_and_its_guard_holds_in_each(tmp_path: Path) -> None:
    output = _inner_suite(tmp_path, "-m", "quick")
    assert re.search(r"created: \d+/\d+ workers", output), output
    assert _outcomes(output) == {
        "test_quick_tmux": "FAILED",
        "test_quick_torch": "FAILED",
        "test_quick_prometheus_in_a_shell": "FAILED",
        "test_quick_plain_python": "PASSED",
    }, output
