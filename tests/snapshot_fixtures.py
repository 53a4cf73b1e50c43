"""Scripted snapshots for UI tests and screenshots: a realistic 8x H100 training box.

``machine()`` builds one deterministic Snapshot (same arguments, same numbers); ``ScriptedSource``
plays a list of them through the same ``start(on_snapshot)`` contract as the real sampler.
Values come from real captures (see /work/shared/NVML.md section 7): H100 80GB HBM3 SXM with
81 559 MiB, 700 W limit, slowdown at 89 C, max SM clock 1980 MHz, no fan reading.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Sequence
from dataclasses import replace

from traintop.collectors.snapshot import (
    Collective,
    CollectorError,
    CpuCore,
    CpuSnapshot,
    DiskSnapshot,
    Frame,
    GpuProcess,
    GpuSnapshot,
    GpuStatus,
    HostInfo,
    JobSnapshot,
    MemorySnapshot,
    NicSnapshot,
    PhaseShare,
    ProcessSnapshot,
    RankStack,
    Snapshot,
    WorkerSnapshot,
)

MIB, GIB = 2**20, 2**30
EPOCH = 1_750_000_000.0  # 2025-06-15 15:06:40 UTC; tests freeze the clock here
TRAINER_PID = 4242
WORKER_PIDS = (4301, 4302, 4303, 4304)
SW_POWER_CAP, HW_SLOWDOWN, SW_THERMAL = 0x4, 0x8, 0x20


def _wave(tick: int, phase: float, low: float, high: float) -> float:
    """A smooth deterministic signal, so sparklines have shape without randomness."""
    return low + (high - low) * (0.5 + 0.5 * math.sin(tick * 0.7 + phase))


def h100(index: int, tick: int = 0, *, throttling: bool = True) -> GpuSnapshot:
    """One busy H100; with ``throttling`` GPU 2 runs hot (84 C) and GPU 5 hits its power cap."""
    hot = throttling and index == 2
    capped = throttling and index == 5
    reasons = (SW_THERMAL | HW_SLOWDOWN) if hot else SW_POWER_CAP if capped else 0
    return GpuSnapshot(
        index=index,
        name="NVIDIA H100 80GB HBM3",
        uuid=f"GPU-4c9e3b1a-7d2f-4e8a-9b6c-00000000000{index}",
        pci_bus_id=f"00000000:{0x18 + 0x10 * index:02X}:00.0",
        util_gpu_pct=round(_wave(tick, index, 88, 100)) if not hot else 71.0,
        util_mem_pct=round(_wave(tick, index + 1, 35, 60)),
        mem_total_bytes=81_559 * MIB,
        mem_used_bytes=(71_340 + 97 * index) * MIB,
        mem_reserved_bytes=479 * MIB,
        mem_free_bytes=(81_559 - 479 - 71_340 - 97 * index) * MIB,
        temp_c=84.0 if hot else 58.0 + index % 4,
        temp_slowdown_c=89.0,
        temp_shutdown_c=92.0,
        temp_max_operating_c=87.0,
        power_w=700.0 if capped else round(_wave(tick, index, 590, 660)),
        power_limit_w=700.0,
        sm_clock_mhz=1410 if hot else 1755 if capped else 1980,
        sm_clock_max_mhz=1980,
        mem_clock_mhz=2619,
        mem_clock_max_mhz=2619,
        pstate=0,
        fan_pct=None,
        clocks_event_reasons=reasons,
        clocks_event_reasons_supported=0x1FF,
        pcie_rx_bytes_per_s=_wave(tick, index, 9.0e9, 13.5e9),
        pcie_tx_bytes_per_s=_wave(tick, index + 2, 0.8e9, 1.9e9),
        mig_mode=False,
        processes=(GpuProcess(TRAINER_PID + index, (70_900 + 97 * index) * MIB),),
    )


def cpu(cores: int, tick: int = 0) -> CpuSnapshot:
    """Workers pin a few cores near 100 %, the rest idle along, like a data-bound job."""
    core_list = []
    for i in range(cores):
        busy = 97.0 if i % 8 in (1, 2) else _wave(tick, i * 0.9, 4, 38)
        user, system = busy * 0.8, busy * 0.15
        iowait = min(busy * 0.05, 100 - busy)
        core_list.append(CpuCore(i, busy, user, system, iowait, 2900.0 + 20 * (i % 5)))
    mean = sum(core.busy_pct or 0 for core in core_list) / max(cores, 1)
    total = CpuCore(-1, mean, mean * 0.8, mean * 0.15, mean * 0.05, 2950.0)
    return CpuSnapshot(
        cores=tuple(core_list),
        total=total,
        load_avg=(cores * 0.41, cores * 0.38, cores * 0.35),
        freq_mhz=2950.0,
        freq_max_mhz=3700.0,
        physical_cores=max(cores // 2, 1),
    )


def memory(tick: int = 0) -> MemorySnapshot:
    return MemorySnapshot(
        total_bytes=int(503.5 * GIB),
        used_bytes=int((182 + tick * 0.1) * GIB),
        available_bytes=int((321 - tick * 0.1) * GIB),
        cached_bytes=240 * GIB,
        swap_total_bytes=8 * GIB,
        swap_used_bytes=256 * MIB,
        swap_in_bytes_per_s=0.0,
        swap_out_bytes_per_s=0.0,
    )


def disks(tick: int = 0) -> tuple[DiskSnapshot, ...]:
    read = _wave(tick, 0, 0.9e9, 1.6e9)
    return (
        DiskSnapshot("nvme0n1", read, 42e6, read / 131072, 310.0, 62.0, 0.41),
        DiskSnapshot("nvme1n1", 0.0, _wave(tick, 2, 0, 2.1e9), 0.0, 1200.0, 18.0, 1.9),
        DiskSnapshot("sda", 0.0, 12_288.0, 0.0, 3.0, 0.4, 4.2),
    )


def nics(tick: int = 0) -> tuple[NicSnapshot, ...]:
    ib = _wave(tick, 1, 11e9, 21e9)
    return (
        NicSnapshot("eth0", True, 25_000, 31e6, 2.4e6, 22_000, 9_000, 0.0, 0.0, 0.99),
        NicSnapshot("ib0", True, 200_000, ib, ib * 0.98, 1.4e6, 1.4e6, 0.0, 0.0, ib * 4e-9),
        NicSnapshot("docker0", False, None, None, None, None, None, None, None, None),
    )


def _proc(pid: int, user: str, name: str, cmdline: str, cpu_pct: float, rss: int, **rest):
    """A ProcessSnapshot with the usual defaults: child of init, no I/O, no GPU memory, asleep
    unless it uses CPU, no run-queue wait."""
    fields = {"ppid": 1, "read_bytes_per_s": 0.0, "write_bytes_per_s": 0.0, "cpu_wait_pct": 0.0}
    fields = {**fields, "state": "R" if cpu_pct >= 50 else "S", **rest}
    return ProcessSnapshot(
        pid=pid, user=user, name=name, cmdline=cmdline, cpu_pct=cpu_pct, rss_bytes=rss, **fields
    )


def processes(gpus: int, tick: int = 0) -> tuple[ProcessSnapshot, ...]:
    """A trainer (rank 0) with 4 DataLoader workers, the other ranks, and everyday daemons."""
    cmd = "python train.py --config configs/llama-7b.yaml --batch-size 32"
    procs = [
        _proc(
            TRAINER_PID,
            "alice",
            "python",
            cmd,
            _wave(tick, 0, 140, 190),
            24 * GIB,
            ppid=4100,
            read_bytes_per_s=2e6,
            write_bytes_per_s=180e3,
            num_threads=64,
            gpu_mem_bytes=70_900 * MIB if gpus else None,
            cpu_wait_pct=_wave(tick, 0, 2, 6),
        )
    ]
    procs += [
        _proc(
            pid,
            "alice",
            "pt_data_worker",
            f"{cmd} (worker {n})",
            _wave(tick, n, 88, 99),
            3 * GIB + n * 50 * MIB,
            ppid=TRAINER_PID,
            read_bytes_per_s=118e6,
            num_threads=4,
            group_pid=TRAINER_PID,
            cpu_wait_pct=_wave(tick, n, 3, 14),
        )
        for n, pid in enumerate(WORKER_PIDS)
    ]
    procs += [
        _proc(
            TRAINER_PID + rank,
            "alice",
            "python",
            f"{cmd} --local-rank {rank}",
            _wave(tick, rank, 95, 110),
            21 * GIB,
            ppid=4100,
            num_threads=48,
            gpu_mem_bytes=(70_900 + 97 * rank) * MIB,
        )
        for rank in range(1, gpus)
    ]
    return (*procs, *_daemons())


def _daemons() -> list[ProcessSnapshot]:
    return [
        _proc(
            1234,
            "root",
            "dockerd",
            "/usr/bin/dockerd -H fd://",
            1.2,
            96 * MIB,
            write_bytes_per_s=8e3,
        ),
        _proc(1501, "root", "nvidia-persistenced", "/usr/bin/nvidia-persistenced", 0.0, 4 * MIB),
        _proc(2210, "prometheus", "node_exporter", "/usr/local/bin/node_exporter", 0.7, 28 * MIB),
        _proc(5012, "alice", "traintop", "traintop", 0.9, 61 * MIB, ppid=4990),
        _proc(880, "root", "sshd", "sshd: /usr/sbin/sshd -D", 0.0, 9 * MIB),
    ]


def ddp_rank(
    rank: int, world: int, tick: int = 0, *, name: str = "llama-7b", slow: int | None = 2,
    state: str = "live", pid: int | None = None, job_id: str | None = None,
) -> JobSnapshot:  # fmt: skip
    """One rank of a DDP job: ``slow`` sits on a busy loader (more data wait, more own work)
    while the others spend that time waiting for it in all-reduce."""
    straggler = rank == slow
    data, comm = (0.21, 0.03) if straggler else (0.04, 0.22 + 0.01 * (rank % 3))
    step = _wave(tick, rank * 0.3, 0.505, 0.52)
    compute = 1.0 - data - comm
    pid = TRAINER_PID + rank if pid is None else pid
    phases = (("data", data), ("forward", compute * 0.33), ("backward", compute * 0.6),
              ("allreduce", comm), ("optimizer", compute * 0.07))  # fmt: skip
    workers = tuple(
        WorkerSnapshot(w, _wave(tick, w, 55, 97 if straggler else 70), 3 * GIB, 60e6 + w % 10 * 1e6)
        for w in (WORKER_PIDS if rank == 0 else range(pid * 10 + 1, pid * 10 + 3))
    )
    return JobSnapshot(
        pid=pid, name=name, rank=rank, local_rank=rank % 8, world_size=world, state=state,
        steps_total=8_800 + tick * 2, steps_per_s=1 / step, samples_per_s=32 / step,
        step_time_p50_s=step, step_time_p95_s=step * 1.18, data_wait_share=data,
        data_wait_p50_s=step * data, data_wait_p95_s=step * data * 1.6, batches_per_s=1 / step,
        gpu_busy_share=0.93 - data - comm, gpu_busy_source="process",
        phases=tuple(PhaseShare(n, share, step * share) for n, share in phases),
        workers=workers, last_step_age_s=0.2,
        cuda_mem_allocated_bytes=(61_000 + 90 * rank) * MIB, cuda_mem_reserved_bytes=70_000 * MIB,
        job_id=job_id or f"run:tcp://10.0.0.7:29500/{world}", started_at=EPOCH - 3_600,
    )  # fmt: skip


def ddp_job(world: int = 8, tick: int = 0, **kwargs) -> tuple[JobSnapshot, ...]:
    """Every rank of one DDP job on this box."""
    return tuple(ddp_rank(rank, world, tick, **kwargs) for rank in range(world))


TORCH = "/opt/venv/lib/python3.11/site-packages/torch"
TRAIN = "/home/ana/llama/train.py"
WAITING = (
    Frame(TRAIN, 214, "<module>", "main()"),
    Frame(TRAIN, 188, "main", "train(model, loader, args)"),
    Frame(TRAIN, 120, "train", "dist.all_reduce(loss_sum)"),
    Frame(f"{TORCH}/distributed/c10d_logger.py", 83, "wrapper", "return func(*args, **kwargs)"),
    Frame(f"{TORCH}/distributed/distributed_c10d.py", 3252, "all_reduce", "work.wait()"),
)
STUCK = (
    *WAITING[:2],
    Frame(TRAIN, 97, "train", "batch = fetch_shard(bucket, index)"),
    Frame("/home/ana/llama/data.py", 41, "fetch_shard", "blob = client.get_object(key)"),
    Frame("/opt/venv/lib/python3.11/site-packages/botocore/client.py", 569, "_api_call",
          "return self._make_api_call(operation_name, kwargs)"),
    Frame("/usr/lib/python3.11/socket.py", 706, "readinto", "return self._sock.recv_into(b)"),
)  # fmt: skip


def hung_job(waited_s: float = 72.0, world: int = 4, stuck: int = 2) -> tuple[JobSnapshot, ...]:
    """A DDP job hung ``waited_s`` seconds: rank ``stuck`` blocks in a storage read while the
    others wait for it in all_reduce #1042 (their ledgers and stacks say so)."""
    jobs = []
    for job in ddp_job(world, slow=None, name="llama-7b"):
        waiting = job.rank != stuck
        last = Collective("0:default_pg", 1042 if waiting else 1041, "all_reduce",
                          "f32[1]", world, waited_s if waiting else waited_s + 0.4,
                          None if waiting else 0.003, timeout_s=1800.0,
                          site=f"train.py:train:{120}")  # fmt: skip
        stack = RankStack(
            WAITING if waiting else STUCK, 3.0, "helper", "comm" if waiting else "data"
        )
        jobs.append(replace(
            job, state="stalled", steps_per_s=None, samples_per_s=None, batches_per_s=None,
            last_step_age_s=waited_s + 0.5, live_phase="comm" if waiting else "data",
            live_phase_s=waited_s, collectives=(last,), collectives_total=2084 + waiting,
            stack=stack, stall_after_s=10.0, hang_after_s=60.0,
        ))  # fmt: skip
    return tuple(jobs)


def sweep_run(index: int, tick: int = 0, *, state: str = "live", ended_s: float = 0.0):
    """Run ``index`` of a hyper-parameter sweep: one rank, its own job."""
    ended = state in ("finished", "crashed")
    step = (0.2 + index / 100) * (1.0 if ended else _wave(tick, index, 0.96, 1.04))
    job = ddp_rank(0, 1, tick, name=f"sweep{index}", slow=None, state=state,
                   pid=6000 + index, job_id=f"pid:gpu-node-07/{6000 + index}/{index}")  # fmt: skip
    return replace(
        job, steps_total=2_000 + 37 * index, workers=() if ended else job.workers,
        samples_per_s=32 / step, steps_per_s=1 / step, step_time_p50_s=step,
        last_step_age_s=ended_s + 0.2 if ended else 0.2,
        started_at=EPOCH - 600 - 30 * index,
    )  # fmt: skip


def sweep(tick: int = 0) -> tuple[JobSnapshot, ...]:
    """24 runs: 6 still running (one per GPU), 2 that just ended, 16 that ended minutes ago
    (3 of them crashed), listed in collection order so the panel has to sort them."""
    states = {i: ("live", 0.0) for i in range(19, 25)}
    states |= {17: ("finished", 4.0 + tick), 18: ("crashed", 9.0 + tick)}
    states |= {i: ("crashed" if i in (3, 11, 14) else "finished", 60.0 * i) for i in range(1, 17)}
    return tuple(sweep_run(i, tick, state=s, ended_s=age) for i, (s, age) in states.items())


def machine(
    gpus: int = 8,
    *,
    throttling: bool = True,
    cores: int = 32,
    jobs: Sequence[JobSnapshot] = (),
    errors: Sequence[CollectorError] = (),
    tick: int = 0,
    nvml: bool = True,
    lost: Sequence[int] = (),
    job_source: Callable[[int], Sequence[JobSnapshot]] | None = None,
) -> Snapshot:
    """A whole-machine Snapshot; ``lost`` GPU indexes fell off the bus, ``nvml=False`` has none."""
    gpu_list = tuple(
        GpuSnapshot(i, lost=True, error="GPU is lost")
        if i in lost
        else h100(i, tick, throttling=throttling)
        for i in range(gpus if nvml else 0)
    )
    status = (
        GpuStatus(True, None, "590.48.01", "13.1")
        if nvml
        else GpuStatus(False, "NVML library not found")
    )
    procs = processes(gpus if nvml else 0, tick)
    return Snapshot(
        timestamp=EPOCH + tick,
        monotonic=1000.0 + tick,
        interval_s=1.0,
        host=HostInfo("gpu-node-07", 3 * 86400 + 4 * 3600 + 5 * 60 + tick, cores),
        cpu=cpu(cores, tick),
        memory=memory(tick),
        disks=disks(tick),
        nics=nics(tick),
        gpus=gpu_list,
        gpu_status=status,
        processes=procs,
        jobs=tuple(jobs if job_source is None else job_source(tick)),
        errors=tuple(errors),
        process_total=len(procs),  # this scripted box runs only the processes it shows
    )


def series(count: int, **kwargs) -> list[Snapshot]:
    """``count`` consecutive ticks of ``machine(**kwargs)``, so sparklines fill in."""
    return [machine(tick=tick, **kwargs) for tick in range(count)]


async def feed(pilot, source: ScriptedSource, snapshots: Sequence[Snapshot]) -> None:
    """Push snapshots one UI turn apart, so none is coalesced away and every one reaches the
    panels' history (the app drops queued stale frames by design)."""
    for snapshot in snapshots:
        source.push(snapshot)
        await pilot.pause()


class ScriptedSource:
    """Plays snapshots through the SnapshotSource contract, at once or one per ``period_s``."""

    def __init__(
        self, snapshots: Sequence[Snapshot], *, period_s: float | None = None, loop: bool = False
    ) -> None:
        self.snapshots = list(snapshots)
        self.period_s = period_s
        self.loop = loop
        self.interval_s = 1.0
        self.emitted = 0
        self.started = False
        self.stopped = False
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_snapshot: Callable[[Snapshot], None] | None = None

    def start(self, on_snapshot: Callable[[Snapshot], None]) -> None:
        self.started = True
        self._on_snapshot = on_snapshot
        if self.period_s is None:
            for snapshot in self.snapshots:
                self._emit(on_snapshot, snapshot)
            return
        self._thread = threading.Thread(target=self._run, args=(on_snapshot,), daemon=True)
        self._thread.start()

    def _run(self, on_snapshot: Callable[[Snapshot], None]) -> None:
        while not self._stop.is_set():
            for snapshot in self.snapshots:
                if self._stop.wait(self.period_s):
                    return
                self._emit(on_snapshot, snapshot)
            if not self.loop:
                return

    def _emit(self, on_snapshot: Callable[[Snapshot], None], snapshot: Snapshot) -> None:
        self.emitted += 1
        on_snapshot(snapshot)

    def push(self, snapshot: Snapshot) -> None:
        """Emit one more snapshot by hand, as the sampler thread would on its next tick."""
        assert self._on_snapshot is not None, "push() before the app started the source"
        self._emit(self._on_snapshot, snapshot)

    def stop(self) -> None:
        self.stopped = True
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=2)
