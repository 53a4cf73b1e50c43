"""What the screens and `traintop jobs` say of a job that stopped stepping (diagnosis/hang.py).

The jobs table's state cell (``HUNG 1m12s``), each rank's place in the rank table ("in
all_reduce #1042 for 1m12s · train.py:120 in step"), the lines under the focused job (the case,
then the ranks folded by where they are) and every rank's whole stack for the details screen.
"""

from __future__ import annotations

from traintop.diagnosis.hang_finding import KIND_WORDS
from traintop.diagnosis.hang_words import pin_text, worker_text
from traintop.diagnosis.model import Hang, RankHang
from traintop.diagnosis.stack_text import fold_line, stack_lines, where
from traintop.diagnosis.text import duration

LEVEL_WORDS = {"stalled": "STALLED", "hung": "HUNG", "busy": "BUSY", "crashed": "CRASHED"}
# Theme variables: a stall warns, a hang (or a crash) is an error, a busy rank only informs.
LEVEL_STYLES = {"stalled": "bold $warning", "busy": "bold $accent"}


def level_style(hang: Hang) -> str:
    return LEVEL_STYLES.get(hang.level, "bold $error")


def state_text(hang: Hang) -> str:
    """ "HUNG 1m12s", "STALLED 14s"; an ended job's post-mortem is just "CRASHED"."""
    word = LEVEL_WORDS.get(hang.level, hang.level.upper())
    return word if hang.level == "crashed" else f"{word} {duration(hang.for_s)}"


def rank_text(place: RankHang) -> str:
    """A rank's place and, when its stack is known, where it is; the worker it waits on."""
    if not place.frames:
        site = place.collective.site if place.collective is not None else ""
        shown = site and place.state not in ("gone", "failed")
        text = f"{place.text} · called at {site}" if shown else place.text
    else:
        text = f"{place.text} · {where(place.frames)}"
    if place.pin_memory:
        return f"{text} · {pin_text(place.pin_memory)}"
    return text if place.worker is None else f"{text} · {worker_text(place.worker)}"


def case_line(hang: Hang) -> str:
    """ "HUNG 1m12s · not entered: <the case's sentence>"."""
    return f"{state_text(hang)} · {case_text(hang)}"


def case_text(hang: Hang) -> str:
    """ "not entered: <the case's sentence>"."""
    return f"{KIND_WORDS.get(hang.kind, hang.kind.replace('_', ' '))}: {hang.summary}"


def detail_lines(hang: Hang) -> list[str]:
    """The focused job's lines: the case, the ranks folded by where they are, the timeout."""
    lines = [case_line(hang)]
    lines += [f"  {fold_line(f)}" for f in hang.folds]
    lines += [f"  {line}" for line in hang.evidence if line.startswith("the group's timeout")]
    return lines


def every_stack(hang: Hang) -> list[tuple[str, list[str]]]:
    """(heading, lines) per rank: the details screen's "every rank's full stack", and that of
    the DataLoader worker a rank waits on."""
    stacks = []
    for place in hang.ranks:
        how = f"{place.stack_source} stack" if place.frames else "no stack"
        heading = f"rank {place.rank} (pid {place.pid}): {place.text} · {how}"
        lines = stack_lines(place.frames) if place.frames else [_no_stack(place)]
        stacks.append((heading, lines))
        if place.pin_memory:
            stacks.append((f"rank {place.rank}: its pin_memory thread",
                           stack_lines(place.pin_memory)))  # fmt: skip
        worker = place.worker
        if worker is not None:
            frames = worker.stack.frames if worker.stack is not None else ()
            heading = f"rank {place.rank}: {worker_text(worker)}"
            stacks.append((heading, stack_lines(frames) if frames else [_no_worker_stack()]))
    return stacks


def _no_worker_stack() -> str:
    return ("no Python stack: it did not register the stack signal, has no other thread to "
            "take it, or is blocked where no signal reaches it")  # fmt: skip


def _no_stack(place: RankHang) -> str:
    if place.state in ("gone", "failed"):
        return "its process is gone: no stack to take"
    site = place.collective.site if place.collective is not None else ""
    return f"not taken yet{f'; its ledger: called at {site}' if site else ''}"
