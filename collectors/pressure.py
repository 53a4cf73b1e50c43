"""Pressure stall information (PSI): the share of time tasks stalled waiting for CPU, memory or I/O.

Utilization says how busy a resource is; PSI says what the wait for it costs the work that
wants it (Documentation/accounting/psi.rst).  Each file holds two lines::

    some avg10=1.53 avg60=0.87 avg300=0.30 total=127329
    full avg10=0.00 avg60=0.00 avg300=0.00 total=0

``some`` is the share of wall time in which at least one runnable task stalled on the resource,
``full`` the share in which every non-idle task did (no progress at all: what oomd and systemd's
``ManagedOOM`` act on).  ``total`` counts stalled microseconds, so two readings give the exact
share over the interval between them, where the ``avg`` figures trail over 10 s to 5 min.

The host's files are ``/proc/pressure/{cpu,memory,io}`` (Linux 4.20, ``CONFIG_PSI``); a cgroup v2
group has its own ``cpu.pressure``, ``memory.pressure`` and ``io.pressure``.  Where the kernel
has no PSI (no such file, or ``psi=0`` on its command line: the read fails with EOPNOTSUPP)
the reading is ``None`` and the file is never asked again: no error, nothing shown.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass

from traintop.collectors import procfs
from traintop.collectors.memory_state import Pressure, PressureSet
from traintop.collectors.rates import measured

PROC_PRESSURE = "/proc/pressure"
RESOURCES = ("cpu", "memory", "io")
MIN_DT_S = 0.5  # a file read again sooner (by the next rank of one group) repeats its answer
_US = 1e-6


@dataclass(frozen=True, slots=True)
class Totals:
    """One reading's cumulative stalled microseconds and ``some``'s avg10."""

    some_us: int
    full_us: int | None
    some_avg10: float | None


def parse(text: bytes | str) -> Totals | None:
    """A pressure file's totals; None for a text that is not one."""
    raw = text.decode() if isinstance(text, bytes) else text
    found: dict[str, dict[str, str]] = {}
    for line in raw.splitlines():
        kind, _, rest = line.partition(" ")
        found[kind] = dict(word.split("=", 1) for word in rest.split() if "=" in word)
    try:
        some = found["some"]
        full = found.get("full")
        return Totals(int(some["total"]), int(full["total"]) if full else None,
                      float(some["avg10"]) if "avg10" in some else None)  # fmt: skip
    except (KeyError, ValueError):
        return None


def shares(before: Totals | None, after: Totals | None, dt: float) -> Pressure | None:
    """The stall shares between two readings ``dt`` seconds apart (None on a first reading or a
    counter that went back: the group was recreated)."""
    if after is None:
        return None
    if before is None or dt <= 0 or after.some_us < before.some_us:
        return Pressure(None, None, after.some_avg10)
    some = _share(after.some_us - before.some_us, dt)
    full = None
    if after.full_us is not None and before.full_us is not None and after.full_us >= before.full_us:
        full = _share(after.full_us - before.full_us, dt)
    return Pressure(some, full, after.some_avg10)


def _share(stalled_us: int, dt: float) -> float:
    return measured(min(1.0, stalled_us * _US / dt))


class PressureFile:
    """One pressure file kept open and read in place; after a failure it is asked no more."""

    def __init__(self, path: str) -> None:
        self._file: procfs.KeptFile | None = procfs.KeptFile(path, size=256)
        self._last: tuple[float, Totals] | None = None
        self._answer: Pressure | None = None
        self.read_at = -1e18

    def read(self, now: float) -> Pressure | None:
        """The shares since the previous read (None: the kernel has no PSI here); within
        ``MIN_DT_S`` of it, the same answer."""
        if self._file is None or now - self.read_at < MIN_DT_S:
            return self._answer if self._file is not None else None
        self.read_at = now
        self._answer = self._read(now)
        return self._answer

    def _read(self, now: float) -> Pressure | None:
        if self._file is None:
            return None
        try:
            totals = parse(self._file.read())
        except OSError:  # ENOENT, EOPNOTSUPP (psi=0), a group that went away
            self._file.close()
            self._file = None
            return None
        last, self._last = self._last, ((now, totals) if totals is not None else None)
        if last is None:
            return shares(None, totals, 0.0)
        return shares(last[1], totals, now - last[0])

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


class PressureCollector:
    """The host's ``/proc/pressure`` files, one reading a tick; ``collect`` is None where the
    kernel keeps no PSI (so the panel shows nothing and no error is raised)."""

    def __init__(self, root: str = PROC_PRESSURE,
                 clock: Callable[[], float] = time.monotonic) -> None:  # fmt: skip
        self._clock = clock
        present = os.path.isdir(root)
        self._files = {r: PressureFile(os.path.join(root, r)) for r in RESOURCES} if present else {}

    def collect(self) -> PressureSet | None:
        if not self._files:
            return None
        now = self._clock()
        found = {r: f.read(now) for r, f in self._files.items()}
        if not any(found.values()):
            self._files = {}  # nothing readable: PSI is off; stop asking
            return None
        return PressureSet(found["cpu"], found["memory"], found["io"])
