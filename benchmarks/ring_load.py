"""Training-like ring writers for the benchmarks: one process per rank, paced, like torchrun.

``python benchmarks/ring_load.py --dir D --name sweep1 --ranks 8 --rate 20 --seconds 60``
starts 8 rank processes as children of this one (torchrun's shape: the launcher is the parent),
each writing ``--rate`` steps/s into its own segment of one job (shared run id, world size 8),
then closing it cleanly (``--crash``: exiting without the close, as SIGKILL would).  Pure
stdlib: no torch, so 64 ranks fit on a small VM.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from traintop.ring import RingWriter  # noqa: E402

PHASES = ("data", "forward", "backward", "optimizer", "other")


def rank_loop(args: argparse.Namespace, rank: int) -> None:
    """Write ``rate`` steps/s in bursts every 10 ms (a sleeping trainer, not a spinning one)."""
    w = RingWriter.create(name=args.name, phases=PHASES, rank=rank, local_rank=rank,
                          world_size=args.ranks, run_id=args.run_id or args.name,
                          directory=args.dir)  # fmt: skip
    start, step = time.monotonic(), 0
    step_ns = int(1e9 / args.rate)
    phases = (step_ns // 5, step_ns // 5, step_ns // 5, step_ns // 5, step_ns - 4 * (step_ns // 5))
    while (now := time.monotonic()) < start + args.seconds:
        due = int((now - start) * args.rate)
        t_ns = time.monotonic_ns()
        while step < due:
            w.record(step, t_ns - (due - step) * step_ns, phases, 32)
            step += 1
        time.sleep(0.01)
    if args.crash:
        os._exit(0)
    w.close()


def launch(args: argparse.Namespace) -> int:
    """The launcher: one child per rank, like torchrun; waits for all of them."""
    procs = [
        subprocess.Popen([sys.executable, __file__, *sys.argv[1:], "--rank", str(r)])
        for r in range(args.ranks)
    ]
    return max(p.wait() for p in procs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default=None)
    parser.add_argument("--name", default="job")
    parser.add_argument("--run-id", default="")
    parser.add_argument("--ranks", type=int, default=8)
    parser.add_argument("--rate", type=float, default=20.0)
    parser.add_argument("--seconds", type=float, default=60.0)
    parser.add_argument("--crash", action="store_true")
    parser.add_argument("--rank", type=int, default=None)
    args = parser.parse_args()
    if args.rank is None:
        return launch(args)
    rank_loop(args, args.rank)
    return 0


if __name__ == "__main__":
    sys.exit(main())
