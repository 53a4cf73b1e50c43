"""The jobs whose GPU idles inside the step, which issue 33 saw misread on an H200.

``launch``: the small GPT of the issue (``workloads/gpt_model.py``: 8 layers, width 512, four
micro-batches of 16 a step, bf16 autocast, fused AdamW, SDPA, not compiled), written as a user
writes it and run under ``traintop run`` unchanged: ``diagnose`` must say ``host_overhead``,
offer no remedy the job already follows (mixed precision, a fused optimizer) and torch.compile
(it is not compiled), and say what it saw of the job.  ``sync``: the transformer with a
``.item()`` after each of its four micro-steps: ``sync_stall``, naming the line and its count a
step.  On both, the busy share traintop shows against the profiler's kernel time, and traintop's
own sampled profile (asked for early: ``TRAINTOP_PROFILE_FIRST_S``) judged for soundness; while
the launch-bound one runs, GPM and per-process utilization are read back; after it, the facts
the remedies are gated by.

Fake mode: the launch-bound job is a toy on the CPU, profiled by the probe there too
(``TRAINTOP_PROFILE=cpu``), and the fake card lists its PID with a scripted SM share: the busy
share's join, GPM, the per-process calls, the facts and the profile's shares run; the verdict (on
a real card's counters) and the sync job (the sync hook is for CUDA) are skipped, with why.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from gpucheck import fake
from gpucheck.busy_checks import profile_sound, profiler_busy, scripted_busy
from gpucheck.context import Context
from gpucheck.facts_checks import facts_match
from gpucheck.gpu_counters import gpu_counters
from gpucheck.jobs import TRAIN_JOB
from gpucheck.observed import Observed, observe
from gpucheck.results import Check, Result, failed, judged, run, skipped
from gpucheck.train_checks import PROFILE_STEPS, verdict_data
from traintop.collectors.snapshot import JobSnapshot
from traintop.step_profiler import ENV as PROFILE_ENV
from traintop.step_profiler import ENV_FIRST

PROFILE_FIRST_S = "4"  # the probe's first profile 4 s into training: early in the window
FOLLOWED = ("mixed precision", "autocast", "fused optimizer", "fused=true")  # it does these
SEEN = ("bf16 autocast on", "fused AdamW", "not compiled")
SYNC_LINE = "loss.item()"
COUNT_SLACK = 0.5  # syncs a step

COUNTERS = ("gpu_counters", "GPM and the job's per-process utilization read back; which call")
LAUNCH = (
    ("launch_verdict", "the launch-bound GPT of issue 33: host_overhead, remedies it lacks"),
    ("launch_busy_truth", "its busy share against the profiler's kernel time"),
    ("launch_profile", "traintop's sampled profile of it: join, kernels, clock, shares"),
    ("launch_facts", "what the probe saw of it (autocast, optimizer, compile, loader, SDPA)"),
)
SYNC = (
    ("sync_job", "a .item() after every micro-step: sync_stall naming its line and count"),
    ("sync_busy_truth", "its busy share against the profiler's kernel time"),
    ("sync_profile", "traintop's sampled profile of it: join, kernels, clock, shares"),
)


def _profiled(job: JobSnapshot) -> bool:
    """The late figures are in: a sampled profile, and autocast seen inside forward."""
    return job.gpu_profile is not None and job.facts is not None and job.facts.autocast is not None


def _env(ctx: Context) -> dict[str, str]:
    return {ENV_FIRST: PROFILE_FIRST_S, **({PROFILE_ENV: "cpu"} if ctx.no_cuda else {})}


def launch_verdict(obs: Observed) -> Result:
    """host_overhead, no remedy the job follows, torch.compile offered, what was seen said."""
    v = obs.verdict or {}
    got, remedies, evidence = v.get("bottleneck"), v.get("remedies") or [], v.get("evidence") or []
    followed = [r for r in remedies if any(word in r.lower() for word in FOLLOWED)]
    seen = next((e for e in evidence if e.startswith("seen in the job")), None)
    problems = [f"offers what the job does: {r}" for r in followed]
    problems += [f"could not tell: {r}" for r in remedies if "could not tell" in r]
    if not any("torch.compile" in r for r in remedies):
        problems.append("no torch.compile for a job that is not compiled")
    if seen is None or not all(word in seen for word in SEEN):
        problems.append(f"the evidence does not say {', '.join(SEEN)}: {seen}")
    reason = f"diagnose says {got} ({v.get('summary')}); {seen or 'nothing seen of the job'}"
    return judged(got == "host_overhead" and not problems,
                  reason + (f"; {'; '.join(problems)}" if problems else ""),
                  verdict=verdict_data(v), rule=f"host_overhead, none of {FOLLOWED}, "
                  f"torch.compile offered, evidence says {SEEN}")  # fmt: skip


def sync_line() -> int:
    """The line of train_job.py that syncs after each micro-step."""
    lines = TRAIN_JOB.read_text().splitlines()
    return next(n for n, text in enumerate(lines, 1) if SYNC_LINE in text)


def sync_verdict(obs: Observed) -> Result:
    """sync_stall, its summary or evidence naming ``train_job.py:LINE`` with ×N a step, and
    traintop's count of that line within half a sync of the job's N micro-steps."""
    v, line, micro = obs.verdict or {}, sync_line(), obs.result["micro_steps"]
    where = f"{TRAIN_JOB.name}:{line}"
    said = [text for text in (v.get("summary") or "", *(v.get("evidence") or ())) if where in text]
    counted = any(f"×{micro}" in text for text in said)
    sites = obs.job.sync_sites if obs.job else ()
    site = next((s for s in sites if s.file.endswith(TRAIN_JOB.name) and s.line == line), None)
    per_step = site.per_step if site else None
    ok_count = per_step is not None and abs(per_step - micro) <= COUNT_SLACK
    reason = (f"diagnose says {v.get('bottleneck')} ({v.get('summary')}); {where} "
              f"{'named' if said else 'not named'}{' with its count' if counted else ''}; "
              f"traintop counts it {per_step if per_step is None else f'{per_step:.2f}'} a step "
              f"(the job syncs {micro})")  # fmt: skip
    return judged(v.get("bottleneck") == "sync_stall" and bool(said) and counted and ok_count,
                  reason, verdict=verdict_data(v), expected_line=where,
                  sync_sites=[asdict(s) for s in sites])  # fmt: skip


def _launch_checks(ctx: Context, obs: Observed) -> list[Check]:
    cuda, no_cuda = not ctx.no_cuda, f"no CUDA: {ctx.no_cuda}"
    verdict: tuple[Any, ...] = (launch_verdict, obs) if cuda else (skipped, no_cuda)
    busy: tuple[Any, ...] = (
        (profiler_busy, obs) if cuda else (scripted_busy, obs) if ctx.fake else (skipped, no_cuda)
    )
    return [
        run(*LAUNCH[0], *verdict),
        run(*LAUNCH[1], *busy),
        run(*LAUNCH[2], profile_sound, obs, cuda),
        run(*LAUNCH[3], facts_match, obs, cuda),
    ]


def launch_steps(ctx: Context) -> list[Check]:
    """The launch-bound GPT: GPM and per-process utilization while it runs, then its checks."""
    checks: list[Check] = []

    def during(job: Any) -> None:
        checks.append(run(*COUNTERS, gpu_counters, ctx, job.pid))

    try:
        obs = observe(ctx, "launch", "launch", "--profile-steps", PROFILE_STEPS, during=during,
                      env=_env(ctx), prepare=fake.put_job_on_card if ctx.fake else None,
                      until=_profiled)  # fmt: skip
    except Exception as exc:  # the job's own failure: one check says so
        return [*checks, run("launch_job", LAUNCH[0][1], failed, f"{type(exc).__name__}: {exc}")]
    finally:
        if ctx.fake:
            fake.take_jobs_off_card()
    return checks + _launch_checks(ctx, obs)


def sync_steps(ctx: Context) -> list[Check]:
    """The sync job on a card (the sync hook watches CUDA syncs only)."""
    if ctx.no_cuda:
        return [run(i, t, skipped, f"no CUDA: {ctx.no_cuda}") for i, t in SYNC]
    try:
        obs = observe(ctx, "sync", "sync", "--profile-steps", PROFILE_STEPS, env=_env(ctx),
                      until=_profiled)  # fmt: skip
    except Exception as exc:
        return [run(SYNC[0][0], SYNC[0][1], failed, f"{type(exc).__name__}: {exc}")]
    return [
        run(*SYNC[0], sync_verdict, obs),
        run(*SYNC[1], profiler_busy, obs),
        run(*SYNC[2], profile_sound, obs, True),
    ]
