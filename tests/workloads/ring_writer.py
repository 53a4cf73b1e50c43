"""A writer process for the lifecycle tests: steps until a signal stops it.

``ring_writer.py probe NAME``: a training-like loop through ``traintop.attach()`` (1 ms steps).
``ring_writer.py raw CAPACITY``: ``RingWriter.record`` flat out with deterministic content
(tests.ring_helpers.fields), so a reader can prove no record it returns is torn.
``ring_writer.py count N``: N deterministic records flat out, then a normal exit.
Each mode prints the segment path as soon as it exists.
"""

from __future__ import annotations

import sys
import time

import traintop
from tests import ring_helpers


def probe_loop(name: str) -> None:
    probe = traintop.attach(name=name)
    forward = probe.phase("forward")
    probe.step(samples=1)
    print(probe._writer.path, flush=True)
    while True:
        with forward:
            time.sleep(0.001)
        probe.step(samples=1)


def raw_loop(capacity: int, count: int | None) -> None:
    writer = ring_helpers.make_segment(None, capacity=capacity)
    print(writer.path, flush=True)
    i = 0
    while count is None or i < count:
        ring_helpers.write(writer, i)
        i += 1


if __name__ == "__main__":
    mode, arg = sys.argv[1], sys.argv[2]
    if mode == "probe":
        probe_loop(arg)
    else:
        raw_loop(int(arg) if mode == "raw" else 4096, int(arg) if mode == "count" else None)
