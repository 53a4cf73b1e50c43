"""The loop's own account of itself, the reference a test holds traintop's numbers against.

Each workload times its iterations and phases with ``perf_counter`` and, at exit, writes
``{"iterations", "rate", "starts", "shares", "rank", "first_wall", ...}`` as JSON to the path in
``$LOOP_REPORT`` (with ``.<rank>`` appended for ranks other than 0).  Stdlib only, and no
traintop: the scripts must be what a user would run.
"""

from __future__ import annotations

import json
import os
import time
from collections import defaultdict


class LoopClock:
    """Iteration starts and per-phase seconds, for ``seconds`` of running."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self.starts: list[float] = []
        self.spent: dict[str, float] = defaultdict(float)
        self._mark = 0.0
        self._phase = ""
        self.first_wall = 0.0  # time.time() at the first iteration's start: when it was listed

    def running(self) -> bool:
        """Call at the top of each iteration: False once the time is up."""
        now = time.perf_counter()
        self._close(now)
        if self.starts and now - self.starts[0] >= self.seconds:
            return False
        if not self.starts:
            self.first_wall = time.time()
        self.starts.append(now)
        return True

    def mark(self, phase: str) -> None:
        """``phase`` starts now (the previous one ends)."""
        self._close(time.perf_counter())
        self._phase = phase

    def _close(self, now: float) -> None:
        if self._phase:
            self.spent[self._phase] += now - self._mark
        self._mark, self._phase = now, ""

    def report(self, rank: int = 0, **extra: object) -> None:
        n = len(self.starts)
        span = self.starts[-1] - self.starts[0] if n > 1 else 0.0
        total = sum(self.spent.values()) or 1.0
        path = os.environ.get("LOOP_REPORT")
        if not path:
            return
        if rank:
            path = f"{path}.{rank}"
        data = {"iterations": n, "rate": (n - 1) / span if span else None, "rank": rank,
                "first_wall": self.first_wall,
                "starts": [round(s - self.starts[0], 6) for s in self.starts],
                "shares": {k: v / total for k, v in self.spent.items()}, **extra}  # fmt: skip
        with open(path, "w") as f:
            json.dump(data, f)
