"""Where a stalled rank is, in a few short texts: the labels of the exporter's
``traintop_job_stuck_info`` (exporter/stuck_families.py), read back by `traintop fleet`
(fleet/hang.py), so a node's monitor and the fleet judge a stopped job from the same evidence.

* ``process``: what the kernel says of its training thread (sleeping, uninterruptible,
  stopped, traced, zombie, gone; ``busy`` when it uses its CPU);
* ``blocked_on``: in uninterruptible sleep, the system call and its file ("read /mnt/x.tar");
* ``collective``: the collective it is in ("all_reduce #1042 (0:default_pg)"), else
  "after" its newest ("after all_reduce #1041 (0:default_pg)");
* ``where``: its innermost frame of its own code ("log_metrics (train.py:88)");
* ``frames``: its innermost frames, up to ``TOP_FRAMES``, innermost first, by base name
  ("train.py:88 log_metrics < train.py:120 train");
* ``worker``: for a rank that waits for a batch, the DataLoader worker it waits on ("8812
  uninterruptible read /mnt/x.bin __getitem__ (data.py:70)").

Every value is cut to ``MAX_LABEL`` characters.  Pure.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from traintop.collectors.proc_state import STATE_WORDS, blocked, busy
from traintop.collectors.snapshot import Frame, JobSnapshot, ProcState, WorkerSnapshot
from traintop.diagnosis.hang import current, stalled_worker
from traintop.diagnosis.hang_line import where_short
from traintop.diagnosis.stack_text import is_library

TOP_FRAMES = 3
MAX_LABEL = 120
FRAMES_SEP = " < "
FIELDS = ("process", "blocked_on", "collective", "where", "frames", "worker")


def stalled(job: JobSnapshot) -> bool:
    """Running, and past its stall limit without a step."""
    age, limit = job.last_step_age_s, job.stall_after_s
    running = job.state in ("live", "stalled")
    return running and age is not None and limit is not None and age >= limit


def place(job: JobSnapshot) -> dict[str, str]:
    """The label values for one stalled rank ("" for what is not known)."""
    frames = job.stack.frames if job.stack is not None else ()
    worker = stalled_worker(job)
    return {
        k: v[:MAX_LABEL]
        for k, v in {
            "process": process_word(job.proc),
            "blocked_on": _blocked_on(job.proc),
            "collective": _collective(job),
            "where": where_short(frames),
            "frames": FRAMES_SEP.join(_frame(f) for f in _top(frames)),
            "worker": "" if worker is None else _worker(worker),
        }.items()
    }


def process_word(proc: ProcState | None) -> str:
    if proc is None:
        return ""
    return "busy" if busy(proc) else STATE_WORDS.get(proc.state, proc.state)


def _blocked_on(proc: ProcState | None) -> str:
    if not blocked(proc) or not proc.syscall:
        return ""
    return f"{proc.syscall} {proc.file or ''}".strip()


def _collective(job: JobSnapshot) -> str:
    c = current(job)
    if c is not None:
        return f"{c.op} #{c.seq} ({c.group})"
    newest = min(job.collectives, key=lambda e: e.age_s, default=None)
    return f"after {newest.op} #{newest.seq} ({newest.group})" if newest else ""


def _top(frames: Sequence[Frame]) -> list[Frame]:
    """The innermost frames from the user's own innermost one outwards (library frames
    inside it are the call it made, said by ``where``)."""
    own = [f for f in frames if not is_library(f)] or list(frames)
    return list(reversed(own))[:TOP_FRAMES]


def _frame(frame: Frame) -> str:
    return f"{os.path.basename(frame.file)}:{frame.line} {frame.function}"


def _worker(worker: WorkerSnapshot) -> str:
    proc = worker.proc
    state = process_word(proc)
    call = _blocked_on(proc)
    frames = worker.stack.frames if worker.stack is not None else ()
    where = where_short(frames)
    return " ".join(p for p in (str(worker.pid), state, call, where) if p)


def proc_of(word: str) -> ProcState | None:
    """``process`` back into a kernel state ("busy": a thread using its CPU)."""
    if word == "busy":
        return ProcState("R", cpu_pct=100.0)
    letter = next((k for k, v in STATE_WORDS.items() if v == word), None)
    return ProcState(letter) if letter else None


def frames_of(text: str) -> tuple[Frame, ...]:
    """``frames`` back into frames, outermost first (the fleet's reading of the label)."""
    found = []
    for part in text.split(FRAMES_SEP) if text else ():
        head, _, function = part.partition(" ")
        file, _, line = head.rpartition(":")
        if file and line.isdigit() and function:
            found.append(Frame(file, int(line), function))
    return tuple(reversed(found))
