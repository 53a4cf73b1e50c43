"""Render the JSON lines of a GPU scenario run as the table in docs/scenarios.md.

TRAINTOP_GPU_SCENARIO_RESULTS=/tmp/gpu.jsonl python -m pytest -q tests/test_scenarios_gpu.py
python -m tests.scenarios.gpu_report /tmp/gpu.jsonl

Same line format and table as the CPU scenarios (report.py); only the setup column differs.
"""

from __future__ import annotations

import sys

from tests.scenarios.gpu_cases import CASES
from tests.scenarios.report import COLUMNS, RULE, render

HEADER = "| case | setup " + COLUMNS + RULE


def setup(scenario: str) -> str:
    """The case's setup text, or "-" for a line from a case that no longer exists."""
    case = CASES.get(scenario)
    return case.setup if case else "-"


def main(argv: list[str]) -> int:
    return render(argv, "gpu_report", HEADER, setup)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
