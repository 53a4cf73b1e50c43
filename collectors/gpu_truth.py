"""The job's busy share as the card counts it, joined after GPUs and jobs are sampled.

The probe's CUDA-event span (``JobSnapshot.gpu_queued_share``) is time with work queued on the
stream: launch gaps and sync drains count in it, so a launch-bound step reads 99 % "busy" while
the card idles a third of it.  The card's own counters say when a kernel ran:

1. ``"process"``: NVML's per-process SM utilization of the rank's processes on its GPU, where the
   driver gives it (another job's kernels on a shared GPU do not count);
2. ``"device"``: else the GPU's utilization, the tick's mean of the driver's samples where there
   is one (``GpuSnapshot.util_gpu_mean_pct``), else its last sample period.

A rank's GPU is the one where its processes hold the most memory: every rank of a careless DDP
job also keeps a small context on GPU 0, which says nothing about how busy its own GPU is.  A
rank on no GPU NVML lists (a CPU job, no NVML, a pid namespace NVML cannot see into) keeps None.
"""

from __future__ import annotations

from dataclasses import replace

from traintop.collectors.snapshot import GpuSnapshot, JobSnapshot, ProcessSnapshot


def with_gpu_truth(
    jobs: tuple[JobSnapshot, ...], gpus: tuple[GpuSnapshot, ...]
) -> tuple[JobSnapshot, ...]:
    """``jobs`` with ``gpu_busy_share`` and ``gpu_busy_source`` from the card's counters."""
    if not gpus:
        return jobs
    return tuple(_joined(job, gpus) for job in jobs)


def _joined(job: JobSnapshot, gpus: tuple[GpuSnapshot, ...]) -> JobSnapshot:
    pids = {job.pid, *(w.pid for w in job.workers)}
    held = _main_gpu(pids, gpus)
    share, source = _share(pids, held) if held is not None else (None, None)
    return replace(job, gpu_busy_share=share, gpu_busy_source=source)


def _main_gpu(pids: set[int], gpus: tuple[GpuSnapshot, ...]) -> GpuSnapshot | None:
    """The GPU where ``pids`` hold the most memory (the first, at equal memory)."""
    best, most = None, -1
    for gpu in gpus:
        held = [p.used_memory_bytes or 0 for p in gpu.processes if p.pid in pids]
        if held and sum(held) > most:
            best, most = gpu, sum(held)
    return best


def _share(pids: set[int], gpu: GpuSnapshot) -> tuple[float | None, str | None]:
    """The per-process SM share of ``pids`` on ``gpu``, else the GPU's utilization."""
    sm = [p.sm_util_pct for p in gpu.processes if p.pid in pids]
    known = [v for v in sm if v is not None]
    if sm and len(known) == len(sm):
        return min(1.0, sum(known) / 100.0), "process"
    device = gpu.util_gpu_mean_pct if gpu.util_gpu_mean_pct is not None else gpu.util_gpu_pct
    return (None, None) if device is None else (device / 100.0, "device")


def with_process_sm(
    processes: tuple[ProcessSnapshot, ...], gpus: tuple[GpuSnapshot, ...]
) -> tuple[ProcessSnapshot, ...]:
    """Process rows with their SM share of the GPUs they hold (``gpu_sm_pct``), summed over
    GPUs as GPU memory is; rows holding no GPU are returned as they are."""
    sm: dict[int, float] = {}
    for gpu in gpus:
        for proc in gpu.processes:
            if proc.sm_util_pct is not None:
                sm[proc.pid] = sm.get(proc.pid, 0.0) + proc.sm_util_pct
    if not sm:
        return processes
    return tuple(replace(p, gpu_sm_pct=sm[p.pid]) if p.pid in sm else p for p in processes)
