"""Remedies that know the job: each one is tested against a job that already follows it.

For every remedy that turns a knob the probe can read (``JobFacts``), three jobs alike but for
that knob: one that follows it (the remedy must not be offered), one that does not (offered as
it is), and one whose probe could not tell (offered, saying so).  Then the remedies that do not
apply to a model or a device (channels_last without a convolution, pinning on a CPU job).
"""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.diagnosis_factories import GIB, Scene
from traintop.collectors.snapshot import JobFacts, LoaderFacts, OptimizerFacts, SyncSite
from traintop.diagnosis.api import diagnose
from traintop.diagnosis.applied import UNSURE

# A job that does none of it: fp32, eager, a for-each AdamW, a plain DataLoader, NCHW convs.
NOTHING = JobFacts(
    device="cuda",
    autocast="off",
    compiled=False,
    cuda_graphs=False,
    optimizers=(OptimizerFacts("AdamW", fused=None, foreach=None),),
    loaders=(LoaderFacts(4, pin_memory=False, persistent_workers=False, prefetch_factor=2),),
    has_conv=True,
    channels_last=False,
    tf32_matmul=False,
    attention="manual",
    pinned_copies=False,
)
PINNED = (LoaderFacts(4, pin_memory=True, persistent_workers=False, prefetch_factor=2),)
PERSISTENT = (LoaderFacts(4, pin_memory=False, persistent_workers=True, prefetch_factor=2),)
FUSED = (OptimizerFacts("AdamW", fused=True, foreach=None),)

GPU_COMPUTE = Scene()
CPU_COMPUTE = Scene(cpus=2, gpu_count=0, gpu_busy=None, workers=0, trainer_threads=4,
                    trainer_cpu=192, cpu_busy=99)  # fmt: skip
LAUNCH_BOUND = Scene(gpu_util=60, gpu_busy=0.6, gpu_queued=0.99, trainer_main=(97.0, 1.0),
                     workers=0, data_wait=0.01)  # fmt: skip
ITEM = SyncSite("train.py", 41, "step", "item", 2.0, 900, "loss.item()")
SYNCING = Scene(gpu_util=70, gpu_busy=0.7, trainer_main=(30.0, 0.0), trainer_cpu=30,
                sync_sites=(ITEM,))  # fmt: skip
LOADER_CPU = Scene(data_wait=0.62, worker_cpu=98, gpu_busy=0.38, gpu_util=45, cpu_busy=60)
LOADER_IDLE = Scene(data_wait=0.4, workers=2, worker_cpu=40, gpu_busy=0.6, gpu_util=60)
NEAR_OOM = Scene(gpu_mem_share=0.994, cuda_allocated=int(77.8 * GIB))
CPU_FACTS = replace(NOTHING, device="cpu")

# (scene, its bottleneck, a phrase of the remedy, the facts of a job that follows it)
CASES = {
    "compute: mixed precision": (GPU_COMPUTE, "compute", "mixed precision",
                                 replace(NOTHING, autocast="bf16")),
    "compute: fp16 autocast is mixed precision too": (GPU_COMPUTE, "compute", "mixed precision",
                                                      replace(NOTHING, autocast="fp16")),
    "compute: torch.compile": (GPU_COMPUTE, "compute", "torch.compile",
                               replace(NOTHING, compiled=True)),
    "compute: channels_last": (GPU_COMPUTE, "compute", "channels_last",
                               replace(NOTHING, channels_last=True)),
    "compute: fused optimizer": (GPU_COMPUTE, "compute", "fused optimizer",
                                 replace(NOTHING, optimizers=FUSED)),
    "compute: SDPA flash": (GPU_COMPUTE, "compute", "scaled_dot_product_attention",
                            replace(NOTHING, attention="flash")),
    "compute: TF32": (GPU_COMPUTE, "compute", "TF32", replace(NOTHING, tf32_matmul=True)),
    "CPU compute: bf16 autocast": (CPU_COMPUTE, "compute", "bf16 autocast",
                                   replace(CPU_FACTS, autocast="bf16")),
    "CPU compute: torch.compile": (CPU_COMPUTE, "compute", "torch.compile",
                                   replace(CPU_FACTS, compiled=True)),
    "host_overhead: torch.compile": (LAUNCH_BOUND, "host_overhead", "torch.compile the model",
                                     replace(NOTHING, compiled=True)),
    "host_overhead: CUDA graphs": (LAUNCH_BOUND, "host_overhead", "capture the step in CUDA",
                                   replace(NOTHING, cuda_graphs=True)),
    "host_overhead: fused optimizer": (LAUNCH_BOUND, "host_overhead", "fused optimizer",
                                       replace(NOTHING, optimizers=FUSED)),
    "sync_stall: pinned non_blocking copies": (SYNCING, "sync_stall", "non_blocking=True copies",
                                               replace(NOTHING, pinned_copies=True)),
    "data_cpu: persistent_workers": (LOADER_CPU, "data_cpu", "persistent_workers",
                                     replace(NOTHING, loaders=PERSISTENT)),
    "data_cpu: pin_memory": (LOADER_CPU, "data_cpu", "pin_memory",
                             replace(NOTHING, loaders=PINNED)),
    "data_cpu: pinned by hand (no DataLoader flag)": (LOADER_CPU, "data_cpu", "pin_memory",
                                                     replace(NOTHING, pinned_copies=True)),
    "data_starved: persistent_workers": (LOADER_IDLE, "data_starved", "persistent_workers",
                                         replace(NOTHING, loaders=PERSISTENT)),
    "data_starved: pin_memory": (LOADER_IDLE, "data_starved", "pin_memory",
                                 replace(NOTHING, loaders=PINNED)),
    "memory: mixed precision": (NEAR_OOM, "memory", "mixed precision",
                                replace(NOTHING, autocast="bf16")),
}  # fmt: skip


def _remedies(scene: Scene, facts: JobFacts | None, bottleneck: str) -> tuple[str, ...]:
    primary = diagnose(scene.but(facts=facts).window()).primary
    assert primary.bottleneck == bottleneck, primary.summary
    return primary.remedies


@pytest.mark.parametrize(("scene", "bottleneck", "phrase", "follows"), CASES.values(),
                         ids=CASES.keys())  # fmt: skip
def test_a_remedy_the_job_follows_is_not_offered(scene, bottleneck, phrase, follows) -> None:
    assert not any(phrase in r for r in _remedies(scene, follows, bottleneck))


@pytest.mark.parametrize(("scene", "bottleneck", "phrase", "follows"), CASES.values(),
                         ids=CASES.keys())  # fmt: skip
def test_a_remedy_the_job_does_not_follow_is_offered(scene, bottleneck, phrase, follows) -> None:
    base = CPU_FACTS if follows.device == "cpu" else NOTHING
    offered = [r for r in _remedies(scene, base, bottleneck) if phrase in r]
    assert offered and not any(UNSURE in r for r in offered)


@pytest.mark.parametrize(("scene", "bottleneck", "phrase", "follows"), CASES.values(),
                         ids=CASES.keys())  # fmt: skip
def test_could_not_tell_is_never_read_as_off(scene, bottleneck, phrase, follows) -> None:
    """A probe that saw nothing (no facts) or not this knob: offered, and saying so."""
    offered = [r for r in _remedies(scene, None, bottleneck) if phrase in r]
    assert offered and all(r.endswith(UNSURE) for r in offered), offered


NOT_APPLICABLE = {
    "channels_last without a convolution": (GPU_COMPUTE, "compute", "channels_last",
                                            replace(NOTHING, has_conv=False)),
    "TF32 under bf16 autocast": (GPU_COMPUTE, "compute", "TF32",
                                 replace(NOTHING, autocast="bf16")),
    "pin_memory on a CPU job (no facts)": (LOADER_CPU.but(gpu_count=0, gpu_busy=None), "data_cpu",
                                           "pin_memory", None),
    "pin_memory on a CPU job the probe saw": (LOADER_IDLE.but(gpu_count=0, gpu_busy=None),
                                              "data_starved", "pin_memory", CPU_FACTS),
    "persistent_workers without workers": (LOADER_IDLE, "data_starved", "persistent_workers",
                                           replace(NOTHING, loaders=(LoaderFacts(0, False, False,
                                                                                 None),))),
    "CUDA graphs' compile advice to a compiled sync job": (SYNCING.but(trainer_main=(97.0, 1.0),
                                                                       trainer_cpu=99),
                                                           "sync_stall", "torch.compile",
                                                           replace(NOTHING, compiled=True)),
}  # fmt: skip


@pytest.mark.parametrize(("scene", "bottleneck", "phrase", "facts"), NOT_APPLICABLE.values(),
                         ids=NOT_APPLICABLE.keys())  # fmt: skip
def test_a_remedy_that_does_not_apply_is_not_offered(scene, bottleneck, phrase, facts) -> None:
    assert not any(phrase in r for r in _remedies(scene, facts, bottleneck))


def test_the_evidence_says_what_was_seen() -> None:
    facts = replace(NOTHING, loaders=PINNED)
    primary = diagnose(LOADER_IDLE.but(facts=facts).window()).primary
    seen = [e.text for e in primary.evidence if e.text.startswith("seen in the job")]
    assert seen == [
        "seen in the job: DataLoader num_workers=4, pin_memory=True, persistent_workers=False,"
        " prefetch_factor=2, copies from pageable memory"
    ]


def test_prefetch_advice_starts_from_the_jobs_own_factor() -> None:
    loaders = (LoaderFacts(2, pin_memory=True, persistent_workers=True, prefetch_factor=4),)
    remedies = _remedies(LOADER_IDLE, replace(NOTHING, loaders=loaders), "data_starved")
    assert "raise prefetch_factor from 4 to 8 to keep more batches in flight" in remedies
