"""The running totals a format 1.1 writer publishes, read on the monitor side.

At 2,000 steps a second a rank publishes 256 KB of records a second; copying and summing them
was most of what the monitor spent on that rank (0.56 ms a tick).  The writer sums what it
publishes (``traintop/ring_record.py``), so a reader that knows the totals at its cursor needs
only the newest records: the totals of everything in between are a difference of two
cumulative sums.  A slot is trusted only where the writer cannot have been rewriting it while
it was copied (``safe``); anything else makes the caller read every record, as a 1.0 segment
is read.  Pure stdlib.
"""

from __future__ import annotations

import os
from operator import add, sub
from typing import NamedTuple

from traintop import ring_format as ring
from traintop.collectors.ring_columns import Totals
from traintop.collectors.ring_records import RecordBlock

# A slot tagged s is rewritten (tag s + this) only after the head reached s + this - 1.
_REWRITE_AFTER = ring.TOTALS_EVERY * ring.TOTALS_SLOTS


class Cumulative(NamedTuple):
    """The sums of a segment's records [0, at)."""

    at: int
    totals: Totals


class Span(NamedTuple):
    """What one poll accounts for when it returns only the newest records: every new step."""

    steps: int
    totals: Totals
    mem_bytes: int | None  # the newest memory reading up to the last of them, if any


class Slot(NamedTuple):
    """One totals slot as copied: the sums of the records [0, at)."""

    at: int
    totals: Totals
    mem_bytes: int | None  # the newest memory reading among them, if any


def last_slot(head: int) -> int:
    """The newest slot a head read vouches for: written before that head was published."""
    return head - head % ring.TOTALS_EVERY


def read_slot(fd: int, at: int) -> bytes:
    """The raw copy of the slot meant for ``at`` (which may hold another tag, or a torn one)."""
    return os.pread(fd, ring.TOTALS.size, ring.totals_offset(at))


def parsed(raw: bytes, at: int, n_phases: int) -> Slot | None:
    """The slot if both its tags say ``at``; ``safe`` says whether the copy can be trusted."""
    if len(raw) != ring.TOTALS.size:
        return None
    words = ring.TOTALS.unpack(raw)
    if words[0] != at or words[15] != at:
        return None
    return Slot(at, Totals(words[7 : 7 + n_phases], *words[1:5]), words[6] if words[5] else None)


def safe(slot: Slot, h2: int) -> bool:
    """True if the writer cannot have begun rewriting ``slot`` before the head read ``h2``
    (which was read after the copy): it rewrites a slot only after the head reached
    ``at + _REWRITE_AFTER - 1``."""
    return h2 <= slot.at + _REWRITE_AFTER - 2


def anchored(raw: bytes, block: RecordBlock, h1: int, h2: int) -> Cumulative | None:
    """The sums of [0, h1), from the slot ``last_slot(h1)`` (``raw``) and the records after it
    in ``block`` (every record [h1 - len(block), h1)), all copied between the head reads ``h1``
    and ``h2``."""
    at = last_slot(h1)
    slot = parsed(raw, at, block.n_phases) if at >= h1 - len(block) else None
    if slot is None or not safe(slot, h2):
        return None
    tail = block.tail(h1 - at)
    return Cumulative(h1, plus(slot.totals, tail.totals()) if len(tail) else slot.totals)


def plus(a: Totals, b: Totals) -> Totals:
    return Totals(tuple(map(add, a.phase_ns, b.phase_ns)), *map(add, a[1:], b[1:]))


def minus(a: Totals, b: Totals) -> Totals:
    return Totals(tuple(map(sub, a.phase_ns, b.phase_ns)), *map(sub, a[1:], b[1:]))
