"""The trainer's handoff of each batch a DataLoader worker made, timed where it happens.

A worker pickles its batch into a pipe; the trainer's ``next()`` unpickles it, and unpickling
rebuilds each tensor from the worker's shared memory: under torch's default ``file_descriptor``
sharing strategy that is a round trip per storage to a thread in the worker, which answers
only when it gets that worker's GIL (a worker parsing in Python holds it for up to the
switch interval).  Its own work, the trainer's and the worker's serving threads', is in series
with the step whatever the count of workers, so a loader model that does not know it promises
workers a gain the handoff keeps (a job parsing CSV rows: 1.0 ms of a 2.5 ms step).  The
monitor cannot tell it from the wait for the batch: both are inside ``next()``.

So the probe times multiprocessing's unpickling (its queues call ``_ForkingPickler.loads``)
on the training thread, and adds the nanoseconds, the count and the nanoseconds it ran on a CPU
(its thread's clock) to three words of the segment (``HANDOFF_NS_WORD``, ``HANDOFF_COUNT_WORD``,
``HANDOFF_CPU_WORD``); the reader takes their difference over its window.  The CPU part is the
trainer's own work; the rest is the worker's side, its serving threads and the wait for its GIL
(long while the worker's Python keeps it: a worker busy on its next batch).  A pin-memory thread
unpickles on its own thread: not counted (the words stay 0, and the reader falls back to its
estimate).  Two clock reads and a few attribute loads a batch, and two more, of the thread's
CPU clock, on one batch in eight (0.5 µs a batch, 1.2 µs more on those: ``docs/probe.md``).
"""

from __future__ import annotations

import threading
import time
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traintop.probe import Probe

CPU_EVERY = 8  # the handoffs whose CPU time is read: one in this many


def install(probe: Probe, kind: str) -> None:
    """Time the unpickling of every multiprocessing queue's item on ``probe``'s thread
    (a swap of ``kind``: the hooks' off/on switch takes it out and puts it back)."""
    import multiprocessing.queues as queues

    queues_pickler = queues._ForkingPickler  # type: ignore[attr-defined]
    probe._patches.swap(kind, queues, "_ForkingPickler", timed_pickler(probe, queues_pickler))


def timed_pickler(probe: Probe, base: type) -> type:
    """``base`` with a ``loads`` that adds its time on the training thread to the segment's
    words (none yet, or released under it by a close or in a forked child: nothing to keep);
    its CPU time on one handoff in ``CPU_EVERY``, counted that many times (a thread's CPU clock
    is a system call, 0.7 µs: every batch's would triple the cost)."""
    plain, clock, ident, ran = base.loads, probe._clock, threading.get_ident, time.thread_time_ns

    def loads(data: Any, /, *args: Any, **kwargs: Any) -> Any:
        words = getattr(probe._writer, "handoff_words", None)
        if words is None or ident() != probe._thread or not probe._on:
            return plain(data, *args, **kwargs)
        sampled = not words[1] % CPU_EVERY
        start, cpu = clock(), ran() if sampled else 0
        try:
            return plain(data, *args, **kwargs)
        finally:
            try:
                words[0] += clock() - start
                if sampled:
                    words[2] += (ran() - cpu) * CPU_EVERY
                words[1] += 1
            except (ValueError, TypeError):
                pass

    return type("TimedForkingPickler", (base,), {"loads": staticmethod(loads)})
