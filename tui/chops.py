"""Textual's partial screen update, cropped on the left too: only changed cells cross the wire.

A panel marks just the changed cells of a line dirty (tui/widgets/panel.py), and Textual's
compositor turns that into per-line spans ``(y, x1, x2)``.  But ``ChopsUpdate.render_segments``
(Textual 8) crops each widget's strip only at ``x2``: it always starts at the widget's left edge,
so a GPU row whose temperature changed was resent from its border onwards.  This version crops
at ``x1`` as well, with ``Strip.crop``, and moves the cursor there; cells outside the span were
not dirty, so the screen is the same.  Installed by the terminal driver (tui/driver.py) only,
so Pilot tests and SVG screenshots, which do not write to a terminal, run Textual unchanged.
"""

from __future__ import annotations

from rich.console import Console
from textual._compositor import ChopsUpdate


def render_segments(self: ChopsUpdate, console: Console) -> str:
    """Raw terminal data for the update: each span's cells, from ``x1`` to ``x2`` only."""
    sequences: list[str] = []
    last_y = self.spans[-1][0]
    for y, x1, x2 in self.spans:
        for end, (x, strip) in zip(self.chop_ends[y], self.chops[y].items(), strict=False):
            if strip is None or x > x2 or end <= x1:
                continue
            left = max(x, x1)
            sequences.append(_move_to(left, y))
            sequences.append(strip.crop(left - x, min(end, x2) - x).render(console))
        if y != last_y:
            sequences.append("\n")
    return "".join(sequences)


def _move_to(x: int, y: int) -> str:
    return f"\x1b[{y + 1};{x + 1}H"


def install() -> None:
    """Use the left-cropping render for every partial update from now on."""
    ChopsUpdate.render_segments = render_segments
