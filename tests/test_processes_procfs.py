"""collectors.procfs against a fake /proc tree and against the real one."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from collectors import procfs
from collectors.processes import ProcessCollector

TICK = os.sysconf("SC_CLK_TCK")
PAGE = os.sysconf("SC_PAGE_SIZE")


def _stat(pid: int, comm: str, ppid: int, utime: int, stime: int, threads: int, rss: int) -> str:
    fields = ["S", ppid, pid, pid, 0, -1, 4194560, 100, 0, 0, 0, utime, stime, 0, 0, 20, 0]
    fields += [threads, 0, 12345, 1 << 30, rss] + [0] * 27
    return f"{pid} ({comm}) " + " ".join(map(str, fields)) + "\n"


@pytest.fixture
def proc_root(tmp_path):
    def add(pid: int, comm: str, ppid: int = 1, argv: tuple[str, ...] = (), io: str | None = ""):
        folder = tmp_path / str(pid)
        folder.mkdir()
        (folder / "stat").write_text(_stat(pid, comm, ppid, 250, 50, 7, 1000))
        (folder / "cmdline").write_bytes(b"".join(a.encode() + b"\0" for a in argv))
        if io is not None:
            (folder / "io").write_text(io)

    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "stat").write_text("")
    (tmp_path / "meminfo").write_text("")
    add.root = str(tmp_path)
    return add


IO = "rchar: 9\nwchar: 9\nsyscr: 3\nsyscw: 4\nread_bytes: 4096\nwrite_bytes: 8192\n"


def test_stat_fields_are_parsed_even_with_a_paren_in_the_name(proc_root):
    proc_root(42, "evil) 1 2 (x", ppid=7, argv=("python", "train.py"), io=IO)
    (proc,) = procfs.process_iter(proc_root.root)
    assert proc.name() == "evil) 1 2 (x"
    assert (proc.ppid(), proc.num_threads()) == (7, 7)
    assert proc.cpu_times() == (250 / TICK, 50 / TICK)
    assert proc.memory_info().rss == 1000 * PAGE
    assert proc.create_time() == 12345 / TICK
    assert proc.cmdline() == ["python", "train.py"]
    assert proc.io_counters() == (3, 4, 4096, 8192)


def test_kernel_threads_skip_the_io_read(proc_root):
    proc_root(2, "kthreadd", ppid=0, io=None)
    proc_root(9, "kworker/0:1", ppid=2, io=None)
    assert [p.io_counters().read_bytes for p in procfs.process_iter(proc_root.root)] == [0, 0]


def test_missing_files_become_psutil_errors(proc_root):
    proc_root(5, "sleep", io=None)
    (proc,) = procfs.process_iter(proc_root.root)
    with pytest.raises(procfs.NoSuchProcess):
        proc.io_counters()
    with pytest.raises(procfs.NoSuchProcess):
        procfs.ProcfsProcess(6, proc_root.root)


def test_non_numeric_entries_are_not_processes(proc_root):
    proc_root(5, "sleep")
    assert [p.pid for p in procfs.process_iter(proc_root.root)] == [5]


@pytest.mark.skipif(not procfs.available(), reason="needs Linux /proc")
def test_real_proc_matches_this_process():
    me = procfs.ProcfsProcess(os.getpid())
    assert me.ppid() == os.getppid()
    assert me.memory_info().rss > 1 << 20
    assert "pytest" in " ".join(me.cmdline())
    assert me.username()
    collector = ProcessCollector(top_n=None)
    collector.collect()
    rows = {row.pid: row for row in collector.collect()}
    assert rows[os.getpid()].rss_bytes > 1 << 20
    assert rows[os.getpid()].cpu_pct is not None


@pytest.mark.skipif(not procfs.available(), reason="needs Linux /proc")
def test_escape_sequences_in_a_real_command_line_are_shown_as_text():
    """Another user's process named with terminal escapes must not drive our terminal."""
    evil = "\x1b]0;pwned\x07\x1b[2J"
    child = subprocess.Popen(
        [sys.executable, "-c", "import sys, time; time.sleep(30)", evil],
        stdout=subprocess.DEVNULL,
    )
    try:
        rows = {row.pid: row for row in ProcessCollector(top_n=None).collect()}
        line = rows[child.pid].cmdline
        assert "\x1b" not in line and "\x07" not in line
        assert line.endswith("?]0;pwned??[2J")
    finally:
        child.kill()
        child.wait()
