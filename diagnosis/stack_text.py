"""Stacks as people read them: where a rank is, in one line, and ranks folded by that line.

A stack has the user's frames outside and the libraries' inside (torch, the standard library).
What a person wants first is the innermost frame of their own code and what it called there:
``all_reduce (distributed_c10d.py) at train.py:120 in step``, or, when their code itself is
where it waits, ``train.py:88 in log_metrics: time.sleep(600)``.  Ranks with the same line fold
into one ("ranks 0, 1, 3: ..."), so the odd rank out stands out.  Pure functions.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from traintop.collectors.snapshot import Frame, PhaseSamples
from traintop.diagnosis.model import Evidence, StackFold
from traintop.diagnosis.text import rank_list

LIBRARY_MARKERS = ("/site-packages/", "/dist-packages/", "/lib/python3", "/lib64/python3")
# Frames that only pass a call on (decorators, nn.Module's call machinery): what the user's
# code called is the first frame past them.
PASS_THROUGH = frozenset({"wrapper", "wrapped", "inner", "_fn", "decorate_context",
                          "_wrapped_call_impl", "_call_impl", "__call__"})  # fmt: skip
TOP_SAMPLES = 3  # stacks an evidence line of phase samples names


def is_library(frame: Frame) -> bool:
    """Installed packages, the standard library and frozen modules: not the user's code."""
    return frame.file.startswith("<") or any(m in frame.file for m in LIBRARY_MARKERS)


def innermost_user(frames: Sequence[Frame]) -> int | None:
    """Index of the innermost frame of the user's own code (None: the stack has none)."""
    for index in range(len(frames) - 1, -1, -1):
        if not is_library(frames[index]):
            return index
    return None


def where(frames: Sequence[Frame]) -> str:
    """One line for a stack (outermost first): what the user's innermost frame called, and
    where; the frame itself with its source line when it is where the rank waits; and, when a
    library called that frame back (a model's forward under DDP, a file's write under
    torch.save), which library call it runs inside."""
    if not frames:
        return "no stack"
    index = innermost_user(frames)
    if index is None:
        return frame_text(frames[-1])
    called = called_past(frames[index + 1 :])
    if called is None:
        text = frame_text(frames[index], code=True)
    else:
        text = f"{called.function} ({os.path.basename(called.file)}) at {frame_text(frames[index])}"
    return text + _inside(frames, index)


def called_past(frames: Sequence[Frame]) -> Frame | None:
    """The first frame that is more than a pass-through (a decorator, Module.__call__)."""
    return next((f for f in frames if f.function not in PASS_THROUGH), None)


def _inside(frames: Sequence[Frame], index: int) -> str:
    """ ", inside forward (distributed.py) at train.py:120 in step" when library frames called
    frame ``index`` back; "" when the user's own code called it."""
    start = index
    while start > 0 and is_library(frames[start - 1]):
        start -= 1
    library = called_past(frames[start:index])
    if library is None:
        return ""
    caller = f" at {frame_text(frames[start - 1])}" if start > 0 else ""
    return f", inside {library.function} ({os.path.basename(library.file)}){caller}"


def frame_text(frame: Frame, code: bool = False) -> str:
    """``train.py:88 in log_metrics`` (with ``: <source line>`` when ``code`` and known)."""
    text = f"{os.path.basename(frame.file)}:{frame.line} in {frame.function}"
    return f"{text}: {frame.code}" if code and frame.code else text


def fold(stacks: Sequence[tuple[int, Sequence[Frame]]]) -> tuple[StackFold, ...]:
    """(rank, frames) pairs folded by their one-line ``where``, the largest group first
    (equal groups by lowest rank)."""
    groups: dict[str, list[tuple[int, Sequence[Frame]]]] = {}
    for rank, frames in stacks:
        if frames:
            groups.setdefault(where(frames), []).append((rank, frames))
    folds = [
        StackFold(tuple(sorted(r for r, _ in members)), line, tuple(min(members)[1]))
        for line, members in groups.items()
    ]
    return tuple(sorted(folds, key=lambda f: (-len(f.ranks), f.ranks)))


def fold_line(fold: StackFold) -> str:
    """ "ranks 0, 1, 3: all_reduce (distributed_c10d.py) at train.py:120 in step"."""
    who = "rank" if len(fold.ranks) == 1 else "ranks"
    return f"{who} {rank_list(list(fold.ranks))}: {fold.where}"


def stack_lines(frames: Sequence[Frame]) -> list[str]:
    """The whole stack, innermost last, one frame a line with its source line under it (the
    details screen's "every rank's full stack")."""
    lines = []
    for frame in frames:
        lines.append(f'File "{frame.file}", line {frame.line}, in {frame.function}')
        if frame.code:
            lines.append(f"    {frame.code}")
    return lines


def phase_sample_evidence(samples: PhaseSamples | None, rank: int) -> Evidence | None:
    """Where a rank spends a phase, from a few samples of its stack (``JobSnapshot.
    phase_samples``, asked with ``JobCollector.sample_phase``): one evidence line naming the
    most frequent stacks with their share of the samples, or None without samples.

    For the straggler and ``unknown`` evidence: ``phase_sample_evidence(job.phase_samples,
    job.rank)`` once the collector was asked to sample that rank's dominant phase."""
    if samples is None or not samples.matched or not samples.stacks:
        return None
    parts = [
        f"{s.count / samples.matched:.0%} {where(s.frames)}" for s in samples.stacks[:TOP_SAMPLES]
    ]
    phase = f"in {samples.phase}" if samples.phase else "of its time"
    text = f"rank {rank} {phase} ({samples.matched} samples): " + "; ".join(parts)
    return Evidence(text, "stack_samples", float(samples.matched), "training")
