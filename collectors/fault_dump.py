"""Reading ``<segment>.fault``: whose stack each faulthandler dump in it is.

The rank registered faulthandler on its stack signal with ``all_threads=True``, writing into
its ``.fault`` file.  A DataLoader worker the rank forked inherits both, the handler and the
open file (a fork keeps file descriptors; ``O_CLOEXEC`` only drops them at exec): a worker that
gets the signal appends its own dump to the *rank's* file.  And the worker's main thread is the
fork of the rank's training thread, with the same thread ident, so a reader that only looks for
the training thread's ident would take the worker's stack for the rank's.

A dump is one block per Python thread ("Current thread 0x..." for the one that took the signal,
"Thread 0x..." for the others), blocks separated by a blank line; the next dump starts right
after the last frame line, with no blank line.  A dump is a worker's when one of its threads
runs torch's ``_worker_loop`` (a worker's main thread always does; a rank's threads never do).
"""

from __future__ import annotations

import linecache
import os
import re
from dataclasses import dataclass

import traintop
from traintop.collectors.snapshot import Frame

MAX_CODE = 160
_THREAD = re.compile(r"^(Current thread|Thread) (0x[0-9a-fA-F]+)")
_FRAME = re.compile(r'^\s+File "(.*)", line (\d+|\?\?\?) in (.*)$')
WORKER_LOOP = ("_worker_loop", os.path.join("_utils", "worker.py"))
PIN_LOOP = ("_pin_memory_loop", os.path.join("_utils", "pin_memory.py"))


@dataclass(frozen=True, slots=True)
class Block:
    """One thread of a dump: its ident, whether it took the signal, its frames outermost
    first (with the probe's own frames, which callers drop)."""

    ident: int
    current: bool
    frames: tuple[Frame, ...]


@dataclass(frozen=True, slots=True)
class Dump:
    """Every Python thread of one process at one signal."""

    blocks: tuple[Block, ...]

    def runs(self, function: tuple[str, str]) -> Block | None:
        """The thread running ``(function, file ending)``, if any."""
        name, tail = function
        return next((b for b in self.blocks
                     if any(f.function == name and f.file.endswith(tail) for f in b.frames)),
                    None)  # fmt: skip

    @property
    def worker(self) -> bool:
        """A DataLoader worker's dump (it runs torch's worker loop)."""
        return self.runs(WORKER_LOOP) is not None

    def thread(self, ident: int) -> Block | None:
        return next((b for b in self.blocks if b.ident == ident), None)


def dumps(text: str) -> list[Dump]:
    """The dumps in ``text``, oldest first."""
    found: list[list[Block]] = []
    head: tuple[int, bool] | None = None
    frames: list[Frame] = []
    blank = True  # the start of the text starts a dump
    for line in text.splitlines():
        thread = _THREAD.match(line)
        if thread is not None:
            _close(found, head, frames)
            if not blank or not found:
                found.append([])
            head, frames = (int(thread.group(2), 16), thread.group(1) == "Current thread"), []
        elif (frame := _FRAME.match(line)) is not None and head is not None:
            frames.append(_frame(frame))
        blank = not line.strip()
    _close(found, head, frames)
    return [Dump(tuple(blocks)) for blocks in found if blocks]


def _close(found: list[list[Block]], head: tuple[int, bool] | None, frames: list[Frame]) -> None:
    """End the block being read: faulthandler prints innermost first, a Block holds outermost
    first."""
    if head is not None and found:
        found[-1].append(Block(head[0], head[1], tuple(reversed(frames))))


def _frame(found: re.Match) -> Frame:
    number = int(found.group(2)) if found.group(2).isdigit() else 0
    code = linecache.getline(found.group(1), number).strip()[:MAX_CODE]
    return Frame(found.group(1), number, found.group(3), code)


def own(file: str) -> bool:
    """A frame of traintop's probe (its hooks): left out, as the helper leaves it out."""
    return f"{os.sep}traintop{os.sep}" in file and os.path.basename(file) in _PROBE_FILES


_PROBE_FILES = frozenset(
    name for name in os.listdir(os.path.dirname(os.path.abspath(traintop.__file__)))
    if name.endswith(".py")
)  # fmt: skip


def handles(pid: int, number: int) -> bool:
    """Whether ``pid`` catches signal ``number`` (its ``SigCgt``), else the signal's default
    action would kill it.  A DataLoader worker forked from the rank inherited its faulthandler
    registration; a child that exec'd another program did not."""
    try:
        with open(f"/proc/{pid}/status") as f:
            mask = next((int(line.split()[1], 16) for line in f if line.startswith("SigCgt:")), 0)
    except (OSError, ValueError):
        return False
    return bool(mask >> (number - 1) & 1)


def rank_dumps(text: str) -> list[Dump]:
    """The rank's own dumps (not its workers'), oldest first."""
    return [d for d in dumps(text) if not d.worker]


def worker_dumps(text: str) -> list[Dump]:
    """Its workers' dumps, oldest first."""
    return [d for d in dumps(text) if d.worker]
