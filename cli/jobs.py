"""`traintop jobs` and the job choice of `traintop attach`: jobs, not rank segments.

Both list what the monitor's Training panel lists: one job per group of ranks
(:func:`traintop.views.job_groups.groups_of`), running jobs first in natural order.  `jobs --json`
stays one object per rank (scripts filter ranks) and adds ``job``, the key that groups them.
Error messages name at most ``LISTED`` jobs: a sweep of 24 runs must not become one
unreadable line.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from typing import TextIO

from traintop.collectors.snapshot import JobSnapshot
from traintop.diagnosis.export import (
    ending_to_dict,
    hang_to_dict,
    memory_to_dict,
    threads_to_dict,
)
from traintop.diagnosis.stack_text import fold_line
from traintop.views.format import fmt_age, fmt_number, fmt_share
from traintop.views.hang_text import case_text, rank_text, state_text
from traintop.views.job_groups import JobGroup, fmt_first_step, groups_of

LISTED = 4  # jobs named in an error message before "… and N more"
HEADER = (
    f"{'PID':>8}  {'NAME':<24} {'RANKS':>5}  {'STATE':<11} {'STEPS/S':>8} {'SAMPLES/S':>10} "
    f"{'DATA WAIT':>9}  {'SLOWEST':<9} {'AGE':>7} {'1ST STEP':>8}"
)
NONE_FOUND = "no training jobs found (start one with `traintop run -- python train.py`)"


def rank_object(job: JobSnapshot, group: JobGroup) -> dict:
    """One rank as `jobs --json` prints it; ``job`` is shared by every rank of its job."""
    return {
        "pid": job.pid,
        "name": job.name,
        "rank": job.rank,
        "local_rank": job.local_rank,
        "world_size": job.world_size,
        "job_id": job.job_id,
        "job": group.key,
        "started_at": job.started_at,
        "ended_at": job.ended_at,
        "state": job.state,
        "steps_total": job.steps_total,
        "steps_per_s": job.steps_per_s,
        "samples_per_s": job.samples_per_s,
        "data_wait_share": job.data_wait_share,
        "place": _place(job, group),
        "hang": None if group.hang is None else hang_to_dict(group.hang),
        "first_step_s": job.first_step_s,
        "ending": ending_to_dict(job.ending),
        "life": group.life or None,
        "memory": memory_to_dict(job.memory),
        "threads": threads_to_dict(job.threads),
    }


def _place(job: JobSnapshot, group: JobGroup) -> str | None:
    """Where the rank of a stopped job is ("in all_reduce #31 for 12s · ..."); None else."""
    hang = group.hang
    place = next((p for p in hang.ranks if p.pid == job.pid), None) if hang else None
    return None if place is None else rank_text(place)


def _dash(text: str) -> str:
    return "-" if text == "n/a" else text


def _row(pid: int, name: str, ranks: str, state: str, figures: JobSnapshot | JobGroup) -> str:
    return (
        f"{pid:>8}  {name[:24]:<24} {ranks:>5}  {state:<11} "
        f"{_dash(fmt_number(figures.steps_per_s)):>8} "
        f"{_dash(fmt_number(figures.samples_per_s)):>10} "
        f"{_dash(fmt_share(figures.data_wait_share)):>9}"
    )


def job_line(group: JobGroup, now: float) -> str:
    slowest = "" if group.slowest is None else f"r{group.slowest[0]} +{group.slowest[1]:.0%}"
    age = "-" if group.started_at is None else fmt_age(max(0.0, now - group.started_at))
    state = state_text(group.hang).lower() if group.running and group.hang else group.state
    head = _row(group.ranks[0].pid, group.name, group.rank_count, state, group)
    return f"{head}  {slowest:<9} {age:>7} {first_step(group, now):>8}"


def first_step(group: JobGroup, now: float) -> str:
    """How long its first step took (the warm-up), "1m25s…" while it still runs, else "-"."""
    if group.first_step_s is not None:
        return fmt_first_step(group.first_step_s)
    if group.state == "starting" and group.started_at is not None:
        return f"{fmt_age(max(0.0, now - group.started_at))}…"
    return "-"


def life_lines(group: JobGroup) -> list[str]:
    """Under a job: where it is while it starts, how it ended (unless it simply finished)."""
    return [f"          {group.life}"] if group.life else []


def hang_lines(group: JobGroup) -> list[str]:
    """Under a stopped job (or one that crashed in its collectives): its one line (who, where,
    how long), the case, then its ranks folded by where they are."""
    hang = group.hang
    if hang is None:
        return []
    return [f"          {hang.line}", f"            {case_text(hang)}",
            *(f"            {fold_line(f)}" for f in hang.folds)]  # fmt: skip


def rank_line(job: JobSnapshot, group: JobGroup) -> str:
    line = _row(job.pid, f"  rank {job.rank}", "", job.state, job)
    place = _place(job, group)
    return f"{line}  {place}" if place else line


def print_jobs(found: Sequence[JobSnapshot], as_json: bool, ranks: bool, out: TextIO) -> None:
    """What `traintop jobs [--ranks] [--json]` prints."""
    now = time.time()
    groups = groups_of(found, now)
    if as_json:
        objects = [rank_object(job, g) for g in groups for job in g.ranks]
        out.write(json.dumps(objects, indent=2) + "\n")
        return
    if not groups:
        out.write(NONE_FOUND + "\n")
        return
    lines = [HEADER]
    for group in groups:
        lines.append(job_line(group, now))
        lines += hang_lines(group)
        lines += life_lines(group)
        if ranks and len(group.ranks) > 1:
            lines += [rank_line(job, group) for job in group.ranks]
    out.write("\n".join(lines) + "\n")


def select_job(found: Sequence[JobSnapshot], wanted: str | None, pid: int | None) -> int | None:
    """The pid to focus for `attach [PID|NAME]`: the lowest rank of the named job (so the
    monitor shows every rank of it), the given pid, or the only running job; None if none."""
    groups = groups_of(found, time.time())
    if pid is not None:
        return pid if any(g.has_pid(pid) for g in groups) else None
    running = [g for g in groups if g.running] or groups
    if wanted is not None:
        named = [g for g in groups if g.name == wanted]
        running = [g for g in named if g.running] or named
    return running[0].ranks[0].pid if len(running) == 1 else None


def describe(group: JobGroup) -> str:
    """ "4242 (llama-7b, 8 ranks, live)": how an error message names a job."""
    count = len(group.ranks)
    ranks = f", {count} ranks" if count > 1 else ""
    return f"{group.ranks[0].pid} ({group.name}{ranks}, {group.state})"


def capped(items: Sequence[str], limit: int = LISTED) -> str:
    """At most ``limit`` items, then "… and 20 more"."""
    shown = ", ".join(items[:limit]) or "none"
    rest = len(items) - limit
    return f"{shown}, … and {rest} more" if rest > 0 else shown


def no_job_message(found: Sequence[JobSnapshot], wanted: str | None) -> str:
    """Why `attach` found nothing to attach to, with the jobs it could attach to."""
    groups = groups_of(found, time.time())
    if wanted is not None and sum(g.name == wanted and g.running for g in groups) > 1:
        same = [describe(g) for g in groups if g.name == wanted and g.running]
        return f"traintop: several running jobs named {wanted!r}, give a PID: {capped(same)}"
    if wanted is not None:
        what = f"no training job {wanted!r}"
    else:
        what = "several jobs, name one" if groups else "no training job found"
    return f"traintop: {what}; attachable jobs: {capped([describe(g) for g in groups])}"
