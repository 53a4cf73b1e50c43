"""Sampler thread: delivery, interval changes, failing collectors, prompt stop; real smoke test."""

import queue
import threading
import time
from dataclasses import replace

import pytest

from tests.job_fixtures import data_bound_job
from traintop.collectors.factory import build_collectors
from traintop.collectors.sampler import (
    Collectors,
    Sampler,
    clamp_interval,
    gpu_memory_by_pid,
    next_slot,
)
from traintop.collectors.snapshot import GpuProcess, GpuSnapshot, GpuStatus, HostInfo

GPU = GpuSnapshot(index=0, processes=(GpuProcess(7, 3 << 30), GpuProcess(8, None)))


class Fixed:
    """A collector returning the same value; records what the process collector was given."""

    total = None  # as a process collector: how many processes its scan found

    def __init__(self, value):
        self.value, self.calls, self.seen_gpu_mem = value, 0, None

    def collect(self, gpu_mem=None):
        self.calls += 1
        self.seen_gpu_mem = gpu_mem
        return self.value

    def close(self):
        self.closed = True


class FailsOnce(Fixed):
    def collect(self, gpu_mem=None):
        self.calls += 1
        if self.calls == 1:
            raise RuntimeError("sensor gone\nfor now")
        return self.value


class FakeGpu(Fixed):
    def __init__(self):
        super().__init__(((GPU,), GpuStatus(available=True, driver_version="550.54")))


def _collectors(**overrides):
    parts = {
        "gpu": FakeGpu(),
        "cpu": Fixed(None),
        "memory": Fixed(None),
        "disks": Fixed(()),
        "nics": Fixed(()),
        "processes": Fixed(()),
        "host": Fixed(HostInfo("node", 1.0, 2)),
    }
    parts.update(overrides)
    return Collectors(**parts)


def _run(sampler, count, timeout_s=5.0):
    """Start, collect ``count`` snapshots with their arrival times, stop."""
    got = queue.Queue()
    sampler.start(lambda snap: got.put((time.monotonic(), snap)))
    try:
        return [got.get(timeout=timeout_s) for _ in range(count)]
    finally:
        sampler.stop()


def test_the_process_scans_total_reaches_the_snapshot():
    """The box's process count, beside the rows kept; None when the scan found none."""
    processes = Fixed(())
    processes.total = 412
    assert Sampler(_collectors(processes=processes)).sample_once().process_total == 412
    assert Sampler(_collectors()).sample_once().process_total is None


def test_callback_receives_snapshots_with_gpu_memory_passed_to_processes():
    processes = Fixed(())
    sampler = Sampler(_collectors(processes=processes), interval_s=0.1)
    (_, first), (_, second) = _run(sampler, 2)
    assert second.monotonic > first.monotonic
    assert (first.gpus, first.host.hostname, first.errors) == ((GPU,), "node", ())
    assert processes.seen_gpu_mem == {7: 3 << 30}


def test_failing_collector_becomes_error_and_recovers_next_tick():
    cpu = FailsOnce("cpu-section")
    snap1, snap2 = (s for _, s in _run(Sampler(_collectors(cpu=cpu), interval_s=0.1), 2))
    assert snap1.cpu is None
    assert [(e.collector, e.message) for e in snap1.errors] == [
        ("cpu", "RuntimeError: sensor gone for now")
    ]
    assert (snap2.cpu, snap2.errors) == ("cpu-section", ())


def test_failing_gpu_and_host_keep_their_sections_well_formed():
    snap = Sampler(_collectors(gpu=FailsOnce(None), host=FailsOnce(None))).sample_once()
    assert snap.gpus == () and not snap.gpu_status.available
    assert snap.host.logical_cpus >= 1
    assert {e.collector for e in snap.errors} == {"gpu", "host"}


def test_jobs_land_in_snapshot_when_given():
    job = data_bound_job()  # on no GPU the fake lists: no busy share from the card
    assert Sampler(_collectors(jobs=Fixed((job,)))).sample_once().jobs == (
        replace(job, gpu_busy_share=None),
    )
    assert Sampler(_collectors()).sample_once().jobs == ()


def test_jobs_get_the_busy_share_of_the_gpu_they_hold():
    job = data_bound_job(pid=7)
    gpu = replace(GPU, util_gpu_pct=41.0, util_gpu_mean_pct=38.0,
                  processes=(GpuProcess(7, 1 << 30, "C", 36.0, 12.0),))  # fmt: skip
    collectors = _collectors(jobs=Fixed((job,)), gpu=Fixed(((gpu,), GpuStatus(True))))
    got = Sampler(collectors).sample_once().jobs[0]
    assert (got.gpu_busy_share, got.gpu_busy_source) == (0.36, "process")


def test_raising_callback_does_not_kill_the_thread():
    got = queue.Queue()

    def callback(snap):
        got.put(snap)
        if got.qsize() == 1:
            raise ValueError("ui gone")

    sampler = Sampler(_collectors(), interval_s=0.1)
    sampler.start(callback)
    try:
        got.get(timeout=5)
        second = got.get(timeout=5)
    finally:
        sampler.stop()
    assert [e.collector for e in second.errors] == ["on_snapshot"]


def test_interval_change_wakes_the_sleeping_thread():
    got = queue.Queue()
    sampler = Sampler(_collectors(), interval_s=30.0)
    sampler.start(lambda snap: got.put(snap))
    try:
        got.get(timeout=5)
        sampler.interval_s = 0.1
        third = [got.get(timeout=5) for _ in range(2)][-1]
    finally:
        sampler.stop()
    assert third.interval_s == 0.1


def test_a_sample_taken_before_start_sets_the_first_tick_one_interval_later():
    """The monitor shows a synchronous first sample; the thread's first tick must not follow
    it at once, or its rates would span a few milliseconds."""
    sampler = Sampler(_collectors(), interval_s=0.5)
    sampler.sample_once()
    taken = time.monotonic()
    ((arrived, _),) = _run(sampler, 1)
    assert 0.4 <= arrived - taken < 2.0


def test_stop_returns_promptly_from_a_long_interval():
    sampler = Sampler(_collectors(), interval_s=60.0)
    started = threading.Event()
    sampler.start(lambda snap: started.set())
    assert started.wait(5)
    t0 = time.monotonic()
    sampler.stop()
    assert time.monotonic() - t0 < 1.0


@pytest.mark.parametrize(
    ("scheduled", "interval", "now", "expected"),
    [
        (10.0, 1.0, 10.2, 11.0),  # ordinary tick
        (10.0, 1.0, 13.5, 14.0),  # slow tick: slots 11, 12, 13 skipped, no burst
        (10.0, 1.0, 11.0, 12.0),  # exactly on a slot that already passed
        (10.0, 0.5, 10.7, 11.0),  # interval shortened while sleeping: same grid origin
    ],
)
def test_next_slot(scheduled, interval, now, expected):
    assert next_slot(scheduled, interval, now) == expected


@pytest.mark.parametrize(("value", "expected"), [(0.01, 0.1), (5, 5.0), (600, 60.0)])
def test_clamp_interval(value, expected):
    assert clamp_interval(value) == expected


def test_clamp_interval_rejects_nan():
    with pytest.raises(ValueError, match="finite"):
        clamp_interval(float("nan"))


def test_gpu_memory_summed_over_gpus():
    other = GpuSnapshot(index=1, processes=(GpuProcess(7, 1 << 30),))
    assert gpu_memory_by_pid((GPU, other)) == {7: 4 << 30}


def test_close_releases_gpu_and_jobs():
    parts = _collectors(jobs=Fixed(()))
    parts.close()
    assert parts.gpu.closed and parts.jobs.closed


def test_real_collectors_smoke():
    collectors = build_collectors(gpu=FakeGpu(), include_virtual=True)
    sampler = Sampler(collectors, interval_s=0.1)
    sampler.sample_once()
    time.sleep(0.1)
    snap = sampler.sample_once()
    assert snap.errors == ()
    assert len(snap.cpu.cores) == snap.host.logical_cpus
    assert all(c.busy_pct is not None for c in snap.cpu.cores)
    assert snap.memory.total_bytes > 0 and snap.processes
