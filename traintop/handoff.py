"""The trainer's handoff of each batch a DataLoader worker made, timed where it happens.

A worker pickles its batch into a pipe; the trainer's ``next()`` unpickles it, and unpickling
rebuilds each tensor from the worker's shared memory: under torch's default ``file_descriptor``
sharing strategy that is a round trip per storage to a thread in the worker, which answers
only when it gets that worker's GIL (a worker parsing in Python holds it for up to the
switch interval).  That time is the trainer's own, in series with its step whatever the count of
workers, so a loader model that does not know it promises workers a gain the handoff keeps
(a job parsing CSV rows: 1.7 ms of a 2.4 ms step).  The monitor cannot tell it from the wait
for the batch: both are inside ``next()``.

So the probe times multiprocessing's unpickling (its queues call ``_ForkingPickler.loads``)
on the training thread, and adds the nanoseconds and the count to two words of the segment
(``HANDOFF_NS_WORD``, ``HANDOFF_COUNT_WORD``); the reader takes their difference over its
window.  A pin-memory thread unpickles on its own thread: not counted (the words stay 0, and the
reader falls back to its estimate).  Two clock reads and a few attribute loads a batch.
"""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from traintop.probe import Probe


def install(probe: Probe, kind: str) -> None:
    """Time the unpickling of every multiprocessing queue's item on ``probe``'s thread
    (a swap of ``kind``: the hooks' off/on switch takes it out and puts it back)."""
    import multiprocessing.queues as queues

    queues_pickler = queues._ForkingPickler  # type: ignore[attr-defined]
    probe._patches.swap(kind, queues, "_ForkingPickler", timed_pickler(probe, queues_pickler))


def timed_pickler(probe: Probe, base: type) -> type:
    """``base`` with a ``loads`` that adds its time on the training thread to the segment's
    words (none yet, or released under it by a close or in a forked child: nothing to keep)."""
    plain, clock, ident = base.loads, probe._clock, threading.get_ident

    def loads(data: Any, /, *args: Any, **kwargs: Any) -> Any:
        if ident() != probe._thread or not probe._on:
            return plain(data, *args, **kwargs)
        start = clock()
        try:
            return plain(data, *args, **kwargs)
        finally:
            words = getattr(probe._writer, "handoff_words", None)
            if words is not None:
                try:
                    words[0] += clock() - start
                    words[1] += 1
                except (ValueError, TypeError):
                    pass

    return type("TimedForkingPickler", (base,), {"loads": staticmethod(loads)})
