"""Bar and sparkline pieces as styled Content, shared by the GPU, CPU and memory panels."""

from __future__ import annotations

from collections.abc import Iterable

from textual.content import Content

from tui.format import bar_cells, level_style, split_bar


def meter(pct: float | None, width: int, style: str | None = None) -> Content:
    """``[████▌    ]``: a bracketed bar coloured by load unless ``style`` is given."""
    inner = bar_cells(pct, width)
    filled = inner.rstrip(" ")
    return Content.assemble(
        ("[", "dim"),
        (filled, style or level_style(pct)),
        inner[len(filled) :],
        ("]", "dim"),
    )


def stacked_meter(segments: Iterable[tuple[float | None, str]], width: int) -> Content:
    """A bracketed bar of coloured segments, e.g. htop's user/system/iowait split."""
    pairs = list(segments)
    counts = split_bar((pct for pct, _ in pairs), width)
    parts: list[tuple[str, str]] = [("[", "dim")]
    parts += [("|" * count, style) for count, (_, style) in zip(counts, pairs, strict=True)]
    parts += [(" " * (width - sum(counts)), ""), ("]", "dim")]
    return Content.assemble(*parts)
