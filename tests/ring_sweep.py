"""A sweep of short jobs, each of several ranks writing at once, into one ring directory.

Run as ``python -m tests.ring_sweep DIR RUNS RANKS``: it prints, as JSON, which writers each run
got enabled and the fewest free bytes seen while a run's ranks all lived.  A process of its own,
so that each rank is forked from an interpreter holding little more than the ring writer (800
forks of the test runner, with Textual and the suite loaded, cost the suite 17 CPU seconds).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

from tests.ring_helpers import PHASES, write
from traintop.ring import RingWriter


def run(ring: Path, ranks: int, crash: bool) -> tuple[list[bool], int]:
    """One job: ``ranks`` forked trainers all live at once; their writers' states, and the
    free bytes while all of them ran."""
    ready_r, ready_w = os.pipe()
    go_r, go_w = os.pipe()
    pids = [
        _rank(ring, rank, ranks, crash, (ready_r, ready_w, go_r, go_w)) for rank in range(ranks)
    ]
    os.close(ready_w), os.close(go_r)
    with os.fdopen(ready_r, "rb") as ready:
        enabled = [b == ord("1") for b in ready.read(ranks)]
        st = os.statvfs(ring)
        os.close(go_w)  # all ranks see EOF: they finish (or crash) together
        for pid in pids:
            os.waitpid(pid, 0)
    return enabled, st.f_bavail * st.f_frsize


def _rank(ring: Path, rank: int, world: int, crash: bool, pipes: tuple[int, ...]) -> int:
    pid = os.fork()
    if pid:
        return pid
    ready_r, ready_w, go_r, go_w = pipes
    os.close(ready_r), os.close(go_w)  # else no rank ever sees the parent's EOF
    w = RingWriter.create(name="sweep", phases=PHASES, rank=rank, world_size=world,
                          directory=str(ring), run_id=str(os.getppid()))  # fmt: skip
    for i in range(300):
        write(w, i)
    os.write(ready_w, b"1" if w.enabled else b"0")
    os.read(go_r, 1)
    if not crash:
        w.close()
    os._exit(0)


def main(argv: list[str]) -> None:
    ring, runs, ranks = Path(argv[0]), int(argv[1]), int(argv[2])
    results = [run(ring, ranks, crash=i % 10 == 9) for i in range(runs)]
    print(json.dumps({"enabled": [e for e, _ in results], "free": [f for _, f in results]}))


if __name__ == "__main__":
    main(sys.argv[1:])
