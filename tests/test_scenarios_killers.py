"""The quiet killers end to end (tests/scenarios/killer_cases.py): real PyTorch jobs under
`traintop run` (zero code), judged by `traintop diagnose --json` as a subprocess.

Each must answer the wanted id with its figures, never flip, never answer what it must not
(``gil_contention`` for the look-alikes, ``network`` for the checkpoint), in time; the OOM case
must also predict the time left within a factor of 2 of when the kernel really ended it, and
`traintop jobs` must then say "killed by the OOM killer".  Verdicts on real CPU time: solo.
The scenario matrix repeats them (``python -m tests.scenarios.matrix -k killers``);
TRAINTOP_SCENARIO_RESULTS=FILE appends each run's result for the confusion matrix.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.scenarios.harness import ScenarioUnavailable, describe, record
from tests.scenarios.killer_cases import CASES, KillerCase, run_case

pytestmark = [pytest.mark.slow, pytest.mark.solo, pytest.mark.timeout(420)]


# The suite keeps the holder and its hardest look-alike (a busy thread in C); an idle logger and
# a reader waiting in the kernel are never busy, never asked about, and the matrix runs them.
MATRIX_ONLY = frozenset({"gil_logger", "gil_io"})


@pytest.mark.parametrize(
    "case",
    [pytest.param(c, marks=pytest.mark.matrix) if c.name in MATRIX_ONLY else c
     for c in CASES.values()],
    ids=CASES.keys(),
)  # fmt: skip
def test_killer_case(case: KillerCase, ring_dir: Path, tmp_path: Path) -> None:
    try:
        outcome = run_case(case, ring_dir, tmp_path)
    except ScenarioUnavailable as exc:
        pytest.skip(f"{case.name}: {exc}")
    run, workload = outcome.run, outcome.workload
    ttv = record(case.name, workload, run, wanted=case.wanted, deadline_s=case.deadline_s)
    context = f"{describe(run)}\n--- workload log ---\n{workload.log_tail()}"
    assert run.verdict is not None, context
    assert run.bottleneck == case.wanted, context
    assert run.flips == 0, f"verdict flipped: {run.verdict.get('timeline')}\n{context}"
    timeline = {b for _, b in run.verdict.get("timeline") or ()}
    also = {f["bottleneck"] for f in run.verdict.get("also") or ()}
    assert case.forbidden not in timeline | also, context
    evidence = run.verdict.get("evidence") or []
    for check in case.checks:
        assert any(re.search(check, e) for e in evidence), f"{check}\n{context}"
    if case.wanted == "straggler":
        (job,) = run.verdict["per_job"]
        assert job["straggler"]["rank"] == (2 if case.name == "straggler_quota" else 0), context
    if case.name == "host_memory_oom":
        _check_the_end(outcome.predicted_left_s, outcome.ended_after_s, outcome.jobs_text, context)
    assert ttv is not None and ttv <= case.deadline_s, f"time-to-verdict {ttv} s\n{context}"


def _check_the_end(left: float | None, ended: float | None, jobs: str, context: str) -> None:
    """The time left said within a factor of 2 of the kernel's OOM kill, and its word read."""
    assert left is not None and ended is not None, context
    print(f"host_memory_oom: predicted {left} s left, ended after {ended:.0f} s")
    assert 0.5 <= ended / left <= 2.0, f"predicted {left} s, ended after {ended:.0f} s\n{context}"
    assert "killed by the OOM killer" in jobs, f"{jobs}\n{context}"
