"""The least any Textual app takes to its first frame: one line of text and nothing else.

``bench_monitor.py --first-frames`` times it beside htop and traintop with the same harness, so
the first frame's target can be read against what the UI library alone costs on this machine
(interpreter start, ``import textual.app``, the app's start, one paint).  Exits on its own
after ``--seconds`` (Ctrl+Q sooner).
"""

from __future__ import annotations

import argparse

from textual.app import App, ComposeResult
from textual.widgets import Static


class Floor(App[None]):
    """One static line: no CSS file, no bindings of its own, no timer but the exit."""

    def __init__(self, seconds: float) -> None:
        super().__init__()
        self._seconds = seconds

    def compose(self) -> ComposeResult:
        yield Static("textual floor: the first frame of a one-line Textual app")

    def on_mount(self) -> None:
        self.set_timer(self._seconds, self.exit)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seconds", type=float, default=30.0, help="exit after this long")
    Floor(parser.parse_args().seconds).run()


if __name__ == "__main__":
    main()
