"""Run every bottleneck scenario N times and publish the confusion matrix (wanted x got).

    python -m tests.scenarios.matrix --repeat 5            # all scenarios, 5 runs each
    python -m tests.scenarios.matrix --repeat 2 -k straggler
    python -m tests.scenarios.matrix --report-only         # re-render from what was recorded

Each scenario is one slow pytest test in ``tests/test_scenarios*.py`` (everyone's: CPU, GPU,
network, oversubscription, multi-process), run alone in its own pytest process so that one
hang or crash costs one cell, not the run.  Runs are interleaved (every scenario once, then
again), so a busy minute on the machine spreads over scenarios instead of ruining one.

A run counts as a hit when the answer is the wanted label *and* the shown verdict never changed
after it first committed (the ``timeline`` that `traintop diagnose --json` prints): a verdict
that flips is a miss even when it ends right.  A test that records nothing (it crashed before
diagnose answered) counts as ``error``; one that skipped (no netns, no loop device) is listed
as skipped and left out of the matrix.

Resumable: every finished run is appended to the state file (``--state``) at once, and a
restart skips the runs already there; ``--fresh`` starts over.  At the end the results go to a
JSON file and to the marked section of docs/scenarios.md (and of the README beside it, when
it has the markers), and the Markdown is printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from tests.scenarios.matrix_report import START, aggregate, render, replace_section

ROOT = Path(__file__).resolve().parents[2]
TESTS = sorted(str(p.relative_to(ROOT)) for p in (ROOT / "tests").glob("test_scenarios*.py"))
RESULT_ENVS = ("TRAINTOP_SCENARIO_RESULTS", "TRAINTOP_GPU_SCENARIO_RESULTS")
MATRIX_ENV = "TRAINTOP_MATRIX"  # runs the scenarios the suite leaves to the matrix (conftest.py)
RUN_TIMEOUT_S = 600
PYTEST = (sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider")
DEFAULT_STATE = Path.home() / ".cache" / "traintop" / "scenario-matrix.jsonl"


class NoScenarios(Exception):
    """Nothing to run: a bad ``-k``, or pytest could not collect the scenario files."""


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m tests.scenarios.matrix", description=__doc__)
    p.add_argument("--repeat", type=int, default=5, help="runs per scenario (5)")
    p.add_argument("-k", dest="select", default=None, help="only test ids matching this regex")
    p.add_argument("--state", type=Path, default=DEFAULT_STATE, help="resumable run log")
    p.add_argument("--json", type=Path, default=ROOT / "docs" / "scenarios-matrix.json")
    p.add_argument("--docs", type=Path, default=ROOT / "docs" / "scenarios.md")
    p.add_argument("--fresh", action="store_true", help="forget runs recorded in --state")
    p.add_argument("--report-only", action="store_true", help="render what --state holds")
    opts = p.parse_args(argv)
    if opts.repeat < 1:
        p.error("--repeat must be at least 1")
    return opts


def collect(select: str | None) -> list[str]:
    """The slow scenario tests' ids, as pytest names them."""
    done = subprocess.run(
        [*PYTEST, "--collect-only", "-m", "slow", *TESTS],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    ids = [line for line in done.stdout.splitlines() if "::" in line and " " not in line]
    return [i for i in ids if select is None or re.search(select, i)]


def load_state(path: Path) -> list[dict]:
    """Runs recorded so far (a torn last line from a killed run is ignored)."""
    if not path.exists():
        return []
    runs = []
    for line in path.read_text().splitlines():
        try:
            runs.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return runs


def _load1() -> float | None:
    try:
        return os.getloadavg()[0]
    except OSError:
        return None


def run_once(test: str, repeat: int) -> dict:
    """One pytest process for one scenario test; its rows, outcome and duration."""
    with tempfile.NamedTemporaryFile("r", suffix=".jsonl") as rows:
        env = dict(os.environ, **dict.fromkeys(RESULT_ENVS, rows.name), **{MATRIX_ENV: "1"})
        started, load = time.monotonic(), _load1()
        try:
            done = subprocess.run(
                [*PYTEST, "-rs", test],
                cwd=ROOT, env=env, capture_output=True, text=True, timeout=RUN_TIMEOUT_S,
            )  # fmt: skip
            outcome, tail = _outcome(done.returncode, done.stdout), done.stdout[-1500:]
        except subprocess.TimeoutExpired:
            outcome, tail = "timeout", ""
        recorded = [json.loads(line) for line in rows.read().splitlines() if line.strip()]
    return {
        "test": test,
        "repeat": repeat,
        "outcome": outcome,
        "seconds": round(time.monotonic() - started, 1),
        "load1": load,
        "rows": recorded,
        "tail": "" if outcome == "passed" else tail,
    }


def _outcome(returncode: int, stdout: str) -> str:
    if returncode == 0:
        return (
            "skipped"
            if re.search(r"\b\d+ skipped\b", stdout) and " passed" not in stdout
            else "passed"
        )
    return "failed"


def _line(run: dict, index: int, total: int) -> str:
    """One progress line: which run, what it answered, how long it took."""
    rows = run["rows"]
    answers = ", ".join(
        f"{r.get('got') or (r.get('verdict') or {}).get('bottleneck')}"
        f" (wanted {r.get('wanted') or r['scenario']}, {_ttv(r)})"
        for r in rows
    )
    load = "?" if run["load1"] is None else f"{run['load1']:.1f}"
    what = answers or "nothing recorded"
    return (
        f"[{index}/{total}] {run['test']} #{run['repeat'] + 1}: {run['outcome']}: {what}"
        f" ({run['seconds']:.0f} s, load {load})"
    )


def _ttv(row: dict) -> str:
    ttv = row.get("time_to_verdict_s")
    return "no time" if ttv is None else f"{ttv:.1f} s"


def plan(tests: list[str], repeat: int, runs: list[dict]) -> list[tuple[str, int]]:
    """(test, repeat) pairs still to run, interleaved: every test once, then again."""
    done = {(r["test"], r["repeat"]) for r in runs}
    return [(t, i) for i in range(repeat) for t in tests if (t, i) not in done]


def execute(opts: argparse.Namespace, runs: list[dict]) -> list[dict]:
    """Run what is missing, appending each result to the state file as soon as it is known."""
    tests = collect(opts.select)
    if not tests:
        raise NoScenarios(f"no slow scenario test matches {opts.select or 'anything'}")
    todo = plan(tests, opts.repeat, runs)
    opts.state.parent.mkdir(parents=True, exist_ok=True)
    print(f"matrix: {len(todo)} runs to go, state in {opts.state}", flush=True)
    for index, (test, repeat) in enumerate(todo, 1):
        run = run_once(test, repeat)
        with open(opts.state, "a") as out:
            out.write(json.dumps(run) + "\n")
        runs.append(run)
        print(_line(run, index, len(todo)), flush=True)
    return runs


def publish(opts: argparse.Namespace, runs: list[dict]) -> str:
    """Write the JSON results and the docs section; return the Markdown."""
    summary = aggregate(runs)
    markdown = render(summary)
    opts.json.write_text(json.dumps({"summary": summary, "runs": runs}, indent=1) + "\n")
    if opts.docs.exists():
        opts.docs.write_text(replace_section(opts.docs.read_text(), markdown))
    readme = opts.docs.parent.parent / "README.md"
    if readme.exists() and START in readme.read_text():  # only where the README keeps it
        readme.write_text(replace_section(readme.read_text(), markdown))
    return markdown


def main(argv: list[str]) -> int:
    opts = _args(argv)
    if opts.fresh and opts.state.exists():
        opts.state.unlink()
    runs = load_state(opts.state)
    if not opts.report_only:
        try:
            runs = execute(opts, runs)
        except KeyboardInterrupt:
            print("matrix: interrupted; run again to resume", file=sys.stderr)
            return 130
        except NoScenarios as exc:
            print(f"matrix: {exc} (see pytest --collect-only -m slow tests/)", file=sys.stderr)
            return 1
    if not runs:
        print("matrix: nothing recorded yet", file=sys.stderr)
        return 1
    print(publish(opts, runs))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
