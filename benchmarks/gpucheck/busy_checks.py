"""Is the busy share traintop shows the card's truth, and is traintop's own step profile sound?

The truth is the time kernels ran per step: after its window the job profiles ``--profile-steps``
more steps with torch.profiler (GPU activity only) and the kernel time per step is divided by its
own median step while unprofiled (a profiled step runs slower: its own span would undercount).
traintop's figure is ``JobSnapshot.gpu_busy_share`` (NVML's per-process SM share of the job,
else its GPU's utilization: ``gpu_busy_source``), the median over the window's snapshots.  In
fake mode no kernel runs: the truth is the per-process share the fake card was scripted to give
the job, so what is checked there is the join (the job's PID on its GPU, the "process" source).

traintop's sampled profile (``JobSnapshot.gpu_profile``, one step profiled in the job by the
probe) is judged for being what it claims, since nothing but a card can show its join of kernels
to launches (kineto's correlation ids and activity names) and its clock (the step's window in
``time_ns``, the events in kineto's): at least 95 % of the kernels joined to their launch call,
its kernels per step within 10 % of the job's own profiler, its kernel time per step within 20 %
of the job's (a misaligned clock cuts kernels off the window), its shares adding to 1, and the
profiled step 0.8 to 4 times an ordinary one.
"""

from __future__ import annotations

import statistics
from dataclasses import asdict
from typing import Any

from gpucheck.fake import FAKE_JOB_SM_PCT
from gpucheck.observed import Observed, median_step_ms
from gpucheck.results import Result, failed, judged
from traintop.collectors.snapshot import GpuStepProfile

BUSY_TOLERANCE = 0.10  # issue 33: never a busy share the card contradicts by more
JOINED_MIN = 0.95
KERNELS_TOLERANCE = 0.10
KERNEL_TIME_TOLERANCE = 0.20
SHARES_SLACK = 0.01
PROFILED_STEP = (0.8, 4.0)  # a profiled step against an ordinary one, times
SHARES = ("kernel_share", "host_wait_share", "sync_share", "kernel_wait_share", "other_share")


def _median(values: list[float]) -> float | None:
    return statistics.median(values) if values else None


def latest_profile(obs: Observed) -> GpuStepProfile | None:
    """The newest sampled profile the monitor showed of the job."""
    found = [job.gpu_profile for job in obs.shown() if job.gpu_profile is not None]
    return found[-1] if found else None


def _profile_words(p: GpuStepProfile | None) -> str:
    if p is None:
        return "no profile of traintop's"
    host = p.host_wait_share + p.kernel_wait_share
    return (f"traintop's profiled step: kernels {p.kernel_share:.0%}, waiting on the host "
            f"{host:.0%}, on syncs {p.sync_share:.0%}")  # fmt: skip


def busy_truth(obs: Observed, truth: float | None, truth_from: str, **data: Any) -> Result:
    """traintop's busy share (median over the window, with its sources) within
    ``BUSY_TOLERANCE`` of ``truth``; traintop's own profile beside it."""
    shown = obs.shown()
    values = [j.gpu_busy_share for j in shown if j.gpu_busy_share is not None]
    sources = sorted({j.gpu_busy_source for j in shown if j.gpu_busy_source})
    busy = _median(values)
    queued = _median([j.gpu_queued_share for j in shown if j.gpu_queued_share is not None])
    profile = latest_profile(obs)
    if busy is None or truth is None:
        return failed(f"no busy share on one side: traintop {busy}, {truth_from} {truth}",
                      **data)  # fmt: skip
    reason = (f"traintop shows busy {busy:.0%} ({'/'.join(sources)}), {truth_from} {truth:.0%}; "
              f"queued {'n/a' if queued is None else f'{queued:.0%}'}; "
              f"{_profile_words(profile)}")  # fmt: skip
    return judged(
        abs(busy - truth) <= BUSY_TOLERANCE + 1e-9, reason, traintop=busy, sources=sources,
        per_snapshot=values, truth=truth, truth_from=truth_from, queued=queued,
        traintop_profile=None if profile is None else asdict(profile),
        rule=f"within {BUSY_TOLERANCE:.0%} points", **data,
    )  # fmt: skip


def profiler_busy(obs: Observed) -> Result:
    """On a card: against the kernel time of the job's own profile over its unprofiled step."""
    profile = obs.result.get("profile") or {}
    steps, busy_ms = profile.get("steps"), profile.get("busy_ms")
    if not steps or busy_ms is None:
        return busy_truth(obs, None, "the profiler", profiler=profile)
    step_ms = median_step_ms(obs.result)
    words = f"kernels ran {busy_ms / steps:.1f} ms of the job's {step_ms:.1f} ms step"
    return busy_truth(obs, busy_ms / steps / step_ms, words, step_ms=step_ms, profiler=profile)


def scripted_busy(obs: Observed) -> Result:
    """In fake mode: against the share the fake card gives the job, from the process source."""
    result = busy_truth(obs, FAKE_JOB_SM_PCT / 100, "the fake card's SM share of its PID")
    if result.data.get("sources") == ["process"]:
        return result
    return failed(f"{result.reason}; expected the 'process' source", **result.data)


def _kernel_problems(p: GpuStepProfile, joined: Any, theirs: dict[str, Any]) -> list[str]:
    """What a card shows of the profile's join and clock: the kernels, and their time."""
    problems = []
    if not isinstance(joined, float | int) or joined < JOINED_MIN:
        problems.append(f"{joined} of the kernels joined to their launch (want {JOINED_MIN:.0%})")
    per_step = theirs.get("kernels_per_step")
    if not per_step or abs(p.kernels / per_step - 1) > KERNELS_TOLERANCE:
        problems.append(f"{p.kernels} kernels a step, the job's profiler {per_step}")
    ms, steps = theirs.get("busy_ms"), theirs.get("steps")
    ours = p.kernel_share * p.step_s * 1000
    if not ms or not steps or abs(ours / (ms / steps) - 1) > KERNEL_TIME_TOLERANCE:
        problems.append(f"kernels ran {ours:.1f} ms of the step, the job's profiler says "
                        f"{ms and steps and round(ms / steps, 1)}")  # fmt: skip
    return problems


def profile_sound(obs: Observed, cuda: bool) -> Result:
    """traintop's own profiled step, judged as the module says; on the CPU (fake mode) no kernel
    runs, so only its shares are (that it reached the monitor at all is the path checked)."""
    p = latest_profile(obs)
    if p is None:
        return failed("no sampled profile reached the monitor", facts=obs.facts)
    entry = (obs.facts or {}).get("profile") or {}
    ratio = p.step_s * 1000 / median_step_ms(obs.result)
    total = sum(getattr(p, name) for name in SHARES)
    problems = [] if abs(total - 1) <= SHARES_SLACK else [f"shares add up to {total:.3f}"]
    theirs = obs.result.get("profile") or {}
    if cuda:  # a CPU shared with the check's other work stretches steps at random: not there
        if not PROFILED_STEP[0] <= ratio <= PROFILED_STEP[1]:
            problems.append(f"the profiled step is {ratio:.2f}x an ordinary one")
        problems += _kernel_problems(p, entry.get("joined"), theirs)
    joined, cost = entry.get("joined"), p.cost_share
    reason = (f"step #{p.step}, {p.step_s * 1000:.1f} ms ({ratio:.2f}x an ordinary step): "
              f"{_profile_words(p).split(': ', 1)[1]}; {p.kernels} kernels, "
              f"{'n/a' if joined is None else f'{joined:.1%}'} joined; cost "
              f"{'n/a' if cost is None else f'{cost:.3%}'} of the training so far")  # fmt: skip
    if not cuda:
        reason += "; no kernel on the CPU: its join is checked on a card"
    return judged(not problems, reason + (f"; {'; '.join(problems)}" if problems else ""),
                  profile=asdict(p), joined=joined, job_profiler=theirs,
                  rule=f"joined >= {JOINED_MIN:.0%}, kernels within {KERNELS_TOLERANCE:.0%}, "
                  f"kernel time within {KERNEL_TIME_TOLERANCE:.0%}, shares sum to 1, profiled "
                  f"step {PROFILED_STEP[0]}-{PROFILED_STEP[1]}x")  # fmt: skip
