"""Real training jobs under ``traintop run``, each figure traintop shows against the job's own.

The compute job (the card is the limit) is the reference run: while it steps, the surfaces users
read are checked under load (``during``); afterwards its step rate and count, GPU time per step,
phase split, its busy share, verdict and the GPU-process join are judged.  Then two jobs with a
known bottleneck: a starved DataLoader, a card held nearly full (the jobs whose GPU idles inside
the step, launch-bound or stalled by syncs, are ``gpucheck.idle_jobs``).
"""

from __future__ import annotations

import statistics
from collections.abc import Callable
from typing import Any

from gpucheck.busy_checks import profiler_busy
from gpucheck.context import Context
from gpucheck.jobs import Job
from gpucheck.observed import Observed, observe
from gpucheck.results import Check, Result, failed, judged, run, skipped
from traintop.collectors.snapshot import JobSnapshot
from traintop.ring import FLAG_GPU_VALID

RATE_WINDOW_S = 10.0  # the window of traintop's job collector
RATE_TOLERANCE = 0.05
GPU_TIME_TOLERANCE = 0.05
PHASE_TOLERANCE = 0.05  # share points
STEP_COUNT_SLACK = 2  # the first boundary is learnt from the loop
LOW_UTIL_PCT = 50.0
DATA_VERDICTS = frozenset({"data_cpu", "data_io", "data_starved"})
PROFILE_STEPS = "10"
NS = 1_000_000_000


def _first_start(result: dict[str, Any]) -> int:
    return result["end_ns"][0] - sum(ns[0] for ns in result["phase_ns"].values())


def collector_window(obs: Observed) -> tuple[int, int]:
    """The span the job collector summarised in its last snapshot, in CLOCK_MONOTONIC ns, from
    the job's own step ends: it keeps each poll's steps whole while the poll's last step ended
    within ``RATE_WINDOW_S`` of the snapshot, so the span starts where the poll holding the
    first step inside that window began (where the poll before it left off).  A step ends
    before the snapshot that follows it: the poll precedes the snapshot's time by milliseconds."""
    ends, polls = obs.result["end_ns"], [int(s.monotonic * NS) for s in obs.snapshots]
    hi = polls[-1]
    edge = hi - int(RATE_WINDOW_S * NS)
    first = next((end for end in ends if end >= edge), hi)
    earlier = [p for p in polls if p < first]
    if not earlier:  # inside the first poll, which kept the steps of the window before it
        return max(polls[0] - int(RATE_WINDOW_S * NS), _first_start(obs.result)), hi
    return max(end for end in ends if end <= earlier[-1]), hi


def steps_in(result: dict[str, Any], lo: int, hi: int) -> int:
    """How many of the job's steps ended in (lo, hi], by its own clock."""
    return sum(1 for end in result["end_ns"] if lo < end <= hi)


def own_rate(result: dict[str, Any], lo: int, hi: int) -> float:
    """Steps per second ending in (lo, hi], by the job's own clock."""
    return steps_in(result, lo, hi) / ((hi - lo) / NS)


def steps_rate(obs: Observed) -> Result:
    """traintop's steps/s (the Training panel's, its last 10 s) and step count against the job's:
    within 5 %, or one step of the window where it holds fewer than 20 (the window is rebuilt
    from the polls' times, which a loaded box spreads: the CPU job of fake mode steps twice a
    second beside the suite's other tests, where a card's job makes hundreds)."""
    job = obs.job
    if job is None or not job.steps_per_s:
        return failed("traintop shows no step rate for the job", last_job=_as_dict(job))
    lo, hi = collector_window(obs)
    own = own_rate(obs.result, lo, hi)
    counted = obs.records[-1].step + 1 if obs.records else 0
    profiled = (obs.result.get("profile") or {}).get("steps", 0)
    total = len(obs.result["end_ns"]) + profiled
    ratio = job.steps_per_s / own
    tolerance = max(RATE_TOLERANCE, 1 / max(1, steps_in(obs.result, lo, hi)))
    ok = abs(ratio - 1) <= tolerance and abs(counted - total) <= STEP_COUNT_SLACK
    reason = (
        f"{job.steps_per_s:.2f} steps/s against the job's {own:.2f} (x{ratio:.3f}); "
        f"{counted} steps counted, the job made {total}"
    )
    return judged(
        ok,
        reason,
        traintop_steps_per_s=job.steps_per_s,
        job_steps_per_s=own,
        traintop_steps=counted,
        job_steps=total,
        ready_s=round(obs.ready_s, 1),
        rule=f"rate within {tolerance:.0%}, count within {STEP_COUNT_SLACK}",
    )


def gpu_time(obs: Observed) -> Result:
    """GPU ms per step from the probe's CUDA events (every 16th step) against the job's own
    ``torch.cuda.Event`` around every step, medians over the steady steps."""
    ours = [
        r.gpu_ns / 1e6
        for r in obs.records
        if r.flags & FLAG_GPU_VALID and r.t_start_ns >= obs.steady_ns
    ]
    index = obs.result["steady_index"] or 1
    theirs = [ms for ms in obs.result["gpu_ms"][index:] if ms is not None]
    if not ours or not theirs:
        return failed(f"{len(ours)} steps timed by traintop, {len(theirs)} by the job")
    a, b = statistics.median(ours), statistics.median(theirs)
    reason = (
        f"{a:.3f} ms per step against the job's {b:.3f} ms (x{a / b:.3f}; {len(ours)} steps timed)"
    )
    return judged(
        abs(a / b - 1) <= GPU_TIME_TOLERANCE,
        reason,
        traintop_ms=a,
        job_ms=b,
        traintop_timed=len(ours),
        job_timed=len(theirs),
        rule=f"medians within {GPU_TIME_TOLERANCE:.0%}",
    )


def own_shares(obs: Observed) -> tuple[dict[str, float], float]:
    """The job's own phase split over the collector's window, and the largest share one of its
    steps holds there (what a step more or less at the window's edge can move a share by)."""
    lo, hi = collector_window(obs)
    inside = [i for i, end in enumerate(obs.result["end_ns"]) if lo < end <= hi]
    phases = obs.result["phase_ns"].values()
    sums = {name: sum(ns[i] for i in inside) for name, ns in obs.result["phase_ns"].items()}
    total = sum(sums.values()) or 1
    one_step = max((sum(ns[i] for ns in phases) for i in inside), default=0) / total
    return {name: value / total for name, value in sums.items()}, one_step


def phase_split(obs: Observed) -> Result:
    """The phase split traintop shows against the job's own clock reads at the same points:
    each share within 5 points, plus the share one step holds in the window (a step more or
    less at its edge; under 1 % on a card, 7 % for the CPU job of fake mode on a loaded box)."""
    job = obs.job
    if job is None or not job.phases:
        return failed("traintop shows no phases for the job", last_job=_as_dict(job))
    ours = {p.name: p.share for p in job.phases}
    theirs, one_step = own_shares(obs)
    tolerance = PHASE_TOLERANCE + one_step
    rows = {
        n: {"traintop": round(ours.get(n, 0.0), 4), "job": round(theirs.get(n, 0.0), 4)}
        for n in sorted(set(ours) | set(theirs))
    }
    off = [n for n, r in rows.items() if abs(r["traintop"] - r["job"]) > tolerance]
    split = ", ".join(f"{n} {r['traintop']:.0%}/{r['job']:.0%}" for n, r in rows.items())
    return judged(
        not off,
        f"traintop/job: {split}" + (f"; off: {', '.join(off)}" if off else ""),
        phases=rows,
        rule=f"each within {tolerance:.0%} points",
    )


def verdict_is(obs: Observed, expected: frozenset[str]) -> Result:
    """``diagnose`` names the bottleneck the job was built to have."""
    v = obs.verdict or {}
    got = v.get("bottleneck")
    reason = f"diagnose says {got} ({v.get('summary')}), expected {' or '.join(sorted(expected))}"
    return judged(got in expected, reason, verdict=verdict_data(v))


def verdict_data(v: dict[str, Any]) -> dict[str, Any]:
    keys = ("bottleneck", "confidence", "summary", "evidence", "remedies", "also", "mode",
            "since_s")  # fmt: skip
    return {key: v.get(key) for key in keys}


def gpu_process_join(obs: Observed) -> Result:
    """NVML lists the job's PID as a process on the card (the join of GPU memory to a process
    and a job; a PID namespace, as in most containers, breaks it)."""
    gpus = obs.snapshots[-1].gpus if obs.snapshots else ()
    listed = sorted({p.pid for g in gpus for p in g.processes})
    ok = obs.pid in listed
    reason = f"job pid {obs.pid} {'is' if ok else 'is not'} among NVML's GPU processes {listed}"
    return judged(ok, reason, nvml_pids=listed)


def _as_dict(job: JobSnapshot | None) -> dict[str, Any] | None:
    if job is None:
        return None
    keys = ("steps_per_s", "steps_total", "gpu_busy_share", "data_wait_share", "state")
    return {key: getattr(job, key) for key in keys}


def _util_median(obs: Observed) -> float | None:
    values = [
        g.util_gpu_pct for s in obs.snapshots for g in s.gpus[:1] if g.util_gpu_pct is not None
    ]
    return statistics.median(values) if values else None


COMPUTE_TITLE = "the compute-bound bf16 transformer under traintop run"
NO_CUDA_CHECKS = (
    ("train_gpu_time", "GPU time per step: traintop's CUDA events against the job's"),
    ("train_busy_truth", "the busy share traintop shows against the profiler's kernel time"),
    ("train_verdict", "verdict of the compute-bound job: compute"),
    ("gpu_process_join", "NVML lists the job's PID on the card"),
)


def compute_checks(ctx: Context, during: Callable[[Job | None], list[Check]]) -> list[Check]:
    """The reference job: surfaces under load while it runs, then its figures judged.  If the
    job fails, the surfaces are still checked (without it) and the failure is one check."""
    checks: list[Check] = []
    try:
        profiled = () if ctx.no_cuda else ("--profile-steps", PROFILE_STEPS)
        obs = observe(ctx, "compute", "compute", *profiled,
                      during=lambda job: checks.extend(during(job)))  # fmt: skip
    except Exception as exc:  # the job's own failure; the checks that need no job still run
        reason = f"{type(exc).__name__}: {exc}"
        return (checks or during(None)) + [run("compute_job", COMPUTE_TITLE, failed, reason)]
    checks.append(
        run("train_steps", "steps/s and step count: traintop against the job", steps_rate, obs)
    )
    checks.append(
        run("train_phases", "phase split: traintop against the job's clock", phase_split, obs)
    )
    if ctx.no_cuda:
        return [
            *checks,
            *(run(i, t, skipped, f"no CUDA: {ctx.no_cuda}") for i, t in NO_CUDA_CHECKS),
        ]
    return [
        *checks,
        run("train_gpu_time", NO_CUDA_CHECKS[0][1], gpu_time, obs),
        run("train_busy_truth", NO_CUDA_CHECKS[1][1], profiler_busy, obs),
        run("train_verdict", NO_CUDA_CHECKS[2][1], verdict_is, obs, frozenset({"compute"})),
        run("gpu_process_join", NO_CUDA_CHECKS[3][1], gpu_process_join, obs),
    ]


def data_job(ctx: Context) -> Result:
    """A DataLoader too slow for the card: a data verdict, and NVML reads the card underused."""
    obs = observe(ctx, "data", "data")
    util = _util_median(obs)
    verdict = verdict_is(obs, DATA_VERDICTS)
    low = util is not None and util < LOW_UTIL_PCT
    reason = f"{verdict.reason}; GPU utilization median {util}% (below {LOW_UTIL_PCT:g}%: {low})"
    return judged(verdict.status == "pass" and low, reason, util_median_pct=util, **verdict.data)


def memory_job(ctx: Context) -> Result:
    """A job whose tensors fill the card: the memory finding, with the job's own allocation."""
    obs = observe(ctx, "memory", "memory")
    v = obs.verdict or {}
    named = [v.get("bottleneck"), *(a.get("bottleneck") for a in v.get("also") or ())]
    gpu = obs.snapshots[-1].gpus[0] if obs.snapshots and obs.snapshots[-1].gpus else None
    used = gpu.mem_used_bytes / gpu.mem_total_bytes if gpu and gpu.mem_total_bytes else None
    share = "no memory reading" if used is None else f"used {used:.1%}"
    reason = (
        f"memory {'named' if 'memory' in named else 'not named'} (verdicts {named}); NVML {share}"
    )
    return judged(
        "memory" in named,
        reason,
        nvml_used_share=used,
        job_memory=obs.result.get("memory"),
        verdict=verdict_data(v),
    )
