"""The child of ``bench_first_frame.py --callgrind``: one tool's start counted in instructions.

Runs under callgrind (instrumented from the interpreter's start) in the parent's pty: the
monitor (``traintop``, its first tick a minute away) or the one-line Textual app (``textual``).
Every write to the terminal ends a callgrind dump named after it, so the parent adds the dumps
up to the last write of the first frame: the instructions its first frame cost, the same on a
loaded box as on an idle one.  It exits once nothing was written for ``QUIET_S`` (callgrind
runs about fifty times slower than the tool alone).
"""

from __future__ import annotations

import ctypes
import os
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from instr_count import _library

QUIET_S = 20.0


def main() -> None:
    lib = ctypes.CDLL(str(_library()))
    import textual.drivers.linux_driver as linux_driver

    write, last = linux_driver.LinuxDriver.write, [time.monotonic(), 0]

    def counted(driver: linux_driver.LinuxDriver, data: str) -> None:
        write(driver, data)
        last[:] = [time.monotonic(), last[1] + 1]
        lib.cg_dump(f"write {last[1]:04d} {len(data)}".encode())  # the count since the last

    linux_driver.LinuxDriver.write = counted  # pyright: ignore[reportAttributeAccessIssue]
    threading.Thread(target=_exit_when_quiet, args=(last,), daemon=True).start()
    if sys.argv[1] == "textual":
        from textual_floor import Floor

        Floor(600).run()
    else:
        from traintop.cli.main import main as traintop

        traintop(["--interval", "60"])


def _exit_when_quiet(last: list) -> None:
    while not last[1] or time.monotonic() - last[0] < QUIET_S:
        time.sleep(0.5)
    os._exit(0)


if __name__ == "__main__":
    main()
