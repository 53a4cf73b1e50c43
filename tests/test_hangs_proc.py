"""Stopped, blocked and busy ranks, and a DataLoader worker that never returns, on real jobs:
what the kernel says of a stalled rank comes first, and every surface says it the same way.

Four jobs of tests/workloads/hangs.py under `traintop run`, all at once, watched by one
`traintop record` (the monitor's view, tick by tick), with the hang limit lowered to 20 s so
that "never hung" means something within a test (the stall limit keeps its 10 s):

* ``stop`` (2 ranks, ``steady``): the test stops rank 1 with SIGSTOP once it steps, later
  resumes it with SIGCONT; beside it, rank 0, which waits and is not stopped;
* ``spin`` (2 ranks): rank 1 computes in Python for a minute before the step's all-reduce:
  busy, never hung; beside it ``sleep`` (2 ranks), whose rank 1 sleeps there instead: hung;
* ``fifo`` (one process, 2 workers): a worker reads a FIFO nobody writes, the read a dead
  network mount never answers; beside it the other worker, idle in its wait for an index.
  Later the test freezes the reading thread in the cgroup v1 freezer: it is then in state D
  in its read (wchan ``__refrigerator``), real /proc data for the uninterruptible path, where a
  root-only FUSE or NFS trick would otherwise be needed.

`traintop jobs --json` and `traintop diagnose --for 2 --json`, run side by side, must say the
same hang in the same line.  Every process is killed at the end, the freezer group removed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.isolation import no_gpu_env
from tests.snapshot_fixtures import machine
from tests.test_hangs import TORCHRUN, TRAINTOP, WORKLOAD, Observed, _clis, _kill_trees, _start
from traintop.collectors.jobs import JobCollector
from traintop.collectors.proc_state import busy
from traintop.collectors.snapshot import JobSnapshot
from traintop.diagnosis.hang import hang_of
from traintop.diagnosis.job_groups import group_jobs
from traintop.store.reader import Recording

pytest.importorskip("torch")

TWO_RANKS = [*TORCHRUN[:-1], "--nproc_per_node=2"]
HANG_AFTER_S = 20.0
DEADLINE_S = 300.0
SLACK_S = 3.0  # past the stall limit: the 2 s, + a tick of a busy recorder
FREEZER = Path("/sys/fs/cgroup/freezer")
JOBS = {
    "stop": [*TWO_RANKS, WORKLOAD, "--case", "steady", "--steps", "100000"],
    "spin": [*TWO_RANKS, WORKLOAD, "--case", "spin", "--odd", "1", "--steps", "30",
             "--spin-s", "75", "--timeout-s", "240"],
    "sleep": [*TWO_RANKS, WORKLOAD, "--case", "sleep", "--odd", "1", "--steps", "30",
              "--timeout-s", "240"],
}  # fmt: skip


@dataclass
class Seen(Observed):
    """What the monitor saw, the CLIs' answers, and what the test did when."""

    fifo: str = ""
    stopped_pid: int = 0
    frozen_pid: int = 0
    frozen_jobs: list = field(default_factory=list)  # `jobs --json` with the worker frozen
    before_freeze: list = field(default_factory=list)  # and just before
    resumed: bool = False  # the stopped job stepped again after SIGCONT


def _jobs(found: tuple[JobSnapshot, ...]) -> dict[str, list[JobSnapshot]]:
    return {g.name: list(g.ranks) for g in group_jobs(machine(gpus=0, jobs=found))}


def _hang(found: dict, case: str):
    ranks = found.get(f"hang-{case}")
    return hang_of(ranks) if ranks else None


def _settled(found: dict) -> bool:
    """Every stop is past the hang limit (the spin: busy that long), the worker is named."""
    late = [_hang(found, c) for c in ("stop", "spin", "sleep")]
    fifo = _hang(found, "fifo")
    named = fifo is not None and any(p.worker and p.worker.stack for p in fifo.ranks)
    return named and all(h is not None and h.for_s > HANG_AFTER_S + 1 for h in late)


def _freezer(name: str) -> Path | None:
    """A cgroup v1 freezer group of ours, or None where there is no writable hierarchy."""
    group = FREEZER / name
    try:
        group.mkdir(exist_ok=True)
        (group / "freezer.state").read_text()
    except OSError:
        return None
    return group


def _freeze(group: Path, tid: int) -> None:
    """Freeze one thread (``tasks`` moves a thread, ``cgroup.procs`` a whole process)."""
    (group / "tasks").write_text(f"{tid}\n")
    (group / "freezer.state").write_text("FROZEN\n")


def _thaw(group: Path | None) -> None:
    """Thaw the group (a frozen task takes its SIGKILL only when thawed)."""
    if group is not None:
        with contextlib.suppress(OSError):
            (group / "freezer.state").write_text("THAWED\n")


def _remove(group: Path | None) -> None:
    """Remove the group, once the killed tasks have left it."""
    for _ in range(50 if group is not None else 0):
        with contextlib.suppress(OSError):
            group.rmdir()
            return
        time.sleep(0.1)


def _worker_state(found: dict, pid: int) -> str | None:
    ranks = found.get("hang-fifo") or []
    return next((w.proc.state for r in ranks for w in r.workers if w.pid == pid and w.proc), None)


@pytest.fixture(scope="module")
def seen(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Seen]:
    tmp = tmp_path_factory.mktemp("hangs-proc")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINTOP", "TORCH_"))}
    env.update(no_gpu_env(tmp), PYTHONPATH=str(Path(WORKLOAD).parents[2]), OMP_NUM_THREADS="1",
               TRAINTOP_HANG_AFTER=f"20x,{HANG_AFTER_S:g}s")  # fmt: skip
    fifo = tmp / "shard.fifo"
    os.mkfifo(fifo)
    recording = tmp / "proc.ttrec"
    procs = [_start([*TRAINTOP, "record", "-o", str(recording), "--interval", "1"], env,
                    tmp / "record.log")]  # fmt: skip
    jobs = {**JOBS, "fifo": [sys.executable, WORKLOAD, "--case", "fifo", "--steps", "30",
                             "--fifo", str(fifo)]}  # fmt: skip
    for case, argv in jobs.items():
        procs.append(_start([*TRAINTOP, "run", "--name", f"hang-{case}", "--", *argv], env,
                            tmp / f"{case}.log"))  # fmt: skip
    collector = JobCollector(directory=env["TRAINTOP_RING_DIR"])
    group = _freezer(f"traintop-test-{os.getpid()}")
    state = Seen(recording, {}, [], fifo=str(fifo))
    ranks: set[int] = set()
    try:
        _watch(state, collector, env, group, ranks)
    finally:
        collector.close()
        procs[0].send_signal(signal.SIGTERM)
        procs[0].wait(timeout=60)
        _thaw(group)
        _kill_trees(procs[1:], ranks)
        _remove(group)
    with Recording(recording) as rec:
        samples = [rec.sample(i) for i in range(len(rec.samples))]
    state.samples = [(s, v) for s, v in samples if v is not None]
    yield state


def _watch(state: Seen, collector: JobCollector, env: dict, group: Path | None,
           ranks: set[int]) -> None:  # fmt: skip
    """Stop rank 1 of ``stop`` once it steps; at the settled point ask the CLIs; freeze the
    reading worker; resume the stopped rank and see it step again."""
    deadline = time.monotonic() + DEADLINE_S
    step = "stop"
    while time.monotonic() < deadline:
        time.sleep(0.5)
        found = _jobs(collector.collect())
        ranks |= {r.pid for rs in found.values() for r in rs}
        step = _next(step, state, found, env, group)
        if step == "done":
            return
    pytest.fail(f"the cases never settled (at {step!r})")


def _next(step: str, state: Seen, found: dict, env: dict, group: Path | None) -> str:
    """One move of the script; returns the next step."""
    stop = found.get("hang-stop") or []
    if step == "stop" and len(stop) == 2 and all(r.steps_total > 30 for r in stop):
        state.stopped_pid = next(r.pid for r in stop if r.rank == 1)
        os.kill(state.stopped_pid, signal.SIGSTOP)
        return "settle"
    if step == "settle" and _settled(found):
        state.diagnose, state.jobs = _clis([["diagnose", "--for", "2", "--json"],
                                            ["jobs", "--json"]], env)  # fmt: skip
        if group is None:
            return "resume"
        fifo = _hang(found, "fifo")
        state.frozen_pid = next(p.worker.pid for p in fifo.ranks if p.worker)
        (state.before_freeze,) = _clis([["jobs", "--json"]], env)
        _freeze(group, state.frozen_pid)
        return "frozen"
    if step == "frozen" and _worker_state(found, state.frozen_pid) == "D":
        (state.frozen_jobs,) = _clis([["jobs", "--json"]], env)
        return "resume"
    if step == "resume":
        os.kill(state.stopped_pid, signal.SIGCONT)
        return "resumed"
    if step == "resumed" and stop and _hang(found, "stop") is None:
        state.resumed = True
        return "done"
    return step


def _in_time(ranks: list[JobSnapshot], hang) -> None:
    limit = max(r.stall_after_s for r in ranks if r.stall_after_s is not None)
    assert hang.for_s <= limit + SLACK_S, (hang.for_s, limit)


def _hangs(seen: Seen, case: str) -> list:
    return [v.hang for _i, _r, v in seen.verdicts(case) if v.hang is not None]


def _place(hang, rank: int):
    return next(p for p in hang.ranks if p.rank == rank)


def _cli_hang(rows: list, case: str) -> dict:
    return next(r["hang"] for r in rows if r["name"] == f"hang-{case}" and r["hang"])


def _tail(line: str) -> str:
    """A hang line without its head ("HANG 23s · "): the CLIs ran a second apart."""
    return line.split(" · ", 1)[1]


@pytest.mark.slow
def test_a_stopped_rank_is_named_stopped_with_how_to_resume_it(seen: Seen) -> None:
    _, ranks, hang = seen.first_hang("stop")
    _in_time(ranks, hang)
    pid = seen.stopped_pid
    assert hang.kind == "stopped", hang
    assert f"rank 1 stopped (kill -CONT {pid}) · rank 0 waits in " in hang.line, hang.line
    assert f"`kill -CONT {pid}` resumes it" in hang.summary
    assert _place(hang, 1).proc.state == "T"
    waiting = _place(hang, 0)  # beside it: the rank that waits is asleep, not stopped
    assert waiting.proc.state == "S" and "stopped" not in waiting.text
    assert "hung" in {h.level for h in _hangs(seen, "stop")}  # a stopped rank is stuck
    assert seen.resumed  # SIGCONT, as the verdict said, and the job steps again


@pytest.mark.slow
def test_a_rank_burning_its_cpu_is_busy_never_hung_and_a_sleeping_one_is_hung(seen) -> None:
    spins = _hangs(seen, "spin")
    assert {h.level for h in spins} == {"busy"}, {h.level for h in spins}
    assert max(h.for_s for h in spins) > HANG_AFTER_S + 1  # past the hang limit, still busy
    first = spins[0]
    assert first.line.startswith("BUSY ") and "rank 1 on CPU in spin (hangs.py:" in first.line
    assert busy(_place(first, 1).proc)  # runnable half the time at least, however crowded
    sleeps = _hangs(seen, "sleep")  # beside it: the same stop asleep, under the same limits
    assert {h.level for h in sleeps} == {"stalled", "hung"}
    assert "rank 1 in log_metrics (hangs.py:" in sleeps[-1].line
    assert _place(sleeps[-1], 1).proc.state == "S"


@pytest.mark.slow
def test_a_loader_worker_blocked_in_a_read_is_named_with_its_file_and_frame(seen) -> None:
    _, ranks, first = seen.first_hang("fifo")
    _in_time(ranks, first)
    named = next(h for h in _hangs(seen, "fifo") if h.ranks[0].worker and h.ranks[0].worker.stack)
    worker = named.ranks[0].worker
    assert (worker.proc.state, worker.proc.syscall, worker.proc.file) == ("S", "read", seen.fifo)
    functions = {(os.path.basename(f.file), f.function) for f in worker.stack.frames}
    assert {("hangs.py", "read_shard"), ("hangs.py", "__getitem__")} <= functions
    assert f"rank 0 waits on worker {worker.pid} in read_shard" in named.line, named.line
    assert "read shard.fifo" in named.line
    assert f"worker {worker.pid} (asleep in read on {seen.fifo})" in named.summary
    (rank,) = ranks
    idle = [w for w in rank.workers if w.pid != worker.pid]  # beside it: the idle worker
    assert idle and all(w.proc.syscall == "poll" and w.stack is None for w in idle)


@pytest.mark.slow
def test_a_worker_frozen_in_its_read_is_blocked_in_the_kernel(seen: Seen) -> None:
    if not seen.frozen_jobs:
        pytest.skip("no writable cgroup v1 freezer here")
    before = _cli_hang(seen.before_freeze, "fifo")["ranks"][0]["worker"]
    assert before["process"]["state"] == "S"  # asleep in its read: not D
    hang = _cli_hang(seen.frozen_jobs, "fifo")
    worker = hang["ranks"][0]["worker"]
    assert worker["pid"] == seen.frozen_pid
    proc = worker["process"]
    assert (proc["state"], proc["syscall"], proc["file"]) == ("D", "read", seen.fifo)
    assert proc["wchan"] == "__refrigerator"  # what holds it: the freezer, said as it is
    assert f"waits on worker {seen.frozen_pid} in read_shard, D: read shard.fifo" in hang["line"]
    assert "blocked in the kernel (state D) in read on" in hang["summary"]


@pytest.mark.slow
def test_jobs_and_diagnose_say_one_judgement_in_one_line(seen: Seen) -> None:
    """Run side by side, a second apart: the same kind and the same line (but its age)."""
    per_job = {j["name"]: j for j in seen.diagnose["per_job"]}
    for case in ("stop", "spin", "sleep", "fifo"):
        listed = _cli_hang(seen.jobs, case)
        judged = per_job[f"hang-{case}"]["hang"]
        assert (listed["kind"], listed["level"]) == (judged["kind"], judged["level"]), case
        assert _tail(listed["line"]) == _tail(judged["line"]), case
        assert per_job[f"hang-{case}"]["summary"] == judged["line"]  # the JSON summary too
    assert per_job["hang-fifo"]["hang"]["ranks"][0]["worker"]["stack"]  # --for 2 was enough
    assert not [a for j in per_job.values() if j["hang"] for a in j["also"]]  # no echo
