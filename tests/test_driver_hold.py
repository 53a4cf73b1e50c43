"""The terminal driver's start-up hold: the settling paints are dropped, the modes they set
are kept, and everything after the release goes straight out."""

from __future__ import annotations

import asyncio
from unittest import mock

from textual.app import App

from traintop.tui.driver import QuietLinuxDriver


def test_held_paints_drop_their_cells_and_keep_their_modes():
    asyncio.run(_held_paints())


async def _held_paints() -> None:
    driver = QuietLinuxDriver(App())
    out: list[str] = []
    with mock.patch("textual.drivers.linux_driver.LinuxDriver.write", lambda _, d: out.append(d)):
        driver.write("before\x1b[38;5;1mred")
        driver._held = []  # what start_application_mode sets up
        driver.write("\x1b[?2026h\x1b[1;1Hcells\x1b[38;5;2mgreen\x1b]22;default\x07")
        driver.write("\x1b[2;1Hmore cells\x1b[?2026l")
        assert out == ["before\x1b[38;5;1mred"]  # nothing held has gone out yet
        assert driver._release()
        assert out[1] == "\x1b[?2026h\x1b]22;default\x07\x1b[?2026l"
        driver.write("\x1b[1;1Hsettled")
        assert out[2] == "\x1b[1;1Hsettled"
        assert not driver._release()  # a second release (at exit) has nothing to do
