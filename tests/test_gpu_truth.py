"""collectors/gpu_truth.py: the job's busy share from the card, with scripted snapshots."""

from __future__ import annotations

from dataclasses import replace

from tests.job_fixtures import data_bound_job
from traintop.collectors.gpu_truth import with_gpu_truth
from traintop.collectors.snapshot import GpuProcess, GpuSnapshot

GIB = 1 << 30
JOB = replace(data_bound_job(pid=100), gpu_busy_share=None, gpu_queued_share=0.99)


def gpu(index: int, *procs: GpuProcess, util: float | None = 60.0, mean: float | None = None):
    return GpuSnapshot(index=index, util_gpu_pct=util, util_gpu_mean_pct=mean, processes=procs)


def truth(*gpus: GpuSnapshot, job=JOB):
    got = with_gpu_truth((job,), gpus)[0]
    return got.gpu_busy_share, got.gpu_busy_source


def test_per_process_sm_share_of_the_rank_not_the_device() -> None:
    shared = gpu(0, GpuProcess(100, 20 * GIB, "C", 57.0, 20.0),
                 GpuProcess(999, 2 * GIB, "C", 30.0, 5.0), util=90.0)  # fmt: skip
    assert truth(shared) == (0.57, "process")


def test_the_rank_and_its_workers_add_up() -> None:
    worker = JOB.workers[0].pid
    g = gpu(0, GpuProcess(100, 20 * GIB, "C", 50.0, 9.0), GpuProcess(worker, GIB, "C", 8.0, 1.0))
    assert truth(g) == (0.58, "process")


def test_device_utilization_where_no_per_process_value() -> None:
    no_procutil = gpu(0, GpuProcess(100, 20 * GIB), util=61.0, mean=48.5)
    assert truth(no_procutil) == (0.485, "device")  # the tick's mean before the last period
    assert truth(replace(no_procutil, util_gpu_mean_pct=None)) == (0.61, "device")


def test_the_rank_s_gpu_is_where_it_holds_the_most_memory() -> None:
    stray = gpu(0, GpuProcess(100, 500 << 20, "C", 0.0, 0.0))  # a context on GPU 0
    own = gpu(3, GpuProcess(100, 30 * GIB, "C", 71.0, 30.0))
    assert truth(stray, own) == (0.71, "process")


def test_none_without_nvml_or_a_gpu_the_rank_holds() -> None:
    assert truth() == (None, None)
    assert truth(gpu(0, GpuProcess(555, GIB, "C", 80.0, 1.0))) == (None, None)
    mig = gpu(0, GpuProcess(100, GIB), util=None)  # MIG: no utilization at all
    assert truth(mig) == (None, None)


def test_an_idle_rank_reads_zero_not_unknown() -> None:
    assert truth(gpu(0, GpuProcess(100, GIB, "C", 0.0, 0.0), util=0.0)) == (0.0, "process")


def test_the_queued_span_is_kept_apart() -> None:
    got = with_gpu_truth((JOB,), (gpu(0, GpuProcess(100, GIB, "C", 62.0, 3.0)),))[0]
    assert (got.gpu_busy_share, got.gpu_queued_share) == (0.62, 0.99)


def test_process_rows_get_their_sm_share_summed_over_gpus() -> None:
    from tests.snapshot_fixtures import processes
    from traintop.collectors.gpu_truth import with_process_sm

    rows = tuple(replace(p, gpu_sm_pct=None) for p in processes(tick=0, gpus=2))
    trainer = rows[0].pid
    unsupported = GpuProcess(1, GIB, "C", None, None)
    gpus = (gpu(0, GpuProcess(trainer, GIB, "C", 40.0, 1.0)),
            gpu(1, GpuProcess(trainer, GIB, "C", 35.0, 1.0), unsupported))  # fmt: skip
    got = {p.pid: p.gpu_sm_pct for p in with_process_sm(rows, gpus)}
    assert got[trainer] == 75.0
    assert all(v is None for pid, v in got.items() if pid != trainer)
