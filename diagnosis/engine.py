"""The diagnosis engine: every job's verdict over a window, and the one to show first.

Each live job is judged on all of its ranks (:mod:`traintop.diagnosis.job_verdicts`); ended jobs get
their final word in the past tense and never take part in a live one's; with no live job the
machine itself is judged, or the answer is that nothing runs.  Pure and stateless: the same
window always gives the same verdict.  Time comes from the snapshots' stamps, never from a
clock.  Flicker control lives in :mod:`traintop.diagnosis.stabilizer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis import (
    rules_data,
    rules_gil,
    rules_gpu,
    rules_host,
    rules_job,
    rules_launch,
    rules_memory,
)
from traintop.diagnosis.context import Box, Context, context_for
from traintop.diagnosis.explain import explain
from traintop.diagnosis.findings import with_fixes
from traintop.diagnosis.job_groups import group_jobs
from traintop.diagnosis.job_verdicts import judge_ended, judge_live, ranked_rules
from traintop.diagnosis.memo import Memo
from traintop.diagnosis.model import Candidate, Finding, JobVerdict, Verdict

MIN_WINDOW_S = 3.0
MIN_SAMPLES = 2
# Ticks are scheduled ``interval`` apart but land a few ms early or late: a window of three 1 s
# ticks may span 2.99 s.  Judge it rather than wait a whole extra tick.
TICK_JITTER = 0.02
NO_LIVE_JOB = "no live training job"

Rule = Callable[[Context], Candidate | None]

# One entry per bottleneck id; each rule decides alone whether its bottleneck holds.
RULES: tuple[tuple[str, Rule], ...] = (
    ("data_io", rules_data.data_io),
    ("data_cpu", rules_data.data_cpu),
    ("data_starved", rules_data.data_starved),
    ("data_handoff", rules_data.data_handoff),
    ("gil_contention", rules_gil.gil_contention),
    ("host_overhead", rules_launch.host_overhead),
    ("sync_stall", rules_launch.sync_stall),
    ("oversubscribed", rules_host.oversubscribed),
    ("network", rules_job.network),
    ("periodic_stall", rules_job.periodic_stall),
    ("throttle_thermal", rules_gpu.throttle_thermal),
    ("throttle_power", rules_gpu.throttle_power),
    ("memory", rules_gpu.memory),
    ("host_memory", rules_memory.host_memory),
    ("idle", rules_job.idle),
    ("compute", rules_job.compute),
)
BOX_WIDE = frozenset({"oversubscribed"})  # a finding about every job on the box
BOX_WIDE_METRICS = frozenset({"swap_bytes_per_s"})
run_rules = ranked_rules(RULES)


def _unknown(summary: str, mode: str, window_s: float, **more) -> Verdict:
    finding = Finding("unknown", 0.0, "info", summary)
    return Verdict(primary=finding, also=(), mode=mode, window_s=window_s, since_s=None, **more)


def _check(window: Sequence[Snapshot]) -> list[Snapshot]:
    """Validate the input once, with a one-line message, and order it by sampling time."""
    items = list(window)
    bad = next((x for x in items if not isinstance(x, Snapshot)), None)
    if bad is not None:
        raise TypeError(f"diagnose() needs Snapshot objects, got {type(bad).__name__}")
    return sorted(items, key=lambda s: s.monotonic)


def diagnose(
    window: Sequence[Snapshot],
    *,
    job_pid: int | None = None,
    min_window_s: float = MIN_WINDOW_S,
    memo: Memo | None = None,
) -> Verdict:
    """Name the bottleneck of every job over ``window`` (snapshots, any order): one verdict per
    job in ``per_job``; the primary is about ``job_pid``'s job, else the worst live job, else
    the machine.  ``unknown`` until the window spans ``min_window_s`` seconds.  ``memo``, kept
    by the caller between calls on a sliding window, saves the work those windows share; the
    verdict is the same with or without it."""
    snaps = _check(window)
    span = snaps[-1].monotonic - snaps[0].monotonic if snaps else 0.0
    if not snaps:
        return _unknown("no sample taken", "system", 0.0)
    groups = group_jobs(snaps[-1])
    if job_pid is not None and not any(job_pid in g.pids for g in groups):
        return _unknown(f"no attached job with pid {job_pid}", "system", span)
    if len(snaps) < MIN_SAMPLES or span < min_window_s * (1 - TICK_JITTER):
        mode = "attach" if any(g.live for g in groups) else "system"
        return _unknown(f"collecting data: {span:.1f} of {min_window_s:g} s", mode, span)
    memo = Memo() if memo is None else memo
    live, box = judge_live(memo.window(snaps), [g for g in groups if g.live], run_rules)
    ended = judge_ended(snaps, [g for g in groups if not g.live], run_rules, memo)
    per_job = (*live, *ended)
    focus = _focus(per_job, job_pid)
    if focus is not None:
        return _about_job(focus, per_job, span)
    return _about_box(box, per_job, span)


def _focus(per_job: Sequence[JobVerdict], job_pid: int | None) -> JobVerdict | None:
    """The job asked for (live or ended), else the worst live one."""
    if job_pid is not None:
        return next(v for v in per_job if any(r.pid == job_pid for r in v.ranks))
    return next((v for v in per_job if v.live), None)


def _about_job(focus: JobVerdict, per_job: tuple[JobVerdict, ...], span: float) -> Verdict:
    """The verdict on one job; ``jobs`` holds its ranks, or every live rank for a finding
    about the whole box (oversubscription, swapping)."""
    ranks = focus.ranks
    if focus.live and _box_wide(focus.primary):
        ranks = tuple(r for v in per_job if v.live for r in v.ranks)
    return Verdict(
        primary=focus.primary,
        also=focus.also,
        mode="attach",
        window_s=span,
        since_s=None,
        jobs=ranks,
        per_job=per_job,
        job_id=focus.job_id,
        live_jobs=sum(v.live for v in per_job),
    )


def _box_wide(finding: Finding) -> bool:
    if finding.bottleneck in BOX_WIDE:
        return True
    return any(e.metric in BOX_WIDE_METRICS for e in finding.evidence)


def _about_box(box: Box, per_job: tuple[JobVerdict, ...], span: float) -> Verdict:
    """No live attached job: judge the GPUs (a process may use one unattached, or they idle),
    and say when nothing runs at all."""
    ctx = context_for(box, None)
    idle = not any(g.pids for g in ctx.gpus)
    if not box.has_gpus:
        return _unknown(no_live_job(per_job), "system", span, per_job=per_job, idle_box=True)
    found = run_rules(ctx)
    if not found:
        return _unknown(explain(ctx).summary, "system", span, per_job=per_job, idle_box=idle)
    findings = tuple(with_fixes(c).finding for c in found)
    return Verdict(findings[0], findings[1:], "system", span, None, per_job=per_job, idle_box=idle)


def no_live_job(per_job: Sequence[JobVerdict]) -> str:
    """One line: nothing runs, and the newest ended run's final word."""
    ended = [v for v in per_job if not v.live]
    if not ended:
        return NO_LIVE_JOB
    newest = ended[0]
    more = f" ({len(ended)} ended runs)" if len(ended) > 1 else ""
    return f"{NO_LIVE_JOB}{more}; {newest.name} {newest.primary.summary}"
