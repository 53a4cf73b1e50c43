"""The helper's thread samples, in this process: a thread in pure Python runs only while the GIL
is free; one hashing a large buffer in C (which releases the GIL for the whole call) runs while
it is held as well; an idle one runs in neither; each is named, with its frame.  (Side by side,
a pure-Python spinner would starve the hasher of the GIL it needs between its calls: each is
sampled beside an idle thread only.)  What the threads run depends on the CPU time they get:
solo."""

from __future__ import annotations

import hashlib
import threading
import time
from collections.abc import Callable

import pytest

from traintop.collectors.snapshot import PyThread
from traintop.collectors.stacks import py_threads
from traintop.diagnosis.rules_gil import GIL_RATIO, gil_share
from traintop.stack_helper import training_stack
from traintop.thread_samples import threads_sampled

pytestmark = pytest.mark.solo
NEEDS = 1 - GIL_RATIO  # what the GIL rule takes for a thread that holds the GIL


def spin_in_python(stop: threading.Event) -> None:
    total = 0
    while not stop.is_set():
        for i in range(1000):
            total += i * i


def hash_in_c(stop: threading.Event) -> None:
    block = b"x" * (256 << 20)  # about 0.2 s a call, the GIL released throughout
    while not stop.is_set():
        hashlib.sha256(block).digest()


def idle(stop: threading.Event) -> None:
    stop.wait()


def sampled(busy: Callable[[threading.Event], None]) -> dict[str, PyThread]:
    """Every thread of this process sampled while ``busy`` and an idle thread run."""
    stop = threading.Event()
    threads = [threading.Thread(target=f, args=(stop,), name=f.__name__, daemon=True)
               for f in (busy, idle)]  # fmt: skip
    for t in threads:
        t.start()
    try:
        time.sleep(0.3)
        answer = threads_sampled(threading.get_ident(), 20, 0.02, training_stack)
    finally:
        stop.set()
        for t in threads:
            t.join(timeout=5)
    return {t.name: t for t in py_threads(answer)}


def test_a_thread_in_pure_python_needs_the_gil() -> None:
    found = sampled(spin_in_python)
    spinner = found["spin_in_python"]
    assert spinner.samples == 20 and spinner.frames[-1].function == "spin_in_python"
    assert (gil_share(spinner) or 0.0) >= NEEDS  # it ran only while the GIL was free
    assert gil_share(found["idle"]) is None  # it ran in neither: nothing to tell


def test_a_thread_in_c_that_released_the_gil_does_not() -> None:
    hasher = sampled(hash_in_c)["hash_in_c"]
    assert hasher.frames[-1].function == "hash_in_c"
    share = gil_share(hasher)  # it ran while the GIL was held as well (or too little to tell)
    assert share is None or share < NEEDS, hasher
