"""Render the JSON lines written by a scenario run as the Markdown table in docs/scenarios.md.

TRAINTOP_SCENARIO_RESULTS=/tmp/scn.jsonl python -m pytest -q tests/test_scenarios.py
python -m tests.scenarios.report /tmp/scn.jsonl

The CPU scenarios (this module's ``main``) and the GPU cases (gpu_report.py) share one line
format, written by ``append_result`` and read back by ``render``, so both tables stay alike.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Callable
from pathlib import Path

WORKLOADS = {
    "data_cpu": "24 blur+FFT rounds per 3x128x128 image, 2 workers, linear model",
    "data_starved": "20 ms sleep per sample, batch 8, num_workers=0, linear model",
    "data_handoff": "JSON records tokenized in Python into 3 tensors, 1 worker, embedding bag",
    "data_io": "100 x 4 MB files, O_DIRECT, loop ext4 read-capped at 16 MiB/s, 2 workers",
    "compute": "1024-4096-4096-10 MLP on an in-memory tensor, 2 threads",
    "periodic_stall": "~8 ms steps, 205 MB checkpoint + fsync every 25 steps",
    "oversubscribed": "3 wide-MLP trainers, torch.set_num_threads(4) each, 2 cores",
    "network": "2-rank gloo DDP, 260 k params, veth between 2 netns, tbf 20 Mbit/s",
}
COLUMNS = "| expected | observed | confidence | time-to-verdict | evidence |\n"
RULE = "| --- | --- | --- | --- | --- | --- | --- |"
HEADER = "| scenario | workload " + COLUMNS + RULE


def append_result(
    results_env: str, scenario: str, ttv: float | None, verdict: dict | None, **more: object
) -> None:
    """Append one JSON line to the file named by ``$results_env``; unset means not recording.
    ``more`` adds keys the matrix reads: ``wanted`` (when it is not the scenario's name),
    ``got`` (the answer's label) and ``flips``."""
    target = os.environ.get(results_env)
    if target:
        row = {"scenario": scenario, "time_to_verdict_s": ttv, "verdict": verdict, **more}
        with open(target, "a") as out:
            out.write(json.dumps(row) + "\n")


def row(result: dict, setup: str) -> str:
    """One table row from one JSON line; missing pieces are shown, never invented."""
    scenario = result["scenario"]
    verdict = result.get("verdict") or {}
    confidence = verdict.get("confidence")
    ttv = result.get("time_to_verdict_s")
    evidence = "; ".join(verdict.get("evidence") or []) or "-"
    cells = [
        f"`{scenario}`",
        setup,
        f"`{result.get('wanted', scenario)}`",
        f"`{verdict.get('bottleneck', 'none')}`",
        "-" if confidence is None else f"{confidence:.2f}",
        "-" if ttv is None else f"{ttv:.1f} s",
        evidence.replace("|", "/"),
    ]
    return "| " + " | ".join(cells) + " |"


def render(argv: list[str], module: str, header: str, setup_of: Callable[[str], str]) -> int:
    """Print the table for the one results file in ``argv``; usage and read errors are one line."""
    if len(argv) != 1:
        print(f"usage: python -m tests.scenarios.{module} RESULTS.jsonl", file=sys.stderr)
        return 2
    try:
        lines = Path(argv[0]).read_text().splitlines()
        results = [json.loads(line) for line in lines if line.strip()]
    except (OSError, json.JSONDecodeError) as exc:
        print(f"{module}: cannot read {argv[0]}: {exc}", file=sys.stderr)
        return 1
    print(header)
    for result in results:
        print(row(result, setup_of(result["scenario"])))
    return 0


def main(argv: list[str]) -> int:
    return render(argv, "report", HEADER, lambda scenario: WORKLOADS.get(scenario, "-"))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
