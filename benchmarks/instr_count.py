"""Instructions a block of Python code executes, counted by valgrind's callgrind: the same count
on a loaded box as on an idle one, where wall time moves by tens of percent.

A process started by ``under_callgrind`` runs with instrumentation off (torch imports at a
fraction of callgrind's usual slowdown); ``Counter.count(label, body)`` switches it on around
``body()`` alone, through callgrind's client requests (a ten-line C library, built here with gcc
and loaded with ctypes), and reads the dump it wrote.  Outside valgrind ``count`` returns None,
so a benchmark runs the same code either way.
"""

from __future__ import annotations

import ctypes
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

SOURCE = r"""
#include <valgrind/callgrind.h>
int cg_running(void) { return RUNNING_ON_VALGRIND; }
void cg_start(void) { CALLGRIND_START_INSTRUMENTATION; CALLGRIND_ZERO_STATS; }
void cg_stop(const char *label) { CALLGRIND_DUMP_STATS_AT(label); CALLGRIND_STOP_INSTRUMENTATION; }
void cg_dump(const char *label) { CALLGRIND_DUMP_STATS_AT(label); }
"""
OUT_ENV = "BENCH_CALLGRIND_OUT"  # where the dumps go (set by ``under_callgrind``)


def _library() -> Path:
    """The client-request library, built once per source text."""
    tag = hashlib.sha256(SOURCE.encode()).hexdigest()[:12]
    lib = Path(tempfile.gettempdir()) / f"traintop-cg-{os.getuid()}-{tag}.so"
    if lib.exists():
        return lib
    gcc = shutil.which("gcc")
    if gcc is None or not Path("/usr/include/valgrind/callgrind.h").exists():
        raise RuntimeError("instruction counts need gcc and valgrind's headers (apt-get install "
                           "gcc valgrind)")  # fmt: skip
    src = lib.with_suffix(f".{os.getpid()}.c")
    src.write_text(SOURCE)
    tmp = lib.with_suffix(f".{os.getpid()}.tmp")
    subprocess.run([gcc, "-shared", "-fPIC", "-O1", "-o", str(tmp), str(src)], check=True)
    src.unlink()
    tmp.replace(lib)
    return lib


class Counter:
    """Counts instructions of code blocks when this process runs under ``under_callgrind``."""

    def __init__(self) -> None:
        self._out = os.environ.get(OUT_ENV)
        self._lib = ctypes.CDLL(str(_library())) if self._out else None
        self.active = bool(self._lib and self._lib.cg_running())

    def count(self, label: str, body: Callable[[], object]) -> int | None:
        """Instructions ``body()`` executed (None outside callgrind)."""
        if not self.active:
            body()
            return None
        for _ in range(3):  # a dump now and then holds a wrapped-around total: count again
            total = self._once(label, body)
            if 0 <= total < 1 << 48:
                return total
        raise RuntimeError(f"callgrind gave no sane count for {label!r}")

    def _once(self, label: str, body: Callable[[], object]) -> int:
        out = Path(self._out)  # type: ignore[arg-type]
        before = set(out.parent.glob(out.name + "*"))
        self._lib.cg_start()  # type: ignore[union-attr]
        body()
        self._lib.cg_stop(label.encode())  # type: ignore[union-attr]
        dumps = set(out.parent.glob(out.name + "*")) - before
        return sum(_total(path) for path in dumps)


def _total(path: Path) -> int:
    """The Ir total of one callgrind dump."""
    for line in path.read_text(errors="replace").splitlines():
        if line.startswith(("summary:", "totals:")):
            return int(line.split()[1])
    raise RuntimeError(f"no totals in {path}")


def under_callgrind(argv: list[str], env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start ``python argv`` under callgrind, instrumentation off until a block asks for it."""
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        raise RuntimeError("valgrind not found (apt-get install valgrind)")
    out = Path(tempfile.mkdtemp(prefix="traintop-cg-")) / "cg.out"
    env = {**(env or os.environ), OUT_ENV: str(out), "PYTHONHASHSEED": "0"}
    cmd = [valgrind, "--tool=callgrind", "--instr-atstart=no", f"--callgrind-out-file={out}",
           sys.executable, *argv]  # fmt: skip
    return subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                            text=True)  # fmt: skip
