"""When a job that stopped stepping is stalled, and when it is hung (issue 25's thresholds).

A job is stalled when none of its ranks finished a step for max(5 x its median step, 10 s),
hung at max(20 x, 60 s): a job of 2 s steps that pauses 15 s is still nothing, one of 20 ms steps
that pauses 15 s has stopped.  Both are set per monitor with ``TRAINTOP_STALL_AFTER`` and
``TRAINTOP_HANG_AFTER`` ("5x,10s": a factor of the median step, a floor in seconds; either part
alone keeps the other's default).  The collector writes each rank's limits into its snapshot, so
a recording is judged on replay as it was live.  Stacks are asked for from half the stall limit
on (``capture_after``), so they are there when the verdict is.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass

ENV_STALL, ENV_HANG = "TRAINTOP_STALL_AFTER", "TRAINTOP_HANG_AFTER"
CAPTURE_SHARE = 0.5  # stacks are asked for at this share of the stall limit
_PART = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([xs])\s*$")


@dataclass(frozen=True, slots=True)
class Threshold:
    """No step for max(factor x the median step, floor_s) seconds."""

    factor: float
    floor_s: float

    def after_s(self, step_p50_s: float | None) -> float:
        if step_p50_s is None:
            return self.floor_s
        return max(self.floor_s, self.factor * step_p50_s)


STALL = Threshold(5.0, 10.0)
HANG = Threshold(20.0, 60.0)


def parse(text: str, default: Threshold) -> Threshold:
    """ "5x,10s", "10s" or "5x" (the missing part from ``default``); ValueError, with the
    accepted form, for anything else."""
    factor, floor = default.factor, default.floor_s
    for part in text.split(","):
        found = _PART.match(part)
        if found is None or float(found.group(1)) <= 0:
            raise ValueError(f"{text!r}: expected a factor and a floor such as '5x,10s'")
        if found.group(2) == "x":
            factor = float(found.group(1))
        else:
            floor = float(found.group(1))
    return Threshold(factor, floor)


def from_env() -> tuple[Threshold, Threshold]:
    """(stall, hang) from the environment; ValueError naming the variable when one is bad."""
    limits = []
    for name, default in ((ENV_STALL, STALL), (ENV_HANG, HANG)):
        try:
            limits.append(parse(os.environ[name], default) if os.environ.get(name) else default)
        except ValueError as exc:
            raise ValueError(f"{name}={exc}") from None
    return limits[0], limits[1]


def capture_after_s(stall_after_s: float) -> float:
    """From when on a silent rank's stack is asked for."""
    return CAPTURE_SHARE * stall_after_s
