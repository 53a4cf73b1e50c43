"""Zero-code accuracy on real loop styles: traintop's account against each loop's own.

Runs every workload of tests/workloads/loops/ under the installed ``traintop run`` (as
tests/test_loop_styles.py does) and prints, per loop style and rank: the loop's own iteration
rate and the steps/s ``traintop jobs --json`` reports (and their ratio), samples per step, the
forward / backward / optimizer shares (loop's own -> traintop's; backward includes DDP's
``comm``), and the rank identity traintop reports.

    python benchmarks/bench_loop_styles.py [--seconds 5]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from functools import partial
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from tests import test_loop_styles as loops

STYLES = (  # label, job name, how to run it in a scratch folder
    ("manual SGD, no DataLoader", "word_language_model/main",
     partial(loops.run_loop, script="word_language_model/main.py")),
    ("GAN, two optimizers", "gan", partial(loops.run_loop, script="gan.py")),
    ("LBFGS closure", "lbfgs", partial(loops.run_loop, script="lbfgs.py")),
    ("gradient accumulation x4", "grad_accum", partial(loops.run_loop, script="grad_accum.py")),
    ("mp.spawn DDP, 2 ranks", "spawn_ddp",
     lambda tmp: loops.run_loop(tmp, "spawn_ddp.py", "29571", world=2)),
    ("Lightning DDP launcher, 2 ranks", "lightning_ddp",
     partial(loops.run_loop, script="lightning_ddp.py", world=2, port=29581)),
    ("accelerate launch, 2 CPU ranks", "accelerate_ddp", partial(loops.run_accelerate, port=29821)),
)  # fmt: skip
SHARES = (("forward", ("forward",)), ("backward", ("backward", "comm")),
          ("optimizer", ("optimizer",)))  # fmt: skip
# "comm" is DDP's tail of backward and also any blocking collective (the spawn script's stop
# vote, Lightning's per-step broadcasts), so DDP rows' backward can read above the loop's own.


def row(label: str, job: dict, report: dict) -> str:
    ours, theirs = loops.shares(job), report["shares"]
    cells = [f"{theirs.get(name, 0.0):.0%} → {sum(ours.get(n, 0.0) for n in probe):.0%}"
             for name, probe in SHARES]  # fmt: skip
    per_step = job["samples_per_s"] / job["steps_per_s"] if job["samples_per_s"] else None
    samples = "—" if per_step is None else f"{per_step:.1f}"
    rate = loops.tail_rate(report)  # over the steps a finished job's figures cover
    return (f"| {label} | {job['rank']}/{job['local_rank']}/{job['world_size']} | "
            f"{rate:.1f} | {job['steps_per_s']:.1f} | "
            f"{job['steps_per_s'] / rate:.3f} | {report['batch']} / {samples} | "
            f"{' | '.join(cells)} |")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", default="5", help="how long each loop trains")
    args = parser.parse_args()
    loops.LOOP_SECONDS = args.seconds
    print("| loop style | rank/local/world | loop it/s | traintop steps/s | ratio | "
          "samples/step loop / traintop | forward | backward | optimizer |")  # fmt: skip
    print("|---|---|---|---|---|---|---|---|---|")
    for label, name, runner in STYLES:
        with tempfile.TemporaryDirectory(prefix="a_loops_") as tmp:
            run = runner(Path(tmp))
        for job in sorted((j for j in run.snapshot_jobs if j["name"] == name),
                          key=lambda j: j["rank"]):  # fmt: skip
            print(row(label, job, run.reports[job["rank"]]), flush=True)


if __name__ == "__main__":
    main()
