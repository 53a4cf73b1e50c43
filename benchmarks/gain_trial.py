"""The prediction trial: does a remedy buy what traintop said it would?  (docs/gains.md)

Synthetic CPU jobs with known costs (gaintrial/job.py) in every class the verdict has on a CPU,
each run under `traintop run` and recorded (A); the prediction its verdict makes for the
remedy's setting is written down; then the job runs again with the remedy applied (B).  Repeats
interleave A and B; runs that other load on the box disturbed are rejected and run again.

    python benchmarks/gain_trial.py                    # the tuning cases, 3 repeats each
    python benchmarks/gain_trial.py --held-out         # the held-out third too
    python benchmarks/gain_trial.py -k latency --repeat 2
    python benchmarks/gain_trial.py --report-only      # docs/gains.md from what is recorded

Needs root (cgroup v1 cpu and blkio groups, a loop device) and a quiet box: a run during which
other processes take more than ``--max-others`` CPUs is run again.  Resumable: every run is
appended to ``--state`` as soon as it ends; ``--fresh`` starts over.  The report goes to the
marked section of docs/gains.md and to docs/gains-trial.json.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(1, str(Path(__file__).resolve().parents[1]))

from gaintrial.cases import CASES
from gaintrial.predict import prediction
from gaintrial.report import markdown, replace_section, summary
from gaintrial.trial import Options, load_state, run_case

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_STATE = Path.home() / ".cache" / "traintop" / "gain-trial.jsonl"


def _args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python benchmarks/gain_trial.py",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--repeat", type=int, default=3, help="A/B pairs per case (3)")
    p.add_argument("-k", dest="select", default=None, help="only cases (or classes) matching")
    p.add_argument("--held-out", action="store_true", help="run the held-out cases too")
    p.add_argument("--state", type=Path, default=DEFAULT_STATE, help="resumable run log")
    p.add_argument("--out", type=Path, default=None, help="recordings (default: by --state)")
    p.add_argument("--fresh", action="store_true", help="forget the runs in --state")
    p.add_argument("--report-only", action="store_true")
    p.add_argument("--repredict", action="store_true",
                   help="development: the tuning cases' predictions made again from their A "
                   "recordings with the code as it is now (never the held-out cases'; the "
                   "report says so, and nothing is written to --state or the docs)")  # fmt: skip
    p.add_argument("--max-others", type=float, default=0.15, help="CPUs of other work allowed")
    p.add_argument("--max-peak", type=float, default=0.6, help="... in any one second")
    p.add_argument("--quiet-wait", type=float, default=math.inf,
                   help="longest wait (s) for a quiet box before a run (none)")  # fmt: skip
    p.add_argument("--warm", type=float, default=8.0, help="seconds before recording")
    p.add_argument("--record", type=float, default=20.0, help="seconds recorded")
    p.add_argument("--docs", type=Path, default=ROOT / "docs" / "gains.md")
    return p.parse_args(argv)


def _cases(opts: argparse.Namespace) -> list:
    pick = [c for c in CASES if opts.held_out or not c.held_out]
    if opts.select:
        pick = [c for c in pick if re.search(opts.select, f"{c.name} {c.klass}")]
    return pick


def _log(row: dict) -> None:
    run = row["run"]
    rate = run["steps_per_s"]
    gain = (row.get("prediction") or {}).get("gain") or {}
    said = f" predicted {gain.get('words')}" if gain else ""
    state = "ok" if row["accepted"] else "REJECTED"
    print(
        f"{row['case']} #{row['rep'] + 1} {row['role']}: "
        f"{'-' if rate is None else f'{rate:.2f}'} steps/s, others {run['others_cpus']:.2f} "
        f"CPUs (peak {run['others_peak']:.2f}) {state}{said}",
        flush=True,
    )


def _interrupt(*_: object) -> None:
    raise KeyboardInterrupt  # SIGTERM too: stop the jobs and undo the cgroups and the disk


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGTERM, _interrupt)
    opts = _args(argv)
    if opts.fresh and opts.state.exists():
        opts.state.unlink()
    out = opts.out or opts.state.with_suffix("")
    out.mkdir(parents=True, exist_ok=True)
    rows = load_state(opts.state)
    if not opts.report_only and not opts.repredict:
        options = Options(opts.state, out, opts.repeat, opts.warm, opts.record, opts.max_others,
                          opts.max_peak, quiet_wait_s=opts.quiet_wait)  # fmt: skip
        try:
            for case in _cases(opts):
                run_case(case, options, rows, _log)
        except KeyboardInterrupt:
            print("gain trial: interrupted; run again to resume", file=sys.stderr)
            return 130
    if opts.repredict:
        print(markdown(summary(repredicted(rows))))
        print("(re-predicted with the code as it is now: a development aid, not the trial)")
        return 0
    result = summary(rows)
    section = markdown(result)
    (opts.docs.parent / "gains-trial.json").write_text(json.dumps(result, indent=1) + "\n")
    if opts.docs.exists():
        opts.docs.write_text(replace_section(opts.docs.read_text(), section))
    print(section)
    return 0


def repredicted(rows: list[dict]) -> list[dict]:
    """The rows with each tuning case's A predictions made again from its recording."""
    held = {c.name for c in CASES if c.held_out}
    knob = {c.name: c.knob for c in CASES}
    out = []
    for row in rows:
        if row["role"] == "A" and row["case"] not in held and row["run"]["steps_per_s"]:
            value = ((row.get("prediction") or {}).get("gain") or {}).get("value")
            again = prediction(row["run"]["recording"], row["case"], knob[row["case"]], True, value)
            row = {**row, "prediction": again}
        out.append(row)
    return out


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
