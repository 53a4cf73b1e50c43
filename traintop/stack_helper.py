"""Stacks on demand, without ptrace: a helper thread that tells the monitor where the loop is.

A monitor that sees a job stop stepping wants each rank's training-thread stack.  py-spy and gdb
need ptrace, which containers often forbid.  So each rank keeps a helper thread, started with
its segment, blocked in ``select()`` on a FIFO beside the segment in the private ring directory
(``<segment>.ask``): while nobody asks it only wakes every ``ALIVE_EVERY_S`` to write the time
(``ALIVE_WORD``: when the rank ended, for a reader after a SIGKILL).  A monitor writes one request
line; the thread answers with the training thread's Python stack (file, line, function; never a
local variable) in ``<segment>.<id>.stack``, or with a few samples of it folded by frame:

    <id> stack                                  one stack (and PyTorch's unfinished
                                                flight-recorder entries, traintop.flight_recorder)
    <id> sample <count> <interval_ms> [<phase>] ``count`` stacks ``interval_ms`` apart, those
                                                taken in ``phase`` folded and counted
    <id> threads <count> <interval_ms>          every Python thread sampled ``count`` times:
                                                name, stacks, whether it ran without the GIL
                                                (traintop.thread_samples)

When C code holds the GIL the thread cannot run.  For that case the helper registers
``faulthandler`` on a signal (``stack_signal``): a monitor whose request went unanswered sends it
to the helper thread (a thread-directed ``tgkill``, so the training thread's own system call is
not interrupted), and faulthandler writes every thread's Python stack from C into
``<segment>.fault``, without the GIL.  The signal is published in the segment's header page
(``STACK_SIGNAL_WORD``) so a monitor never sends a signal nobody handles.

What is written goes only into the ring directory (mode 0700, the user's own); a request is
accepted only from there.  Everything is switched off with ``TRAINTOP_STACKS=0``.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import linecache
import os
import select
import signal
import sys
import threading
import time
from collections import Counter
from pathlib import Path
from types import FrameType
from typing import Any

from traintop import flight_recorder, ring_paths
from traintop.ring import segment_words
from traintop.ring_format import (
    ALIVE_EVERY_S,
    ALIVE_WORD,
    HELPER_TID_WORD,
    STACK_SIGNAL_WORD,
    TRAIN_THREAD_WORD,
    TRAIN_TID_WORD,
)
from traintop.thread_samples import threads_sampled

ENV_STACKS = "TRAINTOP_STACKS"
ENV_SIGNAL = "TRAINTOP_STACK_SIGNAL"
DEFAULT_SIGNAL_OFFSET = 6  # SIGRTMIN+6: no launcher, scheduler or trainer we know sends it
MAX_FRAMES = 64  # innermost frames kept per stack
MAX_CODE = 160  # characters of a frame's source line
OWN = os.path.dirname(os.path.abspath(__file__)) + os.sep  # traintop's frames are left out
MAX_SAMPLES = 200
MAX_SAMPLING_S = 5.0  # a sample request never keeps the helper busy longer
OFF = ("0", "off", "no", "none", "false")
PIN_LOOP, PIN_FILE = "_pin_memory_loop", "pin_memory.py"  # torch/utils/data/_utils/


def stack_signal(value: str | None = None) -> int:
    """The signal faulthandler dumps on: ``$TRAINTOP_STACK_SIGNAL`` (a number, a name such as
    ``SIGUSR2``, or ``SIGRTMIN+N``), SIGRTMIN+6 by default; 0 when switched off or unusable."""
    text = (os.environ.get(ENV_SIGNAL) if value is None else value) or ""
    text = text.strip().upper()
    if text.lower() in OFF:
        return 0
    try:
        return _parse_signal(text) if text else signal.SIGRTMIN + DEFAULT_SIGNAL_OFFSET
    except (ValueError, AttributeError):
        return 0


def _parse_signal(text: str) -> int:
    if text.isdigit():
        number = int(text)
    elif text.startswith("SIGRTMIN"):
        number = signal.SIGRTMIN + int(text.removeprefix("SIGRTMIN").removeprefix("+") or 0)
    else:
        number = int(getattr(signal, text if text.startswith("SIG") else "SIG" + text))
    if not 0 < number < signal.NSIG or number in (signal.SIGKILL, signal.SIGSTOP):
        raise ValueError(text)
    return number


def caught_signals(pid: int | str = "self") -> int:
    """The SigCgt mask of ``/proc/<pid>/status``: the signals that process handles."""
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigCgt:"):
                return int(line.split()[1], 16)
    return 0


class StackHelper:
    """The helper thread of one segment, and the files it owns."""

    def __init__(self, probe: Any, segment: Path, words: memoryview) -> None:
        self._probe = probe
        self._segment = segment
        self._words = words
        self._fifo = ring_paths.side_path(segment, ring_paths.ASK_SUFFIX)
        self._fd = -1
        self._fault: Any = None
        self._signal = 0
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Make the FIFO, register the signal, start the thread; raise OSError on failure."""
        os.mkfifo(self._fifo, 0o600)
        self._fd = os.open(self._fifo, os.O_RDWR | os.O_NOFOLLOW | os.O_CLOEXEC)
        self._words[TRAIN_THREAD_WORD] = self._probe._thread
        self._words[TRAIN_TID_WORD] = native_id(self._probe._thread)
        self._register_signal()
        self._thread = threading.Thread(target=self._serve, name="traintop-stacks", daemon=True)
        self._thread.start()

    def _register_signal(self) -> None:
        """faulthandler on the chosen signal, unless someone else already handles it."""
        number = stack_signal()
        if not number or caught_signals() >> (number - 1) & 1:
            return
        if signal.getsignal(number) not in (signal.SIG_DFL, None):
            return
        path = ring_paths.side_path(self._segment, ring_paths.FAULT_SUFFIX)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC
        self._fault = os.fdopen(os.open(path, flags, 0o600), "wb", buffering=0)
        faulthandler.register(number, file=self._fault, all_threads=True, chain=False)
        self._signal = number
        self._words[STACK_SIGNAL_WORD] = number

    def stop(self) -> None:
        """At the segment's close: end the thread, unregister, remove the side files."""
        with contextlib.suppress(OSError):
            os.write(self._fd, b"0 quit\n")
        if self._thread is not None:
            self._thread.join(timeout=1.0)
        if self._signal:
            with contextlib.suppress(Exception):
                faulthandler.unregister(self._signal)
            self._words[STACK_SIGNAL_WORD] = 0
        if self._fault is not None:
            self._fault.close()
        with contextlib.suppress(OSError):
            os.close(self._fd)
        ring_paths.remove_side_files(self._segment, keep=ring_paths.ENDING_KINDS)

    def _serve(self) -> None:
        """Block until asked; answer each request line.  Any failure ends the helper only.

        Every ``ALIVE_EVERY_S`` without a request it wakes to write the time into the alive
        word, so that a reader that comes after a SIGKILL still knows when the rank was last
        alive (a rank that waited 30 s for data, then was killed, ended stalled)."""
        with contextlib.suppress(Exception):
            self._words[HELPER_TID_WORD] = threading.get_native_id()
            pending = b""
            while True:
                self._words[ALIVE_WORD] = time.monotonic_ns()
                facts = getattr(self._probe, "_facts", None)  # traintop.facts_agent
                if facts is not None:  # its wake never raises
                    facts.wake(self._segment)
                if not select.select([self._fd], [], [], ALIVE_EVERY_S)[0]:
                    continue
                pending += os.read(self._fd, 4096)
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if not self._answer(line.decode(errors="replace").split()):
                        return

    def _answer(self, words: list[str]) -> bool:
        """Handle one request; False when told to quit."""
        if len(words) < 2 or not words[0].isdigit():
            return True
        request, kind = int(words[0]), words[1]
        if kind == "quit":
            return False
        if kind == "stack":
            self._reply(request, self._stack_reply())
        elif (
            kind in ("sample", "threads")
            and len(words) >= 4
            and all(w.isdigit() for w in words[2:4])
        ):
            count = max(1, min(int(words[2]), MAX_SAMPLES))
            interval = min(int(words[3]) / 1000, MAX_SAMPLING_S / count)
            if kind == "threads":
                found = threads_sampled(self._probe._thread, count, interval, training_stack)
                self._reply(request, {"kind": "threads", **found})
            else:
                phase = words[4] if len(words) > 4 else None
                self._reply(request, self._sample_reply(count, interval, phase))
        return True

    def _stack_reply(self) -> dict:
        frames = training_stack(self._probe._thread)
        reply = {"kind": "stack", "frames": frames, "phase": current_phase(self._probe)}
        pending = flight_recorder.unfinished()
        if pending is not None:
            reply["flight_recorder"] = pending
        pin = pin_memory_thread()
        if pin is not None:
            reply["pin_memory"] = training_stack(pin)
        return reply

    def _sample_reply(self, count: int, interval: float, phase: str | None) -> dict:
        return {"kind": "sample", "phase": phase,
                **sampled(self._probe, count, interval, phase)}  # fmt: skip

    def _reply(self, request: int, body: dict) -> None:
        """Write the answer whole (a temporary name, then rename) for the monitor to read."""
        body = {"id": request, "taken_ns": time.monotonic_ns(), **body}
        final = ring_paths.reply_path(self._segment, request)
        tmp = final.with_name(ring_paths.TMP_PREFIX + final.name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(tmp, flags, 0o600), "w") as f:
            json.dump(body, f)
        os.rename(tmp, final)


def training_stack(ident: int, limit: int = MAX_FRAMES) -> list[list]:
    """The thread's stack, outermost first, as ``[file, line, function, source line]``; no
    locals, and none of traintop's own frames (its hooks sit between the user and torch)."""
    frames = frames_out(sys._current_frames().get(ident), limit)
    for frame in frames:
        frame.append(linecache.getline(frame[0], frame[1]).strip()[:MAX_CODE])
    return frames


def frames_out(frame: FrameType | None, limit: int) -> list[list]:
    """``[file, line, function]`` of ``frame`` and its callers, outermost first: the innermost
    ``limit`` of them, none of traintop's own (also the stack of a line that calls
    ``sys.exit``, traintop/run_end.py)."""
    frames = []
    while frame is not None and len(frames) < limit:
        code = frame.f_code
        if not code.co_filename.startswith(OWN):
            frames.append([code.co_filename, frame.f_lineno or 0, code.co_name])
        frame = frame.f_back
    frames.reverse()
    return frames


def pin_memory_thread() -> int | None:
    """The ident of the DataLoader's pin_memory thread (it runs torch's ``_pin_memory_loop``),
    if this process has one: a rank waiting for a batch may wait on it, not on a worker."""
    for ident, frame in sys._current_frames().items():
        while frame is not None:
            code = frame.f_code
            if code.co_name == PIN_LOOP and code.co_filename.endswith(PIN_FILE):
                return ident
            frame = frame.f_back
    return None


def native_id(ident: int) -> int:
    """The kernel's id of the thread ``ident`` (its ``/proc/PID/task/TID``); 0 if unknown."""
    found = next((t for t in threading.enumerate() if t.ident == ident), None)
    return (found.native_id or 0) if found is not None else 0


def current_phase(probe: Any) -> str | None:
    """The phase the probe has open right now (read without a lock: a word, at worst stale)."""
    index = probe._open
    names = probe._names
    return names[index] if 0 <= index < len(names) else None


def sampled(probe: Any, count: int, interval: float, phase: str | None) -> dict:
    """``count`` stacks ``interval`` s apart; those taken in ``phase`` (any when None) folded:
    ``{"taken": n, "matched": m, "stacks": [{"frames": [...], "count": k}, ...]}``."""
    folded: Counter[tuple] = Counter()
    matched = 0
    for i in range(count):
        if i:
            time.sleep(interval)
        if phase is not None and current_phase(probe) != phase:
            continue
        matched += 1
        folded[tuple(map(tuple, training_stack(probe._thread)))] += 1
    stacks = [{"frames": [list(f) for f in k], "count": n} for k, n in folded.most_common()]
    return {"taken": count, "matched": matched, "stacks": stacks}


def start(probe: Any, writer: Any) -> StackHelper | None:
    """The helper of ``writer``'s segment (``Probe._on_segment``); None where there is none
    (no segment, switched off, a DataLoader worker's silent writer).  Never raises."""
    found = segment_words(writer)
    if found is None or os.environ.get(ENV_STACKS, "1").lower() in OFF:
        return None
    helper = StackHelper(probe, *found)
    try:
        helper.start()
    except Exception as exc:
        print(f"traintop: stacks on demand disabled ({exc})", file=sys.stderr)
        with contextlib.suppress(Exception):
            helper.stop()
        return None
    writer.on_close(helper.stop)
    return helper
