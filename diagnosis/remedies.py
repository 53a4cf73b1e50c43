"""Remedies, ranked for the case: the first line is the one most likely to help.

Where a number can be computed (how many DataLoader workers the cores allow), it is.
"""

from __future__ import annotations

from dataclasses import replace

from traintop.diagnosis import gains
from traintop.diagnosis.applied import NA, OFF, ON, UNSURE, Remedy, facts_of, knob, offer
from traintop.diagnosis.busy import gpm_mean
from traintop.diagnosis.context import Context, once
from traintop.diagnosis.demand import CpuDemand
from traintop.diagnosis.job_cpus import amount, job_cpus
from traintop.diagnosis.limit_remedies import limit_remedies
from traintop.diagnosis.model import Gain
from traintop.diagnosis.pause_kind import CHECKPOINT, EVALUATION, PauseKind
from traintop.diagnosis.text import pct

IDLE_WORKER_PCT = 25.0  # workers below this much CPU wait on something other than a core
SM_FILLED_PCT = 50.0  # GPM: below this share of SMs active while a kernel runs, kernels are small
TENSOR_USED_PCT = 20.0  # GPM: tensor cores this idle under autocast: GEMM shapes that miss them

PERSISTENT = Remedy(
    "set persistent_workers=True so workers are not re-forked every epoch", "persistent_workers"
)
PINNED = Remedy("pin_memory=True with non_blocking=True copies", "pin_memory")


def worker_budget(ctx: Context) -> int:
    """Workers the job's CPUs can feed per local rank: its share of the CPUs its cgroup gives
    it (the host's when none limits it), less the trainer's own."""
    return max(1, int(job_cpus(ctx).cpus) - 1)


def suggest_workers(ctx: Context) -> int | None:
    """A concrete ``num_workers`` where no loop could be measured (an ended run, system mode):
    more workers while idle cores would feed them, else ``None``."""
    current = len(ctx.workers)
    target = min(worker_budget(ctx), max(2, current * 2, current + 2))
    return target if target > current else None


def _workers_text(ctx: Context, now: int, new: int) -> str:
    """``raise DataLoader num_workers from 2 to 4 (16 logical CPUs)``, or why latency, not
    CPU, bounds workers that idle."""
    head = f"raise DataLoader num_workers from {now} to {new}"
    loads = [w.cpu_pct for w in ctx.workers if w.cpu_pct is not None]
    if loads and sum(loads) / len(loads) < IDLE_WORKER_PCT:
        idle = sum(loads) / len(loads)
        return f"{head}: they idle at {idle:.0f} % CPU, so latency, not CPU, bounds them"
    return f"{head} ({job_cpus(ctx).words})"


def _more_workers(ctx: Context) -> tuple[str | Gain, ...]:
    """The workers the loader model says reach the next bound, with what they buy (no gain
    where the CPUs or storage hold the job); the old rule of thumb where no loop is measured.
    Made once a rank: each data rule that claims a part of its wait offers it."""
    return once(ctx, "more_workers", _workers_remedy)


def _workers_remedy(ctx: Context) -> tuple[str | Gain, ...]:
    target = gains.workers_target(ctx)
    if target is None:
        new = suggest_workers(ctx)
        return (_workers_text(ctx, len(ctx.workers), new),) if new is not None else ()
    text = _workers_text(ctx, *target)
    gain = gains.more_workers(ctx, text)
    return (gain,) if gain is not None else (text,)


def _prefetch(ctx: Context, why: str) -> str | Gain:
    """``raise prefetch_factor from 2 to 6 ...``: from the job's own value (torch's default 2
    where the probe did not see the loader) to the depth the loop model says reaches the
    knee (twice it where no depth gains), with what that buys."""
    facts = facts_of(ctx)
    loaders = [lo for lo in facts.loaders if lo.prefetch_factor] if facts else []
    now = (loaders[0].prefetch_factor or 2) if loaders else 2
    new = gains.prefetch_target(ctx, now)
    head = f"raise prefetch_factor from {now} to {new}" if loaders else (
        f"raise prefetch_factor (e.g. {new})")  # fmt: skip
    text = f"{head} {why}"
    return gains.deeper_prefetch(ctx, text, now, new) or text


def data_cpu(ctx: Context, spare_cores: bool) -> tuple[str | Gain, ...]:
    """Workers are CPU-bound: more workers buy something only while cores are free (the model
    says how much, or that they buy nothing), else make each batch cheaper; a cgroup quota
    that throttles the job comes first (raise it, run no more workers than it feeds, and then
    offer no more)."""
    del spare_cores  # the loader model weighs the free cores itself
    limits = limit_remedies(ctx, workers=True)
    return offer(
        ctx,
        (
            *limits,
            # its second remedy, where it has one, lowers the workers: never more beside it
            *(() if len(limits) > 1 else _more_workers(ctx)),
            gains.loader_cut(ctx, "move augmentation to the GPU (torchvision.transforms.v2 on "
                             "CUDA tensors, NVIDIA DALI)", ("cpu", "augmentation on the GPU")),
            gains.loader_cut(ctx, "pre-process offline: store decoded/resized samples instead "
                             "of decoding every epoch", ("cpu", "samples pre-processed")),
            gains.loader_cut(ctx, "use a faster decoder (pillow-simd, torchvision.io."
                             "decode_jpeg on GPU)", ("cpu", "a faster decoder")),
            PERSISTENT,
            PINNED,
        ),
    )  # fmt: skip


def data_io(ctx: Context) -> tuple[str | Gain, ...]:
    """Reads are the limit: read less, read sequentially, or read from something faster."""
    return (
        gains.loader_cut(ctx, "copy the dataset to local NVMe or RAM (/dev/shm) so reads hit "
                         "the page cache", ("read", "the data in RAM"), exact=True),
        gains.loader_cut(ctx, "pack small files into sharded formats (WebDataset tar shards, "
                         "LMDB, TFRecord, MosaicML streaming) for sequential reads",
                         ("read", "files packed in shards")),
        *_more_workers(ctx),
        _prefetch(ctx, "so more reads are in flight while the GPU computes"),
        gains.loader_cut(ctx, "store smaller samples (compressed JPEG/WebP at training "
                         "resolution)", ("read", "smaller samples")),
    )  # fmt: skip


def data_starved(ctx: Context) -> tuple[str | Gain, ...]:
    """Neither CPU nor disk is full: the pipeline lacks parallelism, not capacity."""
    return offer(
        ctx,
        (
            *_more_workers(ctx),
            _prefetch(ctx, "to keep more batches in flight"),
            PERSISTENT,
            Remedy("pin_memory=True", "pin_memory"),
            gains.loader_cut(ctx, "batch remote fetches or cache them locally: per-sample "
                             "latency bounds throughput", ("wait", "fetches batched or cached")),
            "check the Dataset's __getitem__ for locks, sleeps or per-sample network calls",
        ),
    )  # fmt: skip


SHARE_BY_NAME = (
    'torch.multiprocessing.set_sharing_strategy("file_system") before the DataLoader is made: '
    "each tensor then comes by its name in /dev/shm, not by a round trip to its worker"
)
ONE_TENSOR = (
    "return each batch as fewer, larger tensors (stack its fields in the Dataset or collate_fn): "
    "every tensor is handed over on its own"
)


def data_handoff(ctx: Context) -> tuple[str | Gain, ...]:
    """The trainer's handoff of each batch is the wait: share tensors by name where the job
    shares them by descriptor (a round trip to a worker that answers only when it gets its own
    GIL), hand over fewer tensors, or take batches in beside the step (a pinning thread, on a
    GPU job).  More workers never shorten it: none is offered."""
    shared = knob(ctx, "sharing_strategy")
    by_name: tuple[str | Gain, ...] = ()
    if shared not in (ON, NA):
        text = SHARE_BY_NAME if shared == OFF else f"{SHARE_BY_NAME} {UNSURE}"
        change = ("handoff", "sharing_strategy file_descriptor → file_system")
        by_name = (gains.loader_cut(ctx, text, change, knob="sharing_strategy"),)
    fewer = gains.loader_cut(ctx, ONE_TENSOR, ("handoff", "fewer tensors a batch"))
    return offer(ctx, (*by_name, fewer, PINNED))


MIXED_PRECISION = Remedy(
    "use mixed precision: torch.autocast(device_type='cuda', dtype=torch.bfloat16) "
    "(or fp16 + GradScaler)",
    "autocast",
)
COMPILE = Remedy("torch.compile the model", "compile")
BIGGER_BATCH = "raise the batch size while memory allows (scale the learning rate)"


GPU_COMPUTE: tuple[Remedy | str, ...] = (
    MIXED_PRECISION,
    COMPILE,
    BIGGER_BATCH,
    Remedy("channels_last memory format for convolutional models", "channels_last"),
    Remedy("a fused optimizer: AdamW(fused=True)", "fused_optimizer"),
    Remedy("F.scaled_dot_product_attention with the flash kernel (bf16/fp16 inputs)", "attention"),
    Remedy("allow TF32 matmuls: torch.backends.cuda.matmul.allow_tf32 = True", "tf32"),
)


KERNELS = "a kernel change: how much faster its kernels run is not in the time budget"
ON_GPU = "how fast a GPU would run the step is not in a CPU job's time budget"


def compute(ctx: Context) -> tuple[str | Gain, ...]:
    """The device is the limit: make each step cheaper on it, by what the job does not do yet
    (and what the SMs' counters say is left on the table).  No figure: what a kernel change
    buys is not in the budget."""
    if not ctx.box.has_gpus:
        return _cpu_compute(ctx)
    fixes = list(GPU_COMPUTE)
    active, tensor = gpm_mean(ctx, "sm_active_pct"), gpm_mean(ctx, "tensor_active_pct")
    if active is not None and active < SM_FILLED_PCT:
        fixes.remove(BIGGER_BATCH)  # small kernels leave SMs idle: more work per kernel first
        fixes.insert(0, f"{BIGGER_BATCH}: only {active:.0f} % of the SMs are active")
    if tensor is not None and tensor < TENSOR_USED_PCT and knob(ctx, "autocast") == "on":
        fixes.insert(
            0,
            f"tensor cores run {tensor:.0f} % of the time in autocast: keep matmul dimensions "
            "(hidden size, batch × sequence) multiples of 8, 64 on Hopper",
        )
    return gains.unmodelled(offer(ctx, fixes), KERNELS)


def _cpu_compute(ctx: Context) -> tuple[str | Gain, ...]:
    """A CPU-only trainer: a GPU, a quota that lets it use its cores, bf16, compile."""
    cpus = job_cpus(ctx)
    k = max(1, int(cpus.cpus))
    threads = "torch.set_num_threads(physical cores)"
    if cpus.limit is not None:
        threads = f"torch.set_num_threads({k}): the job may use {amount(cpus.limit)}"
    gpu = gains.not_modelled("move training to a GPU if one is available", ON_GPU)
    return gains.unmodelled(
        offer(
            ctx,
            (
                *limit_remedies(ctx, workers=False),
                gpu,
                gains.more_threads(ctx, threads, k),
                Remedy(
                    "bf16 autocast on the CPU: torch.autocast('cpu', dtype=torch.bfloat16)",
                    "autocast",
                ),
                COMPILE,
            ),
        ),
        KERNELS,
    )


LAUNCHES: tuple[Remedy | str, ...] = (
    Remedy(
        "torch.compile the model: fused kernels mean fewer launches "
        "(mode='reduce-overhead' also replays them as CUDA graphs)",
        "compile",
    ),
    Remedy(
        "capture the step in CUDA graphs (torch.compile mode='reduce-overhead', or "
        "torch.cuda.graph): one launch replays all its kernels",
        "cuda_graphs",
    ),
    "raise the batch size (fewer micro-batches with gradient accumulation): each launch "
    "then does more work",
    "move per-step Python work (metrics, logging, augmentation) off the training loop",
    Remedy(
        "a fused optimizer (AdamW(fused=True)): one launch per step instead of one "
        "per parameter group and op",
        "fused_optimizer",
    ),
)


def host_overhead(ctx: Context, idle: float) -> tuple[Gain, ...]:
    """Launch-bound: fewer launches (compile, CUDA graphs, a fused optimizer), more work per
    launch (a bigger batch), less Python between them.  Mixed precision makes kernels faster,
    not fewer, so it is never advice here.  Each buys at most the ``idle`` share of the time
    the GPU waits for launches."""
    fixes = offer(ctx, (*limit_remedies(ctx, workers=False), *LAUNCHES))
    return gains.bounded(fixes, idle, f"the {pct(idle)} the GPU waits for launches gone")


THEN_COMPILE = Remedy(
    "then, if the GPU still waits between kernels (the training thread runs all the time): "
    "torch.compile the model, mode='reduce-overhead' for CUDA graphs",
    "compile",
)


def sync_stall(
    ctx: Context, site: str | None, idle: float, launching: bool = False
) -> tuple[Gain, ...]:
    """Remove the waits: the named line first, then the usual suspects; a training thread
    that also runs all the time may be launch-bound behind them (``launching``).  Each buys
    at most the ``idle`` share of the time the GPU waits after the syncs."""
    first = (
        (
            f"take {site} off the step: keep the value on the GPU and read it every N "
            "steps (or copy it with non_blocking=True and read it a step later)",
        )
        if site
        else ()
    )
    fixes = offer(
        ctx,
        (
            *first,
            "remove .item(), .cpu(), .numpy() and print(tensor) from the training loop",
            "accumulate metrics on the GPU and read them every N steps",
            "avoid torch.cuda.synchronize() and data-dependent control flow (if loss > x)",
            Remedy("use non_blocking=True copies from pinned memory", "pin_memory"),
            *((THEN_COMPILE,) if launching else ()),
        ),
    )
    return gains.bounded(fixes, idle, f"the {pct(idle)} the GPU waits after syncs gone")


def straggler(rank: int, claim: float, spread: float, now: float | None) -> tuple[Gain, ...]:
    """One rank holds the others back: find what only it has, or even out the work.  Either
    brings it to the others' pace, which buys back the ``claim`` they wait on it."""
    reason = f"rank {rank} at the others' pace"
    change = f"rank {rank} at the others' pace"
    return tuple(
        replace(gains.removed(text, claim, spread, reason, now), change=change, knob="straggler")
        for text in (
            f"look at what only rank {rank} has: a slower or throttled device, other processes "
            "on its CPUs, a busier disk or link",
            "balance the work across ranks: uneven shards or sequence lengths, or a task only "
            "one rank runs (logging, evaluation, checkpoints)",
        )
    )


def network(share: float, now: float | None) -> tuple[Gain, ...]:
    """Each buys at most the ``share`` of the time in communication."""
    return gains.bounded(NETWORK, share, f"the {pct(share)} in communication gone", now)


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
EVALUATE = "evaluate less often, or in a process of its own or on another GPU"
LOG = PERIODIC[1]


def periodic(lost: float, pause: str, count: int, now: float | None,
             kind: PauseKind | None = None) -> tuple[Gain, ...]:  # fmt: skip
    """Taking the pause off the step buys back its ``lost`` share (``count`` long steps
    measured it): the first remedy does that for the pause's ``kind`` (its sampled stacks':
    pause_kind), the others are only the most they can buy.  Not sampled yet: a checkpoint's
    remedy first, the evaluation's and logging's after it."""
    first, *others = _periodic_fixes(kind)
    gain = gains.removed(first, lost, gains.few(count), pause, now)
    rest = gains.bounded(others, lost, pause, now)
    return (replace(gain, change="the pauses off the step", knob="pauses"), *rest)


def _periodic_fixes(kind: PauseKind | None) -> tuple[str, ...]:
    """The remedies for a pause of ``kind``, the one that takes it off the step first: what
    the stacks show it is not (a checkpoint, an evaluation) is not offered."""
    if kind is None:
        return PERIODIC
    if kind.kind == CHECKPOINT:
        return PERIODIC[:1]
    if kind.kind == EVALUATION:
        return (EVALUATE,)
    return (f"run {kind.place} less often, or off the training thread", LOG)


IDLE = (
    "check the model and batches are on the GPU: model.to('cuda'), batch.to('cuda')",
    "check CUDA_VISIBLE_DEVICES and that torch.cuda.is_available() is True in the job",
    "if the job is stalled, look at its last phase: a deadlock, a hung collective or a dead worker",
)


MEMORY = "memory held, not time: what it buys is not in the time budget"


def memory(ctx: Context) -> tuple[Gain, ...]:
    """A full GPU risks OOM: less activation memory, or less fragmentation (the host's memory
    is traintop.diagnosis.remedies_host's)."""
    gpu = (
        "lower the batch size or use gradient accumulation",
        "activation checkpointing (torch.utils.checkpoint) to cut activation memory",
        Remedy("mixed precision (bf16 autocast) to halve activation memory", "autocast"),
        "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True against fragmentation",
    )
    return gains.unmodelled(offer(ctx, gpu), MEMORY)


def alloc_retries(ctx: Context) -> tuple[Gain, ...]:
    """The allocator retries: fragmentation first (the cheapest fix), then less memory."""
    fixes = offer(
        ctx,
        (
            "PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True: segments grow instead of "
            "fragmenting, so fewer cudaMalloc calls fail",
            "lower the batch size (or the longest sequence) a little, with gradient "
            "accumulation to keep the effective batch",
            "activation checkpointing (torch.utils.checkpoint) to cut activation memory",
            Remedy("mixed precision (bf16 autocast) to halve activation memory", "autocast"),
        ),
    )
    return gains.unmodelled(fixes, MEMORY)


def oversubscribed(ctx: Context) -> tuple[str | Gain, ...]:
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
        gains.fewer_threads(ctx, first, share) or first,
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
