"""Rules that read CPU demand (run-queue waits from schedstat): oversubscribed, data_cpu and
host_overhead, with their near misses.  Figures are those the 2-CPU development VM showed for
the scenario workloads under `traintop run` (tests/scenarios/workloads/oversubscribed.py)."""

from __future__ import annotations

import pytest

from tests.diagnosis_factories import Scene
from traintop.diagnosis.api import diagnose
from traintop.diagnosis.demand import CpuDemand, TrainerDemand

CPU_BOX = Scene(
    cpus=2, gpu_count=0, gpu_busy=None, workers=0, data_wait=0.01, cpu_busy=100, load=4.0
)
# 3 trainers x set_num_threads(4): 8 threads each, 45 % CPU each, queueing 200 % each.
THREE_BY_FOUR = CPU_BOX.but(trainer_threads=8, trainer_cpu=45, trainer_wait=200, extra_jobs=2)
# The case: 2 trainers x set_num_threads(2) (4 threads each), 100 % CPU, 140 % wait.
TWO_BY_TWO = CPU_BOX.but(trainer_threads=4, trainer_cpu=100, trainer_wait=140, extra_jobs=1)
# The healthy control: one trainer, 2 compute threads, others' load makes it wait 60 %.
ONE_BY_TWO = CPU_BOX.but(trainer_threads=4, trainer_cpu=150, trainer_wait=60)


def _verdict(scene: Scene):
    return diagnose(scene.window())


def _ids(scene: Scene) -> set[str]:
    v = _verdict(scene)
    return {f.bottleneck for f in (v.primary, *v.also)}


@pytest.mark.parametrize("scene", [THREE_BY_FOUR, TWO_BY_TWO], ids=["3x4", "2x2"])
def test_trainers_queueing_for_cpus_they_oversubscribe(scene: Scene) -> None:
    assert _verdict(scene).primary.bottleneck == "oversubscribed"


def test_oversubscribed_names_jobs_threads_wait_and_the_thread_setting() -> None:
    primary = _verdict(THREE_BY_FOUR).primary
    texts = [e.text for e in primary.evidence]
    assert "3 jobs (24 threads) want 7.3 CPUs of 2 and wait for one 82 % of the time" in texts
    assert any(
        t.startswith("trainer train.py (pid 4242, 8 threads) waits for a CPU 82 %") for t in texts
    )
    assert any(t.startswith("threads per trainer: train.py (pid 4242) 8, ") for t in texts)
    assert primary.remedies[0].startswith("torch.set_num_threads(1) / OMP_NUM_THREADS=1")
    assert primary.remedies[2].startswith("run fewer trainers at once: 3 on 2 CPUs")


def test_one_trainer_within_the_cores_stays_compute_under_others_load() -> None:
    primary = _verdict(ONE_BY_TWO).primary
    assert primary.bottleneck == "compute"
    assert "oversubscribed" not in _ids(ONE_BY_TWO)
    texts = [e.text for e in primary.evidence]
    assert "trainer python (pid 4242) waits for a CPU 29 % of the time" in texts


def test_many_threads_that_rarely_queue_are_not_oversubscribed() -> None:
    """An 8-CPU box, 3 trainers wanting 9.9 CPUs but waiting only 9 % of the time."""
    big = CPU_BOX.but(cpus=8, trainer_threads=8, trainer_cpu=300, trainer_wait=30, extra_jobs=2)
    assert "oversubscribed" not in _ids(big)


def test_gpu_kept_busy_is_not_oversubscribed() -> None:
    busy_gpu = Scene(cpus=2, workers=0, trainer_threads=8, trainer_cpu=45, trainer_wait=200,
                     extra_jobs=2, cpu_busy=100)  # fmt: skip
    assert "oversubscribed" not in _ids(busy_gpu)


def test_threads_per_trainer_leaves_the_workers_their_cpus() -> None:
    trainers = tuple(TrainerDemand(p, "t", f"run:x/{p}", 20, 4, 100.0, 10.0) for p in (1, 2))
    assert CpuDemand(trainers, cpus=16, worker_cpus=3.6).threads_per_trainer == 6
    assert CpuDemand(trainers, cpus=2, worker_cpus=3.6).threads_per_trainer == 1
    assert CpuDemand(trainers, cpus=16).wait_share is not None
    assert CpuDemand(trainers, cpus=16).runs == 2


# data_cpu.py on a host whose /proc/stat shows spare CPU (a cgroup quota, or load just
# arriving): 2 workers at 70 % of a core each, queueing for another 25 %.
QUEUED_WORKERS = CPU_BOX.but(
    workers=2, worker_threads=3, worker_cpu=70, trainer_cpu=2, data_wait=0.95, cpu_busy=80
)


def test_worker_that_runs_or_waits_all_the_time_is_cpu_bound() -> None:
    primary = _verdict(QUEUED_WORKERS.but(worker_wait=25)).primary
    assert primary.bottleneck == "data_cpu"
    texts = [e.text for e in primary.evidence]
    assert "2/2 workers at 70 % CPU and waiting for a CPU 25 % of the time" in texts


def test_worker_at_seventy_percent_without_queueing_splits_the_wait() -> None:
    """Workers on a CPU 72 % of the time and asleep the rest: the CPU explains most of the
    wait, and the rest is named beside it with its part."""
    verdict = _verdict(QUEUED_WORKERS.but(worker_wait=2))
    assert [verdict.primary.bottleneck, verdict.also[0].bottleneck] == ["data_cpu", "data_starved"]
    assert verdict.primary.share == 0.95 * 0.72
    texts = [e.text for e in verdict.primary.evidence]
    assert "the loaders meanwhile: 68 % on a CPU, 27 % idle" in texts


GPU_GAPS = Scene(gpu_busy=0.5, data_wait=0.01, trainer_cpu=75)


def test_host_overhead_counts_the_main_threads_queueing() -> None:
    primary = _verdict(GPU_GAPS.but(trainer_main=(72, 25))).primary
    assert primary.bottleneck == "host_overhead"
    texts = [e.text for e in primary.evidence]
    assert any("main thread at 72 % CPU and waiting for a CPU 25 % of the time" in t for t in texts)


def test_busy_helper_threads_do_not_make_the_main_thread_pegged() -> None:
    assert "host_overhead" not in _ids(GPU_GAPS.but(trainer_cpu=150, trainer_main=(40, 2)))


def test_workers_that_fill_the_box_get_fewer_workers_advice() -> None:
    """8 CPUs, one trainer with 8 CPU-bound workers queueing: threads alone cannot fix it."""
    crowded = CPU_BOX.but(cpus=8, trainer_threads=8, trainer_cpu=200, trainer_wait=150,
                          workers=8, worker_threads=1, worker_cpu=60, worker_wait=40)  # fmt: skip
    primary = _verdict(crowded).primary
    assert primary.bottleneck == "oversubscribed"
    assert primary.remedies[0].startswith(
        "torch.set_num_threads(1) / OMP_NUM_THREADS=1 per trainer"
    )
    assert primary.remedies[2].startswith("fewer DataLoader workers: they want 8.0 of the 8 CPUs")


def test_a_rank_sharing_the_cores_with_its_peers_is_compute_bound_when_it_runs_or_queues() -> None:
    """A CPU DDP rank on a fast link: 78 % on a CPU and 18 % queued behind its peer is the CPU
    being the limit (healthy), though its use alone is below a pegged core."""
    rank = CPU_BOX.but(trainer_threads=6, trainer_cpu=78, trainer_wait=18, cpu_busy=87)
    assert _verdict(rank).primary.bottleneck == "compute"
    assert _verdict(rank.but(trainer_wait=0)).primary.bottleneck == "unknown"
