"""Textual's Linux driver with an input thread that sleeps until there is something to read.

The stock input thread polls stdin every 0.1 s, so that it notices when the app stops and can
time out a lone Escape key.  Ten wake-ups a second, each a pass of Python code, were a tenth of
the whole monitor's CPU while nobody typed.  This thread blocks on stdin and on a wake-up pipe
that the stop event writes to, and uses a timeout only while the key parser waits for one (the
moment after an Escape).  Keys, mouse, paste and resize behave as before: the parser and the
event dispatch are Textual's own.  Output goes out lighter too: screen updates cropped to the
changed cells, with colour codes as differences (tui/chops.py).
"""

from __future__ import annotations

import codecs
import contextlib
import os
import re
import selectors
import sys
import threading
import time

from textual._time import get_time
from textual._xterm_parser import XTermParser
from textual.drivers.linux_driver import LinuxDriver

from traintop.tui import chops


class _WakingEvent(threading.Event):
    """The driver's stop event; setting it also wakes the input thread blocked in select()."""

    def __init__(self, wake_fd: int) -> None:
        super().__init__()
        self._wake_fd = wake_fd

    def set(self) -> None:
        super().set()
        with contextlib.suppress(OSError):
            os.write(self._wake_fd, b"\0")


# The start-up paints come tens of milliseconds apart (the first layout, the first samples'
# restyles, the footer's keys once focus settles); the first tick comes an interval later.
STARTUP_QUIET_S = 0.15
STARTUP_HOLD_MAX_S = 0.6
# What a held paint may carry besides cells: terminal modes, OSC strings, keyboard protocol.
_MODES = re.compile(r"\x1b\[\?[0-9;]*[hl]|\x1b\][^\x07]*\x07|\x1b\[[<>=][0-9;]*u")


def erases_in_background(term: str | None = None) -> bool:
    """Whether the terminal erases cells in the current background colour (terminfo's
    ``bce``: xterm, VTE, kitty, the Linux console), so that an erase draws what blanks would.
    tmux does so whatever its own terminfo entry says (and draws on the outer terminal what
    that one supports); GNU screen does not by default."""
    if os.environ.get("TMUX"):
        return True
    try:
        import curses

        curses.setupterm(term or os.environ.get("TERM", "dumb"), sys.stdout.fileno())
        return curses.tigetflag("bce") > 0
    except Exception:  # no curses, no terminfo entry, no terminal: write the blanks
        return False


class QuietLinuxDriver(LinuxDriver):
    """A ``LinuxDriver`` whose input thread costs nothing while no key is pressed."""

    @staticmethod
    def suits() -> bool:
        """Where Textual itself would pick ``LinuxDriver``: a POSIX terminal, no driver
        chosen through ``TEXTUAL_DRIVER`` (textual-serve, devtools)."""
        return os.name == "posix" and not os.environ.get("TEXTUAL_DRIVER")

    def __init__(self, *args, **kwargs) -> None:
        super().__init__(*args, **kwargs)
        self._wake_read, wake_write = os.pipe()
        os.set_blocking(self._wake_read, False)
        os.set_blocking(wake_write, False)  # a full pipe already wakes the thread
        self.exit_event = _WakingEvent(wake_write)
        self._hold_lock = threading.Lock()
        self._held: list[str] | None = None  # start-up paints held back (see below)
        self._last_held = 0.0
        chops.install(erase_blanks=erases_in_background())

    def write(self, data: str) -> None:
        """What goes to the terminal, unless the start-up paints are being held back."""
        with self._hold_lock:
            if self._held is not None:
                self._held.append(data)
                self._last_held = time.monotonic()
                return
        super().write(data)

    def start_application_mode(self) -> None:
        """Enter the alternate screen, then hold the start-up paints until they settle.

        Textual paints the screen five or six times in its first half second (a layout, a
        relayout once the panels know their heights, restyles, the footer recomposing as focus
        settles): 100 KiB over SSH, where one full screen is 20 KiB.  The paints are held
        until the output is quiet for ``STARTUP_QUIET_S`` (at most ``STARTUP_HOLD_MAX_S``),
        dropped, and the settled screen is painted once.
        """
        super().start_application_mode()
        with self._hold_lock:
            self._held = []
            self._last_held = started = time.monotonic()
        threading.Thread(target=self._release_when_quiet, args=(started,), daemon=True).start()

    def stop_application_mode(self) -> None:
        self._release()
        super().stop_application_mode()

    def _release_when_quiet(self, started: float) -> None:
        """Sleep until the moment the paints have been quiet long enough (or the hold is at
        its longest), not in steps: a step's slack was up to a third of the quiet time added
        to the first frame."""
        while self._held is not None:
            due = min(self._last_held + STARTUP_QUIET_S, started + STARTUP_HOLD_MAX_S)
            wait = due - time.monotonic()
            if wait <= 0:
                if self._release():
                    with contextlib.suppress(RuntimeError):  # the app stopped meanwhile
                        self._app.call_from_thread(self._app.screen.refresh)
                return
            time.sleep(wait + 0.001)

    def _release(self) -> bool:
        """Stop holding; pass on the modes the held paints set, drop their cells."""
        with self._hold_lock:
            held, self._held = self._held, None
        if held:
            super().write("".join(_MODES.findall("".join(held))))
        return held is not None

    def run_input_thread(self) -> None:
        """Read stdin and dispatch events until the stop event is set."""
        parser = XTermParser(self._debug)
        decode = codecs.getincrementaldecoder("utf-8")().decode
        with selectors.DefaultSelector() as selector:
            selector.register(self.fileno, selectors.EVENT_READ)
            selector.register(self._wake_read, selectors.EVENT_READ)
            while not self.exit_event.is_set():
                ready = [key.fd for key, _ in selector.select(_parser_timeout(parser))]
                if self.fileno in ready and not self._feed(parser, decode):
                    selector.unregister(self.fileno)  # end of input: wait for the stop event
                if self._wake_read in ready:
                    self._drain_wake_pipe()
                self._dispatch(parser.tick())

    def _feed(self, parser: XTermParser, decode) -> bool:
        """Parse what stdin holds and dispatch its events; False at the end of input."""
        data = os.read(self.fileno, 4096)
        text = decode(data, final=not data)
        if text:  # empty also while half of a multi-byte character has arrived
            self._dispatch(parser.feed(text))
        return bool(data)

    def _dispatch(self, events) -> None:
        for event in events:
            self.process_message(event)

    def _drain_wake_pipe(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while os.read(self._wake_read, 64):
                pass


def _parser_timeout(parser: XTermParser) -> float | None:
    """Seconds until the parser's pending timeout (a lone Escape), or None to wait for input."""
    deadline = parser._timeout_time  # set by Parser.feed and read by Parser.tick
    return None if deadline is None else max(0.0, deadline - get_time())
