"""One stack, one judgement: a stack another reader already had taken is used as it is, and a
forked DataLoader worker's faulthandler dump, which lands in the rank's own ``.fault`` file
under the rank's training-thread ident, is never taken for the rank's (collectors/stacks.py,
collectors/fault_dump.py), on real processes and real faulthandler output."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from tests.isolation import private_dir
from tests.polling import eventually
from tests.test_stack_helper import gil_holder, probe_in
from traintop.collectors.fault_dump import WORKER_LOOP, worker_dumps
from traintop.collectors.ring_reader import open_segment
from traintop.collectors.stacks import StackClient, thread_frames, wait_for

FORKING_RANK = textwrap.dedent(
    """
    import faulthandler, os, signal, sys, threading, time
    sys.path.insert(0, sys.argv[2])
    from _utils.worker import _worker_loop  # a file named like torch's worker loop

    faulthandler.register(signal.SIGUSR2, file=open(sys.argv[1], "ab", buffering=0),
                          all_threads=True)

    def train_step():
        pid = os.fork()
        if pid == 0:
            _worker_loop()
            os._exit(0)
        print(pid, threading.get_ident(), flush=True)
        time.sleep(30)

    train_step()
    """
)


def test_a_workers_dump_in_the_ranks_file_is_told_apart_from_the_ranks(tmp_path) -> None:
    """The worker's main thread is the fork of the rank's training thread: same ident."""
    (tmp_path / "_utils").mkdir()
    (tmp_path / "_utils" / "worker.py").write_text(
        "import os, pathlib, time\n\ndef _worker_loop():\n"
        "    pathlib.Path(os.environ['READY']).write_text('in the loop')\n    time.sleep(30)\n"
    )
    fault = tmp_path / "rank.fault"
    argv = [sys.executable, "-c", FORKING_RANK, str(fault), str(tmp_path)]
    ready = tmp_path / "ready"
    env = {**os.environ, "READY": str(ready)}
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True, env=env)
    worker = None
    try:
        worker, ident = map(int, proc.stdout.readline().split())
        assert eventually(ready.exists)  # the worker is in its loop: its dump shows it
        for pid in (proc.pid, worker, proc.pid, worker):  # rank, worker, rank, worker
            size = fault.stat().st_size if fault.exists() else 0
            os.kill(pid, signal.SIGUSR2)
            assert eventually(lambda size=size: fault.exists() and fault.stat().st_size > size)
        text = fault.read_text()
    finally:
        if worker is not None:
            os.kill(worker, signal.SIGKILL)
        proc.kill()
        proc.wait()
    rank = thread_frames(text, ident)
    assert rank is not None and rank[-1].function == "train_step"  # not the worker's newer one
    (_, newest) = worker_dumps(text)
    frames = newest.runs(WORKER_LOOP).frames
    assert frames[-1].function == "_worker_loop" and newest.thread(ident) is not None


def test_a_dump_another_reader_triggered_is_used_without_a_second_signal(tmp_path) -> None:
    proc, path = gil_holder(tmp_path, "")
    try:
        time.sleep(0.3)  # the PyDLL call holds the GIL now
        with open_segment(path) as segment:
            first = StackClient(path, segment.header)
            assert first.ask(time.monotonic())
            wait_for(first, segment.hot, timeout_s=4.0)
            assert first.taken is not None and first.taken.source == "signal"
            fault = path.with_name(path.name.removesuffix(".ring") + ".fault")
            size = fault.stat().st_size
            second = StackClient(path, segment.header)  # another command, later
            assert second.reuse(time.monotonic(), segment.hot(), since_ns=0)
            assert second.taken.frames[-1].function == "hold_the_gil"
            assert second.taken.source == "signal" and fault.stat().st_size == size
            moved = time.monotonic_ns()  # the rank moved after the dump: it says nothing now
            assert not StackClient(path, segment.header).reuse(time.monotonic(), segment.hot(),
                                                               since_ns=moved)  # fmt: skip
    finally:
        proc.kill()
        proc.wait()


def test_an_answer_to_another_reader_is_left_for_the_next_one(tmp_path: Path) -> None:
    ring_dir = private_dir(tmp_path / "ring")
    probe = probe_in(ring_dir)
    path = probe._writer.path
    try:
        with open_segment(path) as segment:
            first = StackClient(path, segment.header)
            before = time.monotonic_ns()
            assert first.ask(time.monotonic())
            wait_for(first, segment.hot)
            assert first.taken is not None and first.taken.source == "helper"
            second = StackClient(path, segment.header)
            assert second.reuse(time.monotonic(), segment.hot(), since_ns=before)
            assert second.taken.source == "helper"
            assert [f.function for f in second.taken.frames] == [
                f.function for f in first.taken.frames
            ]
    finally:
        probe.close()


PIN_LOOP = """\
import threading

release = threading.Event()


def _pin_memory_loop():
    pin_memory()


def pin_memory():
    release.wait(30)
"""


def test_the_helper_answers_with_the_pin_memory_threads_stack_too(tmp_path: Path) -> None:
    """A rank with a thread running a loop named as torch's pin_memory loop: the stack answer
    carries that thread's frames beside the training thread's."""
    (tmp_path / "_utils").mkdir()
    (tmp_path / "_utils" / "pin_memory.py").write_text(PIN_LOOP)
    sys.path.insert(0, str(tmp_path))
    try:
        from _utils import pin_memory as fake  # a file named like torch's
    finally:
        sys.path.remove(str(tmp_path))
    thread = threading.Thread(target=fake._pin_memory_loop, daemon=True)
    thread.start()
    ring_dir = private_dir(tmp_path / "ring")
    probe = probe_in(ring_dir)
    path = probe._writer.path
    try:
        with open_segment(path) as segment:
            client = StackClient(path, segment.header)
            assert client.ask(time.monotonic())
            wait_for(client, segment.hot)
            names = [f.function for f in client.taken.pin_memory]
            loop = names.index("_pin_memory_loop")
            assert names[loop + 1] == "pin_memory" and "pin_memory" not in [
                f.function for f in client.taken.frames
            ]
    finally:
        fake.release.set()
        thread.join(5)
        probe.close()
