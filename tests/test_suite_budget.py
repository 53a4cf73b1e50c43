"""The whole suite's two parts (tests/suite.py) and its time budget (tests/budget.py), each on a
small suite of its own run in a pytest subprocess, as tests/test_tiers.py does for the tiers.

The inner tests sleep a few tenths of a second against budgets of a tenth: no wall-clock bound
is asserted, only which tests the budget names and the runs' exit statuses."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

from tests import suite, tiers

ROOT = Path(__file__).resolve().parents[1]

INNER = """
import time
import pytest

def test_quick_and_quick_enough():
    pass

def test_quick_but_too_slow():
    time.sleep(0.5)

@pytest.mark.slow
def test_slow_within_its_budget():
    time.sleep(0.5)

@pytest.mark.solo
def test_solo_takes_what_it_needs():
    time.sleep(0.5)

@pytest.mark.e2e
def test_e2e_takes_what_it_needs():
    time.sleep(0.5)
"""

CONFTEST = 'pytest_plugins = ("tests.tiers", "tests.budget")\n'
INI = """[pytest]
markers =
    slow
    e2e
    quick
    solo
    xdist_group
budget_quick_s = 0.2
budget_slow_s = 5
"""


def _inner(tmp_path: Path, body: str = INNER) -> dict[str, str]:
    (tmp_path / "test_inner.py").write_text(body)
    (tmp_path / "conftest.py").write_text(CONFTEST)
    (tmp_path / "pytest.ini").write_text(INI)
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", tiers.REPORTS_ENV)}
    env["PYTHONPATH"] = str(ROOT)
    return env


def _pytest(tmp_path: Path, *args: str) -> subprocess.CompletedProcess:
    env = _inner(tmp_path)
    argv = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-rA", *args]
    return subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip


def _over_budget(output: str) -> set[str]:
    return set(re.findall(r"^OVER BUDGET: \S+::(\w+) took", output, re.M))


def test_a_quick_test_over_its_budget_fails_a_run_whose_tests_all_passed(tmp_path: Path) -> None:
    done = _pytest(tmp_path)
    output = done.stdout + done.stderr
    assert "5 passed" in output and done.returncode == 1, output
    assert _over_budget(output) == {"test_quick_but_too_slow"}, output
    assert re.search(r"slowest 15 tests", output), output
    slowest = re.findall(r"^\s+[\d.]+ s  (\w+)\s+\S+::(\w+)$", output, re.M)
    tiers_of = {name: tier for tier, name in slowest}
    assert tiers_of["test_solo_takes_what_it_needs"] == "exempt", output
    assert tiers_of["test_slow_within_its_budget"] == "slow", output


def test_the_budget_holds_on_workers_where_the_controller_never_collected(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "-n", "2")
    output = done.stdout + done.stderr
    assert done.returncode == 1 and _over_budget(output) == {"test_quick_but_too_slow"}, output


def test_within_budget_the_run_passes(tmp_path: Path) -> None:
    done = _pytest(tmp_path, "-k", "not too_slow")
    assert done.returncode == 0, done.stdout + done.stderr


def test_the_suite_runs_both_parts_and_fails_when_either_does(tmp_path: Path) -> None:
    env = _inner(tmp_path, INNER.replace("time.sleep(0.5)\n\n@pytest.mark.slow", "assert 0\n\n"
                                         "@pytest.mark.slow", 1))  # fmt: skip
    env["TRAINTOP_TEST_WORKERS"] = "1"  # one worker is enough to be a parallel run
    done = subprocess.run([sys.executable, "-m", "tests.suite", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), str(tmp_path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=180)  # fmt: skip
    output = done.stdout + done.stderr
    assert done.returncode == 1, output
    assert re.search(r"== parallel part: exit 1", output), output
    assert re.search(r"== solo part: exit 0", output), output  # it ran though the first failed
    assert "1 passed, 4 deselected" in output, output  # the solo part: the solo test alone


def test_the_parts_split_the_tests_by_the_solo_marker() -> None:
    (parallel, first), (solo, second) = suite.parts(["-x"])
    assert (parallel, solo) == ("parallel", "solo")
    assert "-m not solo -n 4 --dist loadgroup -x" in " ".join(first)
    assert " ".join(second).endswith("-m pytest -rs -m solo -n 0 -x")
    assert "-rs" in first  # skips are listed with their reasons


def test_the_parts_cache_bytecode_whatever_the_machine_asks(monkeypatch) -> None:
    """The install skips pip's compiling (--no-compile): without the cache every process the
    suite starts would compile torch's modules again."""
    seen: list[dict[str, str]] = []

    def run(argv, env, check):
        seen.append(env)
        return subprocess.CompletedProcess(argv, 0)

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    monkeypatch.setattr(suite.subprocess, "run", run)
    assert suite.main([]) == 0
    assert len(seen) == 2 and not any("PYTHONDONTWRITEBYTECODE" in env for env in seen)


GROUPED = """
import pytest

@pytest.mark.slow
def test_slow_is_grouped_by_its_module(request):
    assert request.node.get_closest_marker("xdist_group").args == ("test_inner.py",)

@pytest.mark.slow
@pytest.mark.xdist_group("mine")
def test_a_group_of_its_own_is_kept(request):
    assert request.node.get_closest_marker("xdist_group").args == ("mine",)

def test_quick_is_not_grouped(request):
    assert request.node.get_closest_marker("xdist_group") is None
"""


def test_a_module_s_slow_tests_share_one_worker(tmp_path: Path) -> None:
    """Grouped by module, a module-scoped fixture's jobs start once under ``loadgroup``."""
    env = _inner(tmp_path, GROUPED)
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "2",
                           "--dist", "loadgroup"], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=120)  # fmt: skip
    assert done.returncode == 0 and "3 passed" in done.stdout, done.stdout + done.stderr


TERMINAL = """
import os

def test_a_worker_has_the_terminal_size_of_its_controller():
    assert (os.environ.get("COLUMNS"), os.environ.get("LINES")) == (None, "33")
"""


def test_a_worker_has_the_terminal_size_of_its_controller(tmp_path: Path) -> None:
    """xdist gives its workers COLUMNS=80 LINES=24: a monitor started in a 200x50 tmux pane
    drew 80 columns, and its e2e tests timed out waiting for the panels that did not fit."""
    env = _inner(tmp_path, TERMINAL)
    env.pop("COLUMNS", None)
    env["LINES"] = "33"
    done = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-n", "1"],
                          cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)  # fmt: skip
    assert done.returncode == 0 and "1 passed" in done.stdout, done.stdout + done.stderr
