"""Shared signals: conditions several rules test, each returning the evidence that proves it.

An empty tuple means "does not hold", so a rule reads ``if io_bound(ctx): ...`` and reuses the
same evidence in its finding.  Thresholds live here, once, and docs/diagnosis.md explains them.
"""

from __future__ import annotations

from collections.abc import Iterable

from traintop.diagnosis.context import Context
from traintop.diagnosis.model import Evidence
from traintop.diagnosis.stats import mean_of, present, share_true
from traintop.diagnosis.text import pct, pct100, rate
from traintop.diagnosis.views import ProcView
from traintop.diagnosis.views import (
    comm_phases as comm_phases,  # traintop.exporter.job_families imports it here
)

DATA_WAIT_SHARE = 0.20  # share of step time spent waiting for the next batch
IOWAIT_PCT = 10.0  # whole-machine iowait
DISK_BUSY_PCT = 80.0  # iostat %util of one device ...
DISK_AWAIT_MS = 10.0  # ... with requests queueing this long (NVMe %util alone means little)
READ_MIN_BYTES_PER_S = 512 * 1024  # storage-bound input reads at least this (writes do not count)
CPU_SATURATED_PCT = 90.0  # whole-machine busy
WORKER_BUSY_PCT = 85.0  # a DataLoader worker is one process: ~100 % = one core
LOADER_IDLE_PCT = 25.0  # loaders below this while reading and late are waiting on storage
LOADER_CROWDED_PCT = 25.0  # ... at or above it on a saturated host they are short of CPU
TRAINER_PEGGED_PCT = 90.0  # the trainer's Python thread holds one core
WAIT_EVIDENCE_PCT = 5.0  # run-queue wait worth quoting beside a CPU figure
QUEUE_EVIDENCE_SHARE = 0.1  # a trainer queueing this share of its runnable time is worth saying
GPU_UNDERUSED_PCT = 80.0  # mean utilization below this leaves compute on the table
GPU_SWING_PCT = 20.0  # utilization standard deviation revealing idle gaps
GPU_IDLE_PCT = 5.0
NIC_BUSY_PCT = 70.0  # share of link speed
COMM_SHARE = 0.2  # share of step in communication phases


def data_wait(ctx: Context) -> float | None:
    """Window mean share of step time the job waited for data (attach mode only)."""
    return ctx.job.data_wait_share if ctx.job else None


def data_wait_evidence(ctx: Context, detail: str = "") -> tuple[Evidence, ...]:
    """The job waits on its input for a large share of its time (``detail``: how)."""
    wait = data_wait(ctx)
    if wait is None or wait < DATA_WAIT_SHARE:
        return ()
    text = f"data wait {pct(wait)} of time" + (f", {detail}" if detail else "")
    return (Evidence(text, "data_wait_share", wait, "training"),)


def held_share(values: Iterable[float | None], threshold: float) -> float:
    """How steadily a signal held over the window: the share of its measured samples at or
    above ``threshold`` (1 when it has no samples to tell: a window mean is all there is)."""
    got = present(values)
    return share_true(v >= threshold for v in got) if got else 1.0


def wait_held(ctx: Context) -> float:
    """The share of the window's summaries whose data wait reached the threshold."""
    return held_share(ctx.job.waits, DATA_WAIT_SHARE) if ctx.job else 1.0


def io_bound(ctx: Context) -> tuple[Evidence, ...]:
    """Storage limits reading: data is being read, and either the machine shows storage
    pressure or the job's loaders sit idle while they read.  Machine-wide iowait alone cannot
    tell dataset reads from a checkpoint's fsync, and it vanishes on a busy host (it is idle
    time) or thins out on a big one, so the loaders' own CPU is the second witness."""
    reads = read_traffic(ctx)
    if not reads:
        return ()
    pressure = storage_pressure(ctx) or _idle_readers(ctx)
    return pressure + reads if pressure else ()


def loaders(ctx: Context) -> tuple[ProcView, ...]:
    """The processes that load batches: the DataLoader workers, else the trainer itself."""
    if ctx.workers:
        return ctx.workers
    return (ctx.trainer,) if ctx.trainer is not None else ()


def loader_cpu_pct(ctx: Context) -> float | None:
    """Mean CPU of the loading processes (100 = one core)."""
    return mean_of(p.cpu_pct for p in loaders(ctx))


def _idle_readers(ctx: Context) -> tuple[Evidence, ...]:
    """The job waits for batches while its loaders read and barely use a CPU: blocked on I/O."""
    cpu = loader_cpu_pct(ctx)
    if ctx.mode != "attach" or cpu is None or cpu >= LOADER_IDLE_PCT:
        return ()
    if (data_wait(ctx) or 0.0) < DATA_WAIT_SHARE:
        return ()
    text = f"{len(loaders(ctx))} loading processes at {pct100(cpu)} CPU each while reading"
    return (Evidence(text, "loader_cpu_pct", cpu, "dataloader"),)


def storage_pressure(ctx: Context) -> tuple[Evidence, ...]:
    found: list[Evidence] = []
    iowait = ctx.box.iowait_pct
    if iowait is not None and iowait >= IOWAIT_PCT:
        found.append(Evidence(f"CPU iowait {pct100(iowait)}", "iowait_pct", iowait, "cpu"))
    for d in ctx.box.disks:
        if (d.busy_pct or 0.0) >= DISK_BUSY_PCT and (d.await_ms or 0.0) >= DISK_AWAIT_MS:
            read = rate(d.read_bytes_per_s or 0.0)
            busy = pct100(d.busy_pct or 0.0)
            text = f"disk {d.name} {read}, await {d.await_ms:.0f} ms, {busy} busy"
            found.append(Evidence(text, f"disk.{d.name}.busy_pct", d.busy_pct, "disk"))
    return tuple(found)


def read_traffic(ctx: Context) -> tuple[Evidence, ...]:
    """The job reads from storage: its trainer's and workers' read bytes when known (other
    processes' reads are not its problem), else any disk's read rate (system mode)."""
    own = [p.read_bytes_per_s for p in (ctx.trainer, *ctx.workers) if p is not None]
    measured = [r for r in own if r is not None]
    if measured:
        total = sum(measured)
        if total < READ_MIN_BYTES_PER_S:
            return ()
        text = f"job reads {rate(total)} from storage"
        return (Evidence(text, "job_read_bytes_per_s", total, "dataloader"),)
    disk = max(ctx.box.disks, key=lambda d: d.read_bytes_per_s or 0.0, default=None)
    if disk is None or (disk.read_bytes_per_s or 0.0) < READ_MIN_BYTES_PER_S:
        return ()
    text = f"disk {disk.name} reads {rate(disk.read_bytes_per_s or 0.0)}"
    return (Evidence(text, f"disk.{disk.name}.read_bytes_per_s", disk.read_bytes_per_s, "disk"),)


def cpu_saturated(ctx: Context) -> tuple[Evidence, ...]:
    """Every core is busy: more processes cannot get more CPU."""
    busy = ctx.box.cpu_busy_pct
    if busy is None or busy < CPU_SATURATED_PCT:
        return ()
    text = f"CPU {pct100(busy)} busy across {ctx.box.logical_cpus} logical CPUs"
    return (Evidence(text, "cpu_busy_pct", busy, "cpu"),)


def runnable_pct(p: ProcView) -> float | None:
    """CPU a process wanted: on a CPU plus waiting for one (100 = one thread all the time).
    A worker that gets 80 % of a core and queues for the rest is as CPU-bound as one at 100 %."""
    if p.cpu_pct is None:
        return None
    return p.cpu_pct + (p.cpu_wait_pct or 0.0)


def workers_saturated(ctx: Context, why: str = "") -> tuple[Evidence, ...]:
    """Most DataLoader workers run or wait to run all the time: decoding/augmentation is the
    work (a worker is one process, ~100 % = one core).  ``why``: what makes them wait, said
    after the figure (a cgroup quota that throttles them)."""
    measured = [w for w in ctx.workers if w.cpu_pct is not None]
    hot = [w for w in measured if (runnable_pct(w) or 0.0) >= WORKER_BUSY_PCT]
    if not measured or len(hot) * 4 < len(measured) * 3:
        return ()
    mean = sum(w.cpu_pct or 0.0 for w in measured) / len(measured)
    text = f"{len(hot)}/{len(measured)} workers at {pct100(mean)} CPU"
    waits = [w.cpu_wait_pct for w in measured if w.cpu_wait_pct is not None]
    wait = sum(waits) / len(waits) if waits else 0.0
    if wait >= WAIT_EVIDENCE_PCT:
        text += f" and waiting for a CPU {pct100(wait)} of the time{why}"
    return (Evidence(text, "worker_cpu_pct", mean, "dataloader"),)


def no_workers(ctx: Context) -> tuple[Evidence, ...]:
    """``num_workers=0``: the training process loads every batch itself."""
    if ctx.mode != "attach" or ctx.workers:
        return ()
    text = "no DataLoader workers: the training process loads batches itself"
    return (Evidence(text, "workers", 0.0, "dataloader"),)


def trainer_pegged(ctx: Context) -> tuple[Evidence, ...]:
    """The trainer's main thread holds one core: Python launch overhead or CPU-side work.
    Where its main thread is measured alone, that thread running or queueing for a CPU all
    the time is the test (other threads' CPU says nothing about the Python thread)."""
    t = ctx.trainer
    if t is not None and t.main_cpu_pct is not None:
        return _main_thread_pegged(t)
    if t is not None and t.cpu_pct is not None:
        if t.cpu_pct < TRAINER_PEGGED_PCT:
            return ()
        text = f"trainer {t.name} (pid {t.pid}) at {pct100(t.cpu_pct)} CPU: one core pegged"
        return (Evidence(text, "trainer_cpu_pct", t.cpu_pct, "processes"),)
    return _one_core_pegged(ctx)


def trainer_queueing(ctx: Context) -> tuple[Evidence, ...]:
    """The trainer's threads wait for a CPU a noticeable share of the time they want one: what
    its CPU % cannot say (it got little because it wanted little, or because it queued)."""
    t = ctx.trainer
    if t is None or t.cpu_pct is None or t.cpu_wait_pct is None:
        return ()
    runnable = t.cpu_pct + t.cpu_wait_pct
    share = t.cpu_wait_pct / runnable if runnable > 0.0 else 0.0
    if share < QUEUE_EVIDENCE_SHARE:
        return ()
    text = f"trainer {t.name} (pid {t.pid}) waits for a CPU {pct(share)} of the time"
    return (Evidence(text, "trainer_cpu_wait_share", share, "processes"),)


def _main_thread_pegged(t: ProcView) -> tuple[Evidence, ...]:
    run, wait = t.main_cpu_pct or 0.0, t.main_wait_pct or 0.0
    if run + wait < TRAINER_PEGGED_PCT:
        return ()
    text = f"trainer {t.name} (pid {t.pid}) main thread at {pct100(run)} CPU"
    if wait >= WAIT_EVIDENCE_PCT:
        text += f" and waiting for a CPU {pct100(wait)} of the time"
    text += ": one core pegged" if wait < WAIT_EVIDENCE_PCT else ": it wants a whole core"
    return (Evidence(text, "trainer_cpu_pct", run + wait, "processes"),)


def _one_core_pegged(ctx: Context) -> tuple[Evidence, ...]:
    """Without a known trainer: one core near 100 % while the machine as a whole idles."""
    if not ctx.box.core_busy_pct or (ctx.box.cpu_busy_pct or 0.0) >= 50.0:
        return ()
    top = max(ctx.box.core_busy_pct)
    if top < TRAINER_PEGGED_PCT:
        return ()
    text = f"one core at {pct100(top)} while the CPU is {pct100(ctx.box.cpu_busy_pct or 0)} busy"
    return (Evidence(text, "max_core_busy_pct", top, "cpu"),)


def gpu_underused(ctx: Context) -> tuple[Evidence, ...]:
    """The job's GPUs work, but little or in bursts (idle gaps between kernels)."""
    util, swing = ctx.gpu_util_pct, ctx.gpu_util_std
    if util is None or util < GPU_IDLE_PCT:
        return ()  # an idle GPU is the idle rule's case
    if ctx.mode == "system" and not any(g.pids for g in ctx.gpus):
        return ()  # no process on the GPU: nothing is training there
    swinging = swing is not None and swing >= GPU_SWING_PCT
    if util >= GPU_UNDERUSED_PCT and not swinging:
        return ()
    which = ", ".join(str(g.index) for g in ctx.gpus)
    text = f"GPU {which} utilization {pct100(util)}"
    text += f" (swinging ±{swing:.0f})" if swinging else ""
    return (Evidence(text, "gpu_util_pct", util, "gpu"),)


def nic_busy(ctx: Context) -> tuple[Evidence, ...]:
    """An interface runs near its link speed."""
    found = []
    for n in ctx.box.nics:
        if n.link_util_pct is not None and n.link_util_pct >= NIC_BUSY_PCT:
            traffic = f"rx {rate(n.rx_bytes_per_s or 0)}, tx {rate(n.tx_bytes_per_s or 0)}"
            text = f"NIC {n.name} at {pct100(n.link_util_pct)} of link ({traffic})"
            found.append(Evidence(text, f"nic.{n.name}.link_util_pct", n.link_util_pct, "network"))
    return tuple(found)


def comm_share(ctx: Context) -> tuple[float, str] | None:
    """Summed share of the step spent in phases named like communication, and their names
    (read once per rank into its :class:`~traintop.diagnosis.context.JobView`: several rules and the
    straggler search ask)."""
    return ctx.job.comm if ctx.job else None
