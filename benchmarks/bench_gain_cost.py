"""What the predicted gains add to a verdict tick: instructions counted by callgrind, the same
on a loaded box as on an idle one (bench_diagnose.py's milliseconds move by tens of percent on a
shared 2-core VM), for this tree and one without the predictions.

Each case of bench_diagnose.py (its ``8 ranks data-bound`` case is the one whose ranks' input
pipelines are modelled: eight ranks waiting half their step on four workers each) is fed its
stream of snapshots; once the window is full, ``--calls`` ticks of
:class:`~traintop.diagnosis.verdict_window.VerdictWindow` are counted.  The added milliseconds
are the added instructions at the rate this tree's ticks ran at outside callgrind, in the same
run (thread CPU time, best of ``--repeat``).

    python benchmarks/bench_gain_cost.py --tree /tmp/old [--calls 20] [--cases A,B]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import bench_diagnose as bench  # noqa: E402
from instr_count import Counter, under_callgrind  # noqa: E402

TARGET_MS = 0.5  # issue 42: the prediction adds at most this to a verdict tick


def _ticks(name: str, calls: int) -> tuple[object, list]:
    snaps = bench.stream(name, bench.WINDOW + calls)
    window = bench.VerdictWindow()
    for snap in snaps[: bench.WINDOW]:
        window.update(snap)
    return window, snaps[bench.WINDOW :]


def child(calls: int, cases: list[str]) -> int:
    """Under callgrind: instructions per tick of each case, one JSON line."""
    counter = Counter()
    found = {}
    for name in cases:
        window, rest = _ticks(name, calls)
        total = counter.count(name, lambda w=window, r=rest: [w.update(s) for s in r])
        found[name] = None if total is None else total / calls
    print(json.dumps(found), flush=True)
    return 0


def _count(tree: Path, calls: int, cases: list[str]) -> dict[str, float]:
    env = {**os.environ, "BENCH_DIAGNOSE_CODE": str(tree)}
    args = [__file__, "--child", "--calls", str(calls), "--cases", ",".join(cases)]
    proc = under_callgrind(args, env)
    out, _ = proc.communicate(timeout=3600)
    return json.loads(out.strip().splitlines()[-1])


def ms_per_tick(name: str, calls: int, repeat: int) -> float:
    """This tree's ticks in thread CPU time, the best of ``repeat`` batches."""
    best = float("inf")
    for _ in range(repeat):
        window, rest = _ticks(name, calls)
        started = time.thread_time()
        for snap in rest:
            window.update(snap)
        best = min(best, (time.thread_time() - started) / calls * 1000)
    return best


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--tree", type=Path, required=False, help="the tree without the predictions")
    p.add_argument("--calls", type=int, default=20)
    p.add_argument("--repeat", type=int, default=5)
    p.add_argument("--cases", default=",".join(bench.CASES))
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    opts = p.parse_args()
    cases = opts.cases.split(",")
    if opts.child:
        return child(opts.calls, cases)
    if opts.tree is None:
        p.error("--tree DIR (a tree without the predictions) is required")
    before = _count(opts.tree.resolve(), opts.calls, cases)
    now = _count(HERE.parent, opts.calls, cases)
    print(f"{'per tick':<22}{'before Minstr':>14}{'now Minstr':>12}{'added':>8}{'now ms':>8}"
          f"{'added ms':>10}")  # fmt: skip
    for name in cases:
        ms = ms_per_tick(name, opts.calls, opts.repeat)
        added = now[name] - before[name]
        added_ms = ms * added / now[name]
        print(f"{name:<22}{before[name] / 1e6:14.2f}{now[name] / 1e6:12.2f}"
              f"{added / before[name] * 100:7.0f}%{ms:8.2f}{added_ms:10.3f}"
              f"{'' if added_ms <= TARGET_MS else '  over ' + str(TARGET_MS)}")  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
