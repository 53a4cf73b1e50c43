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
import selectors
import sys
import threading

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
        chops.install(erase_blanks=erases_in_background())

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
