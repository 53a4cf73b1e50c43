"""The suite's time budget: it prints its slowest tests, and a test that takes longer than its
tier allows fails the run, so that the next slow test is a choice (a marker), not a drift.

A test's time is its setup, call and teardown together (a module fixture's start-up is paid by
the first test that asks for it).  The budgets are set far above what each tier's slowest test
takes on the 2-core development VM, loaded by the suite's own parallel workers, so that they
hold on a busy box and catch a test that grew by an order of magnitude:

* quick tests: ``QUICK_S``;
* slow tests that are neither ``solo`` nor ``e2e``: ``SLOW_S`` (they run in parallel with the
  others, so one that takes minutes holds the whole parallel part back);
* ``solo`` and ``e2e`` tests are exempt: their markers are the choice (they run real jobs, or
  drive the installed monitor in tmux, for as long as their scenario needs).

Under pytest-xdist the reports reach the controller, which keeps the totals: the check runs
once, where the summary is printed.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from typing import ClassVar

import pytest

QUICK_S = 30.0
SLOW_S = 300.0
SLOWEST_SHOWN = 15
EXEMPT = ("solo", "e2e")


class _Ledger:
    """Seconds per test id, each id's budget (None: exempt), and the two tiers' budgets."""

    seconds: ClassVar[defaultdict[str, float]] = defaultdict(float)
    budgets: ClassVar[dict[str, float | None]] = {}
    tiers: ClassVar[dict[str, float]] = {"quick": QUICK_S, "slow": SLOW_S}


def pytest_addoption(parser: pytest.Parser) -> None:
    for tier, seconds in _Ledger.tiers.items():
        parser.addini(f"budget_{tier}_s", f"seconds a {tier} test may take", default=str(seconds))


def pytest_configure(config: pytest.Config) -> None:
    _Ledger.tiers = {tier: float(config.getini(f"budget_{tier}_s")) for tier in _Ledger.tiers}


def budget_of(markers: Iterable[str]) -> float | None:
    """The seconds a test with these markers may take, or None when they exempt it."""
    names = set(markers)
    if names.intersection(EXEMPT):
        return None
    return _Ledger.tiers["slow" if "slow" in names else "quick"]


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Under xdist this runs on the controller, which never collected the item: its markers
    come with the report, among its keywords (the tiers marked it at collection).  There the
    id ends in ``@group`` under ``--dist loadgroup``, cut off here."""
    nodeid = report.nodeid.split("@", 1)[0]
    _Ledger.seconds[nodeid] += report.duration
    _Ledger.budgets[nodeid] = budget_of(report.keywords)


def over_budget() -> list[tuple[str, float, float]]:
    """(test id, seconds, budget) for every test that took longer than its budget."""
    found = []
    for nodeid, seconds in _Ledger.seconds.items():
        budget = _Ledger.budgets.get(nodeid)
        if budget is not None and seconds > budget:
            found.append((nodeid, seconds, budget))
    return sorted(found, key=lambda row: -row[1])


def pytest_terminal_summary(terminalreporter, exitstatus: int, config: pytest.Config) -> None:
    if hasattr(config, "workerinput") or not _Ledger.seconds:
        return
    write = terminalreporter.write_line
    terminalreporter.section(f"slowest {SLOWEST_SHOWN} tests (setup + call + teardown)")
    slowest = sorted(_Ledger.seconds.items(), key=lambda row: -row[1])[:SLOWEST_SHOWN]
    for nodeid, seconds in slowest:
        write(f"{seconds:8.1f} s  {_tier(nodeid):6}  {nodeid}")
    for nodeid, seconds, budget in over_budget():
        write(f"OVER BUDGET: {nodeid} took {seconds:.1f} s, its tier allows {budget:.0f} s: "
              f"make it faster, or mark it solo or e2e (tests/budget.py)")  # fmt: skip


def _tier(nodeid: str) -> str:
    budget = _Ledger.budgets.get(nodeid)
    return "exempt" if budget is None else "quick" if budget == _Ledger.tiers["quick"] else "slow"


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    """A run whose tests all passed fails when one of them went over its budget."""
    if hasattr(session.config, "workerinput"):
        return
    if over_budget() and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
