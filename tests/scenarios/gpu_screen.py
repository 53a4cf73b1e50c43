"""Read the monitor's verdict off a real terminal: the banner over time, panel border colours.

The banner is lines 2-3 of the screen (under the header).  Border colours come from
``tmux capture-pane -e``: the SGR foreground in force where a panel's top-left corner is drawn.
"""

from __future__ import annotations

import re
import subprocess
import time
from dataclasses import dataclass, field

from tests.tmux import TmuxSession

SGR = re.compile(r"\x1b\[([0-9;]*)m")
POLL_S = 0.2
BANNER_LINES = slice(1, 3)
EVIDENCE_PANEL = "1 GPU"  # every GPU case quotes a GPU fact
OTHER_PANEL = "2 CPU"  # ... and none quotes the CPU panel


@dataclass
class BannerWatch:
    """What the banner showed: when the label first appeared (seconds after the job started)
    and every distinct banner head (marker + label) seen from then on."""

    label: str
    first_s: float = float("inf")
    heads: list[str] = field(default_factory=list)
    banner: str = ""

    @property
    def steady(self) -> bool:
        return bool(self.heads) and all(self.label in head for head in self.heads)

    def describe(self) -> str:
        return (
            f"label {self.label!r} first at {self.first_s:.1f} s, heads {self.heads}\n{self.banner}"
        )


def banner(screen: str) -> str:
    return "\n".join(screen.splitlines()[BANNER_LINES])


def _head(text: str) -> str:
    """The marker and label: everything before the first evidence dash."""
    return text.splitlines()[0].split(" — ")[0] if text else ""


def watch_banner(
    session: TmuxSession, label: str, job_started: float, hold_s: float
) -> BannerWatch:
    """Poll until ``label`` shows (at most 60 s), then keep polling ``hold_s`` seconds."""
    seen = BannerWatch(label)
    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        text = banner(session.screen())
        if label in text:
            seen.first_s = time.monotonic() - job_started
            seen.banner = text
            break
        time.sleep(POLL_S)
    else:
        seen.banner = text
        return seen
    hold_until = time.monotonic() + hold_s
    while time.monotonic() < hold_until:
        head = _head(banner(session.screen()))
        if not seen.heads or seen.heads[-1] != head:
            seen.heads.append(head)
        time.sleep(POLL_S)
    return seen


def capture_escaped(session: TmuxSession) -> str:
    """The visible pane with its escape sequences (colours) kept."""
    argv = [session.tmux, "-L", session.socket, "capture-pane", "-e", "-p", "-t", session.name]
    return subprocess.run(argv, capture_output=True, text=True, timeout=20, check=True).stdout


def _colour_cells(line: str) -> list[tuple[str, str]]:
    """Each printed character of ``line`` with the SGR foreground in force for it."""
    cells, fg, pos = [], "default", 0
    for match in SGR.finditer(line):
        cells += [(ch, fg) for ch in line[pos : match.start()]]
        fg = _next_fg(fg, match.group(1))
        pos = match.end()
    return cells + [(ch, fg) for ch in line[pos:]]


def _next_fg(fg: str, params: str) -> str:
    """Apply one SGR parameter list to the foreground: reset, 16-colour, 256 or true colour."""
    codes = params.split(";") if params else ["0"]
    i = 0
    while i < len(codes):
        code = codes[i]
        if code in ("0", "39"):
            fg = "default"
        elif code.isdigit() and (30 <= int(code) <= 37 or 90 <= int(code) <= 97):
            fg = code
        elif code == "38":
            width = 3 if codes[i + 1 : i + 2] == ["5"] else 5
            fg, i = ";".join(codes[i : i + width]), i + width - 1
        i += 1
    return fg


def border_colour(escaped: str, title: str) -> str | None:
    """Foreground of the top-left corner of the panel titled ``title``; None if not shown."""
    for line in escaped.splitlines():
        cells = _colour_cells(line)
        text = "".join(ch for ch, _ in cells)
        at = text.find(f" {title} ")
        corner = text.rfind("╭", 0, at) if at >= 0 else -1
        if corner >= 0:
            return cells[corner][1]
    return None


@dataclass(frozen=True)
class BorderColours:
    evidence: str | None
    other: str | None


def border_colours(session: TmuxSession) -> BorderColours:
    """The evidence panel's border colour next to a panel the verdict does not quote."""
    escaped = capture_escaped(session)
    return BorderColours(
        border_colour(escaped, EVIDENCE_PANEL), border_colour(escaped, OTHER_PANEL)
    )
