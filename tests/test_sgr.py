"""Terminal output made lighter must draw the same cells: colour deltas and left-cropped updates."""

from __future__ import annotations

import random
import re
from itertools import pairwise

import pytest
from rich.cells import cell_len
from rich.console import Console
from rich.segment import Segment
from rich.style import Style
from textual._compositor import ChopsUpdate, LayoutUpdate
from textual.geometry import Region
from textual.strip import Strip

from traintop.tui import chops
from traintop.views import sgr

_TOKEN = re.compile(
    r"\x1b\[([0-9;]*)m|\x1b\[(\d+);(\d+)H|(\x1b\]8;[^\x1b]*\x1b\\)|(\n)|([^\x1b\n])"
    r"|\x1b\[(\d+;\d+|)(r)|\x1b\[(\d+)([LMXC])"
)
_COLOURS = ["color(246)", "color(253)", "red", "bright_blue", "#ff8800", "default", None]
_CONSOLE = Console(color_system="256", force_terminal=True, width=200)
Cells = dict[tuple[int, int], tuple[str, sgr.Sgr]]


def replay(stream: str, screen: Cells | None = None) -> Cells:
    """Each cell's character and the terminal style it was drawn in (a minimal terminal),
    drawn over ``screen`` when given (each write starts in the reset state)."""
    state, x, y, cells = sgr.parse("0"), 0, 0, dict(screen or {})
    margins = (0, 10**6)
    tokens = _TOKEN.findall(stream)
    for params, row, col, _link, newline, char, region, margin, count, move in tokens:
        if move == "X":  # ECH: the pen erases only blanks that look like erased cells
            cells.update({(y, x + i): (" ", state) for i in range(int(count))})
        elif move == "C":
            x += int(count)
        elif move:
            cells = _move_lines(cells, y, int(count) if move == "L" else -int(count), margins)
        elif margin:  # DECSTBM: the scroll region's rows (none: the whole screen); cursor home
            top, _, bottom = region.partition(";")
            margins = (int(top) - 1, int(bottom) - 1) if region else (0, 10**6)
            y, x = 0, 0
        elif row:
            y, x = int(row) - 1, int(col) - 1
        elif newline:
            y, x = y + 1, 0
        elif char:
            cells[y, x] = (char, state)
            x += cell_len(char)
        elif not _link:
            state = sgr.parse(params, state)
            assert state is not None, params
    return cells


def _move_lines(cells: Cells, y: int, count: int, margins: tuple[int, int]) -> Cells:
    """IL (``count`` > 0 blank lines at row ``y``) or DL (``-count`` lines) inside the scroll
    region ``margins``, as a terminal does: the rest of the region moves, blanks enter."""
    top, bottom = margins
    if not top <= y <= bottom:
        return cells
    moved: Cells = {}
    for (row, col), cell in cells.items():
        if not y <= row <= bottom:
            moved[row, col] = cell
        elif (count < 0 and row >= y - count) or (count > 0 and row + count <= bottom):
            moved[row + count, col] = cell
    return moved


def _final_style(stream: str) -> sgr.Sgr | None:
    state = sgr.parse("0")
    for params in re.findall(r"\x1b\[([0-9;]*)m", stream):
        state = sgr.parse(params, state)
    return state


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


def _random_strip(rng: random.Random, cells: int) -> Strip:
    """Runs of one to four cells, some of them wide characters, some unstyled."""
    runs, left = [], cells
    while left > 0:
        text = rng.choice(["ab", "│", " █", "中", "x", "1234"])[:left]
        if cell_len(text) > left:
            text = "y" * left
        runs.append(Segment(text, None if rng.random() < 0.1 else _random_style(rng)))
        left -= cell_len(text)
    return Strip(runs, cells)


def _random_update(rng: random.Random) -> ChopsUpdate:
    """Six lines of three widgets side by side (cuts at 0, 20, 50, 80), random dirty spans."""
    cuts = [0, 20, 50, 80]
    chops_, spans = [], []
    for y in range(6):
        chops_.append({x: _random_strip(rng, end - x) for x, end in pairwise(cuts)})
        if rng.random() < 0.8:
            x1 = rng.randrange(0, 79)
            spans.append((y, x1, rng.randrange(x1 + 1, 81)))
    spans = spans or [(0, 0, 80)]
    return ChopsUpdate(chops_, spans, [cuts[1:]] * 6)


def _textual_render(update: ChopsUpdate) -> str:
    """What Rich writes for the same spans: every run's full style, its text, a reset."""
    out = []
    for y, x1, x2 in update.spans:
        for end, (x, strip) in zip(update.chop_ends[y], update.chops[y].items(), strict=True):
            if x > x2 or end <= x1:
                continue
            left = max(x, x1)
            out.append(f"\x1b[{y + 1};{left + 1}H")
            out.append(strip.crop(left - x, min(end, x2) - x).render(_CONSOLE))
    return "".join(out)


def test_partial_updates_draw_every_cell_in_the_same_style():
    rng = random.Random(7)
    for _ in range(200):
        update = _random_update(rng)
        ours = chops.render_segments(update, _CONSOLE)
        assert replay(ours) == replay(_textual_render(update))
        assert _final_style(ours) == sgr.parse("0")  # the terminal is left reset, as by Rich


def _blank_tailed_update(rng: random.Random) -> ChopsUpdate:
    """Rows of segments ending in blanks (a padded command column), random styles."""
    rows = []
    for _ in range(6):
        segments = [Segment("x" * rng.randrange(1, 9) + " " * rng.randrange(0, 40),
                            _random_style(rng)) for _ in range(3)]  # fmt: skip
        rows.append({0: Strip(segments)})
    spans = [(y, 0, rows[y][0].cell_length) for y in range(6)]
    return ChopsUpdate(rows, spans, [[row[0].cell_length] for row in rows])


def test_blank_tails_are_erased_where_an_erase_draws_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    rng = random.Random(13)
    for _ in range(100):
        update = _blank_tailed_update(rng)
        written = chops.render_segments(update, _CONSOLE)
        monkeypatch.setattr(chops, "_erase_blanks", True)
        erased = chops.render_segments(update, _CONSOLE)
        monkeypatch.setattr(chops, "_erase_blanks", False)
        assert replay(erased) == replay(written)
        assert len(erased) <= len(written)
    assert chops.erasable("1;38;5;253;48;5;233")
    assert not chops.erasable("7;38;5;253") and not chops.erasable("4")
    assert not chops.erasable("38;5;7;53")  # overline: not parsed, never erased


def test_a_full_repaint_draws_every_cell_in_the_same_style():
    rng = random.Random(11)
    for _ in range(50):
        lines = [[_random_strip(rng, 40), _random_strip(rng, 40)] for _ in range(5)]
        update = LayoutUpdate(lines, Region(0, 2, 80, 5))
        expected = "".join(
            f"\x1b[{y + 3};1H" + "".join(strip.render(_CONSOLE) for strip in line)
            for y, line in enumerate(lines)
        )
        assert replay(chops.render_layout(update, _CONSOLE)) == replay(expected)


def test_a_panel_row_sends_under_half_the_colour_bytes():
    base = Style(bgcolor="color(233)")
    runs = [Segment(f" {i:>4}% ", base + Style(color=f"color({240 + i % 4})")) for i in range(20)]
    strip = Strip(runs)
    row = chops.render_segments(ChopsUpdate([{0: strip}], [(0, 0, 160)], [[160]]), _CONSOLE)
    textual = "\x1b[1;1H" + strip.render(_CONSOLE)
    assert replay(row) == replay(textual)
    colour_bytes = [sum(map(len, re.findall(r"\x1b\[[0-9;]*m", s))) for s in (row, textual)]
    assert colour_bytes[0] < 0.5 * colour_bytes[1]


def test_spans_on_other_lines_carry_the_style_on_instead_of_resetting():
    style = Style(color="color(253)", bgcolor="color(233)")
    strips = [{0: Strip([Segment("0123456789", style)])} for _ in range(3)]
    update = ChopsUpdate(strips, [(0, 2, 3), (1, 5, 6), (2, 7, 8)], [[10]] * 3)
    out = chops.render_segments(update, _CONSOLE)
    assert out == "\x1b[1;3H\x1b[38;5;253;48;5;233m2\x1b[2;6H5\x1b[3;8H7\x1b[0m"


def test_switch_sends_the_difference_or_a_shorter_reset():
    assert sgr.switch("1;38;5;246;48;5;233", "38;5;246;48;5;233") == "\x1b[22m"
    assert sgr.switch("38;5;246;48;5;233", "38;5;71;48;5;233") == "\x1b[38;5;71m"
    assert sgr.switch("1;3;38;5;246;48;5;233", "") == "\x1b[0m"
    assert sgr.switch("38;5;71", "38;5;71") == ""
    assert sgr.switch("38;5;71", "53") == "\x1b[0;53m"  # overline: not parsed here


def test_unknown_codes_and_links_start_from_a_reset():
    link = Style(color="red", link="https://example.com")
    strip = Strip([Segment("ab", Style(color="red")), Segment("cd", link), Segment("ef")])
    out = chops.render_segments(ChopsUpdate([{0: strip}], [(0, 0, 6)], [[6]]), _CONSOLE)
    assert "\x1b]8;id=" in out and out.endswith("ef")
    assert replay(out) == replay("\x1b[1;1H" + strip.render(_CONSOLE))
    over = Strip([Segment("ab", Style(color="red")), Segment("cd", Style(overline=True))])
    out = chops.render_segments(ChopsUpdate([{0: over}], [(0, 0, 4)], [[4]]), _CONSOLE)
    assert "\x1b[0;53mcd" in out


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

    from traintop.tui.widgets.panel import changed_runs

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

    from traintop.tui.widgets.panel import changed_runs

    old = Content("util  93%  mem 68.4/79.6 GiB  64°C  632/700 W  1980 MHz  ▁▂▃▄▅")
    new = Content("util  95%  mem 68.4/79.6 GiB  64°C  632/700 W  1980 MHz  ▂▃▄▅▆")
    assert changed_runs(old, new) == [(7, 8), (57, 62)]
    near = Content("util  95%  mem 68.4/79.6 GiB  65°C  632/700 W  1980 MHz  ▁▂▃▄▅")
    assert changed_runs(old, near) == [(7, 8), (31, 32)]
    assert changed_runs(Content("a1b2c3"), Content("a9b9c9")) == [(1, 6)]


def test_a_bar_whose_fill_moved_marks_only_the_cells_between_its_ends():
    """A utilisation bar drawn as a filled span and an empty span: when the fill grows by two
    cells, only those cells change style (where spans overlap, every cell of a changed span
    is marked, as the order of overlapping spans decides a cell's style)."""
    from textual.content import Content, Span

    from traintop.tui.widgets.panel import changed_runs

    text = "cpu [" + "|" * 40 + "]"
    old = Content(text, [Span(5, 25, "green"), Span(25, 45, "dim")])
    new = Content(text, [Span(5, 27, "green"), Span(27, 45, "dim")])
    assert changed_runs(old, new) == [(25, 27)]
    nested = Content(text, [Span(5, 45, "dim"), Span(5, 27, "green")])
    assert changed_runs(old, nested) == [(5, 45)]


def test_an_uptime_and_a_clock_that_tick_together_are_two_runs():
    """The header's uptime seconds and clock seconds, 18 cells apart: the cells between are
    worth a cursor move, not a resend (they fell in neighbouring compare blocks)."""
    from textual.content import Content

    from traintop.tui.widgets.panel import changed_runs

    old = Content(" traintop  vm  up 04:10:25  every 2s  21:44:15")
    new = Content(" traintop  vm  up 04:10:27  every 2s  21:44:17")
    assert changed_runs(old, new) == [(25, 26), (45, 46)]
