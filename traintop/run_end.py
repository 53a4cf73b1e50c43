"""How a run ended, written as it happened: ``<segment>.end``, and the dumps of a fatal signal.

A segment alone says only "closed" or "not closed", so every ending used to read "crashed":
Ctrl+C, a scheduler's SIGTERM, an exception, a SIGKILL.  Each is told apart here, without
replacing anything the script or its libraries installed:

* **finished / raised / SIGINT**: the segment's close (atexit) writes ``<segment>.end``, JSON
  ``{"v", "kind", "detail", "frame", "stack", "exit_code"}``, before the liveness lock is
  released, so a reader that finds the lock free finds the end too.  An uncaught exception is
  learnt from a ``sys.excepthook`` chained in front of the one in place (called first, then
  theirs), else from ``sys.last_value`` (which the interpreter sets before any hook runs) when
  the script replaced the hook; the training thread's own exception from a chained
  ``threading.excepthook``.  KeyboardInterrupt is SIGINT (Ctrl+C); an exception that carries
  ``sigval`` (torch elastic's ``SignalException``) is that signal.
* **exited**: ``sys.exit`` with a status other than 0, chained the same way: the exception
  being handled when it is called (``mp.spawn``'s child, a script's ``except: ...;
  sys.exit(1)``), else the status and the line that called it.  ``raise SystemExit(1)`` goes
  by unseen and reads finished.
* **a terminating signal whose action is the default** (SIGTERM from ``timeout``, SLURM or a
  scheduler, SIGHUP, ...) kills the process with no Python code run.  For each such signal the
  run registers ``faulthandler`` with ``chain=True``: from C, it writes every thread's stack into
  the signal's region of ``<segment>.sig`` (offset ``signal x REGION``), restores the default
  action and raises the signal again, so the process dies exactly as it would have, status
  included, even while C code holds the GIL.  A handler the script installs later replaces
  this one (that signal then ends the run the script's way).
* **a fatal error in native code** (SIGSEGV, SIGABRT, ...): where faulthandler is not already
  enabled, it is enabled into region 0 of the same file, which it also leaves to the default
  action.
* **nothing written** (SIGKILL, the OOM killer, ``os._exit``): the run is *gone*.

Forked children (DataLoader workers) drop all of it, so a worker's end is never the trainer's.
A run that exits cleanly without having recorded a single step was no training job: its
segment is removed instead.  Stdlib only; nothing here raises into the script.
"""

from __future__ import annotations

import contextlib
import faulthandler
import json
import os
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType, TracebackType
from typing import Any, NoReturn

from traintop import ring_paths
from traintop.ring import segment_words
from traintop.ring_format import HEAD_WORD
from traintop.stack_helper import OWN, frames_out  # traintop's frames left out of what is shown

REGION = 1 << 16  # bytes of ``<segment>.sig`` per signal number; region 0: a fatal error
TERMINATING = ("SIGTERM", "SIGHUP", "SIGUSR1", "SIGUSR2", "SIGALRM", "SIGXCPU")
MAX_DETAIL = 200
MAX_STACK = 32  # frames an ending keeps, the innermost (a deep recursion would fill the file)
VERSION = 1

_current: EndWatch | None = None  # the watch of this process's segment


class EndWatch:
    """The end of one segment: the hooks, the dump files, and the ``.end`` written at close."""

    def __init__(self, probe: Any, segment: Path, words: memoryview) -> None:
        self._probe = probe
        self._segment = segment
        self._words = words
        self._ending: dict | None = None  # set by a hook when an exception ends the run
        self._fds: list[int] = []
        self._signals: list[int] = []
        self._fatal = False
        self._previous = sys.excepthook
        self._previous_thread = threading.excepthook
        self._previous_exit = sys.exit

    def start(self) -> None:
        """Chain the hooks and register the dumps; raise OSError when the file cannot be made."""
        global _current
        sys.excepthook = self._excepthook
        threading.excepthook = self._thread_excepthook
        sys.exit = self._exit
        dumps = ring_paths.side_path(self._segment, ring_paths.SIG_SUFFIX)
        for number in default_terminating():
            faulthandler.register(number, file=self._region(dumps, number), all_threads=True,
                                  chain=True)  # fmt: skip
            self._signals.append(number)
        if not faulthandler.is_enabled():
            faulthandler.enable(file=self._region(dumps, 0), all_threads=True)
            self._fatal = True
        _current = self

    def _region(self, path: Path, number: int) -> int:
        flags = os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC
        fd = os.open(path, flags, 0o600)
        self._fds.append(fd)
        os.lseek(fd, number * REGION, os.SEEK_SET)
        return fd

    def _excepthook(self, kind: type[BaseException], value: BaseException,
                    tb: TracebackType | None) -> None:  # fmt: skip
        with contextlib.suppress(Exception):
            self._ending = ending_of(value, tb)
        self._previous(kind, value, tb)

    def _thread_excepthook(self, args: Any) -> None:
        if args.thread is not None and args.thread.ident == self._probe._thread:
            with contextlib.suppress(Exception):
                self._ending = ending_of(args.exc_value, args.exc_traceback)
        self._previous_thread(args)

    def _exit(self, status: Any = None) -> NoReturn:  # any object: sys.exit prints it
        """``sys.exit`` chained: a status other than 0 says the run failed, with the exception
        being handled where there is one (torch's ``mp.spawn`` child calls ``sys.exit(1)`` in
        the ``except`` that caught the training function's exception; so do many scripts).
        Any status in the ``except`` of a Ctrl+C (a script that saves, then exits 0): SIGINT."""
        caught = sys.exc_info()[1]
        said = status not in (None, 0) or (caught is not None and _signal_of(caught) is not None)
        if _current is self and said and self._in_training_thread():
            with contextlib.suppress(Exception):
                self._ending = exit_ending(status, caught, sys._getframe(1))
        self._previous_exit(status)

    def _in_training_thread(self) -> bool:
        return threading.get_ident() == self._probe._thread

    def close(self) -> None:
        """At the segment's close, before its lock is released: write how the run ended, or
        remove the segment of a run that finished without a step."""
        self.forget()
        ending = self._ending or self._replaced_hook_ending() or {"kind": "finished"}
        ring_paths.remove_side_files(self._segment, keep=frozenset({"end"}))
        if ending["kind"] == "finished" and not self._words[HEAD_WORD]:
            with contextlib.suppress(OSError):
                os.unlink(self._segment)
            ring_paths.remove_side_files(self._segment)
            return
        write_end(self._segment, ending)

    def _replaced_hook_ending(self) -> dict | None:
        """The exception that ended the script when it replaced our hook with its own: the
        interpreter sets ``sys.last_value`` before it calls any hook."""
        if sys.excepthook == self._excepthook:
            return None
        value = getattr(sys, "last_value", None)
        return ending_of(value, value.__traceback__) if isinstance(value, BaseException) else None

    def forget(self) -> None:
        """Unregister the dumps and close their files (at close, and in a forked child, which
        must never write into the trainer's file).  The chained hooks stay: they only call on."""
        global _current
        for number in self._signals:
            with contextlib.suppress(Exception):
                faulthandler.unregister(number)
        if self._fatal:
            with contextlib.suppress(Exception):
                faulthandler.disable()
        for fd in self._fds:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._signals, self._fds, self._fatal = [], [], False
        if _current is self:
            _current = None


def default_terminating() -> list[int]:
    """The terminating signals whose action is still the default: nobody handles or ignores
    them, in Python or in C (``SigCgt`` / ``SigIgn``)."""
    taken = _proc_masks()
    numbers = [getattr(signal, name) for name in TERMINATING if hasattr(signal, name)]
    return [n for n in numbers
            if signal.getsignal(n) == signal.SIG_DFL and not taken >> (n - 1) & 1]  # fmt: skip


def _proc_masks() -> int:
    """The signals this process catches or ignores, from ``/proc/self/status``."""
    mask = 0
    with contextlib.suppress(OSError, ValueError), open("/proc/self/status") as f:
        for line in f:
            if line.startswith(("SigCgt:", "SigIgn:")):
                mask |= int(line.split()[1], 16)
    return mask


def ending_of(value: BaseException, tb: TracebackType | None) -> dict:
    """The ``.end`` body for an exception that ended the run: a signal's (Ctrl+C, an elastic
    agent's SignalException) or a raised one, with the stack it came through."""
    stack = stack_of(tb)
    where = {"frame": stack[-1] if stack else None, "stack": stack}
    number = _signal_of(value)
    if number is not None:
        return {"kind": "signal", "detail": signal.Signals(number).name, **where,
                "exit_code": -number}  # fmt: skip
    text = f"{type(value).__name__}: {value}" if str(value) else type(value).__name__
    return {"kind": "raised", "detail": text[:MAX_DETAIL], **where, "exit_code": 1}


def exit_ending(status: object, caught: BaseException | None, caller: FrameType) -> dict:
    """The ``.end`` body for ``sys.exit(status)``: the exception being handled, else "exited"
    with the status (a message, ``sys.exit("...")``, exits 1) and the line that called it."""
    code = status if isinstance(status, int) else 0 if status is None else 1
    if caught is not None:
        return {**ending_of(caught, caught.__traceback__), "exit_code": code}
    code_of = caller.f_code
    return {"kind": "exited", "detail": f"sys.exit({status!r})"[:MAX_DETAIL],
            "frame": [code_of.co_filename, caller.f_lineno, code_of.co_name],
            "stack": frames_out(caller, MAX_STACK), "exit_code": code}  # fmt: skip


def _signal_of(value: BaseException) -> int | None:
    if isinstance(value, KeyboardInterrupt):
        return signal.SIGINT
    number = getattr(value, "sigval", None)
    with contextlib.suppress(TypeError, ValueError):
        return int(signal.Signals(number)) if number is not None else None
    return None


def stack_of(tb: TracebackType | None) -> list[list]:
    """``[file, line, function]`` of each frame an exception passed through, outermost first:
    the script's and its libraries', not traintop's hooks (a Ctrl+C lands inside the step hook
    as often as not; the user asks where *their* loop was), unless it came from traintop alone
    (then its innermost frame).  The innermost ``MAX_STACK`` frames."""
    frames, last = [], None
    while tb is not None:
        code = tb.tb_frame.f_code
        last = [code.co_filename, tb.tb_lineno, code.co_name]
        if not code.co_filename.startswith(OWN):
            frames.append(last)
        tb = tb.tb_next
    return frames[-MAX_STACK:] or ([last] if last is not None else [])


def write_end(segment: Path, ending: dict) -> None:
    """``<segment>.end``, whole (a temporary name, then rename), mode 0600."""
    final = ring_paths.side_path(segment, ring_paths.END_SUFFIX)
    tmp = final.with_name(ring_paths.TMP_PREFIX + final.name)
    body = {"v": VERSION, "taken_ns": time.time_ns(), "detail": "", "frame": None,
            "exit_code": None, **ending}  # fmt: skip
    with contextlib.suppress(OSError):
        flags = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW | os.O_CLOEXEC
        with os.fdopen(os.open(tmp, flags, 0o600), "w") as f:
            json.dump(body, f)
        os.rename(tmp, final)


def _forget_in_child() -> None:
    if _current is not None:
        _current.forget()


os.register_at_fork(after_in_child=_forget_in_child)


def start(probe: Any, writer: Any) -> EndWatch | None:
    """The watch of ``writer``'s segment (with the stack helper, at the segment's creation);
    None without a real segment.  Never raises."""
    found = segment_words(writer)
    if found is None:
        return None
    watch = EndWatch(probe, *found)
    try:
        watch.start()
    except Exception as exc:
        print(f"traintop: how the run ends will not be known ({exc})", file=sys.stderr)
        watch.forget()
    writer.on_close(watch.close)
    return watch
