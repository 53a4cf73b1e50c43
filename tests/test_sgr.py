"""Terminal output made lighter must draw the same cells: colour deltas and left-cropped updates."""

from __future__ import annotations

import random
import re

from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual._compositor import ChopsUpdate
from textual.strip import Strip

from tui import chops, sgr

_TOKEN = re.compile(r"\x1b\[([0-9;]*)m|\x1b\[(\d+);(\d+)H|(\n)|([^\x1b\n])")
_COLOURS = ["color(246)", "color(253)", "red", "bright_blue", "#ff8800", "default", None]


def replay(stream: str) -> dict[tuple[int, int], tuple[str, sgr.Sgr]]:
    """Each cell's character and the terminal style it was drawn in (a minimal terminal)."""
    state, x, y, cells = sgr.parse("0"), 0, 0, {}
    for params, row, col, newline, char in _TOKEN.findall(stream):
        if row:
            y, x = int(row) - 1, int(col) - 1
        elif newline:
            y, x = y + 1, 0
        elif char:
            cells[y, x] = (char, state)
            x += 1
        else:
            state = sgr.parse(params, state)
            assert state is not None, params
    return cells


def _random_style(rng: random.Random) -> Style:
    return Style(
        color=rng.choice(_COLOURS),
        bgcolor=rng.choice(_COLOURS[:-1] + ["color(233)"] * 4),
        bold=rng.random() < 0.3,
        dim=rng.random() < 0.2,
        italic=rng.random() < 0.1,
        underline=rng.random() < 0.1,
        reverse=rng.random() < 0.05,
    )


def _frame(rng: random.Random) -> str:
    """What Rich writes for a few lines of styled runs, with cursor moves, as Textual does."""
    console = Console(color_system="256", force_terminal=True, width=200)
    parts = []
    for y in range(6):
        parts.append(f"\x1b[{y + 1};{rng.randint(1, 5)}H")
        runs = [Segment(rng.choice("ab│ █"), _random_style(rng)) for _ in range(30)]
        parts.append(Strip(runs).render(console))
    return "".join(parts)


def test_compacted_output_draws_every_cell_in_the_same_style():
    rng = random.Random(7)
    for _ in range(200):
        frame = _frame(rng)
        assert replay(sgr.compact(frame)) == replay(frame)


def test_compacting_a_panel_row_about_halves_its_colour_bytes():
    console = Console(color_system="256", force_terminal=True, width=200)
    base = Style(bgcolor="color(233)")
    runs = [Segment(f" {i:>4}% ", base + Style(color=f"color({240 + i % 4})")) for i in range(20)]
    row = Strip(runs).render(console)
    compact = sgr.compact(row)
    assert replay(compact) == replay(row)
    colour_bytes = [sum(map(len, re.findall(r"\x1b\[[0-9;]*m", s))) for s in (compact, row)]
    assert colour_bytes[0] < 0.55 * colour_bytes[1]


def test_unknown_codes_are_left_alone():
    stream = "\x1b[0m\x1b[38;5;1mA\x1b[0m\x1b[58;5;3mB\x1b[0m\x1b[38;5;1mC"
    assert sgr.compact(stream) == stream


def test_a_partial_update_starts_at_the_first_dirty_cell():
    console = Console(color_system="256", force_terminal=True, width=40)
    strip = Strip([Segment("│", Style(color="red")), Segment("0123456789abcdef", Style(bold=True))])
    update = ChopsUpdate([{0: strip}], [(0, 6, 9)], [[17]])
    out = chops.render_segments(update, console)
    assert out.startswith("\x1b[1;7H") and "│" not in out
    assert [c for c, _ in replay(out).values()] == list("567")
    assert replay(out)[0, 6][1].attrs == {1}


def test_a_panel_line_marks_only_its_changed_cells_dirty():
    from textual.content import Content, Span

    from tui.widgets.panel import changed_runs

    old = Content("GPU 3  62°C  631/700 W")
    assert changed_runs(old, Content("GPU 3  63°C  631/700 W")) == [(8, 9)]
    assert changed_runs(old, Content("GPU 3  62°C")) == [(11, 22)]  # the old tail is cleared
    restyled = Content("GPU 3  62°C  631/700 W", [Span(7, 11, "red")])
    assert changed_runs(old, restyled) == [(7, 11)]
    assert changed_runs(old, old) == [(44, 45)]  # same text: past the end, nothing sent


def test_changes_far_apart_on_one_line_are_sent_as_separate_runs():
    """A GPU row whose utilisation and sparkline changed must not resend the memory, clock
    and power columns between them; changes a few cells apart stay one run."""
    from textual.content import Content

    from tui.widgets.panel import changed_runs

    old = Content("util  93%  mem 68.4/79.6 GiB  64°C  632/700 W  1980 MHz  ▁▂▃▄▅")
    new = Content("util  95%  mem 68.4/79.6 GiB  64°C  632/700 W  1980 MHz  ▂▃▄▅▆")
    assert changed_runs(old, new) == [(7, 8), (57, 62)]
    near = Content("util  95%  mem 68.4/79.6 GiB  65°C  632/700 W  1980 MHz  ▁▂▃▄▅")
    assert changed_runs(old, near) == [(7, 8), (31, 32)]
    assert changed_runs(Content("a1b2c3"), Content("a9b9c9")) == [(1, 6)]
