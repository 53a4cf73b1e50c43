"""Render the JSON lines of a GPU scenario run as the table in docs/scenarios.md.

TRAINTOP_GPU_SCENARIO_RESULTS=/tmp/gpu.jsonl python -m pytest -q tests/test_scenarios_gpu.py
python -m tests.scenarios.gpu_report /tmp/gpu.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

from tests.scenarios.gpu_cases import CASES

HEADER = (
    "| case | setup | expected | observed | confidence | time-to-verdict | evidence |\n"
    "| --- | --- | --- | --- | --- | --- | --- |"
)


def row(result: dict) -> str:
    """One table row from one JSON line; missing pieces are shown as such, never invented."""
    scenario = result["scenario"]
    verdict = result.get("verdict") or {}
    confidence, ttv = verdict.get("confidence"), result.get("time_to_verdict_s")
    case = CASES.get(scenario)
    cells = [
        f"`{scenario}`",
        case.setup if case else "-",
        f"`{scenario}`",
        f"`{verdict.get('bottleneck', 'none')}`",
        "-" if confidence is None else f"{confidence:.2f}",
        "-" if ttv is None else f"{ttv:.1f} s",
        ("; ".join(verdict.get("evidence") or []) or "-").replace("|", "/"),
    ]
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.scenarios.gpu_report RESULTS.jsonl", file=sys.stderr)
        return 2
    try:
        lines = Path(argv[0]).read_text().splitlines()
        results = [json.loads(line) for line in lines if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        print(f"gpu_report: cannot read {argv[0]}: {exc}", file=sys.stderr)
        return 1
    print(HEADER)
    for result in results:
        print(row(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
