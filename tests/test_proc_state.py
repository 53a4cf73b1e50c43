"""What the kernel says of a stalled rank (collectors/proc_state.py), read from real processes:
stopped, asleep in a read and the file it reads, frozen in that read (state D), busy, gone;
and who may be sent the stack signal (collectors/fault_dump.handles).

The D state comes from the cgroup v1 freezer, mounted and writable here: a frozen task sleeps
uninterruptibly in the call it was in, which keeps its real system call and file in /proc.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.polling import eventually
from traintop.collectors.fault_dump import handles
from traintop.collectors.proc_state import GONE, ProcReader, blocked, busy, children, stopped

READER = textwrap.dedent(
    """
    import os, sys
    fd = os.open(sys.argv[1], os.O_RDWR)  # no writer needed to open, nobody ever writes
    print("reading", flush=True)
    os.read(fd, 1)
    """
)
SPINNER = "import time\nend = time.monotonic() + 30\nwhile time.monotonic() < end: pass\n"


@contextlib.contextmanager
def started(*argv: str) -> Iterator[subprocess.Popen]:
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
    try:
        yield proc
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(proc.pid, signal.SIGCONT)
        proc.kill()
        proc.wait()


def settled(reader: ProcReader, pid: int, state: str) -> bool:
    return eventually(lambda: reader.read(pid).state == state, timeout_s=5.0)


def test_a_stopped_process_reads_stopped_and_a_sleeping_one_does_not() -> None:
    reader = ProcReader()
    with started("sleep", "30") as proc:
        assert settled(reader, proc.pid, "S") and not stopped(reader.read(proc.pid))
        os.kill(proc.pid, signal.SIGSTOP)
        assert settled(reader, proc.pid, "T") and stopped(reader.read(proc.pid))
        os.kill(proc.pid, signal.SIGCONT)
        assert settled(reader, proc.pid, "S")


@contextlib.contextmanager
def reading(fifo: Path, reader: ProcReader) -> Iterator[subprocess.Popen]:
    """A process in a read of ``fifo`` that nobody ever answers."""
    os.mkfifo(fifo)
    with started(sys.executable, "-c", READER, str(fifo)) as proc:
        assert proc.stdout.readline().strip() == "reading"
        assert eventually(lambda: reader.read(proc.pid).syscall == "read", timeout_s=5.0)
        yield proc


def test_a_read_nobody_answers_names_its_call_and_file(tmp_path: Path) -> None:
    fifo = tmp_path / "shard.fifo"
    reader = ProcReader()
    with reading(fifo, reader) as proc:
        state = reader.read(proc.pid)
        assert (state.state, state.syscall, state.file) == ("S", "read", str(fifo))
        assert state.wchan and not blocked(state) and not busy(state)


@pytest.fixture
def freezer() -> Iterator[Path]:
    group = Path(f"/sys/fs/cgroup/freezer/traintop-unit-{os.getpid()}")
    try:
        group.mkdir()
    except OSError:
        pytest.skip("no writable cgroup v1 freezer")
    yield group
    (group / "freezer.state").write_text("THAWED\n")
    assert eventually(lambda: _removed(group), timeout_s=5.0)


def _removed(group: Path) -> bool:
    try:
        group.rmdir()
    except OSError:
        return False
    return True


def test_a_process_frozen_in_its_read_is_in_state_d_with_that_read(tmp_path, freezer) -> None:
    fifo = tmp_path / "shard.fifo"
    reader = ProcReader()
    with reading(fifo, reader) as proc:
        (freezer / "cgroup.procs").write_text(f"{proc.pid}\n")
        (freezer / "freezer.state").write_text("FROZEN\n")
        assert settled(reader, proc.pid, "D")
        state = reader.read(proc.pid)
        assert blocked(state) and (state.syscall, state.file) == ("read", str(fifo))
        assert state.wchan == "__refrigerator"
        (freezer / "freezer.state").write_text("THAWED\n")
        assert settled(reader, proc.pid, "S")


def test_a_process_burning_its_cpu_is_busy_and_one_asleep_is_not() -> None:
    reader = ProcReader()
    with started(sys.executable, "-c", SPINNER) as spinning, started("sleep", "30") as asleep:
        for pid in (spinning.pid, asleep.pid):
            reader.read(pid)
        time.sleep(1.0)
        hot, cold = reader.read(spinning.pid), reader.read(asleep.pid)
    assert busy(hot) and hot.runnable_pct >= 50.0, hot
    # asleep: no CPU to speak of (the kernel books it ~1 ms now and then, seen here)
    assert not busy(cold) and cold.cpu_pct is not None and cold.cpu_pct < 1.0, cold


def test_a_process_or_a_thread_that_is_gone_reads_gone() -> None:
    reader = ProcReader()
    with started("true") as proc:
        proc.wait()
    assert reader.read(proc.pid).state == GONE
    assert reader.read(os.getpid(), tid=2**22 + 7).state == GONE  # no such thread of ours


def test_children_are_listed_oldest_first() -> None:
    with started("sleep", "30") as first, started("sleep", "30") as second:
        mine = children(os.getpid())
    assert mine.index(first.pid) < mine.index(second.pid)


FORKER = textwrap.dedent(
    """
    import faulthandler, os, signal, subprocess, sys, time
    faulthandler.register(signal.SIGUSR2, file=sys.stderr, all_threads=True)
    pid = os.fork()
    if pid == 0:
        time.sleep(30)
        os._exit(0)
    execd = subprocess.Popen(["sleep", "30"])
    print(pid, execd.pid, flush=True)
    time.sleep(30)
    """
)


def test_only_a_forked_child_inherits_the_registered_stack_signal() -> None:
    """A DataLoader worker is forked: it handles the signal (SigCgt); a child that exec'd
    another program does not, and would be killed by it."""
    with started(sys.executable, "-c", FORKER) as proc:
        forked, execd = map(int, proc.stdout.readline().split())
        try:
            assert handles(proc.pid, signal.SIGUSR2) and handles(forked, signal.SIGUSR2)
            assert not handles(execd, signal.SIGUSR2)
        finally:
            for pid in (forked, execd):
                with contextlib.suppress(ProcessLookupError):
                    os.kill(pid, signal.SIGKILL)
