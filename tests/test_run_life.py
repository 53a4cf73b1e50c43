"""A run's life on real jobs (issue 34): seen from its first second, kept apart from the run
before it, and ended as it happened, in every surface.

Every job is tests/workloads/lifecycle.py, unchanged, under `traintop run` (CPU, gloo).

``lives``: one recorder (`traintop record`) watches, at once, a job whose first step spends
20 s of busy CPU in ``build_index`` (a compile warm-up), and jobs that end every way a run
ends: it finishes, it raises, Ctrl+C (SIGINT), SIGTERM from `timeout`, SIGKILL,
``sys.exit(3)``, a rank of an ``mp.spawn`` job raises; then (one storm of torch imports at a
time on a small box) a 2-rank torchrun job stopped with SIGTERM (as a
scheduler stops it) while rank 0 writes a checkpoint behind a barrier.  The tests read what the
recorder kept (the monitor's snapshots and verdicts, tick by tick), `traintop jobs [--json]`
and `traintop diagnose --json`, the last two once everything ended and once during the
warm-up.

``port_runs``: three 3-rank torchrun runs in a row on one ``--master_port``: the first finishes,
the second is killed but for its rank 2, stopped with SIGSTOP and still alive, the third runs.

What these assert holds however the CPUs are shared (the suite runs them beside other tests),
but for one thing: a job that computes for its whole life ends "was compute" only when it had
the CPUs it wanted.  Beside eight other jobs on two cores it was rightly ``oversubscribed``, so
that job runs alone, in a ``solo`` test of its own (``computed``).
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.isolation import no_gpu_env
from tests.process_trees import kill_trees
from tests.scenarios.harness import free_port
from tests.snapshot_fixtures import machine
from traintop.collectors.jobs import JobCollector
from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.diagnosis.model import Verdict
from traintop.store.reader import Recording
from traintop.tui.widgets.jobs_table import group_state_cell
from traintop.views.job_groups import job_groups

pytest.importorskip("torch")
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]

ROOT = Path(__file__).resolve().parents[1]
WORKLOAD = str(ROOT / "tests" / "workloads" / "lifecycle.py")
TRAINTOP = [sys.executable, "-m", "traintop.cli.main"]
DEADLINE_S = 420.0
WARM_S = 20.0
# A step spent almost whole in the standard library (threading's wait): a signal lands there
WAITS = ["--steps", "0", "--step-ms", "0", "--wait-ms", "60"]
# name: (the job's arguments, the state it ends in, its ending's kind and detail)
ENDINGS = {
    "life-finish": (["--steps", "150"], "finished", "finished", ""),
    "life-raise": (["--steps", "0", "--raise-at", "40"], "crashed", "raised",
                   "ValueError: bad batch at step 40"),
    "life-sigint": (WAITS, "stopped", "signal", "SIGINT"),
    "life-sigterm": (WAITS, "stopped", "signal", "SIGTERM"),
    "life-sigkill": (["--steps", "0"], "gone", "gone", ""),
    "life-exit": (["--steps", "0", "--exit-at", "40", "--exit-code", "3"], "crashed", "exited",
                  "sys.exit(3)"),
    "life-ckpt": ([], "stopped", "signal", "SIGTERM"),
}  # fmt: skip
# PyTorch's DDP tutorial: 2 ranks from mp.spawn; rank 1 raises, its child exits 1, the
# parent stops rank 0 with SIGTERM (or rank 0's collective raises first: gloo saw it go)
SPAWN = ["--steps", "0", "--spawn", "2", "--raise-at", "40", "--raise-rank", "1"]
CKPT = ["--steps", "0", "--busy-ms", "30", "--save-after-s", "15", "--save-s", "300"]
# 10 s of steps: the verdict shows from its 3 s window on (with --seconds alone, the default 50
# steps made 2 s: two samples said compute on a quiet box, none on a slow one)
COMPUTE = ["--steps", "0", "--seconds", "10", "--busy-ms", "40"]
KILLED_WORDS = r"gone without a word \(killed: SIGKILL|killed \(SIGKILL\), not by the OOM killer"
WARM = ["--steps", "60", "--warm-s", str(WARM_S)]
TIMEOUT_S = "45"  # `timeout` stops life-sigterm this long after it started


@dataclass
class Lives:
    samples: list[tuple[Snapshot, Verdict]]
    jobs: list  # `traintop jobs --json` once every job ended
    table: str  # `traintop jobs`, then
    diagnose: dict  # `traintop diagnose --for 2 --json`, then
    starting: list  # `traintop jobs --json` while life-warm warms up
    starting_table: str

    def ranks(self, name: str) -> Iterator[tuple[Snapshot, Verdict, list[JobSnapshot]]]:
        for snapshot, verdict in self.samples:
            ranks = [j for j in snapshot.jobs if j.name == name]
            if ranks:
                yield snapshot, verdict, ranks

    def job_verdicts(self, name: str) -> list:
        return [v for _s, verdict, _r in self.ranks(name) for v in verdict.per_job
                if v.name == name]  # fmt: skip


def _env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINTOP", "TORCH"))}
    env.update(no_gpu_env(tmp), PYTHONPATH=str(ROOT), OMP_NUM_THREADS="1")
    return env


def _default_sigint() -> None:
    """SIGINT as a terminal delivers it (a suite started in the background ignores it)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def _start(argv: list[str], env: dict, log: Path) -> subprocess.Popen:
    with log.open("w") as out:
        return subprocess.Popen(argv, env=env, stdout=out, stderr=subprocess.STDOUT,
                                start_new_session=True, preexec_fn=_default_sigint)  # fmt: skip


def _run(name: str, args: list[str], env: dict, tmp: Path, prefix: tuple = ()) -> subprocess.Popen:
    argv = [*prefix, *TRAINTOP, "run", "--name", name, "--", sys.executable, WORKLOAD, *args]
    return _start(argv, env, tmp / f"{name}.log")


def _torchrun(name: str, nproc: int, port: int, args: list[str], env: dict,
              log: Path) -> subprocess.Popen:  # fmt: skip
    launcher = [sys.executable, "-m", "torch.distributed.run", "--nnodes=1",
                f"--nproc_per_node={nproc}", f"--master_port={port}"]  # fmt: skip
    argv = [*TRAINTOP, "run", "--name", name, "--", *launcher, WORKLOAD, *args]
    return _start(argv, env, log)


def _clis(env: dict, *commands: list[str]) -> list[str]:
    """Run traintop ``commands`` side by side (they see the same moment); their outputs."""
    pipes = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    running = [subprocess.Popen([*TRAINTOP, *args], env=env, **pipes) for args in commands]
    outputs = []
    for proc in running:
        out, err = proc.communicate(timeout=300)
        assert proc.returncode in (0, 1, 3), err[-2000:]  # 3: no live job (all ended)
        assert out, f"{proc.args}: exit {proc.returncode}, nothing written\n{err[-2000:]}"
        outputs.append(out)
    return outputs


def _kill_all(procs: list[subprocess.Popen], ranks: set[int]) -> None:
    kill_trees({p.pid for p in procs} | ranks)
    for proc in procs:
        proc.wait(timeout=60)


class _Stage:
    """What the fixture watches for, tick by tick, and does once."""

    def __init__(self, procs: dict[str, subprocess.Popen], env: dict) -> None:
        self.procs, self.env = procs, env
        self.done: set[str] = set()
        self.starting: tuple[list, str] | None = None

    def tick(self, jobs: tuple[JobSnapshot, ...]) -> None:
        by_name: dict[str, list[JobSnapshot]] = {}
        for job in jobs:
            by_name.setdefault(job.name, []).append(job)
        for name, sig in (("life-sigint", signal.SIGINT), ("life-sigkill", signal.SIGKILL)):
            if name not in self.done and any(r.steps_total >= 20 for r in by_name.get(name, [])):
                self.procs[name].send_signal(sig)
                self.done.add(name)
        self._warm(by_name.get("life-warm", []))
        self._checkpoint(by_name.get("life-ckpt", []))

    def _warm(self, ranks: list[JobSnapshot]) -> None:
        """In the warm-up (its helper said it is in build_index): ask the one-shot commands."""
        if self.starting is not None or len(ranks) != 1 or ranks[0].state != "starting":
            return
        frames = ranks[0].stack.frames if ranks[0].stack is not None else ()
        if not any(f.function == "build_index" for f in frames):  # still importing torch
            return
        listed, table = _clis(self.env, ["jobs", "--json"], ["jobs"])
        self.starting = (json.loads(listed), table)

    def _checkpoint(self, ranks: list[JobSnapshot]) -> None:
        """Stalled 15 s behind rank 0's checkpoint: stopped, as a scheduler stops a job."""
        stalled = len(ranks) == 2 and all(r.state == "stalled" for r in ranks)
        quiet = min((r.last_step_age_s or 0.0 for r in ranks), default=0.0)
        if "life-ckpt" not in self.done and stalled and quiet >= 15.0:
            self.procs["life-ckpt"].send_signal(signal.SIGTERM)  # torchrun stops its ranks
            self.done.add("life-ckpt")


def _all_ended(jobs: tuple[JobSnapshot, ...]) -> bool:
    return _ended(jobs, {*ENDINGS, "life-warm", "life-spawn"})


def _ended(jobs: tuple[JobSnapshot, ...], names: set[str]) -> bool:
    groups = {g.name: g for g in job_groups(machine(gpus=0, jobs=jobs))}
    return all(n in groups and not groups[n].running for n in names)


@pytest.fixture(scope="module")
def lives(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lives]:
    tmp = tmp_path_factory.mktemp("lives")
    env = _env(tmp)
    recording = tmp / "lives.ttrec"
    recorder = _start([*TRAINTOP, "record", "-o", str(recording), "--interval", "1"], env,
                      tmp / "record.log")  # fmt: skip
    procs = {"life-warm": _run("life-warm", WARM, env, tmp)}
    collector = JobCollector(directory=env["TRAINTOP_RING_DIR"])
    stage, ranks = _Stage(procs, env), set()
    try:
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline:
            time.sleep(0.5)
            jobs = collector.collect()
            ranks |= {j.pid for j in jobs}
            if len(procs) == 1 and stage.starting is not None:  # life-warm in its warm-up:
                _start_endings(procs, env, tmp)  # one storm of torch imports at a time
            if "life-ckpt" not in procs and _ended(jobs, set(ENDINGS) - {"life-ckpt"}):
                log = tmp / "life-ckpt.log"  # then, the single jobs over, the 2-rank job
                procs["life-ckpt"] = _torchrun("life-ckpt", 2, free_port(), CKPT, env, log)
            stage.tick(jobs)
            if len(procs) > 1 and _all_ended(jobs) and stage.starting is not None:
                break
        else:
            pytest.fail(f"the jobs never all ended; logs in {tmp}")
        table, listed, diagnosed = _clis(env, ["jobs"], ["jobs", "--json"],
                                         ["diagnose", "--for", "2", "--json"])  # fmt: skip
        jobs_json, diagnose = json.loads(listed), json.loads(diagnosed)
    finally:
        collector.close()
        recorder.send_signal(signal.SIGTERM)
        recorder.wait(timeout=60)
        _kill_all(list(procs.values()), ranks)
    with Recording(recording) as rec:
        samples = [rec.sample(i) for i in range(len(rec.samples))]
    starting_json, starting_table = stage.starting
    yield Lives([(s, v) for s, v in samples if v is not None], jobs_json, table, diagnose,
                starting_json, starting_table)  # fmt: skip


def _start_endings(procs: dict[str, subprocess.Popen], env: dict, tmp: Path) -> None:
    procs["life-spawn"] = _run("life-spawn", [*SPAWN, "--port", str(free_port())], env, tmp)
    for name, (args, *_expected) in ENDINGS.items():
        if name == "life-ckpt":
            continue
        if name == "life-sigterm":
            procs[name] = _run(name, args, env, tmp, prefix=("timeout", "-s", "TERM", TIMEOUT_S))
        else:
            procs[name] = _run(name, args, env, tmp)


def test_each_ending_is_named_in_jobs_json(lives: Lives) -> None:
    for name, (_args, state, kind, detail) in ENDINGS.items():
        ranks = [r for r in lives.jobs if r["name"] == name]
        assert ranks, name
        assert {r["state"] for r in ranks} == {state}, (name, ranks)
        assert {r["ending"]["kind"] for r in ranks} == {kind}, (name, ranks)
        assert {r["ending"]["detail"] for r in ranks} == {detail}, (name, ranks)
    raised = next(r for r in lives.jobs if r["name"] == "life-raise")["ending"]
    assert raised["frame"][0] == WORKLOAD and raised["frame"][2] == "check_batch"
    assert raised["stack"][-1] == raised["frame"] and raised["stack"][-2][2] == "train"
    assert raised["exit_code"] == 1
    stopped = {r["name"]: r["ending"] for r in lives.jobs if r["ending"]["kind"] == "signal"}
    assert stopped["life-sigint"]["exit_code"] == -signal.SIGINT
    assert stopped["life-sigterm"]["exit_code"] == -signal.SIGTERM
    lines = lives.table.splitlines()
    said = {line.split()[1]: line for line in lines if line.split()[1:2] and "life-" in line}
    # The kernel's word where its log reaches back (root: /dev/kmsg), else the guess's words.
    assert re.search(KILLED_WORDS, lives.table), lives.table
    assert " stopped " in said["life-ckpt"] and " gone " in said["life-sigkill"]
    assert "raised ValueError: bad batch at step 40 in check_batch (lifecycle.py:" in lives.table
    for signal_words in (r"SIGINT \(Ctrl\+C\)", "SIGTERM"):  # stopped inside threading's wait:
        # the user's line is named, not the library's frame the signal landed in
        assert re.search(rf"stopped by {signal_words} in \w+ \(lifecycle\.py:\d+\)", lives.table)


def test_the_monitor_and_diagnose_say_the_same_endings(lives: Lives) -> None:
    snapshot, _verdict = lives.samples[-1]
    cells = {g.name: group_state_cell(g)[0] for g in job_groups(snapshot)}
    badges = {"finished": "✓ finished", "crashed": "✗ crashed", "stopped": "■ stopped",
              "gone": "† gone"}  # fmt: skip
    for name, (_args, state, _kind, _detail) in ENDINGS.items():
        assert cells[name] == badges[state], (name, cells[name])
    per_job = {j["name"]: j for j in lives.diagnose["per_job"]}
    for name, (_args, state, kind, _detail) in ENDINGS.items():
        assert per_job[name]["state"] == state and per_job[name]["ending"]["kind"] == kind, name
    assert per_job["life-sigterm"]["summary"].startswith("stopped by SIGTERM ")
    summary = per_job["life-sigkill"]["summary"]  # "gone by SIGKILL" where the kernel said so
    assert re.match(r"gone (without a word|by SIGKILL) ", summary), summary
    assert per_job["life-raise"]["summary"].startswith("crashed (ValueError) ")
    assert per_job["life-exit"]["summary"].startswith("crashed (status 3) ")


def test_a_failing_exit_and_a_spawned_rank_that_raised_say_so(lives: Lives) -> None:
    assert "exited with status 3 (sys.exit(3)) in give_up (lifecycle.py:" in lives.table
    ranks = {r["rank"]: r for r in lives.jobs if r["name"] == "life-spawn"}
    assert set(ranks) == {0, 1}  # mp.spawn's parent, which only spawned, is no rank
    raised = ranks[1]["ending"]
    assert raised["kind"] == "raised" and raised["detail"] == "ValueError: bad batch at step 40"
    assert raised["frame"][2] == "check_batch" and ranks[1]["state"] == "crashed"
    assert "rank 1 raised ValueError: bad batch at step 40 in check_batch" in lives.table


def test_a_long_first_step_is_starting_with_where_it_is_then_kept(lives: Lives) -> None:
    before = [(s, v, r) for s, v, r in lives.ranks("life-warm") if not r[0].steps_total]
    states = {r[0].state for _s, _v, r in before}
    assert states == {"starting"}, states  # never stalled, never hung: it works
    assert all(v.hang is None for _s, verdict, _r in before for v in verdict.per_job
               if v.name == "life-warm")  # fmt: skip
    said = [v.primary.summary for v in lives.job_verdicts("life-warm") if v.state == "starting"]
    assert any("on CPU in build_index (lifecycle.py:" in text for text in said), said[-3:]
    (rank,) = [r for r in lives.starting if r["name"] == "life-warm"]
    assert rank["state"] == "starting" and rank["first_step_s"] is None
    assert rank["life"].startswith("starting: first step for ") and "build_index" in rank["life"]
    warm_row = next(line for line in lives.starting_table.splitlines() if "life-warm" in line)
    assert " starting " in warm_row and warm_row.rstrip().endswith("…")
    (done,) = [r for r in lives.jobs if r["name"] == "life-warm"]
    assert WARM_S <= done["first_step_s"] < 3 * WARM_S and done["state"] == "finished"
    row = next(line for line in lives.table.splitlines() if "life-warm" in line)
    assert row.rstrip().endswith(" s") and "finished" in row


def _held_longest(lives: Lives, name: str) -> str:
    """The bottleneck shown longest (in samples) for ``name`` while it ran."""
    shown = Counter(v.primary.bottleneck for v in lives.job_verdicts(name) if v.live)
    shown.pop("unknown", None)
    return shown.most_common(1)[0][0]


@pytest.fixture(scope="module")
def computed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lives]:
    """A job that computes for its whole life, alone under a recorder, until it finishes."""
    tmp = tmp_path_factory.mktemp("computed")
    env, recording = _env(tmp), tmp / "computed.ttrec"
    recorder = _start([*TRAINTOP, "record", "-o", str(recording), "--interval", "1"], env,
                      tmp / "record.log")  # fmt: skip
    job = _run("life-compute", COMPUTE, env, tmp)
    try:
        assert job.wait(timeout=DEADLINE_S) == 0, (tmp / "life-compute.log").read_text()[-2000:]
        time.sleep(2.0)  # the recorder's ticks past the end: the ended job's final word
    finally:
        recorder.send_signal(signal.SIGTERM)
        recorder.wait(timeout=60)
        _kill_all([job], set())
    with Recording(recording) as rec:
        samples = [rec.sample(i) for i in range(len(rec.samples))]
    yield Lives([(s, v) for s, v in samples if v is not None], [], "", {}, [], "")


@pytest.mark.solo  # its verdict is the CPU it gets: beside eight other jobs it is oversubscribed
def test_a_job_that_computed_for_its_life_ends_was_compute(computed: Lives) -> None:
    final = computed.job_verdicts("life-compute")[-1]
    assert not final.live and final.state == "finished"
    assert _held_longest(computed, "life-compute") == "compute"
    assert final.primary.bottleneck == "compute"
    assert ": was compute: " in final.primary.summary, final.primary.summary
    assert any(e.metric == "verdict_held_s" for e in final.primary.evidence)


def test_a_checkpoint_behind_a_barrier_then_sigterm_ends_as_what_it_was(lives: Lives) -> None:
    """Stalled behind rank 0's save (said so while it ran), then stopped: its final word is
    what it was for most of its life, with how it ended; not a reading of its last seconds
    ("was network"), not a post-mortem of a barrier it was stopped in ("rank 0 gone")."""
    live = [v for v in lives.job_verdicts("life-ckpt") if v.live and v.hang is not None]
    assert any("save_checkpoint" in v.hang.summary for v in live), [v.hang.summary for v in live]
    final = lives.job_verdicts("life-ckpt")[-1]
    assert final.state == "stopped" and final.hang is None
    assert final.primary.summary.startswith("stopped by SIGTERM "), final.primary.summary
    assert final.primary.bottleneck == _held_longest(lives, "life-ckpt") != "network"
    assert "gone" not in final.primary.summary
    assert final.primary.evidence[0].text.startswith("rank 0 stopped by SIGTERM in ")


@dataclass
class PortRuns:
    jobs: list  # `traintop jobs --json` with the third run stepping
    table: str
    pids: tuple[set[int], set[int], set[int]]  # each run's rank pids
    stopped: int  # the second run's rank 2, stopped with SIGSTOP


def _rank_pids(collector: JobCollector, name: str, seen: set[int]) -> set[int]:
    """The pids of ``name``'s ranks that stepped and that no earlier run had."""
    return {j.pid for j in collector.collect() if j.name == name and j.steps_total
            and j.pid not in seen}  # fmt: skip


def _states(collector: JobCollector, pids: set[int]) -> set[str]:
    """The states ``pids`` read now: the stopped rank reads stalled once it has gone its stall
    limit without a step, which a run started at once after it may beat on a fast box."""
    return {j.state for j in collector.collect() if j.pid in pids}


def _until(check, what: str, timeout_s: float = 240.0):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.5)
    pytest.fail(f"timed out waiting for {what}")


@pytest.fixture(scope="module")
def port_runs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[PortRuns]:
    tmp = tmp_path_factory.mktemp("port")
    env, port = _env(tmp), free_port()
    collector = JobCollector(directory=env["TRAINTOP_RING_DIR"])
    procs, seen = [], set()
    try:
        procs.append(_torchrun("port-job", 3, port, ["--steps", "40"], env, tmp / "1.log"))
        first = _until(lambda: len(p := _rank_pids(collector, "port-job", seen)) == 3 and p,
                       "the first run to step")  # fmt: skip
        assert procs[0].wait(timeout=240) == 0
        seen |= first
        procs.append(_torchrun("port-job", 3, port, ["--steps", "0"], env, tmp / "2.log"))
        second = _until(lambda: len(p := _rank_pids(collector, "port-job", seen)) == 3 and p,
                        "the second run to step")  # fmt: skip
        seen |= second
        stopped = next(j.pid for j in collector.collect() if j.pid in second and j.rank == 2)
        os.kill(stopped, signal.SIGSTOP)
        for pid in (procs[1].pid, *(second - {stopped})):
            os.kill(pid, signal.SIGKILL)  # the agent and two ranks die; rank 2 lives, stopped
        procs[1].wait(timeout=60)
        procs.append(_torchrun("port-job", 3, port, ["--steps", "0"], env, tmp / "3.log"))
        third = _until(lambda: len(p := _rank_pids(collector, "port-job", seen)) == 3 and p,
                       "the third run to step")  # fmt: skip
        settled = {"stalled"}, {"live"}  # the stopped rank, the third run's ranks
        _until(lambda: (_states(collector, {stopped}), _states(collector, third)) == settled,
               "the stopped rank to read stalled")  # fmt: skip
        listed, table = _clis(env, ["jobs", "--json"], ["jobs", "--ranks"])
        jobs = json.loads(listed)
    finally:
        collector.close()
        _kill_all(procs, seen)
    yield PortRuns(jobs, table, (first, second, third), stopped)


def test_runs_back_to_back_on_one_port_are_three_jobs(port_runs: PortRuns) -> None:
    by_pid = {r["pid"]: r for r in port_runs.jobs}
    keys = [{by_pid[pid]["job"] for pid in run} for run in port_runs.pids]
    assert all(len(k) == 1 for k in keys) and len(set.union(*keys)) == 3, keys
    _first, second, third = (next(iter(k)) for k in keys)
    assert {by_pid[p]["state"] for p in port_runs.pids[0]} == {"finished"}
    assert {by_pid[p]["state"] for p in port_runs.pids[2]} == {"live"}
    assert sorted(by_pid[p]["rank"] for p in port_runs.pids[2]) == [0, 1, 2]
    assert sum(r["job"] == third for r in port_runs.jobs) == 3  # 3/3, nothing inherited
    assert by_pid[port_runs.stopped]["job"] == second != third
    assert {by_pid[p]["state"] for p in port_runs.pids[1] - {port_runs.stopped}} == {"gone"}
    job_ids = {by_pid[p]["job_id"] for run in port_runs.pids for p in run}
    assert len(job_ids) == 3 and all("#" in j for j in job_ids)  # each run's own token


def test_the_live_run_is_listed_alone_and_whole(port_runs: PortRuns) -> None:
    rows = [line for line in port_runs.table.splitlines() if "port-job" in line]
    live = next(row for row in rows if " live " in row)
    assert live.split()[2] == "3"  # RANKS: 3, not 5 and not 1/3
    (stopped,) = [r for r in port_runs.jobs if r["pid"] == port_runs.stopped]
    assert stopped["state"] == "stalled"
