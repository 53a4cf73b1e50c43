"""Bars appended to a :class:`~traintop.tui.line.Line`, shared by the GPU, CPU and memory panels."""

from __future__ import annotations

from collections.abc import Iterable

from traintop.tui.line import Line
from traintop.views.format import bar_cells, level_style, split_bar


def meter(line: Line, pct: float | None, width: int, style: str | None = None) -> Line:
    """Append ``[████▌    ]`` to ``line``: a bracketed bar coloured by load unless ``style``."""
    inner = bar_cells(pct, width)
    filled = inner.rstrip(" ")
    return (
        line.add("[", "dim")
        .add(filled, style or level_style(pct))
        .add(inner[len(filled) :])
        .add("]", "dim")
    )


def stacked_meter(line: Line, segments: Iterable[tuple[float | None, str]], width: int) -> Line:
    """Append a bracketed bar of coloured segments, e.g. htop's user/system/iowait split."""
    pairs = list(segments)
    counts = split_bar((pct for pct, _ in pairs), width)
    line.add("[", "dim")
    for count, (_, style) in zip(counts, pairs, strict=True):
        line.add("|" * count, style)
    return line.add(" " * (width - sum(counts))).add("]", "dim")
