"""A second thread that takes the interpreter from the training loop (``gil_contention``).

CPython runs one thread's Python at a time: a thread holds the GIL while it runs Python (or C
that keeps it) and releases it in blocking calls and in C that lets go (NumPy's and torch's
kernels, socket and file I/O, NCCL's and gloo's loops).  A thread that runs pure Python holds it
for as long as it is on a CPU, or queued for one (a preempted thread keeps it); the training
thread, between its torch calls, then waits for it, asleep on a condition variable up to the 5
ms switch interval each time, and the loop runs slower though the process looks busy ("trainer
at 102 % CPU").

The kernel says how much each thread ran or queued (``schedstat``, per thread); the rank's
helper (traintop/thread_samples.py) says each thread's Python name and stack, and in how many
windows it ran while the helper held the GIL against while the helper left it free: a thread
that runs only while the GIL is free needs it.  The rule holds when a thread other than the
training one

* is runnable (on a CPU or queued for one) ``THREAD_PCT`` of the time or more, and
* ran in fewer than ``GIL_RATIO`` as many of the windows in which the helper held the GIL as of
  those in which it was free (and in a sixth of the windows at least: a thread the CPUs of a
  crowded box rarely run says nothing),

and the training thread itself needs the interpreter for at least ``LOOP_NEED`` of its time (by
the same measure: ``1 - held/free`` windows).  One answer holds twenty windows: a thread that
holds the GIL half the time ran in 5 to 10 of its free ones, and the loop beside it read a need
of 0.56 to 0.82, so the bars sit well below both (at a quarter and at half, one run in four or
five missed it).  It claims the smaller of the holder's share and
the loop's need of its own time (outside its waits for data and peers).  Threads that wait (in
I/O, in C without the GIL, a logger between lines, the pin-memory thread at rest) are not busy
and are never named; a busy thread in C without the GIL runs while the GIL is held as much as
the CPUs let it, and is not either.  A device the job keeps busy (``compute``) is the limit
whatever the interpreter does.
"""

from __future__ import annotations

from dataclasses import dataclass

from traintop.collectors.snapshot import Frame, PyThread
from traintop.diagnosis import remedies_host
from traintop.diagnosis.busy import gpu_busy
from traintop.diagnosis.context import Context
from traintop.diagnosis.findings import candidate
from traintop.diagnosis.gains import bounded, now_rate
from traintop.diagnosis.model import Candidate, Evidence
from traintop.diagnosis.stack_text import where
from traintop.diagnosis.text import pct, pct100

THREAD_PCT = 25.0  # another thread runnable a quarter of the time at least
GIL_RATIO = 0.1  # ... running in under this share as many held windows as free ones
MIN_FREE = 3  # free windows it ran in, at least (and a sixth of them): else it says nothing
FREE_SHARE = 6
LOOP_NEED = 0.35  # the training thread needs the GIL at least this share of its time
MIN_LOST = 0.1
DEVICE_BUSY = 0.8  # a device busy this much is the limit (compute's bar)


@dataclass(frozen=True, slots=True)
class Holder:
    """A thread that holds the interpreter: its Python view and the share of the time the
    kernel had it runnable (on a CPU or queued for one)."""

    thread: PyThread
    cpu_pct: float


def gil_share(t: PyThread) -> float | None:
    """How much of its running ``t`` needs the GIL for: 1 less the ratio of the windows it ran
    in while the GIL was held to those while it was free; None where it ran in too few free
    windows to tell (asleep, or a thread the CPUs rarely run on a crowded box)."""
    if t.ran_free < max(MIN_FREE, t.windows // FREE_SHARE):
        return None
    return 1.0 - min(1.0, t.ran_held / t.ran_free)


def holders(ctx: Context) -> list[Holder]:
    """The rank's threads but the training one that are busy and need the GIL to run."""
    job, trainer = ctx.job.job if ctx.job else None, ctx.trainer
    if job is None or trainer is None or not job.threads:
        return []
    runnable = {tid: run + wait for tid, run, wait in trainer.threads}
    found = []
    for t in job.threads:
        share, need = runnable.get(t.tid, 0.0), gil_share(t)
        if not t.training and share >= THREAD_PCT and need is not None and need >= 1 - GIL_RATIO:
            found.append(Holder(t, share))
    return sorted(found, key=lambda h: -h.cpu_pct)


def _own_time(ctx: Context) -> float:
    """The share of the rank's time outside its waits (for the next batch, for its peers)."""
    budget = ctx.job.budget if ctx.job else None
    if budget is None:
        return 1.0
    return max(0.0, 1.0 - sum(budget.shares.get(n, 0.0) for n in budget.waits))


def _loop(ctx: Context) -> PyThread | None:
    job = ctx.job.job if ctx.job else None
    return next((t for t in job.threads if t.training), None) if job is not None else None


def gil_claim(ctx: Context) -> tuple[list[Holder], float, float]:
    """The holders, the loop's need of the GIL and the share of the time the rule claims
    (0 where it does not hold); the long steps a holder's bursts make are this time too
    (``periodic_stall`` leaves it)."""
    found, loop = holders(ctx), _loop(ctx)
    need = gil_share(loop) if loop is not None else None
    if not found or need is None or need < LOOP_NEED:
        return found, 0.0, 0.0
    busy = gpu_busy(ctx) if ctx.gpus else None
    if busy is not None and busy.share >= DEVICE_BUSY:
        return found, need, 0.0  # the device is the limit: the interpreter's turns cost nothing
    lost = min(found[0].cpu_pct / 100.0, need * _own_time(ctx))
    return found, need, lost if lost >= MIN_LOST else 0.0


def gil_contention(ctx: Context) -> Candidate | None:
    """Another Python thread takes the interpreter from a training loop that needs it."""
    found, need, lost = gil_claim(ctx)
    if not lost:
        return None
    first = found[0]
    return candidate(
        ctx,
        "gil_contention",
        severity="warning",
        summary=f"Thread '{first.thread.name}' holds the interpreter {pct100(first.cpu_pct)} "
        "of the time: the training loop waits for the GIL",
        evidence=_facts(ctx, found, need),
        remedies=lambda: bounded(
            remedies_host.gil_holder(first.thread.name, first.cpu_pct),
            lost,
            "the share of the step the loop waits for the interpreter",
            now_rate(ctx),
        ),
        lost=lost,
    )


def _facts(ctx: Context, found: list[Holder], need: float) -> list[Evidence]:
    facts = [_holder_fact(h) for h in found]
    text = (f"the training thread needs the GIL {pct(need)} of its running time (it ran that "
            f"much less while another thread held it)")  # fmt: skip
    facts.append(Evidence(text, "training_thread_gil_share", need, "processes"))
    t = ctx.trainer
    if t is not None and t.cpu_pct is not None:
        text = f"trainer {t.name} (pid {t.pid}) at {pct100(t.cpu_pct)} CPU"
        facts.append(Evidence(text, "trainer_cpu_pct", t.cpu_pct, "processes"))
    return facts


def _holder_fact(h: Holder) -> Evidence:
    """``thread 'stats' (tid 4321) runs or queues for a CPU 48 % of the time and needs the
    GIL: it ran in 0 of 30 windows while another thread held it, 22 while it was free, in 7 of
    10 samples at train.py:88 in aggregate: ...``."""
    t = h.thread
    text = (f"thread '{t.name}' (tid {t.tid}) runs or queues for a CPU {pct100(h.cpu_pct)} "
            f"of the time and needs the GIL: it ran in {t.ran_held} of {t.windows} windows "
            f"while another thread held it, {t.ran_free} while it was free")  # fmt: skip
    frames = _past_bootstrap(t.frames)
    if frames:
        text += f", in {t.frames_count} of {t.samples} samples at {where(frames)}"
    return Evidence(text, "gil_thread_cpu_pct", h.cpu_pct, "processes")


def _past_bootstrap(frames: tuple[Frame, ...]) -> tuple[Frame, ...]:
    """A thread's frames less ``threading``'s own that start every thread (``_bootstrap``,
    ``run``): its target is where its stack begins."""
    start = 0
    while start < len(frames) and frames[start].file.endswith("threading.py"):
        start += 1
    return frames[start:] or frames
