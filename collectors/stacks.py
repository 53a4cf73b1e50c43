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
import itertools
import json
import linecache
import os
import platform
import re
import stat
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, NamedTuple

import traintop
from traintop import ring_paths
from traintop.collectors.rates import measured
from traintop.collectors.ring_header import SegmentHeader
from traintop.collectors.ring_reader import HotBlock
from traintop.collectors.snapshot import Collective, Frame, PhaseSamples, RankStack, StackSample

REPLY_WAIT_S = 1.0  # an answer later than this: the helper cannot run, use the signal
GIVE_UP_S = 5.0  # no answer and no dump by then: ask again on the next want
MAX_REPLY_BYTES = 1 << 20
MAX_CODE = 160
_IDS = itertools.count(1)
# tgkill's number per machine (asm/unistd.h); elsewhere the signal goes to the process.
TGKILL = {"x86_64": 234, "amd64": 234, "aarch64": 131, "arm64": 131, "riscv64": 131,
          "ppc64le": 250, "ppc64": 250, "s390x": 241, "i686": 270, "i386": 270}  # fmt: skip
_THREAD = re.compile(r"^(?:Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?\?\?) in (.*)$')


class Taken(NamedTuple):
    """A stack as it arrived, with the monitor's clock reading of when it was taken."""

    frames: tuple[Frame, ...]
    taken_s: float
    source: str
    phase: str | None
    pending: tuple[Collective, ...]


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

    def __init__(self, segment: Path, header: SegmentHeader) -> None:
        self._segment = segment
        self._header = header
        self._stack: _Request | None = None
        self._sample: _Request | None = None
        self.taken: Taken | None = None  # the newest stack
        self.samples: tuple[PhaseSamples, float] | None = None  # the newest samples, when
        self.phase_asked: str | None = None

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

    def forget(self) -> None:
        """The rank steps again: its old stack says nothing any more."""
        self._stack, self.taken = None, None

    def poll(self, now: float, hot: HotBlock | None) -> None:
        """Read what arrived; send the signal for a stack request left unanswered."""
        if self._sample is not None:
            body = self._reply(self._sample.id)
            if body is not None:
                self.samples, self._sample = (_samples(body), now), None
        request = self._stack
        if request is None:
            return
        body = self._reply(request.id)
        if body is not None:
            self._stack = None
            self.taken = Taken(_frames(body.get("frames")), now, "helper", body.get("phase"),
                               _pending(body.get("flight_recorder")))  # fmt: skip
            return
        if request.fault_offset is not None:
            self._read_dump(request, now, hot)
        elif now - request.sent_s >= REPLY_WAIT_S and hot is not None:
            self._signal(request, hot)

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
        """The helper's answer to ``request``, read once and removed; None until it is there."""
        path = ring_paths.reply_path(self._segment, request)
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
            with contextlib.suppress(OSError):
                os.unlink(path)
        return body if isinstance(body, dict) and body.get("id") == request else None

    def _signal(self, request: _Request, hot: HotBlock) -> None:
        """Have faulthandler dump the stacks from C: the helper thread cannot take the GIL."""
        fault = ring_paths.side_path(self._segment, ring_paths.FAULT_SUFFIX)
        pid, number = self._header.pid, hot.stack_signal
        if not number or self._header.writer_gone() or not _handles(pid, number):
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
            self.taken = Taken(frames, now, "signal", None, ())
        elif now - request.sent_s >= GIVE_UP_S:
            self._stack = None


def _handles(pid: int, number: int) -> bool:
    """Whether ``pid`` catches signal ``number`` (else its default action would kill it)."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next((int(line.split()[1], 16) for line in f if line.startswith("SigCgt:")), 0)
    except (OSError, ValueError):
        return False
    return bool(mask >> (number - 1) & 1)


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
    """The frames faulthandler printed for thread ``ident`` (its newest block), outermost
    first; None when the dump names no such thread (yet)."""
    found: tuple[Frame, ...] | None = None
    current: list[Frame] | None = None
    for line in dump.splitlines():
        thread = _THREAD.match(line)
        if thread is not None:
            current = [] if int(thread.group(1), 16) == ident else None
            if current is not None:
                found = ()
            continue
        frame = _FRAME.match(line)
        if frame is not None and current is not None and not _own(frame.group(1)):
            number = int(frame.group(2)) if frame.group(2).isdigit() else 0
            code = linecache.getline(frame.group(1), number).strip()[:MAX_CODE]
            current.append(Frame(frame.group(1), number, frame.group(3), code))
            found = tuple(reversed(current))
    return found


def _own(file: str) -> bool:
    """A frame of traintop's probe (its hooks), left out as the helper leaves it out."""
    return f"{os.sep}traintop{os.sep}" in file and os.path.basename(file) in _PROBE_FILES


_PROBE_FILES = frozenset(
    name for name in os.listdir(os.path.dirname(os.path.abspath(traintop.__file__)))
    if name.endswith(".py")
)  # fmt: skip


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


def rank_stack(taken: Taken | None, now: float) -> RankStack | None:
    """The newest stack as a snapshot shows it, aged to ``now``."""
    if taken is None:
        return None
    age = measured(max(0.0, now - taken.taken_s))
    return RankStack(taken.frames, age, taken.source, taken.phase, taken.pending)


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
