"""A run's life in words: starting ("first step for 85 s, on CPU in compile_fx
(torch/_inductor)"), and how it ended ("rank 1 raised ValueError in check_batch
(train.py:40)", "stopped by SIGTERM", "gone without a word").

A rank that has not stepped yet is judged by nothing it measured (it measured nothing): the
verdict says where its main thread is and whether it is on the CPU, so a long warm-up reads as
one.  An ended job's ending is that of the rank that explains it: a rank that raised, else one
gone without a word, else one a signal stopped (torchrun stops the others when one fails).
Pure functions over snapshots.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from traintop.collectors.snapshot import Ending, Frame, JobSnapshot
from traintop.collectors.warmup import on_cpu
from traintop.diagnosis import kill_words
from traintop.diagnosis.model import Evidence, Finding
from traintop.diagnosis.stack_text import called_past, innermost_user
from traintop.diagnosis.text import duration, rank_list

# Ends that explain a job's, first: the failure, then a death without a word, then a stop.
CAUSE_ORDER = ("raised", "exited", "gone", "signal", "finished")
SELF_FAILED = frozenset({"raised", "exited"})  # ended by its own code: who went first matters
FAILED_STATES = frozenset({"crashed", "gone", "restarted"})  # its collectives say why it ended
SITE_DIRS = ("site-packages", "dist-packages")
STDLIB_MARKERS = ("/lib/python3", "/lib64/python3")


def starting_text(job: JobSnapshot, now: float | None) -> str:
    """ "first step for 1m25s, on CPU in compile_fx (torch/_inductor)": how long the rank has
    been starting (since its ring was made, at start-up under ``traintop run``), whether it
    works, and where its main thread is (its helper's answer, asked while it starts)."""
    age = now - job.started_at if now is not None and job.started_at is not None else None
    text = f"first step for {duration(age)}" if age is not None else "before its first step"
    if job.proc is not None:
        text += ", on CPU" if on_cpu(job.proc) else f", off CPU ({job.proc.state})"
    frames = job.stack.frames if job.stack is not None else ()
    return f"{text} in {place(frames)}" if frames else text


def place(frames: Sequence[Frame]) -> str:
    """The innermost frame outside the standard library, as ``function (package/dir)`` for an
    installed package, ``function (file.py:line)`` for the user's own code."""
    frame = next((f for f in reversed(frames) if not _stdlib(f)), frames[-1])
    return f"{frame.function} ({_where(frame)})"


def _stdlib(frame: Frame) -> bool:
    if frame.file.startswith("<"):
        return True
    installed = any(f"/{d}/" in frame.file for d in SITE_DIRS)
    return not installed and any(m in frame.file for m in STDLIB_MARKERS)


def _where(frame: Frame) -> str:
    """``torch/_inductor`` for a package's module, ``train.py:88`` for a user's file."""
    parts = frame.file.split("/")
    for site in SITE_DIRS:
        if site in parts:
            package = parts[parts.index(site) + 1 : -1]
            return "/".join(package[:2]) or os.path.basename(frame.file)
    return f"{os.path.basename(frame.file)}:{frame.line}"


def starting_finding(ranks: Sequence[JobSnapshot], now: float | None) -> Finding:
    """The verdict on a job none of whose ranks has stepped: no bottleneck yet, where it is
    (each rank's own line as evidence, the longest-starting one in the summary)."""
    first = min(ranks, key=lambda r: (r.started_at is None, r.started_at or 0.0, r.rank))
    who = f"rank {first.rank}: " if len(ranks) > 1 else ""
    facts = tuple(
        Evidence(f"{f'rank {r.rank}: ' if len(ranks) > 1 else ''}{starting_text(r, now)}",
                 "starting_s", now - r.started_at if now and r.started_at else None, "training")
        for r in ranks
    )  # fmt: skip
    summary = f"starting: {who}{starting_text(first, now)}"
    return Finding("unknown", 0.0, "info", summary, facts)


def cause(ranks: Sequence[JobSnapshot]) -> JobSnapshot | None:
    """The ended rank whose ending explains the job's: by kind, then, of the ranks that
    failed, the first (its exception stopped the job before its peers' collectives raised),
    then the lowest rank (a signal from outside stops them all at once)."""
    ended = [r for r in ranks if r.ending is not None]
    if not ended:
        return None
    order = {kind: i for i, kind in enumerate(CAUSE_ORDER)}
    return min(ended, key=lambda r: _cause_key(r.ending, r.rank, order))  # type: ignore[arg-type]


def _cause_key(ending: Ending, rank: int, order: dict[str, int]) -> tuple[int, float, int]:
    at = ending.at if ending.kind in SELF_FAILED and ending.at is not None else float("inf")
    return order.get(ending.kind, 0), at, rank


def job_ending(ranks: Sequence[JobSnapshot]) -> Ending | None:
    """The job's ending: that of the rank that explains it (``cause``)."""
    rank = cause(ranks)
    return rank.ending if rank is not None else None


def how(ending: Ending | None) -> str:
    """The ending in a few words, for a state: "stopped by SIGTERM", "raised ValueError",
    "gone by the OOM killer"."""
    if ending is None:
        return ""
    killed = kill_words.how_killed(ending)
    if killed is not None:
        return killed
    if ending.kind == "signal":
        return f"by {ending.detail}" if ending.detail else ""
    if ending.kind == "raised":
        return f"({ending.detail.split(':', 1)[0]})" if ending.detail else ""
    if ending.kind == "exited":
        return f"(status {ending.exit_code})"
    if ending.kind == "gone":
        return "without a word" if not ending.detail else f"({ending.detail})"
    return ""


def ending_text(ranks: Sequence[JobSnapshot]) -> str:
    """One line on how the job ended: the rank that explains it, what it said, where; then the
    others in short ("ranks 1-2 too", "ranks 1-3: stopped by SIGTERM")."""
    rank = cause(ranks)
    if rank is None or rank.ending is None or rank.ending.kind == "finished":
        return ""  # a run that finished has nothing more to say
    ending = rank.ending
    text = f"rank {rank.rank} {_said(ending)}" if len(ranks) > 1 else _said(ending)
    text += ending_place(ending)
    by_word: dict[str, list[int]] = {}
    for other in ranks:
        if other is not rank and other.ending is not None:
            by_word.setdefault(short_ending(other.ending), []).append(other.rank)
    for word, numbers in by_word.items():
        who = f"rank{'s' if len(numbers) > 1 else ''} {rank_list(numbers)}"
        text += f"; {who} too" if word == short_ending(ending) else f"; {who}: {word}"
    return text


def ending_place(ending: Ending) -> str:
    """ " in step (train.py:88)": the innermost frame of the user's own code, and when it ended
    inside a library call, the call (", calling backward (_tensor.py)"): a Ctrl+C or a SIGTERM
    lands in torch's frames as often as not, and the user asks which of their lines it was.
    A stack with no frame of the user's names its innermost frame."""
    frames = ending.frames
    if not frames:
        return ""
    index = innermost_user(frames)
    frame = frames[-1] if index is None else frames[index]
    text = f" in {frame.function} ({_where(frame)})"
    called = None if index is None else called_past(frames[index + 1 :])
    if called is None:
        return text
    return f"{text}, calling {called.function} ({os.path.basename(called.file)})"


def _said(ending: Ending) -> str:
    killed = kill_words.said(ending)
    if killed is not None:
        return killed
    if ending.kind == "raised":
        return f"raised {ending.detail}" if ending.detail else "raised"
    if ending.kind == "exited":
        return f"exited with status {ending.exit_code} ({ending.detail})"
    if ending.kind == "signal":
        return f"stopped by {ending.detail}" + (" (Ctrl+C)" if ending.detail == "SIGINT" else "")
    if ending.kind == "gone":
        if ending.detail:
            return f"gone: {ending.detail}"
        return "gone without a word (killed: SIGKILL, the OOM killer; or died in native code)"
    return "finished"


def short_ending(ending: Ending) -> str:
    """ "raised ValueError", "stopped by SIGTERM", "gone", "killed by the OOM killer",
    "finished" (also the hang's words for an ended rank, ``diagnosis.hang_words.gone_text``)."""
    killed = kill_words.short(ending)
    if killed is not None:
        return killed
    if ending.kind == "raised":
        return f"raised {ending.detail.split(':', 1)[0]}" if ending.detail else "raised"
    if ending.kind == "signal":
        return f"stopped by {ending.detail}" if ending.detail else "stopped"
    if ending.kind == "exited":
        return f"exited with status {ending.exit_code}"
    return ending.kind


def ending_evidence(ranks: Sequence[JobSnapshot]) -> tuple[Evidence, ...]:
    """How the job ended, as the first evidence line of its final verdict."""
    text = ending_text(ranks)
    return (Evidence(text, "ending", None, "training"),) if text else ()


def post_mortem_due(state: str) -> bool:
    """Whether an ended job's collectives explain its end: only when a rank failed.  A job
    stopped by a signal (or finished) in the middle of a collective, a checkpoint behind a
    barrier, did not end because of it."""
    return state in FAILED_STATES
