"""Realistic JobSnapshot tuples for the attach-mode panels, as collectors/jobs.py would emit them.

Numbers follow real runs: a ResNet-50 at batch 128 whose 4 DataLoader workers are CPU-bound, a
4-rank DDP fine-tune where rank 2 sits on a slow node, a job that crashed and one that stalled.
"""

from __future__ import annotations

from dataclasses import replace

from traintop.collectors.snapshot import JobSnapshot, PhaseShare, WorkerSnapshot

GIB = 2**30
MB = 1_000_000


def data_bound_job(pid: int = 4242) -> JobSnapshot:
    """Single GPU, 62 % of each step waiting for data, 4 workers at 98 % CPU."""
    workers = tuple(
        WorkerSnapshot(
            pid=pid + 1 + i,
            cpu_pct=98.0 - i * 0.5,
            rss_bytes=int(1.2 * GIB),
            read_bytes_per_s=45 * MB + i * MB,
        )
        for i in range(4)
    )
    return JobSnapshot(
        pid=pid, name="resnet50-imagenet", rank=0, local_rank=0, world_size=1, state="live",
        steps_total=12_345, steps_per_s=3.1, samples_per_s=396.8,
        step_time_p50_s=0.311, step_time_p95_s=0.402,
        data_wait_share=0.62, data_wait_p50_s=0.193, data_wait_p95_s=0.262,
        batches_per_s=3.1, gpu_busy_share=0.34,
        phases=(
            PhaseShare("data", 0.62, 0.193),
            PhaseShare("fwd", 0.12, 0.037),
            PhaseShare("bwd", 0.19, 0.059),
            PhaseShare("opt", 0.05, 0.016),
        ),
        workers=workers, lost_records=0, last_step_age_s=0.2,
        recent_step_times_s=(0.30, 0.31, 0.33, 0.29, 0.40),
        cuda_mem_allocated_bytes=int(11.2 * GIB), cuda_mem_reserved_bytes=int(14 * GIB),
    )  # fmt: skip


def _rank(rank: int, step_p50_s: float, comm_share: float, data_share: float) -> JobSnapshot:
    compute = 1.0 - comm_share - data_share
    return JobSnapshot(
        pid=5100 + rank, name="llama-ft", rank=rank, local_rank=rank, world_size=4,
        state="live", steps_total=880, steps_per_s=1 / 0.52, samples_per_s=8 / 0.52,
        step_time_p50_s=step_p50_s, step_time_p95_s=step_p50_s * 1.2,
        data_wait_share=data_share, data_wait_p50_s=step_p50_s * data_share,
        data_wait_p95_s=step_p50_s * data_share * 1.5, batches_per_s=1 / 0.52,
        gpu_busy_share=0.8,
        phases=(
            PhaseShare("data", data_share, step_p50_s * data_share),
            PhaseShare("fwd", compute * 0.35, step_p50_s * compute * 0.35),
            PhaseShare("bwd", compute * 0.6, step_p50_s * compute * 0.6),
            PhaseShare("comm", comm_share, step_p50_s * comm_share),
            PhaseShare("opt", compute * 0.05, step_p50_s * compute * 0.05),
        ),
        workers=(WorkerSnapshot(pid=5200 + rank, cpu_pct=40.0, rss_bytes=GIB,
                                read_bytes_per_s=5 * MB),),
    )  # fmt: skip


def multi_rank_job() -> tuple[JobSnapshot, ...]:
    """DDP: every rank's step is ~0.52 s, but ranks 0, 1, 3 spend ~30 % waiting in allreduce
    for rank 2, whose own work (slow node, heavy data wait) is ~40 % longer."""
    return (
        _rank(0, 0.52, comm_share=0.30, data_share=0.05),
        _rank(1, 0.52, comm_share=0.29, data_share=0.05),
        _rank(2, 0.53, comm_share=0.02, data_share=0.25),
        _rank(3, 0.52, comm_share=0.31, data_share=0.05),
    )


def balanced_multi_rank_job() -> tuple[JobSnapshot, ...]:
    """The same run with every rank doing the same work: nothing to call out."""
    return tuple(_rank(r, 0.41, comm_share=0.05, data_share=0.05) for r in range(4))


def crashed_job(pid: int = 6001) -> JobSnapshot:
    """A job that died at step 5,120; the collector no longer has rates for it."""
    return replace(
        data_bound_job(pid), name="vit-b16", state="crashed", steps_total=5_120,
        steps_per_s=None, samples_per_s=None, step_time_p50_s=None, step_time_p95_s=None,
        workers=(), last_step_age_s=3.0, lost_records=17,
    )  # fmt: skip


def crashed_job_before(pid: int = 6001) -> JobSnapshot:
    """The same job one tick before it crashed, with its last numbers."""
    return replace(data_bound_job(pid), name="vit-b16", steps_total=5_119, steps_per_s=2.44,
                   samples_per_s=156.2, step_time_p50_s=0.409, step_time_p95_s=0.455)  # fmt: skip


def stalled_job(pid: int = 7007) -> JobSnapshot:
    """No step for 34 s (stuck in a collective or a hung DataLoader)."""
    return replace(
        data_bound_job(pid), name="bert-pretrain", state="stalled", steps_per_s=None,
        samples_per_s=None, batches_per_s=None, last_step_age_s=34.4,
    )  # fmt: skip


def no_worker_job(pid: int = 8008) -> JobSnapshot:
    """num_workers=0 and no phase marks: only a data-wait share is known."""
    return replace(data_bound_job(pid), name="tiny-mlp", workers=(), phases=(),
                   data_wait_share=0.08, gpu_busy_share=None,
                   cuda_mem_allocated_bytes=None, cuda_mem_reserved_bytes=None)  # fmt: skip
