"""How an ended rank ended, read once from what its probe left (traintop/run_end.py).

``<segment>.end`` (written at the segment's close, before its lock was released) says
finished, raised (the exception and the stack it came through), exited (``sys.exit`` with a
failing status) or stopped by SIGINT; a region of
``<segment>.sig`` holding a faulthandler dump says which default-action signal stopped it
(SIGTERM from ``timeout`` or a scheduler, SIGHUP, ...) or, region 0, which fatal error killed it
in native code, with the training thread's frame; nothing at all, on a segment never closed, is
a rank *gone* without a word (SIGKILL, the OOM killer, ``os._exit``).  The state each ending
reads as: finished, crashed (raised, or exited with a failing status), stopped (a signal), gone.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import linecache
import os
import re
import signal
from pathlib import Path

from traintop import ring_paths
from traintop.collectors.ring_reader import HotBlock
from traintop.collectors.snapshot import Ending, Frame
from traintop.collectors.stacks import thread_frames

REGION = 1 << 16  # as traintop/run_end.py writes them: region N holds signal N's dump
MAX_END_BYTES = 1 << 16
MAX_DUMP_BYTES = REGION
MAX_STACK = 32  # frames of an ending kept, the innermost (traintop/run_end.py writes no more)
STATE_OF = {"finished": "finished", "raised": "crashed", "exited": "crashed", "signal": "stopped",
            "gone": "gone"}  # fmt: skip
_FATAL = re.compile(r"^Fatal Python error: (.+)$", re.MULTILINE)
_CURRENT = re.compile(r"^Current thread (0x[0-9a-fA-F]+)", re.MULTILINE)
FATAL_NAMES = {"Segmentation fault": "SIGSEGV", "Aborted": "SIGABRT", "Bus error": "SIGBUS",
               "Floating-point exception": "SIGFPE", "Illegal instruction": "SIGILL"}  # fmt: skip


def ending_of(segment: Path, hot: HotBlock | None, liveness: str) -> Ending:
    """How the rank of ``segment`` ended; ``liveness`` is what its lock and state word said
    ("finished": closed cleanly, else it died without closing)."""
    written = _end_file(segment)
    if written is not None:
        return written
    dumped = _signal_dump(segment, hot.train_thread if hot is not None else 0)
    if dumped is not None:
        return dumped
    return Ending("finished") if liveness == "finished" else Ending("gone")


def state_of(ending: Ending) -> str:
    """The state an ending reads as in every listing: finished, crashed, stopped or gone."""
    return STATE_OF.get(ending.kind, "gone")


def _end_file(segment: Path) -> Ending | None:
    path = ring_paths.side_path(segment, ring_paths.END_SUFFIX)
    try:
        with open(path, "rb") as f:
            body = json.loads(f.read(MAX_END_BYTES))
        kind = str(body["kind"])
    except (OSError, ValueError, KeyError, TypeError):
        return None
    if kind not in STATE_OF:
        return None
    code, taken = body.get("exit_code"), body.get("taken_ns")
    return Ending(kind, str(body.get("detail") or "")[:200], _frame(body.get("frame")),
                  code if isinstance(code, int) else None,
                  taken / 1e9 if isinstance(taken, int) else None,
                  _stack(body.get("stack")))  # fmt: skip


def _frame(raw: object) -> Frame | None:
    with contextlib.suppress(TypeError, ValueError):
        file, line, function = raw  # type: ignore[misc]
        code = linecache.getline(str(file), int(line)).strip()[:160]
        return Frame(str(file), int(line), str(function), code)
    return None


def _stack(raw: object) -> tuple[Frame, ...]:
    """The ``stack`` an ending was written with (a probe before it wrote none: empty); a
    malformed one is no stack rather than part of one."""
    if not isinstance(raw, list):
        return ()
    frames = [_frame(item) for item in raw[-MAX_STACK:]]
    kept = tuple(frame for frame in frames if frame is not None)
    return kept if len(kept) == len(frames) else ()


def _signal_dump(segment: Path, thread: int) -> Ending | None:
    """The first region of ``<segment>.sig`` that holds a dump: the signal that ended it."""
    path = ring_paths.side_path(segment, ring_paths.SIG_SUFFIX)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        stat = os.fstat(fd)  # its time: the dump's, the file's last write
        for number in range(0, min(signal.NSIG, stat.st_size // REGION + 1)):
            if os.pread(fd, 1, number * REGION) not in (b"", b"\0"):
                dump = os.pread(fd, MAX_DUMP_BYTES, number * REGION).split(b"\0", 1)[0]
                ending = _dumped(number, dump.decode(errors="replace"), thread)
                return dataclasses.replace(ending, at=stat.st_mtime)
    except OSError:
        return None
    finally:
        os.close(fd)
    return None


def _dumped(number: int, dump: str, thread: int) -> Ending:
    """A default-action signal's dump (region ``number``), or a fatal error's (region 0)."""
    frames = _training_frames(dump, thread)[-MAX_STACK:]
    frame = frames[-1] if frames else None
    if number:
        return Ending("signal", _name(number), frame, -number, stack=frames)
    fatal = _FATAL.search(dump)
    what = fatal.group(1).strip() if fatal else "a fatal error"
    name = FATAL_NAMES.get(what)
    return Ending("gone", f"{what} ({name}) in native code" if name else what, frame,
                  -int(getattr(signal, name)) if name else None, stack=frames)  # fmt: skip


def _training_frames(dump: str, thread: int) -> tuple[Frame, ...]:
    """The training thread's frames (the thread the segment names), else the thread that took
    the signal."""
    if thread:
        found = thread_frames(dump, thread)
        if found:
            return found
    current = _CURRENT.search(dump)
    return (thread_frames(dump, int(current.group(1), 16)) or ()) if current else ()


def _name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"
