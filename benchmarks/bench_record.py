"""Recording size and cost for the issue's load: an hour of 8 GPUs at 1 s, plus one 8-rank job
at 10 steps/s per rank (288 000 step records), on a host of ``--cores`` logical CPUs with 400
processes, 4 NICs and 4 disks.

Snapshots and step records are synthetic but realistic: every reading moves each second with
the resolution its source has (NVML whole percents and MHz, milliwatts; CPU shares from jiffies;
step phases in ns with a few percent of jitter), so the compressor gets no easier data than a
real box gives it.  The hour is written as fast as the recorder takes it; CPU is the recorder
process's own CPU time, scaled to a real-time hour.

Baselines in the same run: the same hour as JSON lines (one `traintop snapshot --json` per
second plus one JSON object per step record) and the CPU that writing those lines costs.

Run: python benchmarks/bench_record.py [--cores 128] [--seconds 3600]
"""

from __future__ import annotations

import argparse
import json
import random
import tempfile
import time
from dataclasses import replace
from pathlib import Path

from traintop import ring_format as ring
from traintop.collectors.export import snapshot_to_dict
from traintop.collectors.rates import measured
from traintop.collectors.ring_header import SegmentHeader
from traintop.collectors.ring_reader import PollResult
from traintop.collectors.ring_records import RecordBlock
from traintop.collectors.snapshot import (
    CpuCore,
    CpuSnapshot,
    DiskSnapshot,
    GpuProcess,
    GpuSnapshot,
    GpuStatus,
    HostInfo,
    JobSnapshot,
    MemorySnapshot,
    NicSnapshot,
    PhaseShare,
    ProcessSnapshot,
    Snapshot,
)  # fmt: skip
from traintop.diagnosis.model import Evidence, Finding, Verdict
from traintop.store.writer import Recorder

GIB, MIB = 2**30, 2**20
RANKS, STEPS_PER_S, GPUS = 8, 10, 8
PHASES = ("data", "forward", "backward", "optimizer", "other")
PHASE_MS = (8.0, 25.0, 50.0, 12.0, 5.0)  # a 100 ms step


def reading(rng: random.Random, low: float, high: float) -> float:
    """A derived reading (a rate, a share, a mean) as collectors make it: to 6 digits."""
    return measured(rng.uniform(low, high))


def gpu(i: int, rng: random.Random) -> GpuSnapshot:
    return GpuSnapshot(
        index=i, name="NVIDIA H100 80GB HBM3", uuid=f"GPU-4c9e3b1a-7d2f-4e8a-9b6c-00000000000{i}",
        pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0", util_gpu_pct=float(rng.randint(85, 100)),
        util_mem_pct=float(rng.randint(30, 60)), mem_total_bytes=81_559 * MIB,
        mem_used_bytes=(71_000 + rng.randint(0, 400)) * MIB, mem_reserved_bytes=479 * MIB,
        mem_free_bytes=(10_000 - rng.randint(0, 400)) * MIB, temp_c=float(rng.randint(55, 70)),
        temp_slowdown_c=89.0, temp_shutdown_c=92.0, temp_max_operating_c=87.0,
        power_w=rng.randint(550_000, 700_000) / 1000, power_limit_w=700.0,
        sm_clock_mhz=rng.choice((1980, 1965, 1950, 1755)), sm_clock_max_mhz=1980,
        mem_clock_mhz=2619, mem_clock_max_mhz=2619, pstate=0,
        clocks_event_reasons=rng.choice((0, 0, 0, 4)), clocks_event_reasons_supported=0x1FF,
        pcie_rx_bytes_per_s=reading(rng, 1e8, 9e8), pcie_tx_bytes_per_s=reading(rng, 1e8, 9e8),
        mig_mode=False, processes=(GpuProcess(5000 + i, (70_000 + rng.randint(0, 400)) * MIB),),
    )  # fmt: skip


def cpu(cores: int, rng: random.Random) -> CpuSnapshot:
    def core(i: int) -> CpuCore:
        busy = rng.randint(0, 100) if i < 48 else rng.choice((0, 0, 1, 2))
        user = min(busy, rng.randint(0, busy + 1))
        return CpuCore(i, float(busy), float(user), float(busy - user), 0.0,
                       float(rng.choice((2000, 2400, 3000, 3700))))  # fmt: skip

    load = rng.randint(20 << 16, 40 << 16) / 65536  # the kernel's fixed point
    return CpuSnapshot(tuple(core(i) for i in range(cores)), core(0),
                       (load, 30.0, 28.0), 2800.0, 3700.0, cores // 2)  # fmt: skip


def processes(rng: random.Random, t: int) -> tuple[ProcessSnapshot, ...]:
    """8 trainers and 24 workers busy every second; 368 daemons, mostly asleep, whose memory
    changes now and then (a real process table, not 400 random rows).  Busy ones wait for a CPU
    a few ms a second, a running total in ns as schedstat gives it."""

    def proc(pid: int) -> ProcessSnapshot:
        trainer, worker = pid < 5008, 5008 <= pid < 5032
        busy = trainer or worker or rng.random() < 0.05
        base_rss = 8 * GIB if trainer else 2 * GIB if worker else (pid % 97 + 3) * MIB
        return ProcessSnapshot(
            pid, 1, "alice" if pid < 5032 else "root", f"proc{pid}",
            f"python train.py --rank {pid - 5000}" if trainer else f"/usr/sbin/daemon{pid}",
            reading(rng, 0, 100) if busy else 0.0,
            base_rss + (rng.randint(0, 4096) * 4096 if busy else 0),
            reading(rng, 0, 5e7) if worker else 0.0, 0.0,
            70_000 * MIB if trainer else None, 64 if trainer else 4,
            5000 + (pid - 5008) % 8 if worker else None,
            cpu_wait_s=(t * (pid % 7 + 1) * 10**6 + rng.randint(0, 10**6)) / 1e9 if busy else None,
        )  # fmt: skip

    return tuple(proc(5000 + i) for i in range(400))


class Recent:
    """Each rank's last 120 step times, as the job window keeps them: 10 new per second."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.times = [[self.one() for _ in range(120)] for _ in range(RANKS)]

    def one(self) -> float:
        return round(self.rng.uniform(0.095, 0.105), 6)

    def tick(self, rank: int) -> tuple[float, ...]:
        self.times[rank] = [*self.times[rank][STEPS_PER_S:], *(self.one() for _ in range(10))]
        return tuple(self.times[rank])


def jobs(rng: random.Random, t: int, recent: Recent) -> tuple[JobSnapshot, ...]:
    def job(rank: int) -> JobSnapshot:
        shares = [reading(rng, ms / 100 * 0.95, ms / 100 * 1.05) for ms in PHASE_MS]
        pairs = zip(PHASES, shares, strict=True)
        phases = tuple(PhaseShare(name, s, measured(s / 10)) for name, s in pairs)
        return JobSnapshot(
            5000 + rank, "llama-7b", rank, rank, RANKS, "live", t * STEPS_PER_S,
            reading(rng, 9.8, 10.2), reading(rng, 310, 330), reading(rng, 0.098, 0.102),
            reading(rng, 0.11, 0.13), shares[0], 0.008, 0.009, 10.0, reading(rng, 0.8, 0.9),
            phases, (), 0,
            reading(rng, 0, 0.1), recent.tick(rank),
            70 * GIB, 72 * GIB, job_id="run:llama/8", started_at=1.75e9,
        )  # fmt: skip

    return tuple(job(r) for r in range(RANKS))


def snapshot(t: int, cores: int, rng: random.Random, recent: Recent) -> Snapshot:
    nics = tuple(NicSnapshot(f"ib{i}", True, 200_000, reading(rng, 1e9, 2e10),
                             reading(rng, 1e9, 2e10), reading(rng, 1e5, 1e6),
                             reading(rng, 1e5, 1e6), 0.0, 0.0,
                             reading(rng, 5, 80)) for i in range(4))  # fmt: skip
    disks = tuple(DiskSnapshot(f"nvme{i}n1", reading(rng, 0, 2e9), reading(rng, 0, 1e8),
                               reading(rng, 0, 9000), reading(rng, 0, 500), reading(rng, 0, 60),
                               reading(rng, 0.1, 2)) for i in range(4))  # fmt: skip
    memory = MemorySnapshot(2048 * GIB, 900 * GIB + rng.randint(0, GIB), 1100 * GIB,
                            300 * GIB, 8 * GIB, 0, 0.0, 0.0)  # fmt: skip
    return Snapshot(1.75e9 + t + rng.uniform(0, 0.002), 1000.0 + t, 1.0,
                    HostInfo("gpu-node-07", 86400.0 + t, cores), cpu(cores, rng), memory, disks,
                    nics, tuple(gpu(i, rng) for i in range(GPUS)),
                    GpuStatus(True, None, "590.48.01", "13.1"), processes(rng, t),
                    jobs(rng, t, recent))  # fmt: skip


def header(rank: int) -> SegmentHeader:
    return SegmentHeader(Path(f"/dev/shm/r{rank}"), "llama-7b", 5000 + rank, 1, 1, b"b" * 16, 1000,
                         rank, rank, RANKS, PHASES, 0, ring.MEM_CUDA_ALLOCATED, 4096, False, rank,
                         10**12, int(1.75e18), "llama", "gpu-node-07")  # fmt: skip


class Steps:
    """Each rank's next second of records, exactly as the probe packs them."""

    def __init__(self, rng: random.Random) -> None:
        self.rng = rng
        self.next = [(0, 10**12 + 10**9)] * RANKS

    def second(self, rank: int) -> bytes:
        step, t0 = self.next[rank]
        out = []
        for i in range(STEPS_PER_S):
            phases = [int(ms * 1e6 * self.rng.uniform(0.97, 1.03)) for ms in PHASE_MS]
            fields = (step + i + 1, step + i, t0, *phases, 0, 0, 0, 256, ring.FLAG_GPU_VALID
                      | ring.FLAG_MEM_VALID, 1, int(sum(phases[1:4]) * 0.9),
                      70 * GIB + self.rng.randint(0, 64) * MIB, 256 * 2048, 0,
                      step + i + 1)  # fmt: skip
            out.append(ring.RECORD.pack(*fields))
            t0 += sum(phases)
        self.next[rank] = (step + STEPS_PER_S, t0)
        return b"".join(out)


def verdict(t: int) -> Verdict:
    finding = Finding("compute", 0.92, "ok", "GPU bound: the GPUs are busy 93 % of each step",
                      (Evidence(f"GPU util {90 + t % 7} % of 8 GPUs", "gpu_util", 93.0, "gpu"),),
                      ("larger batch", "torch.compile"))  # fmt: skip
    return Verdict(finding, (), "attach", 10.0, float(t))


def record_hour(path: Path, seconds: int, cores: int) -> tuple[float, int, int]:
    """Feed the recorder; its CPU seconds, the file size, and the records written."""
    rng, steps = random.Random(7), Steps(random.Random(8))
    headers = [header(r) for r in range(RANKS)]
    recent = Recent(rng)
    samples = [snapshot(t, cores, rng, recent) for t in range(min(seconds, 120))]
    cpu0 = time.process_time()
    recorder = Recorder(path)
    for t in range(seconds):
        for rank, h in enumerate(headers):
            recorder.add_records(h, PollResult(RecordBlock(steps.second(rank), len(PHASES)), 0, 0))
        snap = samples[t % len(samples)]
        recorder.add_sample(replace(snap, timestamp=1.75e9 + t, monotonic=1000.0 + t), verdict(t))
        if t % 200 == 0:
            time.sleep(0.05)  # let the writer thread keep up, as it does at one sample a second
    recorder.stop(timeout_s=600)
    return time.process_time() - cpu0, path.stat().st_size, recorder.records


def json_lines_hour(path: Path, seconds: int, cores: int) -> tuple[float, int]:
    """The baseline: the same hour as JSON lines, and its CPU seconds."""
    rng, steps = random.Random(7), Steps(random.Random(8))
    recent = Recent(rng)
    samples = [snapshot(t, cores, rng, recent) for t in range(min(seconds, 120))]
    cpu0 = time.process_time()
    with path.open("w") as fh:
        for t in range(seconds):
            fh.write(json.dumps(snapshot_to_dict(samples[t % len(samples)])) + "\n")
            for rank in range(RANKS):
                for r in RecordBlock(steps.second(rank), len(PHASES)):
                    fh.write(json.dumps({"rank": rank, **r._asdict()}) + "\n")
    return time.process_time() - cpu0, path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--cores", type=int, default=128)
    parser.add_argument("--seconds", type=int, default=3600)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="e-bench-") as tmp:
        cpu_s, size, records = record_hour(Path(tmp) / "hour.ttrec", args.seconds, args.cores)
        base_cpu, base_size = json_lines_hour(Path(tmp) / "hour.jsonl", args.seconds, args.cores)
    scale = 3600 / args.seconds
    print(f"{args.seconds} s of 8 GPUs, {args.cores} CPUs, 400 processes, {RANKS} ranks x "
          f"{STEPS_PER_S} steps/s ({records} step records)")  # fmt: skip
    print(
        f"recording:   {size * scale / 1e6:6.1f} MB per hour  "
        f"CPU {cpu_s * scale:5.1f} s per hour = {cpu_s / args.seconds * 100:.2f} % of one core"
    )
    print(
        f"JSON lines:  {base_size * scale / 1e6:6.1f} MB per hour  "
        f"CPU {base_cpu * scale:5.1f} s per hour = {base_cpu / args.seconds * 100:.2f} % of a core"
    )
    print(f"ratio: {size / base_size:.3f}x the size, {cpu_s / base_cpu:.2f}x the CPU of JSON lines")


if __name__ == "__main__":
    main()
