"""Remedies, ranked for the case: the first line is the one most likely to help.

Where a number can be computed (how many DataLoader workers the cores allow), it is.
"""

from __future__ import annotations

from traintop.diagnosis.context import Context
from traintop.diagnosis.demand import CpuDemand

IDLE_WORKER_PCT = 25.0  # workers below this much CPU wait on something other than a core


def worker_budget(ctx: Context) -> int:
    """Workers the host can feed per local rank: its share of cores minus the trainer's own."""
    per_rank = ctx.box.logical_cpus // max(1, ctx.box.local_jobs)
    return max(1, per_rank - 1)


def suggest_workers(ctx: Context) -> int | None:
    """A concrete ``num_workers`` when more workers would fit on idle cores, else ``None``."""
    current = len(ctx.workers)
    target = min(worker_budget(ctx), max(2, current * 2, current + 2))
    return target if target > current else None


def _more_workers(ctx: Context) -> tuple[str, ...]:
    target = suggest_workers(ctx)
    if target is None:
        return ()
    return (
        f"raise DataLoader num_workers from {len(ctx.workers)} to {target} "
        f"({ctx.box.logical_cpus} logical CPUs)",
    )


def data_cpu(ctx: Context, spare_cores: bool) -> tuple[str, ...]:
    """Workers are CPU-bound: add workers only while cores are free, else make each cheaper."""
    more = _more_workers(ctx) if spare_cores else ()
    return (
        *more,
        "move augmentation to the GPU (torchvision.transforms.v2 on CUDA tensors, NVIDIA DALI)",
        "pre-process offline: store decoded/resized samples instead of decoding every epoch",
        "use a faster decoder (pillow-simd, torchvision.io.decode_jpeg on GPU)",
        "set persistent_workers=True so workers are not re-forked every epoch",
        "pin_memory=True with non_blocking=True copies",
    )


def data_io(ctx: Context) -> tuple[str, ...]:
    """Reads are the limit: read less, read sequentially, or read from something faster."""
    return (
        "copy the dataset to local NVMe or RAM (/dev/shm) so reads hit the page cache",
        "pack small files into sharded formats (WebDataset tar shards, LMDB, TFRecord, "
        "MosaicML streaming) for sequential reads",
        *_more_workers(ctx),
        "raise prefetch_factor so more reads are in flight while the GPU computes",
        "store smaller samples (compressed JPEG/WebP at training resolution)",
    )


def _idle_workers(ctx: Context) -> tuple[str, ...]:
    """Workers that sleep on a fetch cost no core: more of them fit however few cores there
    are (a worker that waits on latency is a process, not a CPU)."""
    loads = [w.cpu_pct for w in ctx.workers if w.cpu_pct is not None]
    if not loads or sum(loads) / len(loads) >= IDLE_WORKER_PCT:
        return _more_workers(ctx)
    current = len(ctx.workers)
    return (
        f"raise DataLoader num_workers from {current} to {2 * current}: they idle at "
        f"{sum(loads) / len(loads):.0f} % CPU, so latency, not CPU, bounds them",
    )


def data_starved(ctx: Context) -> tuple[str, ...]:
    """Neither CPU nor disk is full: the pipeline lacks parallelism, not capacity."""
    return (
        *_idle_workers(ctx),
        "raise prefetch_factor (e.g. 4) to keep more batches in flight",
        "set persistent_workers=True and pin_memory=True",
        "batch remote fetches or cache them locally: per-sample latency bounds throughput",
        "check the Dataset's __getitem__ for locks, sleeps or per-sample network calls",
    )


def compute(ctx: Context) -> tuple[str, ...]:
    """The device is the limit: make each step cheaper on it."""
    if not ctx.box.has_gpus:
        return (
            "move training to a GPU if one is available",
            "torch.set_num_threads(physical cores) and bf16 autocast on CPU",
            "torch.compile the model",
        )
    return (
        "use mixed precision: torch.autocast(dtype=torch.bfloat16) (or fp16 + GradScaler)",
        "torch.compile the model",
        "raise the batch size while memory allows (scale the learning rate)",
        "channels_last memory format for convolutional models",
        "fused optimizers (AdamW(fused=True)) and FlashAttention/SDPA kernels",
    )


def straggler(rank: int) -> tuple[str, ...]:
    """One rank holds the others back: find what only it has, or even out the work."""
    return (
        f"look at what only rank {rank} has: a slower or throttled device, other processes on "
        "its CPUs, a busier disk or link",
        "balance the work across ranks: uneven shards or sequence lengths, or a task only one "
        "rank runs (logging, evaluation, checkpoints)",
    )


HOST_OVERHEAD = (
    "torch.compile (mode='reduce-overhead' captures CUDA graphs) to cut launch overhead",
    "raise the batch size so each kernel launch does more work",
    "move per-step Python work (metrics, logging, augmentation) off the training loop",
    "use fused optimizers (foreach/fused=True) to launch fewer kernels",
)

SYNC_STALL = (
    "remove .item(), .cpu(), .numpy() and print(tensor) from the training loop",
    "accumulate metrics on the GPU and read them every N steps",
    "avoid torch.cuda.synchronize() and data-dependent control flow (if loss > x)",
    "use non_blocking=True copies from pinned memory",
)

NETWORK = (
    "overlap communication with compute (DDP bucket_cap_mb, FSDP prefetch)",
    "gradient accumulation: synchronise every N micro-batches (no_sync())",
    "check NCCL uses the fast fabric: NCCL_DEBUG=INFO, NCCL_IB_HCA / NCCL_SOCKET_IFNAME",
    "compress gradients (bf16 allreduce comm hook) or use a larger batch per rank",
)

THERMAL = (
    "improve cooling: check fans, airflow, dust and the inlet temperature",
    "lower the power limit a little (sudo nvidia-smi -pl <watts>) to run cooler at steady clocks",
    "check neighbouring GPUs/servers for hot exhaust recirculation",
)

POWER = (
    "raise the power limit if the board allows it (sudo nvidia-smi -pl <watts>)",
    "check the PSU/BMC power budget (HW power brake means the platform cut power)",
    "accept it: power-capped clocks still give the best work per watt",
)

PERIODIC = (
    "save checkpoints asynchronously (torch.distributed.checkpoint.async_save) or less often",
    "log and evaluate less often, and without synchronising on every metric",
    "run evaluation on a separate process or GPU",
)

IDLE = (
    "check the model and batches are on the GPU: model.to('cuda'), batch.to('cuda')",
    "check CUDA_VISIBLE_DEVICES and that torch.cuda.is_available() is True in the job",
    "if the job is stalled, look at its last phase: a deadlock, a hung collective or a dead worker",
)


def memory(swapping: bool) -> tuple[str, ...]:
    """Host swapping is urgent (every access can hit disk); a full GPU only risks OOM."""
    gpu = (
        "lower the batch size or use gradient accumulation",
        "activation checkpointing and mixed precision to cut activation memory",
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
    )
    host = (
        "stop swapping: fewer/lighter DataLoader workers (each holds a copy of the Dataset)",
        "memory-map the dataset instead of loading it into every worker",
        "add RAM or close other jobs on the host",
    )
    return (*host, *gpu) if swapping else gpu


def oversubscribed(ctx: Context) -> tuple[str, ...]:
    """Too many runnable threads: give each trainer an explicit share of the cores, what is
    left of them once the DataLoader workers have one each (``CpuDemand.threads_per_trainer``)."""
    d = ctx.box.demand
    if d is None:
        share = max(1, ctx.box.logical_cpus // max(1, ctx.box.local_jobs * (len(ctx.workers) + 1)))
        first = f"torch.set_num_threads({share}) / OMP_NUM_THREADS={share} per process"
    else:
        share = d.threads_per_trainer
        workers = f" less {d.worker_cpus:.1f} for DataLoader workers," if d.worker_cpus else ""
        trainers = f"{d.jobs} trainers" if d.jobs > 1 else "1 trainer"
        first = (
            f"torch.set_num_threads({share}) / OMP_NUM_THREADS={share} per trainer"
            f" ({d.cpus} CPUs,{workers} shared by {trainers})"
        )
    return (
        first,
        "cv2.setNumThreads(0) and torch.set_num_threads(1) inside DataLoader workers",
        _fewer(d),
    )


def _fewer(d: CpuDemand | None) -> str:
    """What to run less of when threads alone cannot fix it: trainers, or workers."""
    if d is not None and d.jobs > d.cpus:
        return f"run fewer trainers at once: {d.jobs} on {d.cpus} CPUs queue even at one thread"
    if d is not None and d.jobs + d.worker_cpus > d.cpus:
        return (
            f"fewer DataLoader workers: they want {d.worker_cpus:.1f} of the {d.cpus} CPUs,"
            " leaving the trainers too little"
        )
    return "fewer DataLoader workers, or fewer jobs sharing this host"
