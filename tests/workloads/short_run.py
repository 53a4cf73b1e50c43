"""A short run for the ended-runs test: steps through the probe, then ends one of two ways.

``short_run.py NAME SECONDS``: steps for SECONDS (a 2 ms wait for each batch, 3 ms of work),
then exits normally: its ring reads finished.
``short_run.py NAME SECONDS STALL``: steps for SECONDS, then waits STALL seconds for a batch
that never comes (a data loader that stopped delivering) and is killed: its ring reads gone.
Rank and world size come from RANK / WORLD_SIZE and the job from MASTER_ADDR / MASTER_PORT, as
under torchrun; no torch is imported, so a run costs a Python start and little else.
"""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator

import traintop


def batches(seconds: float, stall_s: float | None) -> Iterator[int]:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        time.sleep(0.002)
        yield 8
    if stall_s is not None:
        time.sleep(stall_s)
        os.kill(os.getpid(), signal.SIGKILL)


def main(name: str, seconds: float, stall_s: float | None) -> None:
    probe = traintop.attach(name=name)
    for _ in probe.loader(batches(seconds, stall_s)):
        probe.mark("forward")
        time.sleep(0.003)
        probe.step(samples=8)


if __name__ == "__main__":
    main(sys.argv[1], float(sys.argv[2]), float(sys.argv[3]) if len(sys.argv) > 3 else None)
