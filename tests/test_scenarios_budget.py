"""Jobs whose lost time two rules could claim (tests/scenarios/budget_cases.py), end to end.

Each case is a real PyTorch job under `traintop run` (zero code): burst-fed loaders with 2 and
4 workers, a 3-rank DDP job with one rank slow off or on the CPU, a loader on a throttled disk.
`traintop diagnose --for 12 --json --job PID` must name the cause that explains the most time
(``data_starved``, ``straggler`` naming rank 2, ``data_io``), never flip, and say it with the
figures the case is about.  These are repeated by the scenario matrix
(``python -m tests.scenarios.matrix -k budget``), which sets ``TRAINTOP_MATRIX``; the suite
runs them together, once, in tests/test_budget_jobs.py.
TRAINTOP_SCENARIO_RESULTS=FILE appends each run's result for the confusion matrix.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.scenarios.budget_cases import CASES, BudgetCase, run_case
from tests.scenarios.harness import ScenarioUnavailable, describe, record

pytestmark = [pytest.mark.slow, pytest.mark.matrix, pytest.mark.timeout(240)]


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_budget_case(case: BudgetCase, ring_dir: Path, tmp_path: Path) -> None:
    try:
        workload, run = run_case(case, ring_dir, tmp_path)
    except ScenarioUnavailable as exc:
        pytest.skip(f"{case.name} needs a throttled loop device: {exc}")
    ttv = record(case.name, workload, run, wanted=case.wanted, deadline_s=case.deadline_s)
    context = f"{describe(run)}\n--- workload log ---\n{workload.log_tail()}"
    assert run.verdict is not None, context
    assert run.bottleneck == case.wanted, context
    assert run.flips == 0, f"verdict flipped: {run.verdict.get('timeline')}\n{context}"
    evidence = run.verdict.get("evidence") or []
    for check in case.checks:
        assert any(re.search(check, e) for e in evidence), f"{check}\n{context}"
    if case.wanted == "straggler":
        (job,) = run.verdict["per_job"]
        assert job["straggler"]["rank"] == 2, context
    assert ttv is not None and ttv <= case.deadline_s, f"time-to-verdict {ttv} s\n{context}"
