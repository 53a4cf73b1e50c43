"""The diagnosis engine: run every rule over a window, rank what holds, name the primary.

Pure and stateless: the same window always gives the same verdict.  Time comes from the
snapshots' monotonic stamps, never from a clock.  Flicker control lives in
:mod:`diagnosis.stabilizer`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from collectors.snapshot import Snapshot
from diagnosis import rules_data, rules_gpu, rules_host, rules_job
from diagnosis.context import Context, build_context
from diagnosis.model import SEVERITIES, Candidate, Finding, JobSummary, Verdict

MIN_WINDOW_S = 3.0
MIN_SAMPLES = 2

Rule = Callable[[Context], Candidate | None]

# One entry per bottleneck id; each rule decides alone whether its bottleneck holds.
RULES: tuple[tuple[str, Rule], ...] = (
    ("data_io", rules_data.data_io),
    ("data_cpu", rules_data.data_cpu),
    ("data_starved", rules_data.data_starved),
    ("host_overhead", rules_host.host_overhead),
    ("sync_stall", rules_host.sync_stall),
    ("oversubscribed", rules_host.oversubscribed),
    ("network", rules_job.network),
    ("periodic_stall", rules_job.periodic_stall),
    ("throttle_thermal", rules_gpu.throttle_thermal),
    ("throttle_power", rules_gpu.throttle_power),
    ("memory", rules_gpu.memory),
    ("idle", rules_job.idle),
    ("compute", rules_job.compute),
)


def _unknown(summary: str, mode: str, window_s: float) -> Verdict:
    finding = Finding("unknown", 0.0, "info", summary)
    return Verdict(primary=finding, also=(), mode=mode, window_s=window_s, since_s=None)


def _rank(c: Candidate) -> tuple[float, int, float]:
    """Biggest estimated share of step time lost first; severity, then confidence break ties."""
    f = c.finding
    return (c.lost_share, SEVERITIES.index(f.severity), f.confidence)


def _jobs(window: Sequence[Snapshot]) -> tuple[JobSummary, ...]:
    return tuple(
        JobSummary(j.pid, j.name, j.steps_per_s, j.samples_per_s, j.data_wait_share)
        for j in window[-1].jobs
    )


def _check(window: Sequence[Snapshot]) -> list[Snapshot]:
    """Validate the input once, with a one-line message, and order it by sampling time."""
    items = list(window)
    bad = next((x for x in items if not isinstance(x, Snapshot)), None)
    if bad is not None:
        raise TypeError(f"diagnose() needs Snapshot objects, got {type(bad).__name__}")
    return sorted(items, key=lambda s: s.monotonic)


def diagnose(
    window: Sequence[Snapshot], *, job_pid: int | None = None, min_window_s: float = MIN_WINDOW_S
) -> Verdict:
    """Name the bottleneck of the job (``job_pid``, else the attached job, else the machine)
    over ``window`` (snapshots, any order); ``unknown`` until the window spans
    ``min_window_s`` seconds."""
    snaps = _check(window)
    mode = "attach" if snaps and snaps[-1].jobs else "system"
    span = snaps[-1].monotonic - snaps[0].monotonic if snaps else 0.0
    if len(snaps) < MIN_SAMPLES or span < min_window_s:
        return _unknown(f"collecting data: {span:.1f} of {min_window_s:g} s", mode, span)
    ctx = build_context(snaps, job_pid)
    if job_pid is not None and ctx.job is None:
        return _unknown(f"no attached job with pid {job_pid}", "system", span)
    if not ctx.has_gpus and ctx.job is None:
        return _unknown("no GPU and no attached job: nothing to diagnose", ctx.mode, span)
    found = sorted((c for _, rule in RULES if (c := rule(ctx))), key=_rank, reverse=True)
    if not found:
        return _unknown("no rule matched this window", ctx.mode, span)
    findings = tuple(c.finding for c in found)
    return Verdict(findings[0], findings[1:], ctx.mode, span, None, _jobs(snaps))
