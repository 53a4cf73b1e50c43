"""The trial's cases: synthetic jobs with known costs, the remedy each is given, held-out ones.

Every case is job.py with its costs on the command line (A, as the user runs it), the setting a
remedy changes (``knob``: which of the verdict's predictions is read, by the name ``Gain.knob``
carries) and how B differs from A (``apply``): with the value the prediction proposes (workers,
prefetch, threads, quota), or with the cause taken away (the pause, the slow rank, the reads:
the data copied to RAM).  The classes are the verdict's causes on a CPU; each has cases where the
right answer is "no gain" (the cores saturated, a quota spent, a disk at its limit, a deeper
prefetch).

``held_out`` cases were written with the others but never run until the model was final
(docs/gains.md says which and when): they are a third of the count.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Case:
    name: str
    klass: str  # loader_cpu, storage, latency, pauses, oversubscription, slow_rank, quota
    args: tuple[str, ...]  # job.py's arguments for A
    knob: str  # the prediction read: Gain.knob
    apply: str  # workers, prefetch, quota, threads, ram, no_pause, no_slow
    costs: str  # the known costs, in words
    quota: float | None = None  # CPUs of a cgroup quota for A
    disk_bps: int | None = None  # a blkio read limit on the data's device (bytes/s)
    files: int = 0  # files of ``file_kib`` KiB for a storage case
    file_kib: int = 0
    ranks: int = 1  # gloo DDP ranks
    trainers: int = 1  # copies of the job at once (oversubscription)
    held_out: bool = False
    # the value B runs with where the verdict offers no remedy on the knob (no finding: a loop
    # near its knee waits too little for a rule): the model's figure for it, asked directly
    asked: float | None = None

    @property
    def processes(self) -> int:
        return self.ranks * self.trainers


def _c(name: str, klass: str, args: str, knob: str, apply: str, costs: str, **more) -> Case:
    return Case(name, klass, tuple(args.split()), knob, apply, costs, **more)


W, P, Q, T = "num_workers", "prefetch_factor", "cpu_quota", "threads"
PAUSES, STORAGE, STRAGGLER = "pauses", "storage", "straggler"
# fmt: off
CASES: tuple[Case, ...] = (
    # -- loader CPU: workers burn CPU per sample; 2 cores -----------------------------------------
    _c("cpu_1w_cheap_step", "loader_cpu",
       "--workers 1 --batch 4 --sample-cpu-ms 5 --step-wait-ms 8",
       W, "workers", "20 ms CPU a batch in 1 worker, 8 ms step off CPU"),
    _c("cpu_1w_light", "loader_cpu", "--workers 1 --batch 4 --sample-cpu-ms 3 --step-wait-ms 5",
       W, "workers", "12 ms CPU a batch in 1 worker, 5 ms step off CPU"),
    _c("cpu_inline", "loader_cpu", "--workers 0 --batch 4 --sample-cpu-ms 2 --step-wait-ms 8",
       W, "workers", "8 ms CPU a batch loaded in the trainer, 8 ms step off CPU"),
    _c("cpu_1w_cpu_step", "loader_cpu", "--workers 1 --batch 2 --sample-cpu-ms 10 --step-cpu-ms 8",
       W, "workers", "20 ms CPU a batch in 1 worker, 8 ms step on CPU"),
    _c("cpu_2w_saturated", "loader_cpu", "--workers 2 --batch 4 --sample-cpu-ms 5 --step-wait-ms 4",
       W, "workers", "20 ms CPU a batch in 2 workers on 2 cores: no gain"),
    _c("cpu_3w_saturated", "loader_cpu", "--workers 3 --batch 2 --sample-cpu-ms 8 --step-cpu-ms 4",
       W, "workers", "16 ms CPU a batch in 3 workers, 4 ms step on CPU: no gain", held_out=True),
    _c("cpu_1w_heavy", "loader_cpu", "--workers 1 --batch 8 --sample-cpu-ms 4 --step-wait-ms 12",
       W, "workers", "32 ms CPU a batch in 1 worker, 12 ms step off CPU", held_out=True),
    # -- latency: workers sleep per sample (a remote fetch) ---------------------------------------
    _c("lat_1w", "latency", "--workers 1 --batch 4 --sample-wait-ms 4 --step-wait-ms 8",
       W, "workers", "16 ms fetch a batch in 1 worker, 8 ms step"),
    _c("lat_2w_long", "latency", "--workers 2 --batch 4 --sample-wait-ms 10 --step-wait-ms 5",
       W, "workers", "40 ms fetch a batch in 2 workers, 5 ms step"),
    _c("lat_inline", "latency", "--workers 0 --batch 4 --sample-wait-ms 3 --step-wait-ms 10",
       W, "workers", "12 ms fetch a batch in the trainer, 10 ms step"),
    _c("lat_prefetch", "latency", "--workers 2 --batch 4 --sample-wait-ms 6 --step-wait-ms 6",
       P, "prefetch", "24 ms fetch a batch in 2 workers, 6 ms step: a deeper prefetch"),
    _c("lat_4w_near", "latency", "--workers 4 --batch 4 --sample-wait-ms 7 --step-wait-ms 5",
       W, "workers", "28 ms fetch a batch in 4 workers, 5 ms step", asked=6),
    _c("lat_1w_cpu_step", "latency", "--workers 1 --batch 4 --sample-wait-ms 5 --step-cpu-ms 6",
       W, "workers", "20 ms fetch a batch in 1 worker, 6 ms step on CPU", held_out=True),
    _c("lat_prefetch_1w", "latency", "--workers 1 --batch 2 --sample-wait-ms 8 --step-wait-ms 4",
       P, "prefetch", "16 ms fetch a batch in 1 worker, 4 ms step: a deeper prefetch",
       held_out=True),
    _c("lat_3w", "latency", "--workers 3 --batch 8 --sample-wait-ms 3 --step-wait-ms 6",
       W, "workers", "24 ms fetch a batch in 3 workers, 6 ms step", held_out=True, asked=5),
    # -- storage: files read through a blkio read limit -------------------------------------------
    _c("disk_ram", "storage", "--workers 2 --batch 4 --step-wait-ms 10",
       STORAGE, "ram", "1 MiB a batch through a 4 MB/s limit; the data copied to RAM",
       disk_bps=4_000_000, files=640, file_kib=256),
    _c("disk_more_workers", "storage", "--workers 2 --batch 4 --step-wait-ms 10",
       W, "workers", "1 MiB a batch through a 4 MB/s limit: more workers, no gain",
       disk_bps=4_000_000, files=640, file_kib=256),
    _c("disk_cpu_ram", "storage", "--workers 2 --batch 2 --sample-cpu-ms 6 --step-wait-ms 10",
       STORAGE, "ram", "512 KiB and 12 ms CPU a batch through 3 MB/s; the data to RAM",
       disk_bps=3_000_000, files=640, file_kib=256),
    _c("disk_ram_small", "storage", "--workers 1 --batch 8 --step-wait-ms 6",
       STORAGE, "ram", "512 KiB a batch in 1 worker through 2 MB/s; the data to RAM",
       disk_bps=2_000_000, files=1200, file_kib=64, held_out=True),
    _c("disk_more_workers_2", "storage", "--workers 1 --batch 8 --step-wait-ms 6",
       W, "workers", "512 KiB a batch in 1 worker through 2 MB/s: more workers, no gain",
       disk_bps=2_000_000, files=1200, file_kib=64, held_out=True),
    # -- periodic pauses: a pause every N steps ---------------------------------------------------
    _c("pause_sleep", "pauses", "--step-wait-ms 20 --pause-every 20 --pause-ms 500",
       PAUSES, "no_pause", "20 ms steps, a 500 ms pause every 20 steps"),
    _c("pause_cpu", "pauses", "--step-wait-ms 10 --pause-every 40 --pause-ms 250 --pause-kind cpu",
       PAUSES, "no_pause", "10 ms steps, 250 ms of CPU every 40 steps"),
    _c("pause_fsync", "pauses",
       "--step-wait-ms 15 --pause-every 15 --pause-ms 640 --pause-kind fsync",
       PAUSES, "no_pause", "15 ms steps, a 40 MB write+fsync every 15"),
    _c("pause_long_rare", "pauses", "--step-wait-ms 8 --pause-every 150 --pause-ms 1500",
       PAUSES, "no_pause", "8 ms steps, a 1.5 s pause every 150 steps"),
    _c("pause_short", "pauses", "--step-cpu-ms 12 --pause-every 25 --pause-ms 200",
       PAUSES, "no_pause", "12 ms CPU steps, a 200 ms pause every 25 steps", held_out=True),
    # (added after the second run, never tuned against: its pauses load their own batches)
    _c("pause_eval", "pauses", "--workers 2 --batch 4 --sample-cpu-ms 1 --step-wait-ms 8 "
       "--pause-every 40 --pause-kind eval --eval-batches 20", PAUSES, "no_pause",
       "8 ms steps fed by 2 workers; every 40, 20 batches evaluated, loaded in the trainer",
       held_out=True),
    # -- oversubscription: trainers whose threads outnumber the cores -----------------------------
    _c("over_2x4", "oversubscription", "--threads 4 --matmul 12 --batch 4",
       T, "threads", "2 trainers x 4 threads of 256x256 matmuls on 2 cores", trainers=2),
    _c("over_3x2", "oversubscription", "--threads 2 --matmul 12 --batch 4",
       T, "threads", "3 trainers x 2 threads on 2 cores", trainers=3),
    _c("over_2x3", "oversubscription", "--threads 3 --matmul 12 --batch 4",
       T, "threads", "2 trainers x 3 threads on 2 cores", trainers=2, held_out=True),
    # -- a slow rank: 2 gloo ranks, one slower by a sleep -----------------------------------------
    _c("slow_rank_30", "slow_rank", "--step-wait-ms 10 --slow-rank 1 --slow-ms 30",
       STRAGGLER, "no_slow", "10 ms steps, rank 1 30 ms slower", ranks=2),
    _c("slow_rank_cpu", "slow_rank", "--step-cpu-ms 8 --slow-rank 1 --slow-ms 20",
       STRAGGLER, "no_slow", "8 ms CPU steps, rank 1 20 ms slower", ranks=2),
    _c("slow_rank_60", "slow_rank", "--step-wait-ms 20 --slow-rank 0 --slow-ms 60",
       STRAGGLER, "no_slow", "20 ms steps, rank 0 60 ms slower", ranks=2, held_out=True),
    # -- a CPU quota ------------------------------------------------------------------------------
    _c("quota_compute", "quota", "--step-cpu-ms 20 --batch 2",
       Q, "quota", "20 ms CPU steps, no loader, a 0.5 CPU quota", quota=0.5),
    _c("quota_loader", "quota", "--workers 2 --batch 4 --sample-cpu-ms 3 --step-wait-ms 4",
       Q, "quota", "12 ms CPU a batch in 2 workers, a 1.0 CPU quota", quota=1.0),
    _c("quota_more_workers", "quota", "--workers 1 --batch 4 --sample-cpu-ms 4 --step-wait-ms 2",
       W, "workers", "16 ms CPU a batch in 1 worker under a 0.7 CPU quota: no gain", quota=0.7),
    _c("quota_threads", "quota", "--threads 2 --matmul 16 --batch 2",
       Q, "quota", "2 threads of matmuls under a 0.8 CPU quota", quota=0.8, held_out=True),
)
# fmt: on
