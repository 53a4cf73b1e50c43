"""Rows that moved within a list on screen, as the terminal's own line deletes and inserts.

A process that climbs the table from row 20 to row 5 pushes the fifteen rows between down by
one: redrawn, each is a whole row of text (its pid, figures and command), about 140 bytes, and
on a box where a few near-idle processes wake each tick that was most of what the monitor sent.
A terminal moves lines itself: delete row 20, insert a blank at row 5, inside a scroll region
around the list, about 20 bytes, and only the climbed row is drawn.  Pure, so the plan is tested
without a terminal; ``tui/chops.py`` writes it.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence
from dataclasses import dataclass
from difflib import SequenceMatcher


@dataclass(frozen=True, slots=True)
class Moves:
    """How the rows on screen become the new rows.

    ``ops``: ``(row, count)`` applied in order, rows counted from the top of the moving block:
    a negative count deletes that many rows there (those below move up, blanks enter at the
    bottom), a positive one inserts that many blank rows (those below move down, the bottom
    ones leave).  ``source``: for each new row, the old row now drawn there (``None``: a blank
    row to draw).
    """

    ops: tuple[tuple[int, int], ...]
    source: tuple[int | None, ...]


def plan_moves(old: Sequence[Hashable], new: Sequence[Hashable]) -> Moves | None:
    """The deletes and inserts that bring rows keyed ``old`` to ``new`` (same length), or
    ``None`` where no row moves (drawing the changed rows in place is then all there is)."""
    if len(old) != len(new):
        return None
    deletes, inserts, source = _blocks(old, new)
    if not deletes or all(s is None or s == j for j, s in enumerate(source)):
        return None
    ops = [(i, -n) for i, n in reversed(deletes)] + inserts
    return Moves(tuple(ops), tuple(source))


def _blocks(
    old: Sequence[Hashable], new: Sequence[Hashable]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]], list[int | None]]:
    """Old rows to delete and new rows to insert, as ``(first row, count)`` blocks, and the
    old row each new row comes from.  A block replaced by as many rows stays in place (its
    rows are redrawn where they are, as without moves); a longer or shorter one keeps as many
    rows in place as both have."""
    deletes: list[tuple[int, int]] = []
    inserts: list[tuple[int, int]] = []
    source: list[int | None] = [None] * len(new)
    matcher = SequenceMatcher(None, list(old), list(new), autojunk=False)
    for _tag, i1, i2, j1, j2 in matcher.get_opcodes():
        kept = min(i2 - i1, j2 - j1)
        for k in range(kept):
            source[j1 + k] = i1 + k
        if i2 - i1 > kept:
            deletes.append((i1 + kept, i2 - i1 - kept))
        if j2 - j1 > kept:
            inserts.append((j1 + kept, j2 - j1 - kept))
    return deletes, inserts, source
