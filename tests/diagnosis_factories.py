"""Realistic synthetic snapshot windows for the diagnosis tests.

A :class:`Scene` describes one training situation with healthy defaults (one H100-like GPU at
97 %, 8 logical CPUs, 4 DataLoader workers, 3 % data wait); tests override only the knobs that
make their case, e.g. ``Scene(data_wait=0.62, worker_cpu=98).window()``.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from traintop.collectors.snapshot import (
    CpuCore,
    CpuLimit,
    CpuSnapshot,
    DiskSnapshot,
    GpuProcess,
    GpuSnapshot,
    GpuStatus,
    GpuStepProfile,
    HostInfo,
    JobFacts,
    JobSnapshot,
    MemorySnapshot,
    NicSnapshot,
    PhaseSamples,
    PhaseShare,
    ProcessSnapshot,
    Snapshot,
    SyncSite,
    WorkerSnapshot,
)

TRAINER_PID = 4242
RECENT = 120  # steps a JobSnapshot keeps, as traintop.collectors.job_window.RECENT_STEPS
GIB = 1 << 30


@dataclass(frozen=True)
class Scene:
    """One situation; ``*_alt`` values replace their base on odd ticks (noise, alternation)."""

    attach: bool = True
    cpus: int = 8
    cpu_busy: float = 40.0
    core_busy: tuple[float, ...] | None = None
    iowait: float = 1.0
    load: float | None = None
    swap_bytes_per_s: float = 0.0
    gpu_count: int = 1
    gpu_util: float = 97.0
    gpu_util_alt: float | None = None
    gpu_mem_share: float = 0.6
    gpu_on_job: bool = True
    temp: float = 65.0
    temp_slowdown: float | None = 89.0
    power: float = 600.0
    power_limit: float = 700.0
    sm_clock: int = 1980
    reasons: int = 0
    trainer_cpu: float = 60.0
    trainer_threads: int = 24
    trainer_read: float = 0.0
    extra_jobs: int = 0  # more trainers like the first (no workers), attached beside it
    workers: int = 4
    worker_cpu: float = 30.0
    worker_read: float = 5e6
    worker_threads: int = 4
    # Run-queue waits (traintop.collectors.schedstat), None = not measured (no schedstat):
    trainer_wait: float | None = None  # each trainer process, summed over its threads
    trainer_main: tuple[float, float] | None = None  # (run %, wait %) of its main thread
    worker_wait: float | None = None
    worker_state: str | None = None  # state letter of every worker's main thread (D: blocked)
    worker_state_alt: str | None = None
    data_wait: float | None = 0.03
    data_wait_alt: float | None = None
    gpu_busy: float | None = 0.95
    cuda_allocated: int | None = None  # the job's allocated tensor bytes (ring mem_bytes)
    phases: tuple[tuple[str, float], ...] = ()
    step_times: tuple[float, ...] = ()
    # step_times split by phase: one column per entry of ``phases``, each as long as step_times
    phase_times: tuple[tuple[float, ...], ...] = ()
    steps_per_tick: int = 0  # > 0: step_times is the whole window's series, revealed per tick
    world_size: int = 1
    state: str = "live"
    last_step_age: float | None = 0.2
    disk_busy: float = 10.0
    disk_await: float = 1.0
    disk_read: float = 50e6
    nic_util: float = 2.0
    # The card's truth (issue 33): where gpu_busy comes from ("process", "device"; None: an
    # older collector, whose share is the CUDA-event span), the span itself, GPM counters
    # (sm_active, occupancy, tensor, dram; None: no GPM), and the probe's facts side file.
    busy_source: str | None = "process"
    gpu_queued: float | None = None
    gpm: tuple[float, float, float, float] | None = None
    sync_sites: tuple[SyncSite, ...] = ()
    facts: JobFacts | None = None
    profile: GpuStepProfile | None = None
    alloc_retries_per_tick: int | None = None  # the allocator's retries grow by this a tick
    cpu_limit: CpuLimit | None = None
    read_limit: float | None = None  # bytes/s its cgroup lets the job read (blkio, io.max)
    handoff: float | None = None  # seconds the trainer took to take each worker's batch over
    handoff_cpu: float | None = None  # ... of them, its own CPU's
    steps_per_s: float = 4.0
    phase_samples: PhaseSamples | None = None  # the rank's stacks sampled in a phase

    def but(self, **changes) -> Scene:
        """A copy with some knobs changed (reads better than ``replace`` in tables)."""
        return replace(self, **changes)

    def window(self, n: int = 11, dt: float = 1.0, start: float = 1000.0) -> list[Snapshot]:
        """``n`` snapshots ``dt`` seconds apart (11 x 1 s = a 10 s window)."""
        return [self.snapshot(start + i * dt, i, dt) for i in range(n)]

    def snapshot(self, t: float, tick: int = 0, dt: float = 1.0) -> Snapshot:
        """The snapshot taken at monotonic time ``t``; odd ticks use the ``*_alt`` values."""
        odd = tick % 2 == 1
        return Snapshot(
            timestamp=1.7e9 + t,
            monotonic=t,
            interval_s=dt,
            host=HostInfo("gpu-box", 86400.0, self.cpus),
            cpu=self._cpu(),
            memory=MemorySnapshot(
                512 * GIB,
                200 * GIB,
                300 * GIB,
                100 * GIB,
                8 * GIB,
                0,
                self.swap_bytes_per_s / 2,
                self.swap_bytes_per_s / 2,
            ),
            disks=(
                DiskSnapshot(
                    "nvme0n1", self.disk_read, 1e5, 800.0, 2.0, self.disk_busy, self.disk_await
                ),
            ),
            nics=(self._nic(),),
            gpus=tuple(self._gpu(i, odd) for i in range(self.gpu_count)),
            gpu_status=GpuStatus(True, driver_version="590.48.01"),
            processes=self._processes(odd),
            jobs=self._jobs(odd, tick) if self.attach else (),
        )

    def _cpu(self) -> CpuSnapshot:
        per_core = self.core_busy or (self.cpu_busy,) * self.cpus
        cores = tuple(CpuCore(i, b, iowait_pct=self.iowait) for i, b in enumerate(per_core))
        total = CpuCore(-1, self.cpu_busy, iowait_pct=self.iowait)
        load = (self.load, self.load, self.load) if self.load is not None else (2.0, 2.0, 2.0)
        return CpuSnapshot(cores, total, load, 3000.0, 3500.0, self.cpus // 2)

    def _nic(self) -> NicSnapshot:
        bps = 25_000 * 1e6 / 8 * self.nic_util / 100
        return NicSnapshot("eth0", True, 25_000, bps, bps, 1e4, 1e4, 0.0, 0.0, self.nic_util)

    def _gpu(self, index: int, odd: bool) -> GpuSnapshot:
        util = self.gpu_util_alt if odd and self.gpu_util_alt is not None else self.gpu_util
        procs = (GpuProcess(TRAINER_PID + index, 40 * GIB),) if self.gpu_on_job else ()
        return GpuSnapshot(
            index=index,
            name="NVIDIA H100 80GB HBM3",
            util_gpu_pct=util,
            mem_total_bytes=80 * GIB,
            mem_used_bytes=int(80 * GIB * self.gpu_mem_share),
            temp_c=self.temp,
            temp_slowdown_c=self.temp_slowdown,
            temp_shutdown_c=92.0,
            temp_max_operating_c=87.0,
            power_w=self.power,
            power_limit_w=self.power_limit,
            sm_clock_mhz=self.sm_clock,
            sm_clock_max_mhz=1980,
            clocks_event_reasons=self.reasons,
            clocks_event_reasons_supported=0x1FF,
            processes=procs,
            **self._gpm(),
        )

    def _gpm(self) -> dict[str, float]:
        if self.gpm is None:
            return {}
        names = ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct")
        return dict(zip(names, self.gpm, strict=True))

    def _trainer(self, pid: int) -> ProcessSnapshot:
        return ProcessSnapshot(
            pid,
            1,
            "me",
            "python",
            "python train.py",
            self.trainer_cpu,
            8 * GIB,
            self.trainer_read,
            0.0,
            40 * GIB,
            self.trainer_threads,
            pid,
            cpu_wait_pct=self.trainer_wait,
            main_thread_cpu_pct=self.trainer_main[0] if self.trainer_main else None,
            main_thread_wait_pct=self.trainer_main[1] if self.trainer_main else None,
        )

    def _extra_pids(self) -> range:
        return range(TRAINER_PID + 1000, TRAINER_PID + 1000 + self.extra_jobs)

    def _processes(self, odd: bool = False) -> tuple[ProcessSnapshot, ...]:
        trainers = tuple(self._trainer(pid) for pid in (TRAINER_PID, *self._extra_pids()))
        state = self.worker_state_alt if odd and self.worker_state_alt else self.worker_state
        workers = tuple(
            ProcessSnapshot(
                pid,
                TRAINER_PID,
                "me",
                "pt_data_worker",
                "python train.py",
                self.worker_cpu,
                GIB,
                self.worker_read,
                0.0,
                None,
                self.worker_threads,
                TRAINER_PID,
                state=state,
                cpu_wait_pct=self.worker_wait,
            )
            for pid in self._worker_pids()
        )
        return (*trainers, *workers)

    def _worker_pids(self) -> range:
        return range(TRAINER_PID + 100, TRAINER_PID + 100 + self.workers)

    def _jobs(self, odd: bool, tick: int) -> tuple[JobSnapshot, ...]:
        first = self._job(odd, tick)
        extra = (replace(first, pid=pid, workers=()) for pid in self._extra_pids())
        return (first, *extra)

    def _steps(self, tick: int) -> tuple[int, slice]:
        """``steps_total`` and which of the step times are the newest ``RECENT`` at ``tick``."""
        if not self.steps_per_tick:
            return 5000, slice(None)
        done = min(len(self.step_times), (tick + 1) * self.steps_per_tick)
        return 5000 + done, slice(max(0, done - RECENT), done)

    def _job(self, odd: bool, tick: int) -> JobSnapshot:
        wait = self.data_wait_alt if odd and self.data_wait_alt is not None else self.data_wait
        total, recent = self._steps(tick)
        return JobSnapshot(
            pid=TRAINER_PID,
            name="train.py",
            rank=0,
            local_rank=0,
            world_size=self.world_size,
            state=self.state,
            steps_total=total,
            steps_per_s=self.steps_per_s,
            samples_per_s=1024.0,
            step_time_p50_s=0.25,
            step_time_p95_s=0.3,
            data_wait_share=wait,
            data_wait_p50_s=None,
            data_wait_p95_s=None,
            batches_per_s=4.0,
            gpu_busy_share=self.gpu_busy,
            phases=tuple(PhaseShare(name, share, share * 0.25) for name, share in self.phases),
            workers=tuple(
                WorkerSnapshot(pid, self.worker_cpu, GIB, self.worker_read)
                for pid in self._worker_pids()
            ),
            recent_step_times_s=self.step_times[recent],
            recent_phase_times_s=tuple(column[recent] for column in self.phase_times),
            cuda_mem_allocated_bytes=self.cuda_allocated,
            last_step_age_s=self.last_step_age,
            gpu_busy_source=self.busy_source if self.gpu_busy is not None else None,
            gpu_queued_share=self.gpu_queued,
            sync_sites=self.sync_sites,
            facts=self.facts,
            gpu_profile=self.profile,
            cuda_alloc_retries=self._retries(tick),
            cpu_limit=self.cpu_limit,
            read_limit_bps=self.read_limit,
            handoff_s=self.handoff,
            handoff_cpu_s=self.handoff_cpu,
            phase_samples=self.phase_samples,
        )

    def _retries(self, tick: int) -> int | None:
        per_tick = self.alloc_retries_per_tick
        return None if per_tick is None else 7 + per_tick * tick
