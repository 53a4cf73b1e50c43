"""What one diagnosis costs per tick as jobs grow: one rank, an 8-rank job (with and without
DataLoader workers), 64 ranks, and the ended runs a sweep leaves behind.

On every tick :class:`traintop.diagnosis.verdict_window.VerdictWindow` adds the new snapshot to its
30 s window, and on its cadence (every 2 s; beyond 16 ranks every ``ceil(ranks / 16)`` ticks if that
is longer) judges the whole window again.  This benchmark feeds each case a stream of fresh
snapshots at 1 s ticks, shaped like benchmarks/bench_monitor.py's states (ranks writing 20 steps/s
in five phases, 8 GPUs of which one throttles on heat and one on power, ~500 other processes,
one-rank sweep runs that finished), every rank's numbers moving each tick and ended runs ageing, and
times ``update`` once the window is full: ``tick``, the mean over judged and carried ticks alike.
``diagnose`` is the stateless call on one full window, for comparison. Figures are the median of
``--repeat`` batches in thread CPU time (other work on the box does not inflate it), cases
interleaved so a noisy moment hits all of them.

``--tree DIR`` measures the code in DIR (e.g. ``git archive HEAD | tar -x -C /tmp/old``) in
the same run, one batch of each tree in turn, and prints both side by side.

    python benchmarks/bench_diagnose.py [--repeat 7] [--calls 30] [--tree DIR] [--cases A,B]
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CODE = Path(os.environ.get("BENCH_DIAGNOSE_CODE", ROOT))  # which tree's packages to import
sys.path.insert(0, str(CODE))

from tests.diagnosis_factories import GIB, Scene  # noqa: E402
from traintop.collectors.snapshot import (  # noqa: E402
    GpuProcess,
    JobSnapshot,
    PhaseShare,
    ProcessSnapshot,
    Snapshot,
    WorkerSnapshot,
)
from traintop.diagnosis.engine import diagnose  # noqa: E402
from traintop.diagnosis.verdict_window import VerdictWindow  # noqa: E402

SCENE = Scene(gpu_count=8, workers=0)
OTHERS = 480  # unrelated processes on the host
WINDOW = 31  # snapshots the monitor holds at 1 s ticks (30 s window)
RATE = 20  # steps per second and rank, as benchmarks/ring_load.py writes them
RECENT = 120  # step times a summary keeps (traintop.collectors.job_window.RECENT_STEPS)
PHASES = ("data", "forward", "backward", "optimizer", "other")
THROTTLED = {3: dict(clocks_event_reasons=0x28, temp_c=84.0, sm_clock_mhz=1410),
             5: dict(clocks_event_reasons=0x4, power_w=699.0, sm_clock_mhz=1755)}  # fmt: skip


@dataclass(frozen=True)
class Case:
    """One state of the box."""

    jobs: int  # live jobs ...
    ranks: int  # ... of this many ranks each
    workers: int = 0  # DataLoader workers per rank
    ended: int = 0  # one-rank runs that finished before
    data_wait: float = 0.02  # the share of each step its ranks wait for a batch


CASES = {
    "no job": Case(0, 0),
    "1 rank": Case(1, 1),
    "8 ranks": Case(1, 8),
    "8 ranks x 4 workers": Case(1, 8, workers=4),
    "8 ranks data-bound": Case(1, 8, workers=4, data_wait=0.5),
    "24 ended": Case(0, 0, ended=24),
    "8 ranks + 24 ended": Case(1, 8, ended=24),
    "64 ranks": Case(8, 8),
}


def _noise() -> tuple[ProcessSnapshot, ...]:
    """The host's other processes (the same rows every tick: nothing reads them)."""
    return tuple(
        ProcessSnapshot(9000 + i, 1, "root", "kworker", "", 0.1, 1 << 20, 0.0, 0.0)
        for i in range(OTHERS)
    )


NOISE = _noise()


def _workers(pid: int, case: Case) -> range:
    return range(pid * 10 + 1, pid * 10 + 1 + case.workers)


def _job(pid: int, rank: int, job: int, case: Case, tick: int) -> JobSnapshot:
    """A live rank's summary at ``tick``: 20 steps a second, step times and shares moving."""
    total = RATE * (tick + 10)
    steps = tuple(0.05 * (1 + 0.01 * ((s + rank) % 7)) for s in range(total - RECENT, total))
    wait = case.data_wait + 0.001 * (tick % 3)
    shares = (wait, *(share * (1 - case.data_wait) / 0.98 for share in (0.3, 0.5, 0.1, 0.078)))
    return JobSnapshot(
        pid=pid, name=f"job{job}", rank=rank, local_rank=rank % 8, world_size=case.ranks,
        state="live", steps_total=total, steps_per_s=RATE, samples_per_s=32.0 * RATE,
        step_time_p50_s=0.05, step_time_p95_s=0.055, data_wait_share=shares[0],
        data_wait_p50_s=None, data_wait_p95_s=None, batches_per_s=RATE, gpu_busy_share=None,
        phases=tuple(PhaseShare(n, s, s * 0.05) for n, s in zip(PHASES, shares, strict=True)),
        workers=tuple(WorkerSnapshot(w, 40.0, GIB, 1e5) for w in _workers(pid, case)),
        last_step_age_s=0.01, recent_step_times_s=steps, job_id=f"run:job{job}",
        started_at=1.7e9,
    )  # fmt: skip


def _final(i: int) -> JobSnapshot:
    """The summary a sweep run ended with (finished, or crashed)."""
    done = _job(5000 + i, 0, 100 + i, Case(1, 1), 0)
    state = "crashed" if i % 6 == 0 else "finished"
    return replace(done, state=state, job_id=f"run:sweep{i}")


FINALS = [_final(i) for i in range(64)]


def _ended(i: int, tick: int) -> JobSnapshot:
    """An ended run as the collector reports it on every tick: its kept summary, aged
    (``traintop.collectors.jobs._aged``)."""
    return replace(FINALS[i], last_step_age_s=120.0 + i + tick)


def _ranks(case: Case) -> list[tuple[int, int, int]]:
    """(pid, rank, job) of every live rank; each job's launcher is pid 900 + job."""
    return [(1000 + 8 * j + r, r, j) for j in range(case.jobs) for r in range(case.ranks)]


def _processes(case: Case, tick: int) -> tuple[ProcessSnapshot, ...]:
    rows = [
        ProcessSnapshot(900 + j, 1, "me", "python", "", 0.5, GIB, 0.0, 0.0, None, 2, 900 + j)
        for j in range(case.jobs)
    ]
    for pid, _, job in _ranks(case):
        cpu = 30.0 + (tick + pid) % 4
        rows.append(ProcessSnapshot(pid, 900 + job, "me", "python", "", cpu, GIB, 0.0, 0.0,
                                    None, 24, pid, cpu_wait_pct=1.0))  # fmt: skip
        rows += [
            ProcessSnapshot(w, pid, "me", "pt_data_worker", "", 40.0, GIB, 1e5, 0.0, None, 4, pid)
            for w in _workers(pid, case)
        ]
    return (*rows, *NOISE)


def _gpus(base: Snapshot, tick: int) -> tuple:
    """Eight GPUs held by two processes each (not the ranks: the fake NVML's pids), GPU 3 hot
    and GPU 5 at its power cap, utilisation moving."""
    return tuple(
        replace(
            g,
            util_gpu_pct=90.0 + (tick + g.index) % 5,
            processes=(GpuProcess(41200 + g.index, 50 * GIB), GpuProcess(41300 + g.index, GIB)),
            **THROTTLED.get(g.index, {}),
        )
        for g in base.gpus
    )


def snapshot(case: Case, tick: int) -> Snapshot:
    """The sampler's snapshot at ``tick`` (1 s apart)."""
    base = SCENE.snapshot(1000.0 + tick, tick)
    live = [_job(pid, r, job, case, tick) for pid, r, job in _ranks(case)]
    gone = [_ended(i, tick) for i in range(case.ended)]
    return replace(
        base, gpus=_gpus(base, tick), processes=_processes(case, tick), jobs=(*live, *gone)
    )


def stream(name: str, ticks: int) -> list[Snapshot]:
    """The first ``ticks`` snapshots of case ``name``."""
    return [snapshot(CASES[name], tick) for tick in range(ticks)]


def time_ticks(snaps: list[Snapshot], calls: int) -> float:
    """ms per ``VerdictWindow.update`` once the window is full (the monitor's steady state)."""
    window = VerdictWindow()
    for snap in snaps[:WINDOW]:
        window.update(snap)
    started = time.thread_time()
    for snap in snaps[WINDOW : WINDOW + calls]:
        window.update(snap)
    return (time.thread_time() - started) / calls * 1000


def time_diagnose(snaps: list[Snapshot], calls: int) -> float:
    """ms per stateless ``diagnose`` of one full window."""
    full = snaps[:WINDOW]
    started = time.thread_time()
    for _ in range(calls):
        diagnose(full)
    return (time.thread_time() - started) / calls * 1000


def one_round(streams: dict[str, list[Snapshot]], calls: int) -> dict[str, list[float]]:
    """One batch of each case: ms per tick and per diagnose."""
    return {
        name: [time_ticks(snaps, calls), time_diagnose(snaps, calls)]
        for name, snaps in streams.items()
    }


def serve(calls: int, cases: list[str]) -> int:
    """Child mode: one round per line read, one JSON line back (the parent interleaves trees).
    The streams are frozen out of the garbage collector's sweeps: the monitor does not hold
    them, and sweeping them would charge the diagnosis for the benchmark's own data."""
    streams = {name: stream(name, WINDOW + calls) for name in cases}
    gc.collect()
    gc.freeze()
    for _ in sys.stdin:
        print(json.dumps(one_round(streams, calls)), flush=True)
    return 0


def _child(code: Path, calls: int, cases: list[str]) -> subprocess.Popen:
    env = {**os.environ, "BENCH_DIAGNOSE_CODE": str(code)}
    args = [sys.executable, __file__, "--serve", "--calls", str(calls), "--cases", ",".join(cases)]
    return subprocess.Popen(args, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)


def _ask(child: subprocess.Popen) -> dict[str, list[float]]:
    assert child.stdin is not None and child.stdout is not None
    child.stdin.write("round\n")
    child.stdin.flush()
    return json.loads(child.stdout.readline())


def measure(trees: dict[str, Path], repeat: int, calls: int, cases: list[str]) -> dict[str, dict]:
    """Per tree, per case: the median [tick ms, diagnose ms], trees taking turns."""
    children = {label: _child(code, calls, cases) for label, code in trees.items()}
    rounds: dict[str, list] = {label: [] for label in trees}
    try:
        for _ in range(repeat):
            for label, child in children.items():
                rounds[label].append(_ask(child))
    finally:
        for child in children.values():
            child.stdin.close()  # type: ignore[union-attr]
            child.wait()
    return {label: _medians(got) for label, got in rounds.items()}


def _medians(rounds: list[dict[str, list[float]]]) -> dict[str, tuple[float, float]]:
    names = rounds[0].keys()
    return {
        n: (statistics.median(r[n][0] for r in rounds), statistics.median(r[n][1] for r in rounds))
        for n in names
    }


def report(results: dict[str, dict], cases: list[str]) -> None:
    labels = list(results)
    head = "".join(f"{label + ' tick':>14}{label + ' diag':>14}" for label in labels)
    print(f"{'ms per call':<20}{head}")
    for name in cases:
        cells = "".join(
            f"{tick:14.2f}{diag:14.2f}" for tick, diag in (results[lb][name] for lb in labels)
        )
        print(f"{name:<20}{cells}")


def main() -> int:
    args = argparse.ArgumentParser(description=__doc__)
    args.add_argument("--repeat", type=int, default=7)
    args.add_argument("--calls", type=int, default=30)
    args.add_argument("--tree", type=Path, help="also measure the code in this tree (before)")
    args.add_argument("--cases", default=",".join(CASES), help="comma-separated case names")
    args.add_argument("--serve", action="store_true", help=argparse.SUPPRESS)
    opts = args.parse_args()
    cases = opts.cases.split(",")
    if unknown := set(cases) - set(CASES):
        args.error(f"unknown cases {sorted(unknown)}; known: {', '.join(CASES)}")
    if opts.serve:
        return serve(opts.calls, cases)
    trees = {"before": opts.tree.resolve()} if opts.tree else {}
    report(measure({**trees, "now": ROOT}, opts.repeat, opts.calls, cases), cases)
    return 0


if __name__ == "__main__":
    sys.exit(main())
