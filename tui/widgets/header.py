"""The top line: host, uptime, refresh interval, wall clock and the PAUSED flag.

The clock is injected so snapshot tests can freeze it; everything else comes from the latest
snapshot, so the header shows what the sampler saw, not what the UI assumes.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from textual.content import Content

from traintop.collectors.snapshot import Snapshot
from traintop.tui.widgets.panel import LineWidget
from traintop.views.format import fmt_duration, fmt_interval


class HeaderBar(LineWidget):
    """One line; repaints only when its text changes."""

    def __init__(self, clock: Callable[[], float], hostname: str | None, *, id: str) -> None:
        super().__init__(id=id)
        self._clock = clock
        self._hostname = hostname
        self._lines = [Content("traintop")]

    def show(
        self,
        snapshot: Snapshot | None,
        interval_s: float,
        paused: bool,
        recording: tuple[str, bool] | None = None,
    ) -> None:
        content = header_text(
            snapshot, self._hostname, interval_s, self._clock(), paused, recording
        )
        self.set_lines([content])


def header_text(
    snapshot: Snapshot | None,
    hostname: str | None,
    interval_s: float,
    now: float,
    paused: bool,
    recording: tuple[str, bool] | None = None,
) -> Content:
    """``recording`` is (what to say, failed): "REC file.ttrec" or why it stopped."""
    host = hostname or (snapshot.host.hostname if snapshot else "…")
    uptime = fmt_duration(snapshot.host.uptime_s) if snapshot else "…"
    return Content.assemble(
        ("traintop", "bold $accent"),
        "  ",
        (host, "bold"),
        ("  up ", "dim"),
        uptime,
        ("  every ", "dim"),
        fmt_interval(interval_s),
        "  ",
        time.strftime("%H:%M:%S", time.localtime(now)),
        ("  PAUSED (p to resume)", "bold reverse $warning") if paused else "",
        _recording(recording),
    )


def _recording(recording: tuple[str, bool] | None) -> Content | str:
    if recording is None:
        return ""
    text, failed = recording
    style = "bold $error" if failed else "bold $error-lighten-1"
    return Content.assemble("  ", (f"{'!' if failed else '●'} {text}", style))
