"""Render the JSON lines written by a scenario run as the Markdown table in docs/scenarios.md.

TRAINTOP_SCENARIO_RESULTS=/tmp/scn.jsonl python -m pytest -q tests/test_scenarios.py
python -m tests.scenarios.report /tmp/scn.jsonl
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

WORKLOADS = {
    "data_cpu": "24 blur+FFT rounds per 3x128x128 image, 2 workers, linear model",
    "data_starved": "20 ms sleep per sample, batch 8, num_workers=0, linear model",
    "data_io": "100 x 4 MB files, O_DIRECT, loop ext4 read-capped at 16 MiB/s, 2 workers",
    "compute": "1024-4096-4096-10 MLP on an in-memory tensor, 2 threads",
    "periodic_stall": "~8 ms steps, 205 MB checkpoint + fsync every 25 steps",
    "oversubscribed": "3 wide-MLP trainers, torch.set_num_threads(4) each, 2 cores",
    "network": "2-rank gloo DDP, 260 k params, veth between 2 netns, tbf 20 Mbit/s",
}
HEADER = (
    "| scenario | workload | expected | observed | confidence | time-to-verdict | evidence |\n"
    "| --- | --- | --- | --- | --- | --- | --- |"
)


def row(result: dict) -> str:
    """One table row from one JSON line; missing pieces are shown, never invented."""
    scenario = result["scenario"]
    verdict = result.get("verdict") or {}
    confidence = verdict.get("confidence")
    ttv = result.get("time_to_verdict_s")
    evidence = "; ".join(verdict.get("evidence") or []) or "-"
    cells = [
        f"`{scenario}`",
        WORKLOADS.get(scenario, "-"),
        f"`{scenario}`",
        f"`{verdict.get('bottleneck', 'none')}`",
        "-" if confidence is None else f"{confidence:.2f}",
        "-" if ttv is None else f"{ttv:.1f} s",
        evidence.replace("|", "/"),
    ]
    return "| " + " | ".join(cells) + " |"


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests.scenarios.report RESULTS.jsonl", file=sys.stderr)
        return 2
    try:
        lines = Path(argv[0]).read_text().splitlines()
        results = [json.loads(line) for line in lines if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        print(f"report: cannot read {argv[0]}: {exc}", file=sys.stderr)
        return 1
    print(HEADER)
    for result in results:
        print(row(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
