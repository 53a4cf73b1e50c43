"""traintop.collectors.procfs against a fake /proc tree and against the real one."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from traintop.collectors import procfs
from traintop.collectors.processes import ProcessCollector

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
    assert me.cmdline() == psutil.Process().cmdline()
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


# ---- kept files: pread of descriptors held across ticks ------------------------------------


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


@pytest.mark.skipif(not procfs.available(), reason="needs Linux /proc")
def test_kept_file_rereads_fresh_figures_without_reopening():
    files = procfs.PidFiles("/proc", "stat", limit=8)
    before = procfs.ProcfsProcess(os.getpid(), raw=files.read(os.getpid())).cpu_times()
    _spin(0.05)
    after = procfs.ProcfsProcess(os.getpid(), raw=files.read(os.getpid())).cpu_times()
    assert sum(after) > sum(before)
    assert len(files) == 1


@pytest.mark.skipif(not procfs.available(), reason="needs Linux /proc")
def test_a_reaped_process_is_gone_through_its_kept_file():
    """The descriptor pins the process, not the pid: once reaped, reads fail (a new process
    that got the pid would be opened afresh), and the descriptor is dropped."""
    child = subprocess.Popen(["sleep", "30"])
    files = procfs.PidFiles("/proc", "stat", limit=8)
    assert procfs.ProcfsProcess(child.pid, raw=files.read(child.pid)).ppid() == os.getpid()
    child.kill()
    child.wait()
    with pytest.raises(procfs.NoSuchProcess):
        files.read(child.pid)
    assert len(files) == 0


def test_kept_files_beyond_the_limit_are_read_plainly(proc_root):
    for pid in (5, 6, 7):
        proc_root(pid, "sleep")
    files = procfs.PidFiles(proc_root.root, "stat", limit=2)
    assert [files.read(pid).split()[0] for pid in (5, 6, 7)] == [b"5", b"6", b"7"]
    assert len(files) == 2
    files.close()
    assert len(files) == 0


def test_kept_files_stay_open_while_their_process_lives(proc_root):
    for pid in (5, 6, 7):
        proc_root(pid, "sleep")
    files = procfs.PidFiles(proc_root.root, "stat", limit=8)
    for pid in (5, 6, 7):
        files.read(pid)
    files.retain({5, 6, 8})
    assert len(files) == 2  # 7 is gone; 5 and 6 are kept, read or not


def test_missing_io_file_means_the_process_is_gone_and_bad_io_reads_as_unknown(proc_root):
    """A process that dies between its stat and io reads is dropped, as psutil's would be;
    io counters that cannot be parsed are unknown, never an error for the whole table."""
    proc_root(5, "gone", io=None)
    proc_root(6, "garbled", io="rchar: x\n")
    rows = {row.pid: row for row in ProcessCollector(ps=procfs.Procfs(proc_root.root)).collect()}
    assert set(rows) == {6}
    assert (rows[6].read_bytes_per_s, rows[6].write_bytes_per_s) == (None, None)


def test_a_malformed_stat_line_skips_only_that_process(proc_root):
    proc_root(5, "fine")
    proc_root(6, "broken")
    (Path(proc_root.root) / "6" / "stat").write_text("6 (broken) S 1 2\n")
    assert [p.pid for p in procfs.process_iter(proc_root.root)] == [5]


# ---- unchanged processes: the same object, and the collector's reading of it reused --------


def _rewrite_stat(root: str, pid: int, comm: str, utime: int, ppid: int = 1) -> None:
    (Path(root) / str(pid) / "stat").write_text(_stat(pid, comm, ppid, utime, 50, 7, 1000))


def test_an_unchanged_stat_line_gives_the_same_process_object(proc_root):
    proc_root(5, "sleep")
    table = procfs.Procfs(proc_root.root)
    (first,) = table.process_iter()
    assert table.process_iter() == [first]
    _rewrite_stat(proc_root.root, 5, "sleep", utime=251)  # rewritten in place: pread sees it
    (changed,) = table.process_iter()
    assert changed is not first and changed.cpu_times().user == 251 / TICK


def test_a_process_idle_since_the_last_tick_keeps_its_reading_and_row(proc_root):
    proc_root(5, "sleep", io=IO)
    proc_root(6, "busy", io=IO)
    now = [0.0]
    collector = ProcessCollector(ps=procfs.Procfs(proc_root.root), clock=lambda: now[0])
    for tick in (1, 2, 3):
        now[0] = float(tick)
        _rewrite_stat(proc_root.root, 6, "busy", utime=250 + 100 * tick)
        rows = {row.pid: row for row in collector.collect()}
        if tick == 2:
            idle, busy = rows[5], rows[6]
    assert rows[5] is idle and rows[5].cpu_pct == 0.0
    assert rows[5].read_bytes_per_s == 0.0
    assert rows[6] is not busy and rows[6].cpu_pct == busy.cpu_pct == 100.0 * 100 / TICK


def test_unreadable_io_of_an_idle_process_is_not_read_again(proc_root, monkeypatch):
    """Another user's process: its counters stay unknown while it sleeps, as they would be on
    a read, which is saved."""
    proc_root(5, "other")
    tries = []

    def denied(self):
        tries.append(self.pid)
        raise procfs.AccessDenied(self.pid)

    monkeypatch.setattr(procfs.ProcfsProcess, "io_counters", denied)
    now = [0.0]
    collector = ProcessCollector(ps=procfs.Procfs(proc_root.root), clock=lambda: now[0])
    for tick in range(4):
        now[0] = float(tick)
        (row,) = collector.collect()
    assert (row.read_bytes_per_s, row.cpu_pct) == (None, 0.0)
    assert tries == [5, 5]  # first tick, and the first tick with a CPU reading


def test_io_readable_at_last_is_read_again_while_idle(proc_root, monkeypatch):
    """A first reading of the counters (access granted after a denial) is not a reading to
    reuse: the next tick has a previous one, and I/O rates (0) instead of unknown."""
    proc_root(5, "sleep", io=IO)
    readable = procfs.ProcfsProcess.io_counters
    denied = [True]

    def io_counters(self):
        if denied[0]:
            raise procfs.AccessDenied(self.pid)
        return readable(self)

    monkeypatch.setattr(procfs.ProcfsProcess, "io_counters", io_counters)
    now = [0.0]
    collector = ProcessCollector(ps=procfs.Procfs(proc_root.root), clock=lambda: now[0])
    rates = []
    for tick in range(3):
        now[0], denied[0] = float(tick), tick == 0
        (row,) = collector.collect()
        rates.append(row.read_bytes_per_s)
    assert rates == [None, None, 0.0]


def _sched(root: str, pid: int, line: str) -> None:
    (Path(root) / str(pid) / "schedstat").write_text(line)


def _kworker(proc_root, own: str, line: str) -> tuple[procfs.Procfs, list]:
    """A kernel thread with schedstat ``line`` (the reader's own: ``own``), scanned twice:
    the table and what its second scan, the first to pair schedstat with stat, returned."""
    proc_root(9, "kworker/0:1", ppid=2, io=None)
    (Path(proc_root.root) / "self" / "schedstat").write_text(own)
    _sched(proc_root.root, 9, line)
    table = procfs.Procfs(proc_root.root)
    table.process_iter()
    return table, table.process_iter()


def test_a_sleeping_kernel_thread_is_known_by_its_schedstat_line(proc_root):
    table, (known,) = _kworker(proc_root, "1 1 1\n", "500 20 7\n")
    _rewrite_stat(proc_root.root, 9, "kworker/0:1", utime=999, ppid=2)
    assert table.process_iter() == [known]  # schedstat unchanged: stat not read
    _sched(proc_root.root, 9, "900 20 8\n")
    (ran,) = table.process_iter()
    assert ran.cpu_times().user == 999 / TICK


def test_kernel_threads_are_read_whole_where_the_kernel_keeps_no_statistics(proc_root):
    table, _ = _kworker(proc_root, "0 0 0\n", "0 0 0\n")
    _rewrite_stat(proc_root.root, 9, "kworker/0:1", utime=999, ppid=2)
    (proc,) = table.process_iter()
    assert proc.cpu_times().user == 999 / TICK


# ---- /proc listed only when a task was born --------------------------------------------------


def _own_proc(proc_root, newest: int) -> None:
    """Make the fake /proc this process's own (``self`` links to our pid) with a newest pid."""
    (Path(proc_root.root) / "self" / "stat").unlink()
    (Path(proc_root.root) / "self").rmdir()
    os.symlink(str(os.getpid()), Path(proc_root.root) / "self")
    (Path(proc_root.root) / "loadavg").write_text(f"0.10 0.20 0.30 1/90 {newest}\n")


def test_proc_is_listed_again_only_once_a_task_was_born(proc_root):
    proc_root(5, "sleep")
    proc_root(6, "sleep")
    _own_proc(proc_root, newest=6)
    table = procfs.Procfs(proc_root.root, limit=0)  # plain reads: a removed file is gone
    assert [p.pid for p in table.process_iter()] == [5, 6]
    proc_root(7, "sleep")  # not born as far as the kernel's newest pid says: not listed
    shutil.rmtree(Path(proc_root.root) / "5")  # ended: its read fails
    assert [p.pid for p in table.process_iter()] == [6]
    (Path(proc_root.root) / "loadavg").write_text("0.10 0.20 0.30 1/90 7\n")
    assert [p.pid for p in table.process_iter()] == [6, 7]


def test_a_proc_of_another_pid_namespace_is_always_listed(proc_root):
    proc_root(5, "sleep")
    (Path(proc_root.root) / "loadavg").write_text("0.10 0.20 0.30 1/90 5\n")  # self: no link
    table = procfs.Procfs(proc_root.root, limit=0)
    table.process_iter()
    proc_root(6, "sleep")
    assert [p.pid for p in table.process_iter()] == [5, 6]


@pytest.mark.skipif(not procfs.available(), reason="needs Linux /proc")
def test_real_processes_born_and_ended_between_ticks_are_seen():
    table = procfs.Procfs()
    table.process_iter()
    child = subprocess.Popen(["sleep", "30"])
    try:
        assert child.pid in {p.pid for p in table.process_iter()}
    finally:
        child.kill()
        child.wait()
    assert child.pid not in {p.pid for p in table.process_iter()}


# ---- whole system files kept open ------------------------------------------------------------


def test_kept_file_reads_the_current_content_whatever_its_size(tmp_path):
    path = tmp_path / "stat"
    path.write_text("cpu 1 2 3\n")
    kept = procfs.KeptFile(str(path), size=4)
    assert kept.read() == b"cpu 1 2 3\n"
    path.write_text("cpu 4 5 6 7 8 9\n" * 3)  # in place, larger than the buffer
    assert kept.read() == b"cpu 4 5 6 7 8 9\n" * 3
    kept.close()
    assert kept.read() == b"cpu 4 5 6 7 8 9\n" * 3  # reopened
