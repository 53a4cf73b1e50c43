"""Trainers sharing the CPUs (tests/scenarios/cpu_cases.py), end to end, zero code.

Real PyTorch trainers under `traintop run`; `traintop diagnose --for 12 --json --job PID` must
name more compute threads than CPUs ``oversubscribed`` in time (harness.in_time), with the jobs'
run-queue wait, thread counts and a computed ``torch.set_num_threads`` in its answer, and must
leave one trainer whose threads fit the CPUs ``compute``.
TRAINTOP_SCENARIO_RESULTS=FILE appends each run's result for the confusion matrix.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.scenarios.cpu_cases import CASES, CpuCase, run_case
from tests.scenarios.harness import describe, in_time, record

pytestmark = [pytest.mark.solo, pytest.mark.timeout(180)]

VERDICT_DEADLINE_S = 15.0
WAIT_EVIDENCE = re.compile(r"^\d jobs \(\d+ threads\) want [\d.]+ CPUs of \d+ and wait for one")


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_cpu_sharing_case(case: CpuCase, ring_dir: Path, tmp_path: Path) -> None:
    workload, run = run_case(case, ring_dir, tmp_path)
    ttv = record(case.name, workload, run, wanted=case.wanted)
    context = f"{describe(run)}\n--- workload log ---\n{workload.log_tail()}"
    assert run.verdict is not None, context
    if case.forbidden is not None:
        found = {run.bottleneck, *(a.get("bottleneck") for a in run.verdict.get("also") or [])}
        assert case.forbidden not in found, context
    assert run.bottleneck == case.wanted, context
    assert run.flips == 0, context
    if case.wanted == "oversubscribed":
        evidence = run.verdict.get("evidence") or []
        assert any(WAIT_EVIDENCE.match(e) for e in evidence), context
        assert "torch.set_num_threads(1)" in (run.verdict.get("remedies") or [""])[0], context
    assert in_time(ttv, VERDICT_DEADLINE_S), f"time-to-verdict {ttv} s\n{context}"
