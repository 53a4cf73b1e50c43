"""Zero-code multi-rank communication scenarios (tests/scenarios/net_cases.py), end to end.

Each case is a real torchrun gloo DDP job under `traintop run` in its own network namespace;
`traintop diagnose --for 12 --json` runs outside it and must name a shaped link `network` (and
the fast link anything but `network`) in time (harness.in_time), quoting measured numbers.
TRAINTOP_SCENARIO_RESULTS=FILE appends each run's result for the confusion matrix.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tests.scenarios.harness import ScenarioUnavailable, describe, in_time, record
from tests.scenarios.net_cases import CASES, NetCase, run_case

pytestmark = [pytest.mark.solo, pytest.mark.timeout(180)]

VERDICT_DEADLINE_S = 15.0


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_network_case(case: NetCase, ring_dir: Path, tmp_path: Path) -> None:
    try:
        workload, run = run_case(case, ring_dir, tmp_path)
    except ScenarioUnavailable as exc:
        pytest.skip(f"needs network namespaces: {exc}")
    ttv = record(case.name, workload, run, wanted=case.wanted)
    context = f"{describe(run)}\n--- workload log ---\n{workload.log_tail()}"
    assert run.verdict is not None, context
    if case.forbidden is not None:
        assert run.bottleneck != case.forbidden, context
        return
    assert run.bottleneck == case.wanted, context
    evidence = run.verdict.get("evidence") or []
    assert any(re.search(r"communication \(comm\) \d+ % of step", e) for e in evidence), context
    assert any(e.startswith("job's network namespace: lo rx ") for e in evidence), context
    assert in_time(ttv, VERDICT_DEADLINE_S), f"time-to-verdict {ttv} s\n{context}"
