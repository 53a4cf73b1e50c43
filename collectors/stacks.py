"""Asking a rank where its training thread is, without ptrace (the monitor side of
traintop/stack_helper.py).

One ``StackClient`` per rank segment.  ``ask`` writes one request line into the rank's FIFO
(``<segment>.ask``) without blocking; the rank's helper thread answers in
``<segment>.<id>.stack``, read on a later tick, so the sampler never waits.  A request still
unanswered after ``REPLY_WAIT_S`` means the helper cannot run (C code holds the GIL): the client
then sends the signal the rank registered with faulthandler (published in its segment), to the
helper thread alone (``tgkill``: the training thread's system call is not interrupted), and
reads the training thread's stack from the dump faulthandler appends to ``<segment>.fault``.
A signal is sent only to the writer's own process, only when that process handles it (its
``SigCgt``), and at most once per request.
"""

from __future__ import annotations

import contextlib
import ctypes
import dataclasses
import itertools
import json
import os
import platform
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

from traintop import ring_paths
from traintop.collectors.fault_dump import PIN_LOOP, dumps, handles, own, rank_dumps
from traintop.collectors.rates import measured
from traintop.collectors.ring_header import SegmentHeader
from traintop.collectors.ring_reader import HotBlock
from traintop.collectors.snapshot import (
    Collective,
    Frame,
    PhaseSamples,
    PyThread,
    RankStack,
    StackSample,
)

REPLY_WAIT_S = 1.0  # an answer later than this: the helper cannot run, use the signal
# A one-shot command (`traintop jobs`, `diagnose`) signals sooner: a helper that can run
# answers within milliseconds, and the command has 2 s in all.
ONE_SHOT_REPLY_WAIT_S = 0.5
GIVE_UP_S = 5.0  # no answer and no dump by then: ask again on the next want
# An answer or a dump this young, taken after the rank last moved, is used as it is, whoever
# asked for it (another `traintop jobs`, the monitor): one stack, one judgement.
REUSE_S = 15.0
KEEP_REPLIES_S = 30.0  # answers are left for other readers this long, then removed
MAX_REPLY_BYTES = 1 << 20
KEEP_THREAD_ANSWERS = 3  # a rank's threads are judged on its last few answers together
MAX_CODE = 160
_IDS = itertools.count(1)
# tgkill's number per machine (asm/unistd.h); elsewhere the signal goes to the process.
TGKILL = {"x86_64": 234, "amd64": 234, "aarch64": 131, "arm64": 131, "riscv64": 131,
          "ppc64le": 250, "ppc64": 250, "s390x": 241, "i686": 270, "i386": 270}  # fmt: skip


class Taken(NamedTuple):
    """A stack as it arrived, with the monitor's clock reading of when it was taken."""

    frames: tuple[Frame, ...]
    taken_s: float
    source: str
    phase: str | None
    pending: tuple[Collective, ...]
    pin_memory: tuple[Frame, ...] = ()  # the DataLoader's pin_memory thread's stack


class _Request(NamedTuple):
    id: int
    kind: str
    sent_s: float
    fault_offset: int | None  # where the dump starts in the .fault file, once signalled


def new_id() -> int:
    """A request id unique to this monitor process (the helper answers in a file named by it)."""
    return os.getpid() << 24 | next(_IDS) & 0xFFFFFF


class StackClient:
    """Stacks and phase samples of one rank, asked for and read without ever blocking."""

    def __init__(
        self, segment: Path, header: SegmentHeader, reply_wait_s: float = REPLY_WAIT_S
    ) -> None:
        self._segment = segment
        self._header = header
        self._reply_wait_s = reply_wait_s
        self._stack: _Request | None = None
        self._sample: _Request | None = None
        self.taken: Taken | None = None  # the newest stack
        self.samples: tuple[PhaseSamples, float] | None = None  # the newest samples, when
        self.phase_asked: str | None = None
        self._threads: _Request | None = None
        self.threads: Answers = []  # every Python thread, as answered (the last few), when

    @property
    def waiting(self) -> bool:
        """A stack request is out and unanswered."""
        return self._stack is not None

    def ask(self, now: float) -> bool:
        """Ask for the training thread's stack (unless a request is out); True if sent."""
        if self._stack is not None and now - self._stack.sent_s < GIVE_UP_S:
            return False
        request = _Request(new_id(), "stack", now, None)
        self._stack = request if self._send(f"{request.id} stack") else None
        return self._stack is not None

    def ask_samples(self, now: float, phase: str | None, count: int, interval_ms: int) -> bool:
        """Ask for ``count`` samples ``interval_ms`` apart, folded, of those in ``phase``."""
        request = _Request(new_id(), "sample", now, None)
        line = f"{request.id} sample {count} {interval_ms}" + (f" {phase}" if phase else "")
        self._sample = request if self._send(line) else None
        self.phase_asked = phase
        return self._sample is not None

    def ask_threads(self, now: float, count: int, interval_ms: int) -> bool:
        """Ask for every Python thread, sampled ``count`` times ``interval_ms`` apart
        (traintop/thread_samples.py): names, stacks, whether each ran without the GIL."""
        request = _Request(new_id(), "threads", now, None)
        sent = self._send(f"{request.id} threads {count} {interval_ms}")
        self._threads = request if sent else None
        return sent

    def forget(self) -> None:
        """The rank steps again: its old stack says nothing any more."""
        self._stack, self.taken = None, None

    def poll(self, now: float, hot: HotBlock | None) -> None:
        """Read what arrived; send the signal for a stack request left unanswered."""
        if self._sample is not None:
            body = self._reply(self._sample.id)
            if body is not None:
                self.samples, self._sample = (_samples(body), now), None
        if self._threads is not None:
            body = self._reply(self._threads.id)
            if body is not None:
                self.threads = [
                    *self.threads[-(KEEP_THREAD_ANSWERS - 1) :],
                    (py_threads(body), now),
                ]
                self._threads = None
            elif now - self._threads.sent_s >= GIVE_UP_S:
                self._threads = None
        request = self._stack
        if request is None:
            return
        body = self._reply(request.id)
        if body is not None:
            self._stack = None
            self.taken = _taken(body, now, "helper")
            return
        if request.fault_offset is not None:
            self._read_dump(request, now, hot)
        elif now - request.sent_s >= self._reply_wait_s and hot is not None:
            self._signal(request, hot)

    def reuse(self, now: float, hot: HotBlock | None, since_ns: int) -> bool:
        """Take a stack someone else already had taken (an answer to another reader's request,
        or a faulthandler dump another reader triggered), when it is under ``REUSE_S`` old and
        was taken after ``since_ns`` (CLOCK_MONOTONIC: the rank's last move); True if one was."""
        if not self._header.same_host_clock():
            return False
        now_ns = time.monotonic_ns()
        found = _newest_answer(self._segment, since_ns, now_ns)
        if found is None and hot is not None:
            found = _newest_dump(self._segment, hot.train_thread, since_ns, now_ns)
        if found is None:
            return False
        body, source, taken_ns = found
        self.taken = _taken(body, now - (now_ns - taken_ns) / 1e9, source)
        return True

    def _send(self, line: str) -> bool:
        """One request line into the FIFO; False when nobody reads it or it is full."""
        fifo = ring_paths.side_path(self._segment, ring_paths.ASK_SUFFIX)
        flags = os.O_WRONLY | os.O_NONBLOCK | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(fifo, flags)
        except OSError:  # ENXIO: no reader (no helper, or it died); ENOENT: an older writer
            return False
        try:
            st = os.fstat(fd)
            if not stat.S_ISFIFO(st.st_mode) or st.st_uid != os.getuid():
                return False
            return os.write(fd, (line + "\n").encode()) > 0
        except OSError:  # EAGAIN: the helper is far behind
            return False
        finally:
            os.close(fd)

    def _reply(self, request: int) -> dict[str, Any] | None:
        """The helper's answer to ``request``, read when it is there (None until then).  It is
        left in place for other readers (``reuse``); answers older than ``KEEP_REPLIES_S`` go."""
        body = _read_answer(ring_paths.reply_path(self._segment, request))
        if body is None:
            return None
        _prune_answers(self._segment)
        return body if body.get("id") == request else None

    def _signal(self, request: _Request, hot: HotBlock) -> None:
        """Have faulthandler dump the stacks from C: the helper thread cannot take the GIL."""
        fault = ring_paths.side_path(self._segment, ring_paths.FAULT_SUFFIX)
        pid, number = self._header.pid, hot.stack_signal
        if not number or self._header.writer_gone() or not handles(pid, number):
            self._stack = None
            return
        try:
            offset = os.stat(fault, follow_symlinks=False).st_size
            send_to_thread(pid, hot.helper_tid, number)
        except OSError:
            self._stack = None
            return
        self._stack = request._replace(fault_offset=offset)

    def _read_dump(self, request: _Request, now: float, hot: HotBlock | None) -> None:
        """The training thread's stack from the faulthandler dump, once it is written."""
        fault = ring_paths.side_path(self._segment, ring_paths.FAULT_SUFFIX)
        try:
            with open(fault, "rb") as f:
                f.seek(request.fault_offset or 0)
                text = f.read(MAX_REPLY_BYTES).decode(errors="replace")
        except OSError:
            text = ""
        ident = hot.train_thread if hot is not None else 0
        frames = thread_frames(text, ident)
        if frames is not None:
            self._stack = None
            self.taken = Taken(frames, now, "signal", None, (), pin_frames(text))
        elif now - request.sent_s >= GIVE_UP_S:
            self._stack = None


def _taken(body: dict[str, Any], taken_s: float, source: str) -> Taken:
    """An answer (or a dump read as one) as a ``Taken``."""
    pending, pin = _pending(body.get("flight_recorder")), _frames(body.get("pin_memory"))
    return Taken(_frames(body.get("frames")), taken_s, source, body.get("phase"), pending, pin)


def pin_frames(dump: str) -> tuple[Frame, ...]:
    """The pin_memory thread's frames in the rank's newest dump (none: it has no such thread)."""
    found = rank_dumps(dump)
    block = found[-1].runs(PIN_LOOP) if found else None
    return tuple(f for f in block.frames if not own(f.file)) if block else ()


def _read_answer(path: Path) -> dict[str, Any] | None:
    """One answer file, if it is a regular file of ours holding a JSON object."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_uid != os.getuid():
            return None
        body = json.loads(os.read(fd, MAX_REPLY_BYTES))
    except (OSError, ValueError):
        body = None
    finally:
        os.close(fd)
    return body if isinstance(body, dict) else None


def _answers(segment: Path) -> list[tuple[float, Path]]:
    """(mtime, path) of every answer file beside ``segment``."""
    stem = segment.name.removesuffix(".ring") + "."
    found = []
    with contextlib.suppress(OSError), os.scandir(segment.parent) as entries:
        for entry in entries:
            name = entry.name
            if name.startswith(stem) and name.endswith(".stack"):
                with contextlib.suppress(OSError):
                    found.append((entry.stat(follow_symlinks=False).st_mtime, Path(entry.path)))
    return found


def _prune_answers(segment: Path) -> None:
    cutoff = time.time() - KEEP_REPLIES_S
    for mtime, path in _answers(segment):
        if mtime < cutoff:
            with contextlib.suppress(OSError):
                os.unlink(path)


def _newest_answer(segment: Path, since_ns: int, now_ns: int) -> tuple[dict, str, int] | None:
    """The newest stack answer (any reader's) taken after ``since_ns`` and young enough."""
    for _mtime, path in sorted(_answers(segment), reverse=True):
        body = _read_answer(path)
        if body is None or body.get("kind") != "stack":
            continue
        taken = int(body.get("taken_ns", 0) or 0)
        usable = since_ns < taken <= now_ns and now_ns - taken <= REUSE_S * 1e9
        return (body, "helper", taken) if usable else None
    return None


def _newest_dump(segment: Path, ident: int, since_ns: int, now_ns: int) -> tuple | None:
    """The rank's dump in ``.fault`` when it is the file's last write, young enough and after
    ``since_ns`` (a worker's dump written after it leaves its time unknown)."""
    fault = ring_paths.side_path(segment, ring_paths.FAULT_SUFFIX)
    try:
        st = os.stat(fault, follow_symlinks=False)
        taken = now_ns - (time.time_ns() - st.st_mtime_ns)
        if not since_ns < taken or now_ns - taken > REUSE_S * 1e9 or not ident:
            return None
        with open(fault, "rb") as f:
            f.seek(max(0, st.st_size - MAX_REPLY_BYTES))
            found = dumps(f.read().decode(errors="replace"))
    except OSError:
        return None
    block = found[-1].thread(ident) if found and not found[-1].worker else None
    if block is None:
        return None
    frames = [[f.file, f.line, f.function, f.code] for f in block.frames if not own(f.file)]
    pin = found[-1].runs(PIN_LOOP)
    pins = [[f.file, f.line, f.function, f.code] for f in pin.frames] if pin else None
    return {"frames": frames, "pin_memory": pins}, "signal", taken


def send_to_thread(pid: int, tid: int, number: int) -> None:
    """``tgkill(pid, tid, number)``: the signal for one thread of ``pid``; the process when
    this machine's call number is unknown or no thread is named.  Raises OSError."""
    call = TGKILL.get(platform.machine().lower())
    if call is None or tid <= 0 or not os.path.isdir(f"/proc/{pid}/task/{tid}"):
        os.kill(pid, number)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.syscall(call, pid, tid, number) != 0:
        raise OSError(ctypes.get_errno(), "tgkill failed")


def thread_frames(dump: str, ident: int) -> tuple[Frame, ...] | None:
    """The frames faulthandler printed for thread ``ident`` of the rank (its newest dump that
    names it; a worker's dumps, which carry the same ident, are not the rank's), outermost
    first; None when no dump names it (yet)."""
    for found in reversed(rank_dumps(dump)):
        block = found.thread(ident)
        if block is not None:
            return tuple(f for f in block.frames if not own(f.file))
    return None


def _frames(raw: Any) -> tuple[Frame, ...]:
    """``[[file, line, function, source line], ...]`` as the helper writes it; anything else
    is dropped."""
    frames = []
    for item in raw if isinstance(raw, list) else ():
        with contextlib.suppress(TypeError, ValueError):
            file, line, function, code = item
            frames.append(Frame(str(file), int(line), str(function), str(code)[:MAX_CODE]))
    return tuple(frames)


def _pending(raw: Any) -> tuple[Collective, ...]:
    """The flight recorder's unfinished entries (traintop.flight_recorder.FlightEntry)."""
    pending = []
    now_ns = time.time_ns()  # the recorder stamps entries with the wall clock
    for e in raw if isinstance(raw, list) else ():
        with contextlib.suppress(KeyError, TypeError, ValueError, IndexError):
            age = measured(max(0.0, (now_ns - int(e["created_ns"])) / 1e9))
            timeout = int(e.get("timeout_ms", 0)) / 1000 or None
            pending.append(Collective(str(e["group"]), int(e["seq"]), str(e["op"]),
                                      _fr_shape(e), 0, age, None, False, timeout))  # fmt: skip
    return tuple(pending)


FR_DTYPES = {"Float": "f32", "Half": "f16", "BFloat16": "bf16", "Double": "f64", "Long": "i64",
             "Int": "i32", "Short": "i16", "Char": "i8", "Byte": "u8", "Bool": "bool"}  # fmt: skip


def _fr_shape(entry: dict[str, Any]) -> str:
    """The first input's ``f32[1024,4]``, as the ledger writes shapes; "" with no input."""
    sizes, dtypes = entry.get("sizes") or (), entry.get("dtypes") or ()
    if not sizes:
        return ""
    dtype = FR_DTYPES.get(str(dtypes[0]), str(dtypes[0])) if dtypes else "?"
    return f"{dtype}[{','.join(str(int(d)) for d in sizes[0])}]"


def _samples(body: dict[str, Any]) -> PhaseSamples:
    stacks = tuple(
        StackSample(_frames(s.get("frames")), int(s.get("count", 0)))
        for s in body.get("stacks", ())
        if isinstance(s, dict)
    )
    return PhaseSamples(body.get("phase"), int(body.get("taken", 0)),
                        int(body.get("matched", 0)), stacks, 0.0)  # fmt: skip


def py_threads(body: dict[str, Any]) -> tuple[PyThread, ...]:
    """A ``threads`` answer's threads, each with its most frequent stack."""
    found = []
    for t in body.get("threads", ()):
        with contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
            stacks = [s for s in t.get("stacks", ()) if isinstance(s, dict)]
            top = stacks[0] if stacks else {}
            found.append(
                PyThread(
                    tid=int(t["tid"]),
                    name=str(t.get("name", ""))[:64],
                    training=bool(t.get("training")),
                    samples=int(t["samples"]),
                    ran_held=int(t.get("ran_held", 0)),
                    ran_free=int(t.get("ran_free", 0)),
                    windows=int(t["samples"]),
                    frames=_frames(top.get("frames")),
                    frames_count=int(top.get("count", 0)),
                    daemon=bool(t.get("daemon")),
                )
            )
    return tuple(found)


Answers = list[tuple[tuple[PyThread, ...], float]]


def rank_threads(answers: Answers, now: float, keep_s: float) -> tuple[PyThread, ...]:
    """The threads of the answers under ``keep_s`` old, each thread's windows summed over them
    (ten say little on a crowded box; a few answers more), its name, samples and stack from
    the newest, aged to ``now``."""
    kept = [(threads, at) for threads, at in answers if now - at <= keep_s]
    if not kept:
        return ()
    newest, at = kept[-1]
    age = measured(max(0.0, now - at))
    return tuple(_summed(t, kept, age) for t in newest)


def _summed(thread: PyThread, answers: Answers, age: float) -> PyThread:
    same = [t for threads, _ in answers for t in threads if t.tid == thread.tid]
    return dataclasses.replace(
        thread,
        ran_held=sum(t.ran_held for t in same),
        ran_free=sum(t.ran_free for t in same),
        windows=sum(t.windows for t in same),
        age_s=age,
    )


def rank_stack(taken: Taken | None, now: float) -> RankStack | None:
    """The newest stack as a snapshot shows it, aged to ``now``."""
    if taken is None:
        return None
    age = measured(max(0.0, now - taken.taken_s))
    return RankStack(taken.frames, age, taken.source, taken.phase, taken.pending,
                     taken.pin_memory)  # fmt: skip


def phase_samples(samples: tuple[PhaseSamples, float] | None, now: float) -> PhaseSamples | None:
    if samples is None:
        return None
    found, at = samples
    return PhaseSamples(found.phase, found.taken, found.matched, found.stacks,
                        measured(max(0.0, now - at)))  # fmt: skip


def wait_for(
    client: StackClient, hot: HotBlock | Callable[[], HotBlock] | None, timeout_s: float = 2.5
) -> None:
    """Poll ``client`` until its request is answered or ``timeout_s`` passed (for one-shot
    commands; the monitor polls once a tick instead)."""
    deadline = time.monotonic() + timeout_s
    while client.waiting and time.monotonic() < deadline:
        time.sleep(0.05)
        client.poll(time.monotonic(), hot() if callable(hot) else hot)
