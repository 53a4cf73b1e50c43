"""Colour changes as differences: the SGR codes that take the terminal from one style to another.

Rich writes every styled run as its whole style (``ESC[38;5;253;48;5;233m``), the text and a
reset, so on a panel row of twenty runs with one background most of the bytes that cross SSH
are colour codes that change nothing.  The terminal keeps one current style; :func:`switch`
gives only what differs from the style in force to the next one, or nothing.  What the next
style lacks is switched off with ECMA-48's own codes (39/49 default colours, 22-29 attributes
off); where a code is not parsed here, or a reset is shorter, it is a reset and the full style.
Either way the terminal ends in exactly the next style, so the screen is the same cell for
cell (tests/test_sgr.py replays both streams).  Used by the terminal renders in tui/chops.py.
"""

from __future__ import annotations

from typing import NamedTuple

_ATTRS = frozenset(range(1, 10))
_OFF_CODE = {1: 22, 2: 22, 3: 23, 4: 24, 5: 25, 6: 25, 7: 27, 8: 28, 9: 29}
_OFF_ATTRS = {22: {1, 2}, 23: {3}, 24: {4}, 25: {5, 6}, 27: {7}, 28: {8}, 29: {9}}


class Sgr(NamedTuple):
    """A terminal style: on-attributes (1 bold .. 9 strike) and the fg/bg colour codes."""

    attrs: frozenset[int]
    fg: str | None
    bg: str | None


_PLAIN = Sgr(frozenset(), None, None)


def parse(params: str, base: Sgr = _PLAIN) -> Sgr | None:
    """``base`` changed by one SGR parameter list; None for codes outside the plain set."""
    codes = params.split(";") if params else ["0"]
    attrs, fg, bg, i = set(base.attrs), base.fg, base.bg, 0
    while i < len(codes):
        if not codes[i].isdigit():
            return None
        code, width = int(codes[i]), _colour_width(codes, i)
        if code == 0:
            attrs, fg, bg = set(), None, None
        elif code in _ATTRS:
            attrs.add(code)
        elif code in (38, 48) and width:
            colour = ";".join(codes[i : i + width])
            fg, bg = (colour, bg) if code == 38 else (fg, colour)
            i += width - 1
        elif 30 <= code <= 37 or 90 <= code <= 97:
            fg = codes[i]
        elif 40 <= code <= 47 or 100 <= code <= 107:
            bg = codes[i]
        elif code in (39, 49):
            fg, bg = (None, bg) if code == 39 else (fg, None)
        elif code in _OFF_ATTRS:
            attrs -= _OFF_ATTRS[code]
        else:
            return None  # anything else is never rewritten
        i += 1
    return Sgr(frozenset(attrs), fg, bg)


def _colour_width(codes: list[str], i: int) -> int:
    """Parameters taken by an extended colour at ``i`` (38;5;n or 38;2;r;g;b), 0 if none."""
    if codes[i] not in ("38", "48") or i + 1 >= len(codes):
        return 0
    width = {"5": 3, "2": 5}.get(codes[i + 1], 0)
    return width if i + width <= len(codes) else 0


def difference(old: Sgr, new: Sgr) -> str:
    """The SGR parameters that take the terminal from ``old`` to ``new`` (ECMA-48 "off" codes
    for what ``new`` lacks: 22 clears both bold and dim, so a kept one is set again)."""
    offs = sorted({_OFF_CODE[a] for a in old.attrs - new.attrs})
    again = new.attrs & {1, 2} if 22 in offs else frozenset()
    parts = [str(code) for code in offs]
    parts += [str(a) for a in sorted((new.attrs - old.attrs) | again)]
    parts += [
        _colour(c, was, off) for c, was, off in ((new.fg, old.fg, "39"), (new.bg, old.bg, "49"))
    ]
    return ";".join(part for part in parts if part)


def _colour(code: str | None, was: str | None, off: str) -> str:
    if code == was:
        return ""
    return code or off


def switch(old: str, new: str) -> str:
    """The SGR sequence that takes the terminal from style ``old`` to style ``new`` (parameter
    strings as Rich renders them, "" for the reset state): the difference, or a reset and
    ``new`` where that is shorter or a code is not parsed here; "" when nothing changes."""
    before, after = parse(old), parse(new)
    full = f"\x1b[0;{new}m" if new else "\x1b[0m"
    if before is None or after is None:
        return full
    delta = difference(before, after)
    if not delta:
        return ""
    return min(f"\x1b[{delta}m", full, key=len)
