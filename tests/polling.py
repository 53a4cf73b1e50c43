"""Waiting in tests for something another process does, with a deadline."""

from __future__ import annotations

import time
from collections.abc import Callable


def eventually(check: Callable[[], bool], timeout_s: float = 5.0, every_s: float = 0.05) -> bool:
    """Whether ``check`` comes true within ``timeout_s`` (asked every ``every_s``)."""
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() >= deadline:
            return False
        time.sleep(every_s)
    return True
