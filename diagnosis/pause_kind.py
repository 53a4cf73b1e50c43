"""What a periodic pause is, from the stacks its phase was sampled in.

A long step every N steps is usually one of three things, and each has its own fix: a
checkpoint (save it asynchronously, or less often), an evaluation pass inside the loop (run it
less often, or in a process of its own), or some other periodic work (logging, a metric synced
to the host, a file rotated).  The time budget cannot tell them apart: all three are time
between one step's optimizer step and the next batch.  The rank's stacks, sampled while it is in
the phase the pauses fall in, can.  The mechanism each kind leaves on the stack:

* a checkpoint writes: its frames are in torch's serializer (``torch.save``), in
  ``torch.distributed.checkpoint`` or ``safetensors``, or a line of the user's syncs a file to
  disk (``fsync``) or saves, or the user's innermost frame is a ``save``/``checkpoint`` function
  (the innermost only: an outer ``train_with_checkpoints`` is on every stack);
* an evaluation runs the model outside the step: ``nn.Module.__call__`` frames in a phase that is
  not the step's forward or backward, or, in the forward phase (the zero-code probe counts an
  evaluation's batches as the step's, so its model calls as forward), the model called from
  two places of the user's code, the step's and another (a function's name is no evidence:
  ``train_and_evaluate`` is on every stack, and an evaluation caught reading its batches is
  named by its place);
* anything else is named by where it is (``log_metrics (train.py:88)``).

Pure functions over ``PhaseSamples`` (collected by ``JobCollector.sample_phase``).
"""

from __future__ import annotations

import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from traintop.collectors.snapshot import Frame, PhaseSamples
from traintop.diagnosis.stack_text import innermost_user, is_library

CHECKPOINT_FILES = ("torch/serialization.py", "/distributed/checkpoint/", "/safetensors/")
CHECKPOINT_WORDS = ("save", "checkpoint", "ckpt")
CHECKPOINT_CODE = ("fsync", "torch.save", ".save(")
MODULE_CALL = "torch/nn/modules/module.py"  # the model (or a module of it) is being called
STEP_PHASES = ("forward", "backward")  # where a module call is the step's own work
INNER = frozenset({"<genexpr>", "<listcomp>", "<dictcomp>", "<setcomp>", "<lambda>"})
MOST = 0.5  # of the samples taken in the phase: a kind that holds less names nothing

CHECKPOINT, EVALUATION, OTHER = "checkpoint", "evaluation", "other"


@dataclass(frozen=True, slots=True)
class PauseKind:
    """The kind of work the sampled pauses were, the share of the matched samples that kind
    holds, and where the stack most of that kind was."""

    kind: str
    share: float
    place: str  # ``log_metrics (train.py:88)``: the user's innermost frame of that stack


def pause_kind(samples: PhaseSamples | None) -> PauseKind | None:
    """The kind most of the samples' stacks were.  None: no sample was taken in the phase, no
    kind holds ``MOST`` of them, or they were in the step's forward or backward and show
    neither a checkpoint nor an evaluation (the step's own work is sampled there too, so a
    place is not the pause's)."""
    if samples is None or not samples.matched or not samples.stacks:
        return None
    two = len({site for s in samples.stacks if (site := model_site(s.frames))}) > 1
    kinds = [kind_of(s.frames, samples.phase, two) for s in samples.stacks]
    counts: Counter[str] = Counter()
    for kind, stack in zip(kinds, samples.stacks, strict=True):
        counts[kind] += stack.count
    kind, count = max(counts.items(), key=lambda item: (item[1], item[0] != OTHER))
    if count < MOST * samples.matched:
        return None  # mixed: no kind holds most of them
    if kind == OTHER and samples.phase in STEP_PHASES:
        return None  # the step's own forward or backward is sampled there too: no place
    top = samples.stacks[kinds.index(kind)]
    return PauseKind(kind, count / samples.matched, place(top.frames))


def kind_of(frames: Sequence[Frame], phase: str | None, two_sites: bool = False) -> str:
    """``checkpoint``, ``evaluation`` or ``other`` for one stack taken in ``phase``;
    ``two_sites``: the samples show the model called from two places of the user's code."""
    index = innermost_user(frames)
    named = index is not None and any(w in frames[index].function.lower() for w in CHECKPOINT_WORDS)
    if named or any(_saves(f) for f in frames):
        return CHECKPOINT
    outside = phase not in STEP_PHASES or (phase == "forward" and two_sites)
    if outside and model_site(frames) is not None:
        return EVALUATION
    return OTHER


def model_site(frames: Sequence[Frame]) -> tuple[str, int] | None:
    """Where the user's code called the model (the frame before the first module call)."""
    first = next((i for i, f in enumerate(frames) if MODULE_CALL in f.file), None)
    if not first:
        return None
    caller = frames[first - 1]
    return caller.file, caller.line


def _saves(frame: Frame) -> bool:
    """A frame of a checkpoint being written: the serializer's, or a line of the user's that
    saves or syncs a file to disk."""
    if any(marker in frame.file for marker in CHECKPOINT_FILES):
        return True
    return not is_library(frame) and any(c in frame.code for c in CHECKPOINT_CODE)


def place(frames: Sequence[Frame]) -> str:
    """``log_metrics (train.py:88)``: the user's innermost frame, short enough for a remedy (a
    comprehension or lambda by the function it is in, at its own line)."""
    index = innermost_user(frames)
    index = len(frames) - 1 if index is None else index
    line, name = frames[index].line, frames[index].function
    while name in INNER and index > 0:
        index -= 1
        name = frames[index].function
    return f"{name} ({os.path.basename(frames[index].file)}:{line})"
