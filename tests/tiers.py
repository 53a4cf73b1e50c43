"""Two tiers of the suite: ``pytest -m quick`` for the edit loop (on several workers), everything
in CI.

A test is ``slow`` when it starts a training process (a Python process that imports torch), a
tmux session or a Prometheus server: mark it ``@pytest.mark.slow`` (``e2e`` and ``solo`` imply
slow; a module's ``pytestmark`` marks all its tests).  A slow test is ``solo`` when what it
asserts depends on the CPU time real processes get (a real job's verdict, its step timing): the
whole suite (tests/suite.py) runs those after the others, one at a time.  Every other test is
marked ``quick`` here, at collection, so a new test lands in the quick tier by default.

The quick tier checks itself, so that a test in the wrong tier fails instead of slowing the
tier down: while a quick test (its fixtures included) sets up and runs, starting ``tmux`` or
``prometheus`` raises at once, and a Python process it starts that imports torch fails with
an ImportError that names this rule (the directory on ``PYTHONPATH`` below holds a ``torch``
that refuses) and fails the test.  A child whose ``PYTHONPATH`` the test sets itself (or whose
environment it builds from scratch, or a Python started with ``-E``/``-I``) is not seen; the tmux
and Prometheus checks hold for every child.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any, ClassVar

import pytest

HEAVY_PROGRAMS = frozenset({"tmux", "prometheus"})
REPORTS_ENV = "TRAINTOP_QUICK_GUARD_REPORTS"  # where a refused torch import leaves its argv
RULE = "mark it @pytest.mark.slow (tests/tiers.py)"

_REFUSING_TORCH = f'''"""tests/tiers.py: a quick test started a Python process importing torch."""
import os, sys, uuid
_reports = os.environ.get("{REPORTS_ENV}")
if _reports and os.path.isdir(_reports):
    with open(os.path.join(_reports, uuid.uuid4().hex), "w") as _out:
        _out.write(" ".join(sys.argv))
raise ImportError("a quick test started a training process (it imports torch): {RULE}")
'''


class _Guard:
    """Whether a quick test is setting up or running (read by the audit hook), and the folder
    of the refusing torch and of the refusals' reports."""

    active = False
    folder = Path()
    saved: ClassVar[dict[str, str | None]] = {}  # the environment from before the guard


QUICK_WORKERS_MAX = 8


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """``-m quick`` alone runs on one worker per CPU (pytest-xdist, 2 to 8): its tests hold no
    wall-clock deadline, so they may share the CPUs.  The whole suite is tests/suite.py (its
    parallel part, then the solo tests alone); ``-n`` chooses otherwise."""
    if config.option.markexpr != "quick" or hasattr(config, "workerinput"):
        return
    if getattr(config.option, "numprocesses", 0) is None:  # xdist is there and -n was not given
        config.option.numprocesses = max(2, min(QUICK_WORKERS_MAX, os.cpu_count() or 1))


TERMINAL_ENV = ("COLUMNS", "LINES")


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """pytest-xdist starts its workers with ``COLUMNS=80 LINES=24`` in their environment: a
    monitor a test starts in a 200x50 tmux pane, or a ``traintop jobs`` whose table fits the
    terminal, would take them over the terminal's own size.  Each worker gets the controller's."""
    node.workerinput["terminal_env"] = {name: os.environ.get(name) for name in TERMINAL_ENV}


def _terminal_env_of_the_controller(config: pytest.Config) -> None:
    for name, value in getattr(config, "workerinput", {}).get("terminal_env", {}).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def pytest_configure(config: pytest.Config) -> None:
    _terminal_env_of_the_controller(config)
    _Guard.folder = Path(tempfile.mkdtemp(prefix="traintop-quick-guard-"))
    (_Guard.folder / "reports").mkdir()
    (_Guard.folder / "refusing" / "torch").mkdir(parents=True)
    (_Guard.folder / "refusing" / "torch" / "__init__.py").write_text(_REFUSING_TORCH)
    sys.addaudithook(_refuse_heavy_programs)


def pytest_unconfigure(config: pytest.Config) -> None:
    _Guard.active = False
    shutil.rmtree(_Guard.folder, ignore_errors=True)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Mark each test ``quick`` or ``slow`` before ``-m`` selects among them (``e2e`` and
    ``solo`` imply ``slow``), and keep a module's slow tests on one worker of a parallel run."""
    for item in items:
        if any(item.get_closest_marker(name) is not None for name in ("e2e", "solo")):
            item.add_marker(pytest.mark.slow)
        if item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.quick)
        elif item.get_closest_marker("xdist_group") is None:
            item.add_marker(pytest.mark.xdist_group(_module_of(item)))


def _module_of(item: pytest.Item) -> str:
    """A slow test's group under ``--dist loadgroup``: its module, so that the training jobs,
    tmux sessions or Prometheus a module-scoped fixture starts are started once, by the one
    worker that runs all of the module's tests (spread over workers, each would start its own)."""
    return item.nodeid.split("::", 1)[0]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_setup(item: pytest.Item) -> Iterator[None]:
    """A quick test's guard is up from its first fixture on; child Pythons find the refusing
    torch first on ``PYTHONPATH`` (put back after its teardown, where monkeypatch's undo ran)."""
    if item.get_closest_marker("quick") is not None:
        _guard()
    try:
        return (yield)
    finally:
        _fail_on_reports()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item: pytest.Item) -> Iterator[None]:
    try:
        return (yield)
    finally:
        _fail_on_reports()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item: pytest.Item) -> Iterator[None]:
    _Guard.active = False  # stopping what the test started may run tmux
    try:
        return (yield)
    finally:
        for name, value in _Guard.saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
        _Guard.saved = {}
        _take_reports()


def _guard() -> None:
    _Guard.saved = {name: os.environ.get(name) for name in ("PYTHONPATH", REPORTS_ENV)}
    refusing = str(_Guard.folder / "refusing")
    os.environ["PYTHONPATH"] = os.pathsep.join(filter(None, (refusing, _Guard.saved["PYTHONPATH"])))
    os.environ[REPORTS_ENV] = str(_Guard.folder / "reports")
    _Guard.active = True


def _fail_on_reports() -> None:
    """A refusal that a child Python reported fails the test (its own failure, if any, was the
    consequence)."""
    started = _take_reports()
    if started:
        pytest.fail(f"a quick test started a training process ({started[0]}): {RULE}")


def _take_reports() -> list[str]:
    reports = list((_Guard.folder / "reports").iterdir())
    started = [report.read_text() for report in reports]
    for report in reports:
        report.unlink()
    return started


def _refuse_heavy_programs(event: str, args: tuple[Any, ...]) -> None:
    """Audit hook: a process start that names tmux or prometheus, in a quick test, raises."""
    if not _Guard.active or event not in _STARTS:
        return
    words = _STARTS[event](args)
    heavy = HEAVY_PROGRAMS.intersection(os.path.basename(word) for word in words)
    if heavy:
        raise RuntimeError(f"a quick test started {min(heavy)}: {RULE}")


def _words(*parts: Any) -> list[str]:
    """The words of a command: its program and arguments, a shell's command line split at
    spaces (``sh -c "cd / && tmux ..."`` names tmux)."""
    flat = []
    for part in parts:
        many = part if isinstance(part, (list, tuple)) else [part]
        flat += [word for item in many if item is not None for word in os.fsdecode(item).split()]
    return flat


_STARTS = {  # audit event: its arguments -> the words of the command it starts
    "subprocess.Popen": lambda args: _words(args[0], args[1]),  # executable, args
    "os.posix_spawn": lambda args: _words(args[0], args[1]),  # path, argv
    "os.exec": lambda args: _words(args[0], args[1]),  # path, args
    "os.system": lambda args: _words(args[0]),  # command
}
