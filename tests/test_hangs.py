"""Hangs on real jobs: every case of issue 25 at once, under `traintop run`, read by one
recorder, `traintop diagnose` and `traintop jobs`, and replayed.

Each case is tests/workloads/hangs.py, unchanged, as a 4-rank torchrun job on gloo (the
DataLoader case as one process).  A hung rank uses no CPU, so all cases start together and one
`traintop record` watches them all; the tests read what it kept (every snapshot and verdict),
so they assert what the live monitor showed, tick by tick.  The checkpoint job (a quarter of
its rate for a while, then a 30 s save on rank 0) is the longest: it starts first, and the
others start once it steps, so its save overlaps their start-up (torch imports slowly: 37
processes import it).  Every process tree is killed at the end; the gloo timeout would end
them anyway.

On gloo a rank that exits, or ranks that reduce different shapes, make their peers fail at
once (NCCL's would wait for the timeout): those two cases end crashed, and the verdict is the
job's post-mortem, read from the ledgers the moment the ranks end.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest

from tests.isolation import no_gpu_env
from tests.process_trees import descendants
from tests.snapshot_fixtures import machine
from traintop.collectors.jobs import JobCollector
from traintop.collectors.snapshot import JobSnapshot
from traintop.diagnosis.hang import hang_of
from traintop.diagnosis.job_groups import group_jobs
from traintop.diagnosis.model import Hang, JobVerdict
from traintop.store.reader import Recording
from traintop.store.replay_source import ReplaySource
from traintop.tui.replay_app import ReplayApp
from traintop.tui.widgets.training import TrainingPanel
from traintop.tui.widgets.verdict import VerdictBanner

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = str(ROOT / "tests" / "workloads" / "hangs.py")
TRAINTOP = [sys.executable, "-m", "traintop.cli.main"]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=4"]
CASES = ("checkpoint", "sleep", "skip", "shapes", "gil", "exit", "ddp")  # 4-rank torchrun jobs
HUNG = ("sleep", "skip", "gil", "ddp", "loader")  # still hung when the fixture ends
ENDED = ("shapes", "exit", "checkpoint")
DEADLINE_S = 300.0
REPLAY_WAIT_S = 60.0  # a replayed sample decoded and shown, however loaded the box
SLACK_S = 3.0  # past the stall limit: the limit + 2 s of the issue, + a tick of a busy recorder


@dataclass
class Observed:
    """What the monitor saw: the recording, `diagnose --json`, `jobs --json`."""

    recording: Path
    diagnose: dict
    jobs: list
    samples: list = field(default_factory=list)  # (snapshot, verdict), in order

    def verdicts(self, case: str) -> Iterator[tuple[int, JobSnapshot, JobVerdict]]:
        """(sample index, a rank, the job's verdict) of ``hang-<case>`` at every sample."""
        for index, (snapshot, verdict) in enumerate(self.samples):
            job = next((v for v in verdict.per_job if v.name == f"hang-{case}"), None)
            ranks = [r for r in snapshot.jobs if r.name == f"hang-{case}"]
            if job is not None and ranks:
                yield index, ranks, job

    def first_hang(self, case: str) -> tuple[int, list, Hang]:
        """The first sample whose verdict on the job is a hang."""
        return next((i, r, v.hang) for i, r, v in self.verdicts(case) if v.hang is not None)

    def last_hang(self, case: str) -> Hang:
        """The last sample's hang (an ended job's: its post-mortem)."""
        return [v.hang for _i, _r, v in self.verdicts(case) if v.hang is not None][-1]


def _start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True)  # fmt: skip


def _kill_trees(procs: list[subprocess.Popen], ranks: set[int]) -> None:
    for pid in descendants({p.pid for p in procs} | ranks):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            continue
    for proc in procs:
        proc.wait(timeout=30)


def _settled(jobs: tuple[JobSnapshot, ...]) -> tuple[bool, bool]:
    """(every hung case is past its stall limit, every ended case ended)."""
    groups = {g.name: g for g in group_jobs(machine(gpus=0, jobs=jobs))}
    stopped = [hang_of(groups[f"hang-{c}"].ranks) if f"hang-{c}" in groups else None for c in HUNG]
    hung = all(h is not None and h.for_s > 10.5 for h in stopped)
    ended = all(f"hang-{c}" in groups and not groups[f"hang-{c}"].live for c in ENDED)
    return hung, ended


def _case(case: str, env: dict, tmp: Path) -> subprocess.Popen:
    """``hang-<case>`` under `traintop run`: a 4-rank torchrun job, the loader case alone."""
    if case == "loader":
        job = [sys.executable, WORKLOAD, "--case", case, "--steps", "30"]
    else:
        job = [*TORCHRUN, WORKLOAD, "--case", case, "--steps", "30", "--timeout-s", "240"]
    case_env = {**env, "TORCH_FR_BUFFER_SIZE": "64"} if case == "sleep" else env
    return _start([*TRAINTOP, "run", "--name", f"hang-{case}", "--", *job], case_env,
                  tmp / f"{case}.log")  # fmt: skip


def _clis(commands: list[list[str]], env: dict) -> list:
    """Run traintop ``commands`` side by side; their JSON outputs."""
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    running = [subprocess.Popen([*TRAINTOP, *args], env=env, **pipes) for args in commands]
    outputs = []
    for proc in running:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode in (0, 1), err[-2000:]
        outputs.append(json.loads(out))
    return outputs


@pytest.fixture(scope="module")
def observed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Observed]:
    tmp = tmp_path_factory.mktemp("hangs")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINTOP", "TORCH_"))}
    env.update(no_gpu_env(tmp), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    recording = tmp / "hangs.ttrec"
    procs = [_start([*TRAINTOP, "record", "-o", str(recording), "--interval", "1"], env,
                    tmp / "record.log")]  # fmt: skip
    procs.append(_case("checkpoint", env, tmp))
    collector = JobCollector(directory=env["TRAINTOP_RING_DIR"])
    ranks: set[int] = set()
    diagnose, jobs = None, None
    try:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            time.sleep(0.5)
            found = collector.collect()
            ranks |= {j.pid for j in found}
            if len(procs) == 2 and len(found) == 4:  # the checkpoint job steps: the rest now
                procs += [_case(case, env, tmp) for case in (*CASES[1:], "loader")]
            hung, ended = _settled(found)
            if hung and diagnose is None:
                diagnose, jobs = _clis([["diagnose", "--for", "2", "--json"], ["jobs", "--json"]],
                                       env)  # fmt: skip
            if hung and ended and diagnose is not None:
                break
        else:
            pytest.fail(f"the cases never settled; logs in {tmp}")
    finally:
        collector.close()
        procs[0].send_signal(signal.SIGTERM)  # the recorder writes its last second and exits
        procs[0].wait(timeout=60)
        _kill_trees(procs[1:], ranks)
    with Recording(recording) as rec:
        samples = [rec.sample(i) for i in range(len(rec.samples))]
    yield Observed(recording, diagnose, jobs, [(s, v) for s, v in samples if v is not None])


def _frame_functions(hang: Hang, rank: int) -> set[tuple[str, str]]:
    place = next(p for p in hang.ranks if p.rank == rank)
    return {(os.path.basename(f.file), f.function) for f in place.frames}


def _in_time(observed: Observed, case: str) -> Hang:
    """The first hang of ``case``, checked to come within the job's stall limit + the issue's
    2 s (+ SLACK_S for a busy box) of the stall (the job's last step), or else at the first
    sample the recorder took past the limit: 30 processes importing torch on 2 cores can hold
    a 1 s recorder back for seconds, and what the verdict owes is the first tick it gets."""
    index, ranks, hang = observed.first_hang(case)
    limit = max(r.stall_after_s for r in ranks if r.stall_after_s is not None)
    before = observed.samples[max(index - 1, 0)][0]
    gap = observed.samples[index][0].monotonic - before.monotonic
    assert hang.for_s <= limit + SLACK_S or hang.for_s - gap < limit, (hang.for_s, gap, limit)
    return hang


@pytest.mark.slow
def test_a_rank_sleeping_before_its_collective_is_named(observed: Observed) -> None:
    hang = _in_time(observed, "sleep")
    assert (hang.level, hang.kind, hang.op, hang.missing, hang.inside) == (
        "stalled", "not_entered", "all_reduce", (2,), (0, 1, 3))  # fmt: skip
    assert ("hangs.py", "log_metrics") in _frame_functions(hang, 2)
    assert "rank 2 is in hangs.py:" in hang.summary and "time.sleep(FOREVER_S)" in hang.summary


@pytest.mark.slow
def test_the_flight_recorder_holds_the_waiting_ranks_collective(observed: Observed) -> None:
    """TORCH_FR_BUFFER_SIZE set for the sleep case: torch 2.13 records gloo groups too, and
    the helper's reply carries what it holds unfinished (read_flight_recorder on real torch)."""
    _, ranks, _hang = observed.first_hang("sleep")
    waiting = [r for r in ranks if r.rank != 2 and r.stack is not None]
    assert waiting and all(r.stack.pending for r in waiting)
    assert {(c.group, c.op) for r in waiting for c in r.stack.pending} == {
        ("0:default_pg", "all_reduce")
    }


@pytest.mark.slow
def test_a_skipped_collective_is_a_desync(observed: Observed) -> None:
    hang = _in_time(observed, "skip")
    assert hang.kind == "desync" and hang.inside == (0, 2, 3) and hang.missing == (1,)
    assert "rank 1 in barrier #31" in hang.summary
    assert ("hangs.py", "train") in _frame_functions(hang, 1)
    assert ("distributed_c10d.py", "barrier") in _frame_functions(hang, 1)


@pytest.mark.slow
def test_ranks_reducing_different_shapes_are_a_desync(observed: Observed) -> None:
    """gloo fails the mismatched reduction at once: the post-mortem names both shapes."""
    index, _ranks, hang = observed.first_hang("shapes")
    assert (hang.level, hang.kind, hang.shapes) == ("crashed", "desync", ("f32[1024]", "f32[2048]"))
    assert "ranks 2-3 in all_reduce #31 (0:default_pg, f32[2048])" in hang.summary
    sites = {p.collective.site for p in hang.ranks if p.collective is not None}
    assert sites == {"hangs.py:log_metrics:96"}  # no stack after a crash: the ledger says where
    ended_at = next(i for i, _r, v in observed.verdicts("shapes") if not v.live)
    assert index <= ended_at  # read the tick the job ended


@pytest.mark.slow
def test_c_code_holding_the_gil_is_found_through_faulthandler(observed: Observed) -> None:
    hang = _in_time(observed, "gil")
    assert hang.kind == "not_entered" and hang.missing == (2,)
    place = next(p for p in hang.ranks if p.rank == 2)
    assert place.stack_source == "signal"
    assert ("hangs.py", "hold_the_gil") in _frame_functions(hang, 2)


@pytest.mark.slow
def test_a_rank_that_exits_is_the_dead_rank(observed: Observed) -> None:
    """gloo: ranks whose ring neighbour left fail at once, the others wait a while longer for
    their own peers (a live dead rank); either way the rank that went first is named."""
    _index, _ranks, hang = observed.first_hang("exit")
    assert hang.kind == "dead_rank" and 3 in hang.missing
    assert hang.summary.startswith("rank 3 gone (finished); "), hang.summary
    assert {p.collective.site for p in hang.ranks if p.rank != 3} == {"hangs.py:log_metrics:96"}
    final = observed.last_hang("exit")
    assert final.level == "crashed" and final.summary.startswith("rank 3 gone (finished); ")


@pytest.mark.slow
def test_a_sleeper_inside_ddps_forward_is_found_despite_the_cpp_all_reduce(observed) -> None:
    hang = _in_time(observed, "ddp")
    assert (hang.kind, hang.group, hang.missing) == ("not_entered", "backward", (1,))
    assert ("hangs.py", "forward") in _frame_functions(hang, 1)
    assert ("distributed.py", "forward") in _frame_functions(hang, 1)  # inside DDP's forward
    assert any("issued from C++" in line for line in hang.evidence)


@pytest.mark.slow
def test_a_dataloader_worker_that_never_returns_is_a_data_hang(observed: Observed) -> None:
    hang = _in_time(observed, "loader")
    assert hang.kind == "no_collective" and hang.inside == ()
    assert ("hangs.py", "train") in _frame_functions(hang, 0)
    assert ("dataloader.py", "__next__") in _frame_functions(hang, 0)


@pytest.mark.slow
def test_a_slow_job_and_a_30_s_checkpoint_never_read_hung(observed: Observed) -> None:
    """A quarter of its rate (no verdict of a stop at all), then rank 0 in torch.save while
    the others wait in a barrier: stalled, never hung, and nothing captured while it stepped."""
    levels = {v.hang.level if v.hang else None for _i, _r, v in observed.verdicts("checkpoint")}
    assert levels == {None, "stalled"}
    hang = _in_time(observed, "checkpoint")
    assert hang.kind == "not_entered" and hang.missing == (0,) and hang.op == "barrier"
    assert ("serialization.py", "save") in _frame_functions(hang, 0)
    assert "inside save (serialization.py) at hangs.py" in hang.summary
    healthy = [r for _i, rs, v in observed.verdicts("checkpoint") if v.hang is None for r in rs]
    stepping = [r for r in healthy if r.steps_total and (r.last_step_age_s or 0) < 5.0]
    assert stepping and all(r.stack is None for r in stepping)  # (a starting rank says where)


@pytest.mark.slow
def test_diagnose_and_jobs_say_it_too(observed: Observed) -> None:
    per_job = {j["name"]: j for j in observed.diagnose["per_job"]}
    kinds = {name[5:]: j["hang"]["kind"] for name, j in per_job.items() if j["hang"]}
    kinds.pop("checkpoint", None)  # stalled or stepping, as the save goes when diagnose runs
    assert kinds == {"sleep": "not_entered", "skip": "desync", "gil": "not_entered",
                     "ddp": "not_entered", "loader": "no_collective", "shapes": "desync",
                     "exit": "dead_rank"}  # fmt: skip
    assert per_job["hang-sleep"]["hang"]["missing"] == [2]
    gil = per_job["hang-gil"]["hang"]  # --for 2 is enough to name the GIL holder's frame
    stuck = next(r for r in gil["ranks"] if r["rank"] == 2)
    assert stuck["stack"] and stuck["stack_source"] == "signal", stuck
    assert "rank 2 in hold_the_gil (hangs.py:" in gil["line"], gil["line"]
    listed = next(r["hang"] for r in observed.jobs if r["name"] == "hang-gil")
    assert listed["line"].split(" · ", 1)[1] == gil["line"].split(" · ", 1)[1]  # one judgement
    sleeping = [r for r in observed.jobs if r["name"] == "hang-sleep"]
    places = {r["rank"]: r["place"] for r in sleeping}
    assert places[2].startswith("not entered (last #30) · hangs.py:89 in log_metrics")
    assert places[0].startswith("in all_reduce #31 for ")


def _cursor_to(panel: TrainingPanel, name: str) -> None:
    """Move the jobs table's cursor to the job ``name`` where the table lists it."""
    names = [getattr(row, "name", None) for row in panel.rows]
    focused = panel.focused
    if name in names and focused is not None and focused.name != name:
        panel.action_move(names.index(name) - names.index(focused.name))


@pytest.mark.slow
def test_replay_shows_the_hung_jobs_and_every_ranks_stack(observed: Observed) -> None:
    """The recording kept the verdicts: replayed, the jobs table says STALLED, the banner
    names the hang, and `d` lists every rank's stack."""
    index = max(i for i, _r, v in observed.verdicts("ddp") if v.hang is not None)

    async def script() -> None:
        with Recording(observed.recording) as rec:
            source = ReplaySource(rec)
            app = ReplayApp(source)
            async with app.run_test(size=(200, 50)) as pilot:
                await pilot.press("space")  # paused
                source.seek_index(_sample_id(rec, observed, index))
                # the source decodes on its own thread: wait for the sample to show, on a
                # loaded box for longer than the 5 s once waited (CI, beside the hang cases);
                # the cursor stays on the job it was on, so a sample shown before the sought
                # one can hold it elsewhere: move it to hang-ddp as ↓/↑ would
                panel = app.query_one(TrainingPanel)
                deadline = time.monotonic() + REPLAY_WAIT_S
                table = ""
                while "▶ hang-ddp" not in table and time.monotonic() < deadline:
                    await pilot.pause(0.05)
                    _cursor_to(panel, "hang-ddp")
                    table = panel.render().plain
                focused = next((ln for ln in table.splitlines() if "▶ hang-ddp" in ln), None)
                assert focused is not None, table
                assert "STALLED" in focused or "HUNG" in focused, table
                assert "not entered: rank 1 never reached backward #31" in table
                assert "not entered (last #30) · hangs.py:52 in" in table
                assert app.query_one(VerdictBanner).render().plain.startswith("◆ HANG")
                await pilot.press("d")
                await pilot.pause(0.3)
                stacks = app.screen.query_one("#details-stacks").render().plain
                assert "rank 0 (pid " in stacks and "line " in stacks

    asyncio.run(script())


def _sample_id(rec: Recording, observed: Observed, index: int) -> int:
    """The recording's position of the ``index``-th sample that had a verdict."""
    with_verdicts = [i for i in range(len(rec.samples)) if rec.sample(i)[1] is not None]
    return with_verdicts[index]
