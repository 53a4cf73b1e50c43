"""Scheduler statistics: parsing, per-interval waits from thread counters, what is (not) read,
and, on the real kernel, processes that queue for one CPU."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from dataclasses import asdict
from pathlib import Path

import pytest

from traintop.collectors import procfs, schedstat
from traintop.collectors.open_files import OpenFiles
from traintop.collectors.processes import ProcessCollector
from traintop.collectors.schedstat import SchedReader, SchedStat, parse

S = 1_000_000_000
KEY = (100, 1.0)


def test_parse() -> None:
    assert parse(b"343602221 355258 23\n") == SchedStat(343602221, 355258)


def _proc(root: Path, pid: int, threads: dict[int, tuple[int, int]]) -> None:
    """A fake /proc/PID: ``threads`` maps tid -> (run ns, wait ns)."""
    for tid, (run, wait) in threads.items():
        task = root / str(pid) / "task" / str(tid)
        task.mkdir(parents=True, exist_ok=True)
        (task / "schedstat").write_text(f"{run} {wait} 5\n")
    main = threads.get(pid, (0, 0))
    (root / str(pid) / "schedstat").write_text(f"{main[0]} {main[1]} 5\n")


def test_process_wait_sums_every_threads_growth(tmp_path: Path) -> None:
    """/proc/PID/schedstat is the main thread only: the wait is summed over threads, and a
    thread born during the interval counts whole."""
    reader = SchedReader(str(tmp_path))
    _proc(tmp_path, 100, {100: (0, 0), 101: (0, 0)})
    first = reader.sample(KEY, 100, 10.0, threads=2, ran=True, detailed=False)
    assert first.wait_pct is None and first.detail is None
    _proc(
        tmp_path,
        100,
        {100: (S // 2, S // 4), 101: (S // 2, S // 2), 102: (0, S // 4)},
    )
    second = reader.sample(KEY, 100, 12.0, threads=3, ran=True, detailed=False)
    assert second.wait_pct == pytest.approx(50.0)  # 1 s of waiting over 2 s
    assert second.wait_s == pytest.approx(1.0)


def test_detail_counts_busy_threads_and_the_main_thread(tmp_path: Path) -> None:
    reader = SchedReader(str(tmp_path))
    _proc(tmp_path, 100, {100: (0, 0), 101: (0, 0), 102: (0, 0)})
    reader.sample(KEY, 100, 0.0, threads=3, ran=True, detailed=True)
    _proc(
        tmp_path,
        100,
        {100: (S * 6 // 10, S * 3 // 10), 101: (S // 10, 0), 102: (0, 0)},
    )
    detail = reader.sample(KEY, 100, 1.0, threads=3, ran=True, detailed=True).detail
    assert detail is not None
    assert detail.busy == 1  # 90 % runnable; 10 % and 0 % are not
    assert detail.main_cpu_pct == pytest.approx(60.0)
    assert detail.main_wait_pct == pytest.approx(30.0)


def test_a_process_that_did_not_run_is_not_read(tmp_path: Path) -> None:
    reader = SchedReader(str(tmp_path))
    _proc(tmp_path, 100, {100: (S, S)})
    reader.sample(KEY, 100, 0.0, threads=1, ran=True, detailed=False)
    (tmp_path / "100" / "schedstat").unlink()  # a read now would raise
    asleep = reader.sample(KEY, 100, 1.0, threads=1, ran=False, detailed=False)
    assert (asleep.wait_pct, asleep.wait_s) == (0.0, 1.0)


def test_many_threaded_rows_outside_the_chosen_few_get_no_figure(tmp_path: Path) -> None:
    reader = SchedReader(str(tmp_path))
    many = schedstat.SUM_THREADS_MAX + 1
    assert reader.sample(KEY, 100, 0.0, threads=many, ran=True, detailed=False).wait_pct is None


def test_forget_starts_a_recycled_pid_afresh(tmp_path: Path) -> None:
    reader = SchedReader(str(tmp_path))
    _proc(tmp_path, 100, {100: (S, S)})
    reader.sample(KEY, 100, 0.0, threads=1, ran=True, detailed=False)
    reader.forget(set())
    assert reader.sample(KEY, 100, 1.0, threads=1, ran=True, detailed=False).wait_pct is None


SPIN = "import time\nend = time.monotonic() + 20\nwhile time.monotonic() < end: pass\n"


@pytest.mark.skipif(not schedstat.available(), reason="kernel keeps no scheduler statistics")
def test_three_spinners_on_one_cpu_wait_two_thirds_of_the_time() -> None:
    """Three CPU-bound processes pinned to one CPU: each runs a third of the time and queues
    for the rest, which the collector reports as WAIT%, with run + wait one whole CPU."""
    cpu = min(os.sched_getaffinity(0))
    spinners = [
        subprocess.Popen(
            [sys.executable, "-c", SPIN], preexec_fn=lambda: os.sched_setaffinity(0, {cpu})
        )
        for _ in range(3)
    ]
    try:
        collector = ProcessCollector(top_n=None)
        collector.collect()
        time.sleep(1.5)
        rows = {r.pid: r for r in collector.collect()}
        mine = [rows[p.pid] for p in spinners]
        for row in mine:
            assert row.cpu_wait_pct is not None and row.cpu_pct is not None
            assert row.cpu_wait_pct >= 40.0, row
            assert 80.0 <= row.cpu_pct + row.cpu_wait_pct <= 110.0, row
            assert row.state == "R"  # runnable: on the CPU or queued for it
    finally:
        for proc in spinners:
            proc.kill()
            proc.wait()


@pytest.mark.skipif(not schedstat.available(), reason="kernel keeps no scheduler statistics")
def test_rows_carry_the_figures_under_unit_named_keys() -> None:
    """What `traintop snapshot --json` writes for a process (asdict of the row)."""
    collector = ProcessCollector(top_n=None)
    collector.collect()
    end = time.monotonic() + 0.3
    while time.monotonic() < end:
        pass
    row = asdict(next(r for r in collector.collect() if r.pid == os.getpid()))
    assert row["state"] == "R"
    assert row["cpu_wait_pct"] is not None and row["cpu_wait_pct"] >= 0.0
    assert row["cpu_wait_s"] is not None and row["cpu_wait_s"] >= 0.0
    assert {"threads_busy", "main_thread_cpu_pct", "main_thread_wait_pct"} <= row.keys()


def _spin(seconds: float) -> None:
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        pass


def _until_reaped(task_dir: str) -> None:
    """Wait for the kernel to release an exited thread.

    ``Thread.join`` returns when the thread releases its state lock, a few instructions
    before the OS thread ends, so its task (and the open schedstat file) can outlive the
    join by a moment on a loaded machine; CI once read it there.
    """
    for _ in range(10_000):
        if not os.path.exists(task_dir):
            return
        time.sleep(0.001)
    raise AssertionError(f"{task_dir} still there after the thread ended")


@pytest.mark.skipif(not schedstat.available(), reason="kernel keeps no scheduler statistics")
def test_open_files_reread_fresh_figures_and_fail_once_the_thread_is_gone() -> None:
    files = OpenFiles(limit=8)
    ready, done = threading.Event(), threading.Event()
    tid: list[int] = []

    def worker() -> None:
        tid.append(threading.get_native_id())
        ready.set()
        done.wait()

    thread = threading.Thread(target=worker)
    thread.start()
    ready.wait()
    path = f"/proc/{os.getpid()}/task/{tid[0]}/schedstat"
    first = parse(files.read(path, tid[0]))
    mine = f"/proc/{os.getpid()}/task/{threading.get_native_id()}/schedstat"
    before = parse(files.read(mine, os.getpid()))
    _spin(0.05)
    assert parse(files.read(mine, os.getpid())).run_ns > before.run_ns  # same fd, new figures
    assert len(files) == 2 and parse(files.read(path, tid[0])).run_ns >= first.run_ns
    done.set()
    thread.join()
    _until_reaped(f"/proc/{os.getpid()}/task/{tid[0]}")
    with pytest.raises(procfs.NoSuchProcess):
        files.read(path, tid[0])
    assert len(files) == 1
    files.end_tick()
    files.end_tick()  # nothing read since the last tick: closed
    assert len(files) == 0


def test_open_files_beyond_the_limit_fall_back_to_plain_reads(tmp_path: Path) -> None:
    files = OpenFiles(limit=1)
    for name in ("a", "b"):
        (tmp_path / name).write_text("1 2 3\n")
        assert parse(files.read(str(tmp_path / name), 1)) == SchedStat(1, 2)
    assert len(files) == 1
    files.close()
    assert len(files) == 0


@pytest.mark.skipif(not schedstat.available(), reason="kernel keeps no scheduler statistics")
def test_a_dropped_collector_leaves_no_descriptor_open() -> None:
    before = len(os.listdir("/proc/self/fd"))
    collector = ProcessCollector(top_n=None)
    collector.collect()
    collector.collect()
    assert len(os.listdir("/proc/self/fd")) > before  # schedstat files kept open between ticks
    del collector
    assert len(os.listdir("/proc/self/fd")) <= before


def _stat_line(pid: int, utime: int) -> str:
    fields = ["S", 1, pid, pid, 0, -1, 0, 0, 0, 0, 0, utime, 0, 0, 0, 20, 0, 1, 0, 100, 1 << 20]
    return f"{pid} (sleeper) " + " ".join(map(str, [*fields, 10, *[0] * 27])) + "\n"


def test_a_row_asleep_for_ticks_is_reused_and_its_next_wait_spans_one_interval(
    tmp_path: Path,
) -> None:
    """Last tick's row comes back while the process sleeps, and its wait figure, once it runs,
    is over the last interval only, exactly as when every tick sampled it afresh."""
    (tmp_path / "self").mkdir()
    (tmp_path / "self" / "schedstat").write_text("1 1 1\n")
    (tmp_path / "7").mkdir()
    (tmp_path / "7" / "cmdline").write_bytes(b"sleeper\0")
    (tmp_path / "7" / "io").write_text("syscr: 0\nsyscw: 0\nread_bytes: 0\nwrite_bytes: 0\n")
    now = [0.0]
    collector = ProcessCollector(ps=procfs.Procfs(str(tmp_path)), clock=lambda: now[0])
    rows = []
    for tick, (utime, wait_ns) in enumerate([(1, 0), (1, 0), (1, 0), (1, 0), (9, S // 2)]):
        (tmp_path / "7" / "stat").write_text(_stat_line(7, utime))
        (tmp_path / "7" / "schedstat").write_text(f"{utime} {wait_ns} 1\n")
        now[0] = float(tick)
        (row,) = collector.collect()
        rows.append(row)
    assert [r.cpu_wait_pct for r in rows[:4]] == [None, 0.0, 0.0, 0.0]
    assert rows[3] is rows[2]
    assert rows[4].cpu_wait_pct == pytest.approx(50.0)  # 0.5 s over the last second
