"""Argument types shared by every subcommand's parser.

One definition each, so that ``traintop -i``, ``record -i``, ``exporter -i`` and ``fleet`` read
and reject a number of seconds with the same one-line message.
"""

from __future__ import annotations

import argparse
import math

MIN_INTERVAL_S = 0.1
MAX_INTERVAL_S = 60.0


def seconds(text: str) -> float:
    """A positive, finite number of seconds (durations, timeouts, staleness)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {text!r}") from None
    if not (value > 0 and math.isfinite(value)):
        raise argparse.ArgumentTypeError(f"seconds must be a positive number, got {text}")
    return value


def interval(text: str) -> float:
    """Seconds between samples, 0.1 to 60 (the range check also rejects NaN and infinities)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"interval must be a number of seconds, got {text!r}"
        ) from None
    if not MIN_INTERVAL_S <= value <= MAX_INTERVAL_S:
        raise argparse.ArgumentTypeError(f"interval must be between 0.1 and 60 seconds, got {text}")
    return value
