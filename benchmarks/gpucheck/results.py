"""What a check answers (pass, fail or skip, one reason, its figures) and how one is run.

A check never stops the others: whatever it raises becomes its own failure, with the traceback
in its figures, and the run goes on.  Each check states its reason in one line, because the
summary is read by someone who did not write the check, on the one day a card is at hand.
"""

from __future__ import annotations

import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

PASS, FAIL, SKIP = "pass", "fail", "skip"
STARTED = time.monotonic()  # the log's clock: when each answer came, from the start


@dataclass(frozen=True, slots=True)
class Result:
    """What a check body returns: its status, why, and the figures behind it."""

    status: str
    reason: str
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Check:
    """A finished check as the report lists it."""

    id: str
    title: str
    status: str
    reason: str
    seconds: float
    data: dict[str, Any]


def passed(reason: str, **data: Any) -> Result:
    return Result(PASS, reason, data)


def failed(reason: str, **data: Any) -> Result:
    return Result(FAIL, reason, data)


def skipped(reason: str, **data: Any) -> Result:
    return Result(SKIP, reason, data)


def judged(good: bool, reason: str, **data: Any) -> Result:
    """Pass when ``good``, else fail, with the same reason and figures either way."""
    return Result(PASS if good else FAIL, reason, data)


def run(check_id: str, title: str, body: Callable[..., Result], *args: Any) -> Check:
    """Run one check body; an exception fails this check only."""
    started = time.monotonic()
    try:
        result = body(*args)
    except Exception as exc:  # one broken check must not cost the others their answer
        result = failed(f"error: {type(exc).__name__}: {exc}", traceback=traceback.format_exc())
    seconds = round(time.monotonic() - started, 2)
    at = time.monotonic() - STARTED
    print(f"gpu_check {at:5.0f} s: {result.status:4} {check_id}: {result.reason}", flush=True)
    return Check(check_id, title, result.status, result.reason, seconds, result.data)


def skip_all(checks: list[tuple[str, str]], reason: str) -> list[Check]:
    """Checks that cannot run at all (no CUDA, no time left), each listed with the reason."""
    return [run(check_id, title, lambda: skipped(reason)) for check_id, title in checks]
