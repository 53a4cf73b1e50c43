"""What every command shares about the terminal it runs in and the package it runs from."""

from __future__ import annotations

import contextlib
import signal
import sys
from collections.abc import Iterator


class NoTerminal(Exception):
    """Standard input or output is not a terminal (a pipe, a file, cron, `ssh -T`)."""


def require_terminal() -> None:
    """The live monitor draws full-screen and reads keys: without a terminal it cannot."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise NoTerminal(
            "the live monitor needs a terminal; for one sample use `traintop snapshot --json`"
        )


@contextlib.contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Let SIGTERM (`kill`, systemd, a job scheduler) take the Ctrl+C path.

    Its default action kills Python mid-frame: the terminal stays in the alternate screen and
    raw mode, and a demo job outlives the monitor.  As a KeyboardInterrupt, Textual restores
    the terminal, our `finally` stops the sampler and the job, and `main` exits 0.
    """
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def package_version() -> str:
    """The installed distribution's version; a source tree that was never installed has none.

    ``importlib.metadata`` is imported here: it scans the installed distributions, which the
    monitor's first frame should not wait for (``--version`` and the exporter ask)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("traintop")
    except PackageNotFoundError:
        return "0+unknown"
