"""Verdicts on the card's own counters (issue 33): compute, host_overhead, sync_stall, memory.

The numbers are the ones real cards showed (docs/gpu-check.md, the issue): a small GPT in bf16
autocast with fused AdamW and flash attention, not compiled, 57-68 % busy by NVML while the
CUDA-event span read 99 %; a transformer with a ``.item()`` after each of four micro-steps,
kernels 79 % of the step.
"""

from __future__ import annotations

import re
from dataclasses import replace

import pytest

from tests.diagnosis_factories import TRAINER_PID, Scene
from traintop.collectors.snapshot import (
    CpuLimit,
    GpuStepProfile,
    JobFacts,
    OptimizerFacts,
    SyncSite,
)
from traintop.diagnosis.api import diagnose
from traintop.diagnosis.model import Finding, Verdict

GPT_FACTS = JobFacts(
    device="cuda",
    autocast="bf16",
    compiled=False,
    cuda_graphs=False,
    optimizers=(OptimizerFacts("AdamW", fused=True, foreach=None),),
    has_conv=False,
    tf32_matmul=True,
    attention="flash",
    pinned_copies=True,
)
# The small GPT on the H200: NVML 57-68 %, the span 99 %, the training thread on its core.
SMALL_GPT = Scene(
    gpu_util=60,
    gpu_util_alt=66,
    gpu_busy=0.62,
    gpu_queued=0.99,
    trainer_cpu=104,
    trainer_main=(96.0, 2.0),
    workers=0,
    data_wait=0.01,
    facts=GPT_FACTS,
    gpm=(44.0, 21.0, 14.0, 31.0),
)
PROFILE = GpuStepProfile(
    step=12000,
    age_s=40.0,
    step_s=0.031,
    kernel_share=0.63,
    host_wait_share=0.29,
    sync_share=0.02,
    kernel_wait_share=0.03,
    other_share=0.03,
    kernels=2840,
    median_kernel_us=9.0,
    launch_us_p50=6.0,
)
ITEM = SyncSite("/home/me/gpt/train.py", 123, "train", "item", 4.0, 4000, "loss.item()")
# The check's sync job: four micro-batches, a `.item()` after each; kernels 79 % of the step.
SYNC_JOB = Scene(
    gpu_util=79,
    gpu_busy=0.77,
    gpu_queued=0.99,
    trainer_cpu=99,
    trainer_main=(97.0, 1.0),
    data_wait=0.02,
    facts=GPT_FACTS,
    sync_sites=(ITEM,),
)


def _all(verdict: Verdict) -> list[Finding]:
    return [verdict.primary, *verdict.also]


def _texts(finding: Finding) -> list[str]:
    return [e.text for e in finding.evidence]


def test_the_small_gpt_is_launch_bound_with_remedies_it_does_not_follow() -> None:
    primary = diagnose(SMALL_GPT.window()).primary
    assert primary.bottleneck == "host_overhead", primary.summary
    texts = _texts(primary)
    assert "GPU busy only 62 % of the time (NVML, the job's processes)" in texts
    assert any(t.startswith("work queued on the GPU 99 % of the step") for t in texts)
    assert any("main thread at 96 % CPU" in t for t in texts)
    assert "seen in the job: bf16 autocast on, not compiled, no CUDA graphs, fused AdamW" in texts
    remedies = " | ".join(primary.remedies)
    assert primary.remedies[0].startswith("torch.compile the model")
    assert "CUDA graphs" in remedies and "raise the batch size" in remedies
    assert "mixed precision" not in remedies and "autocast" not in remedies
    assert "fused" not in remedies.replace("fused kernels", "")


def test_with_a_profiled_step_the_evidence_counts_the_launches() -> None:
    primary = diagnose(SMALL_GPT.but(profile=PROFILE, trainer_main=(70.0, 1.0)).window()).primary
    assert primary.bottleneck == "host_overhead"
    texts = _texts(primary)
    assert "2,840 kernel launches a step, median kernel 9 µs, a launch costs the CPU 6 µs" in texts
    assert any(
        t.startswith("a profiled step (#12000, 40 s ago, 31 ms): kernels 63 %") for t in texts
    )
    assert any("main thread at 71 % CPU" in t for t in texts)  # the thread, pegged or not


def _busy_shown(verdict: Verdict) -> list[float]:
    """Every busy share a finding states (``GPU busy N %``), as a share."""
    found = []
    for finding in _all(verdict):
        for text in [finding.summary, *_texts(finding)]:
            found += [int(n) / 100 for n in re.findall(r"GPU busy (?:only )?(\d+) %", text)]
    return found


@pytest.mark.parametrize(
    "scene",
    [
        SMALL_GPT,
        SMALL_GPT.but(busy_source=None, gpu_busy=0.99, gpu_queued=None),  # a recording: the span
        SMALL_GPT.but(busy_source="device", gpu_busy=0.63),
        SYNC_JOB,
        Scene(),
    ],
    ids=["process share", "older collector's span", "device share", "sync job", "healthy"],
)
def test_no_busy_share_the_cards_counters_contradict(scene: Scene) -> None:
    """The headline and evidence never show a busy share more than 10 points above what the
    card's utilization says over the same window; the span appears only as "queued"."""
    util = sum(s.gpus[0].util_gpu_pct for s in scene.window()) / len(scene.window()) / 100
    verdict = diagnose(scene.window())
    shown = _busy_shown(verdict)
    assert shown, verdict.primary
    assert all(share <= util + 0.10 for share in shown), (shown, util)


def test_an_older_collectors_span_is_read_as_queued_not_busy() -> None:
    old = SMALL_GPT.but(busy_source=None, gpu_busy=0.99, gpu_queued=None)
    primary = diagnose(old.window()).primary
    assert primary.bottleneck == "host_overhead"
    assert "GPU busy only 63 % of the time (NVML utilization)" in _texts(primary)
    assert any(t.startswith("work queued on the GPU 99 % of the step") for t in _texts(primary))


def test_a_span_of_99_percent_is_not_compute_when_the_card_idles() -> None:
    """The issue's headline: "COMPUTE-BOUND: GPU busy 99 % of step" beside a card at 60 %."""
    waiting = SMALL_GPT.but(trainer_main=(30.0, 1.0), trainer_cpu=30, facts=None)
    assert "compute" not in {f.bottleneck for f in _all(diagnose(waiting.window()))}


def test_compute_quotes_the_sms_counters_and_skips_what_the_job_does() -> None:
    fused = (OptimizerFacts("AdamW", True, None),)
    facts = replace(GPT_FACTS, compiled=True, optimizers=fused, tf32_matmul=None)
    busy = Scene(
        gpu_util=97, gpu_busy=0.95, gpu_queued=0.99, facts=facts, gpm=(40.0, 25.0, 10.0, 55.0)
    )
    primary = diagnose(busy.window()).primary
    assert primary.bottleneck == "compute"
    texts = _texts(primary)
    assert "GPU busy 95 % of the time (NVML, the job's processes)" in texts
    assert (
        "SMs 40 % active, warps 25 % of the SMs' maximum, tensor cores 10 %, memory bandwidth 55 %"
        in texts
    )
    assert (
        "seen in the job: bf16 autocast on, compiled, fused AdamW, flash attention, no convolution"
        in texts
    )
    remedies = " | ".join(primary.remedies)
    for done in (
        "mixed precision",
        "torch.compile",
        "channels_last",
        "fused",
        "scaled_dot",
        "TF32",
    ):
        assert done not in remedies, done
    assert primary.remedies[0].startswith("tensor cores run 10 % of the time in autocast")
    assert "only 40 % of the SMs are active" in remedies


def test_compute_without_facts_says_it_could_not_tell() -> None:
    remedies = diagnose(Scene().window()).primary.remedies
    assert remedies[0] == (
        "use mixed precision: torch.autocast(device_type='cuda', dtype=torch.bfloat16) "
        "(or fp16 + GradScaler) (if not already: the probe could not tell)"
    )
    assert "raise the batch size while memory allows (scale the learning rate)" in remedies


def test_sync_stall_names_the_line_and_its_count() -> None:
    primary = diagnose(SYNC_JOB.window()).primary
    assert primary.bottleneck == "sync_stall", primary.summary
    texts = _texts(primary)
    assert (
        texts[0] == "train.py:123 `loss.item()` ×4 a step; the GPU idles 21 % of the time after it"
    )
    assert primary.summary == (
        "Sync stalls idle the GPU 21 % of the time: train.py:123 `loss.item()` ×4 a step"
    )
    assert primary.remedies[0].startswith("take train.py:123 `loss.item()` off the step")
    assert primary.remedies[-1].startswith("then, if the GPU still waits between kernels")
    assert not any("non_blocking=True copies from pinned" in r for r in primary.remedies)


def test_sync_stall_from_a_profiled_step() -> None:
    """The profile splits the idle time: here mostly after the syncs, a little launch wait."""
    profile = GpuStepProfile(step=500, age_s=12.0, step_s=0.11, kernel_share=0.78,
                             host_wait_share=0.03, sync_share=0.17, kernel_wait_share=0.01,
                             other_share=0.01, kernels=1900)  # fmt: skip
    primary = diagnose(SYNC_JOB.but(profile=profile).window()).primary
    assert primary.bottleneck == "sync_stall"
    assert primary.share == pytest.approx(0.21 * 0.17 / 0.20, abs=0.01)
    unprofiled = diagnose(SYNC_JOB.window()).primary  # a thread that may launch, too
    assert primary.confidence > unprofiled.confidence


def test_a_sync_with_a_sleeping_trainer_is_a_sure_sync_stall() -> None:
    sleeping = SYNC_JOB.but(trainer_cpu=35, trainer_main=(30.0, 1.0))
    primary = diagnose(sleeping.window()).primary
    assert primary.bottleneck == "sync_stall"
    assert "trainer at 35 % CPU: waiting, not computing" in _texts(primary)
    assert not any(r.startswith("then, if the GPU") for r in primary.remedies)


HEALTHY = {
    "busy card, a loss.item() every tenth step": Scene(
        facts=GPT_FACTS, sync_sites=(SyncSite("train.py", 88, "train", "item", 0.1, 50),)
    ),
    "busy card, a sync every step it has time for": Scene(
        gpu_util=93, gpu_busy=0.92, facts=GPT_FACTS, sync_sites=(ITEM,), trainer_cpu=99,
        trainer_main=(97.0, 0.0),
    ),
    "busy card, the training thread pegged": Scene(
        gpu_util=96, gpu_busy=0.94, gpu_queued=0.99, trainer_main=(99.0, 0.0), facts=GPT_FACTS
    ),
    "busy card, a profile with a little launch wait": Scene(
        gpu_util=90, gpu_busy=0.88, facts=GPT_FACTS,
        profile=GpuStepProfile(1, 5.0, 0.02, 0.86, 0.08, 0.02, 0.02, 0.02, 600),
    ),
}  # fmt: skip


@pytest.mark.parametrize("scene", HEALTHY.values(), ids=HEALTHY.keys())
def test_healthy_jobs_are_not_flagged(scene: Scene) -> None:
    verdict = diagnose(scene.window())
    assert verdict.primary.bottleneck == "compute", verdict.primary.summary
    flagged = {f.bottleneck for f in _all(verdict)} & {"host_overhead", "sync_stall", "memory"}
    assert not flagged


def test_a_busy_thread_with_gaps_inside_the_step_launches() -> None:
    """Not pegged (85 %), but the span shows the gaps fall inside the step: launching."""
    scene = SMALL_GPT.but(trainer_main=(85.0, 0.0))
    primary = diagnose(scene.window()).primary
    assert primary.bottleneck == "host_overhead"
    assert any("main thread at 85 % CPU: launching, not waiting" in t for t in _texts(primary))


def test_no_syncs_seen_and_a_sleeping_trainer_is_not_a_sync_stall() -> None:
    """The sync hook counted none: the gap is not a sync's (an older probe without the hook
    still gets the old guess)."""
    sleeping = SMALL_GPT.but(trainer_main=(30.0, 0.0), trainer_cpu=30, gpu_queued=None)
    assert "sync_stall" not in {f.bottleneck for f in _all(diagnose(sleeping.window()))}
    guessed = sleeping.but(facts=None, gpu_util=50, gpu_util_alt=50, gpu_busy=0.5)
    assert diagnose(guessed.window()).primary.bottleneck == "sync_stall"


def test_allocator_retries_rising_are_memory() -> None:
    steps = Scene(step_times=(0.25,) * 400, steps_per_tick=20, facts=GPT_FACTS)
    primary = diagnose(steps.but(alloc_retries_per_tick=3).window()).primary
    assert primary.bottleneck == "memory"
    assert primary.severity == "warning"
    assert _texts(primary)[0] == (
        "the CUDA allocator retried 30 times in 200 steps (0.15 a step): each retry frees the"
        " cache and waits for every stream"
    )
    assert primary.remedies[0].startswith("PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True")
    assert not any("mixed precision" in r for r in primary.remedies)  # bf16 autocast seen


def test_allocator_retries_are_counted_per_step_at_the_steps_the_probe_counted_them() -> None:
    """The side file holds the retries with the probe's step count at its write; the ring's
    count runs ahead by up to a write's interval, by a different amount on each tick.  One retry
    every 4th step reads 0.25 a step, not what those counts over the ring's steps make."""
    window = (
        Scene(step_times=(0.25,) * 400, steps_per_tick=20, facts=GPT_FACTS)
        .but(alloc_retries_per_tick=3)
        .window()
    )
    lagged = []
    for tick, snap in enumerate(window):
        counted = snap.jobs[0].steps_total - (0 if tick == 0 else 3 + 7 * (tick % 3))
        job = replace(snap.jobs[0], cuda_alloc_retries=counted // 4,
                      cuda_alloc_retries_steps=counted)  # fmt: skip
        lagged.append(replace(snap, jobs=(job,)))
    (text,) = [t for t in _texts(diagnose(lagged).primary) if "retried" in t]
    assert "(0.25 a step)" in text, text


def test_allocator_retries_that_do_not_rise_are_nothing() -> None:
    verdict = diagnose(Scene(alloc_retries_per_tick=0).window())
    assert "memory" not in {f.bottleneck for f in _all(verdict)}


def test_a_throttled_cpu_job_names_its_quota() -> None:
    """A CPU-only trainer in a one-CPU container, in bf16 autocast: compute, its budget the
    quota's, the quota named, and never told to use bf16."""
    limit = CpuLimit(cpus=1.0, quota_cpus=1.0, cpuset=None, throttled_share=0.6,
                     throttled_s_per_s=0.5, cgroup="/docker/abc")  # fmt: skip
    scene = Scene(cpus=16, gpu_count=0, gpu_busy=None, workers=0, trainer_threads=16,
                  trainer_cpu=99, cpu_busy=10, data_wait=0.01, cpu_limit=limit,
                  facts=JobFacts(device="cpu", autocast="bf16", compiled=False))  # fmt: skip
    primary = diagnose(scene.window()).primary
    assert primary.bottleneck == "compute"
    texts = _texts(primary)
    assert (
        "no GPU: training runs on the CPU (trainer at 99 % CPU of 100 % its cgroup lets its"
        " threads use)" in texts
    )
    assert any(
        t.startswith("the job's cgroup quota of 1.0 CPU (the host has 16) throttled it in 60 %")
        for t in texts
    )
    assert primary.remedies[0].startswith("raise the job's CPU limit (its cgroup quota is 1.0 CPU)")
    assert "torch.set_num_threads(1): the job may use 1.0 CPU" in primary.remedies
    assert not any("bf16" in r for r in primary.remedies)


def test_worker_advice_counts_the_jobs_cpus() -> None:
    """Workers starved on a 16-CPU host inside a 2-CPU cpuset: advice by the cpuset (the
    loader model finds fewer workers reach its CPUs' bound than the host's)."""
    limit = CpuLimit(cpus=2.0, quota_cpus=None, cpuset=(0, 1), cgroup="/slurm/job1")
    scene = Scene(cpus=16, data_wait=0.4, workers=2, worker_cpu=40, gpu_busy=0.6, gpu_util=60,
                  cpu_limit=limit)  # fmt: skip
    primary = diagnose(scene.window()).primary
    assert primary.bottleneck == "data_starved"
    assert primary.remedies[0] == (
        "raise DataLoader num_workers from 2 to 3 (the job's 2 CPUs: cgroup cpuset)"
    )
    assert primary.gains[0].bound_by == "cores"
    host = diagnose(scene.but(cpu_limit=None).window()).primary
    assert host.remedies[0] == "raise DataLoader num_workers from 2 to 4 (16 logical CPUs)"


def test_ranks_sharing_a_quota_share_its_cpus() -> None:
    limit = CpuLimit(cpus=8.0, quota_cpus=8.0, cpuset=None, cgroup="/kubepods/pod7")
    scene = Scene(cpus=64, data_wait=0.4, workers=1, worker_cpu=40, gpu_busy=0.6, gpu_util=60,
                  cpu_limit=limit, extra_jobs=1)  # fmt: skip
    remedies = diagnose(scene.window(), job_pid=TRAINER_PID).primary.remedies
    assert remedies[0] == (
        "raise DataLoader num_workers from 1 to 3"
        " (the job's 8.0 CPUs: cgroup quota, shared by 2 ranks)"
    )
