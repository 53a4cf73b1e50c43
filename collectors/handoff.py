"""The trainer's handoff of each worker's batch over the job's window, from the probe's three
running words (traintop/handoff.py): their difference between the oldest poll the window keeps
and the newest, per batch.  None where the window saw no batch handed off: no workers, a
pin-memory thread taking them in, or a writer that keeps no such words."""

from __future__ import annotations

from collections import deque

from traintop.collectors.rates import measured
from traintop.collectors.ring_reader import HotBlock

_NS = 1e9


class Handoffs:
    """The words as each poll read them, for ``window_s`` seconds."""

    def __init__(self, window_s: float) -> None:
        self.window_s = window_s
        self._seen: deque[tuple[float, int, int, int]] = deque()  # (when, ns, batches, CPU ns)

    def add(self, now: float, hot: HotBlock | None) -> None:
        """The words at ``now``; readings older than the window go (one is kept before it: the
        difference spans the window).  Words that went back belong to a new writer: start over."""
        if hot is None:
            return
        seen = self._seen
        if seen and hot.handoffs < seen[-1][2]:
            seen.clear()
        seen.append((now, hot.handoff_ns, hot.handoffs, hot.handoff_cpu_ns))
        while len(seen) > 2 and seen[1][0] <= now - self.window_s:
            seen.popleft()

    def per_batch(self) -> dict[str, float | None]:
        """Seconds a batch took the trainer to take over, and of them its CPU's, over the
        window (``JobSnapshot.handoff_s``, ``handoff_cpu_s``; None: none counted)."""
        if len(self._seen) < 2:
            return {"handoff_s": None, "handoff_cpu_s": None}
        (_, ns0, n0, cpu0), (_, ns1, n1, cpu1) = self._seen[0], self._seen[-1]
        if n1 <= n0:
            return {"handoff_s": None, "handoff_cpu_s": None}
        count = (n1 - n0) * _NS
        return {"handoff_s": measured((ns1 - ns0) / count),
                "handoff_cpu_s": measured((cpu1 - cpu0) / count)}  # fmt: skip
