"""Process collector against a fake process table: selection, grouping, rates, churn."""

import contextlib
from collections import namedtuple
from types import SimpleNamespace

import pytest

from traintop.collectors.processes import ProcessCollector, order_rows
from traintop.collectors.snapshot import ProcessSnapshot

CpuTimes = namedtuple("CpuTimes", "user system")
Mem = namedtuple("Mem", "rss vms")
Io = namedtuple("Io", "read_count write_count read_bytes write_bytes")


class NoSuchProcess(Exception):
    pass


class ZombieProcess(NoSuchProcess):
    pass


class AccessDenied(Exception):
    pass


TRAIN = ("python", "train.py", "--bs", "64")


class FakeProc:
    def __init__(self, pid, ppid, name="sleep", argv=("sleep", "9"), created=1.0, **kw):
        self.pid, self._ppid, self._name, self._argv, self._created = pid, ppid, name, argv, created
        self.cpu_s = kw.get("cpu_s", 0.0)
        self.rss = kw.get("rss", 1 << 20)
        self.io = kw.get("io", Io(0, 0, 0, 0))
        self.fail_in = kw.get("fail_in")  # method name that raises NoSuchProcess
        self.static_reads = 0
        self.io_reads = 0

    def oneshot(self):
        return contextlib.nullcontext()

    def _check(self, method):
        if self.fail_in == method:
            raise NoSuchProcess(self.pid)

    def create_time(self):
        return self._created

    def cpu_times(self):
        self._check("cpu_times")
        return CpuTimes(self.cpu_s, 0.0)

    def ppid(self):
        return self._ppid

    def name(self):
        self.static_reads += 1
        return self._name

    def cmdline(self):
        return list(self._argv)

    def username(self):
        return "alice"

    def memory_info(self):
        self._check("memory_info")
        return Mem(self.rss, 2 << 20)

    def num_threads(self):
        return 4

    def io_counters(self):
        self.io_reads += 1
        if self.io is None:
            raise AccessDenied(self.pid)
        return self.io


class FakePs:
    NoSuchProcess, ZombieProcess, AccessDenied = NoSuchProcess, ZombieProcess, AccessDenied

    def __init__(self, procs):
        self.procs = procs

    def process_iter(self):
        return iter(list(self.procs))


class Clock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now


def _two_ticks(procs, advance, top_n=30, gpu_mem=None):
    """Collect, add ``advance[pid]`` CPU seconds one second later, collect again."""
    clock, ps = Clock(), FakePs(procs)
    collector = ProcessCollector(ps=ps, clock=clock, top_n=top_n)
    collector.collect(gpu_mem)
    for proc in procs:
        proc.cpu_s += advance.get(proc.pid, 0.0)
    clock.now = 1.0
    return SimpleNamespace(collector=collector, ps=ps, clock=clock, rows=collector.collect(gpu_mem))


def test_top_n_by_cpu_normalised_to_one_core():
    procs = [FakeProc(pid, 1) for pid in (10, 11, 12, 13)]
    rows = _two_ticks(procs, {11: 1.5, 12: 0.25, 13: 0.5}, top_n=2).rows
    assert [(r.pid, r.cpu_pct) for r in rows][:2] == [(11, 150.0), (13, 50.0)]
    assert rows[0].rss_bytes == 1 << 20 and rows[0].num_threads == 4
    assert 12 not in [r.pid for r in rows]


def test_top_n_by_memory_and_io_are_kept_too():
    """Sorting the table by RSS or I/O must not show only the CPU top N."""
    hog, reader = FakeProc(20, 1, rss=8 << 30), FakeProc(21, 1)
    procs = [FakeProc(pid, 1, rss=0) for pid in (10, 11, 12)] + [hog, reader]
    run = _two_ticks(procs, {10: 0.5}, top_n=1)
    reader.io, reader.cpu_s = Io(1, 1, 50 << 20, 0), 0.01
    procs[0].cpu_s += 0.5
    run.clock.now = 2.0
    rows = run.collector.collect()
    assert sorted(r.pid for r in rows) == [10, 20, 21]


def test_total_counts_every_process_scanned_not_only_the_rows_kept():
    """The status line's "N processes" is the box's count (htop's Tasks), not the table's rows;
    a vanished process is not counted, and a scan that fails leaves no stale count."""
    procs = [FakeProc(pid, 1) for pid in range(10, 50)]
    run = _two_ticks(procs, {11: 0.5, 12: 0.25}, top_n=2)
    assert len(run.rows) <= 6 and run.collector.total == 40  # top 2 by CPU, RSS and I/O
    procs[0].fail_in = "cpu_times"
    run.clock.now = 2.0
    run.collector.collect()
    assert run.collector.total == 39
    run.ps.process_iter = lambda: (_ for _ in ()).throw(OSError("/proc unreadable"))
    with pytest.raises(OSError):
        run.collector.collect()
    assert run.collector.total is None


def test_top_n_none_returns_every_process():
    procs = [FakeProc(pid, 1) for pid in range(10, 50)]
    assert len(_two_ticks(procs, {}, top_n=None).rows) == 40


def test_gpu_holders_always_shown_with_their_memory():
    procs = [FakeProc(10, 1), FakeProc(11, 1)]
    rows = _two_ticks(procs, {10: 1.0}, top_n=1, gpu_mem={11: 8 << 30}).rows
    assert {r.pid: r.gpu_mem_bytes for r in rows} == {10: None, 11: 8 << 30}


def test_dataloader_workers_follow_their_trainer():
    procs = [
        FakeProc(100, 1, "python", TRAIN),
        FakeProc(101, 100, "python", TRAIN, created=2.0),  # fork worker
        FakeProc(102, 100, "python", ("python", "-c", "spawn_main(7)"), created=2.0),
        FakeProc(103, 100, "pt_data_worker", TRAIN, created=2.0),
        FakeProc(104, 100, "nvidia-smi", ("nvidia-smi",), created=2.0),  # not a worker
        FakeProc(200, 1, "busy", ("busy",)),
    ]
    rows = _two_ticks(procs, {100: 0.9, 200: 0.5, 102: 0.2}, top_n=2).rows
    assert [r.pid for r in rows] == [100, 102, 101, 103, 200]
    assert [r.group_pid for r in rows] == [None, 100, 100, 100, None]


def test_other_children_of_a_trainer_are_not_its_workers():
    procs = [
        FakeProc(100, 1, "python", TRAIN),
        FakeProc(101, 100, "python", ("python", "eval.py"), created=2.0),
    ]
    rows = _two_ticks(procs, {100: 0.9, 101: 0.5}).rows
    assert [(r.pid, r.group_pid) for r in rows] == [(100, None), (101, None)]


def test_children_of_non_python_parents_are_not_grouped():
    procs = [FakeProc(100, 1, "bash", ("bash",)), FakeProc(101, 100, "bash", ("bash",))]
    rows = _two_ticks(procs, {100: 0.5, 101: 0.4}).rows
    assert [(r.pid, r.group_pid) for r in rows] == [(100, None), (101, None)]


@pytest.mark.parametrize("method", ["cpu_times", "memory_info"])
def test_vanishing_process_is_skipped(method):
    procs = [FakeProc(10, 1), FakeProc(11, 1)]
    run = _two_ticks(procs, {})
    procs[1].fail_in = method
    assert [r.pid for r in run.collector.collect()] == [10]


def test_io_rates_and_access_denied():
    mine, other = FakeProc(10, 1), FakeProc(11, 1)
    other.io = None
    run = _two_ticks([mine, other], {})
    mine.io, mine.cpu_s = Io(5, 5, 3 << 20, 3 << 19), 0.1
    run.clock.now = 3.0
    rows = {r.pid: r for r in run.collector.collect()}
    # Idle at t=1 (no CPU time), so its counters were last read at t=0: averaged over 3 s.
    assert (rows[10].read_bytes_per_s, rows[10].write_bytes_per_s) == (1_048_580, 1 << 19)
    assert (rows[11].read_bytes_per_s, rows[11].write_bytes_per_s) == (None, None)


def test_sleeping_process_io_is_not_read():
    sleeper, worker = FakeProc(10, 1), FakeProc(11, 1)
    run = _two_ticks([sleeper, worker], {11: 0.5})
    assert (sleeper.io_reads, worker.io_reads) == (1, 2)
    assert {r.pid: r.read_bytes_per_s for r in run.rows} == {10: 0.0, 11: 0.0}


def test_reused_pid_gets_fresh_identity():
    old = FakeProc(10, 1, "old", ("old",), cpu_s=100.0)
    run = _two_ticks([old], {})
    run.ps.procs = [FakeProc(10, 1, "new", ("new",), created=50.0, cpu_s=1.0)]
    (row,) = run.collector.collect()
    assert (row.name, row.cpu_pct) == ("new", None)


def test_static_facts_read_once_and_pruned():
    proc = FakeProc(10, 1)
    run = _two_ticks([proc], {})
    run.collector.collect()
    assert proc.static_reads == 1
    run.ps.procs = []
    assert run.collector.collect() == ()
    run.ps.procs = [proc]
    (row,) = run.collector.collect()
    assert proc.static_reads == 2  # the cache entry was pruned with the dead pid
    assert row.cpu_pct is None  # and so was its CPU history


def _row(pid, cpu, group=None):
    return ProcessSnapshot(pid, 1, "u", "n", "n", cpu, 1, None, None, group_pid=group)


def test_order_rows_nests_groups_depth_first():
    rows = [_row(1, 5.0), _row(2, 1.0, group=1), _row(3, 9.0, group=2), _row(4, 7.0)]
    assert [r.pid for r in order_rows(rows)] == [4, 1, 2, 3]


def test_real_psutil_smoke():
    collector = ProcessCollector(top_n=5)
    collector.collect()
    rows = collector.collect()
    assert len(rows) > 0
    assert all(r.cpu_pct is None or r.cpu_pct >= 0.0 for r in rows)
    assert all(r.rss_bytes is not None and r.cmdline for r in rows)
