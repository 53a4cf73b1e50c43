"""A job is a job, and time is honest: ranks folded per job, several jobs, ended runs.

Windows are the healthy ``Scene`` host with its jobs replaced by hand-made rank summaries, so
each test states exactly which ranks exist, what they spend their steps on and whether they
still run.
"""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

from tests.diagnosis_factories import GIB, Scene
from traintop.collectors.snapshot import (
    Frame,
    JobSnapshot,
    PhaseSamples,
    PhaseShare,
    ProcessSnapshot,
    Snapshot,
    StackSample,
)
from traintop.diagnosis.api import VerdictStabilizer, diagnose, verdict_to_dict
from traintop.diagnosis.job_groups import group_jobs
from traintop.diagnosis.verdict_runner import VerdictRunner

CPU_BOX = Scene(gpu_count=0, cpus=8, cpu_busy=40.0, workers=0)
DDP = "run:tcp://127.0.0.1:29700/2"


BACKLOG = 256 * 1024  # bytes a rank's connections hold unsent while the link is the limit


def rank(
    pid: int,
    r: int = 0,
    *,
    job_id: str = "",
    world: int = 1,
    state: str = "live",
    wait: float = 0.01,
    phases: tuple[tuple[str, float], ...] = (("forward", 0.3), ("backward", 0.6)),
    age: float = 0.1,
    name: str = "train.py",
    queued: int | None = None,
) -> JobSnapshot:
    """One rank's summary: 4 steps/s of 250 ms, ``wait`` of it waiting for data."""
    return JobSnapshot(
        pid=pid,
        name=name,
        rank=r,
        local_rank=r,
        world_size=world,
        state=state,
        steps_total=500,
        steps_per_s=4.0,
        samples_per_s=256.0,
        step_time_p50_s=0.25,
        step_time_p95_s=0.3,
        data_wait_share=wait,
        data_wait_p50_s=None,
        data_wait_p95_s=None,
        batches_per_s=4.0,
        gpu_busy_share=None,
        phases=tuple(PhaseShare(n, s, s * 0.25) for n, s in (("data", wait), *phases)),
        last_step_age_s=age,
        job_id=job_id or f"pid:box/{pid}/1",
        started_at=1.7e9,
        send_queue_bytes=queued,
    )


def trainer(pid: int, cpu: float, threads: int = 4) -> ProcessSnapshot:
    return ProcessSnapshot(
        pid, 1, "me", "python", "python train.py", cpu, GIB, 0.0, 0.0, None, threads, pid
    )


def window(jobs: list[JobSnapshot], cpu: dict[int, float], scene: Scene = CPU_BOX) -> list:
    """``scene``'s 10 s window with exactly ``jobs`` attached and their trainers at ``cpu``."""
    procs = tuple(trainer(pid, c) for pid, c in cpu.items())
    return [_with(s, jobs, procs) for s in scene.window()]


def _with(snap: Snapshot, jobs: list[JobSnapshot], procs: tuple) -> Snapshot:
    return replace(snap, jobs=tuple(jobs), processes=procs)


def ids(verdict) -> list[str]:
    return [verdict.primary.bottleneck, *(f.bottleneck for f in verdict.also)]


def test_straggler_with_slow_input_names_the_rank_and_its_cause() -> None:
    """Rank 1 waits for its batches; rank 0 waits inside backward for rank 1."""
    ranks = [
        rank(100, 0, job_id=DDP, world=2, wait=0.0, phases=(("backward", 0.9),)),
        rank(101, 1, job_id=DDP, world=2, wait=0.85, phases=(("backward", 0.1),)),
    ]
    verdict = diagnose(window(ranks, {100: 8.0, 101: 6.0}))
    assert verdict.primary.bottleneck == "data_starved"
    first = verdict.primary.evidence[0].text
    assert first.startswith("rank 1 (pid 101) is the straggler: data_starved costs it 85 %")
    assert "the other ranks 0 %" in first
    (job,) = verdict.per_job
    assert job.straggler is not None and job.straggler.rank == 1
    assert abs(job.straggler.gap - 0.85) < 1e-9
    assert {r.pid for r in verdict.jobs} == {100, 101}


def test_ranks_waiting_alike_on_communication_are_network_without_a_straggler() -> None:
    """Both ranks wait alike, and their connections hold data they cannot send: the link."""
    comm = (("forward", 0.05), ("allreduce", 0.9))
    ranks = [rank(100 + r, r, job_id=DDP, world=2, phases=comm, queued=BACKLOG) for r in range(2)]
    verdict = diagnose(window(ranks, {100: 5.0, 101: 5.0}))
    assert verdict.primary.bottleneck == "network"
    assert verdict.primary.evidence[-1].text == "holds on ranks 0-1 (2 of 2)"
    assert verdict.per_job[0].straggler is None


def test_ranks_waiting_alike_with_nothing_queued_are_not_network() -> None:
    """The same waits with the connections empty: no data waits on the link (the time in the
    collective alone never makes the network the answer)."""
    comm = (("forward", 0.05), ("allreduce", 0.9))
    ranks = [rank(100 + r, r, job_id=DDP, world=2, phases=comm, queued=0) for r in range(2)]
    assert "network" not in ids(diagnose(window(ranks, {100: 5.0, 101: 5.0})))


def test_rank_that_waits_least_on_its_peers_is_the_straggler() -> None:
    """Rank 1 computes (a slower device) while rank 0 waits 80 % in the collective: not the
    network's fault, and the job's answer is the rank it waits for, with where that rank's own
    time goes (its own finding, healthy compute, follows)."""
    ranks = [
        rank(100, 0, job_id=DDP, world=2, phases=(("forward", 0.15), ("allreduce", 0.8))),
        rank(101, 1, job_id=DDP, world=2, phases=(("forward", 0.9), ("allreduce", 0.05))),
    ]
    verdict = diagnose(window(ranks, {100: 10.0, 101: 100.0}))
    assert ids(verdict) == ["straggler", "compute"]
    texts = [e.text for e in verdict.primary.evidence]
    assert texts[0].startswith("rank 1 (pid 101) is the straggler: it waits on its peers 5 %")
    assert texts[1] == "rank 1: 225 ms a step in forward, on CPU (trainer at 100 % CPU)"
    assert texts[2] == (
        "its own cause: more work than the others (compute); its own work takes 225 ms a step, "
        "the other ranks' 38 ms"
    )
    assert verdict.primary.share == 0.75
    assert verdict.primary.summary.startswith("Rank 1 holds back the job")


THREE = "run:tcp://127.0.0.1:29702/3"


def test_ranks_waiting_on_one_off_cpu_rank_read_straggler() -> None:
    """Issue 28's first case: rank 2 blocks 150 ms in its forward (off the CPU), ranks 0 and 1
    wait for it 97 % of their step.  No rule names rank 2's own cause; the job's answer is
    still rank 2, where its time goes and how to look closer (not "no bottleneck found")."""
    waiting = (("forward", 0.01), ("backward", 0.01), ("comm", 0.97))
    slow = (("forward", 0.92), ("backward", 0.01), ("comm", 0.05))
    ranks = [
        *(rank(600 + r, r, job_id=THREE, world=3, wait=0.005, phases=waiting) for r in range(2)),
        rank(602, 2, job_id=THREE, world=3, wait=0.005, phases=slow),
    ]
    verdict = diagnose(window(ranks, {600: 2.0, 601: 2.0, 602: 3.0}))
    p = verdict.primary
    assert (p.bottleneck, p.share) == ("straggler", pytest.approx(0.92))
    texts = [e.text for e in p.evidence]
    assert texts[:2] == [
        "rank 2 (pid 602) is the straggler: it waits on its peers 5 % of its step, "
        "the other ranks 97 %",
        "rank 2: 230 ms a step in forward, off CPU (trainer at 3 % CPU)",
    ]
    assert texts[2] == (
        "its own cause: none a rule names; its own work takes 232 ms a step, the other ranks' 5 ms"
    )
    assert "py-spy dump --pid 602" in p.remedies[-2]
    assert verdict.per_job[0].straggler.rank == 2


def _off_cpu_straggler(samples: PhaseSamples | None = None) -> list[JobSnapshot]:
    waiting = (("forward", 0.01), ("backward", 0.01), ("comm", 0.97))
    slow = (("forward", 0.92), ("backward", 0.01), ("comm", 0.05))
    ranks = [rank(600 + r, r, job_id=THREE, world=3, wait=0.005, phases=waiting) for r in range(2)]
    slow_rank = rank(602, 2, job_id=THREE, world=3, wait=0.005, phases=slow)
    return [*ranks, replace(slow_rank, phase_samples=samples)]


def test_a_straggler_asks_for_its_stacks_then_shows_where_its_time_goes() -> None:
    """Without samples the job's verdict asks for rank 2's stack in forward (its own dominant
    phase) and says py-spy; once they come, the evidence names the line and py-spy goes."""
    cpu = {600: 2.0, 601: 2.0, 602: 3.0}
    before = diagnose(window(_off_cpu_straggler(), cpu)).per_job[0]
    assert before.sample == (602, "forward")
    sleep = (Frame("/srv/train.py", 40, "train", "model(x)"),
             Frame("/srv/model.py", 12, "forward", "time.sleep(0.15)"))  # fmt: skip
    samples = PhaseSamples("forward", 20, 19, (StackSample(sleep, 19),), age_s=1.0)
    after = diagnose(window(_off_cpu_straggler(samples), cpu)).per_job[0]
    texts = [e.text for e in after.primary.evidence]
    assert "rank 2 in forward (19 samples): 100% model.py:12 in forward: time.sleep(0.15)" in texts
    assert after.sample is None and not any("py-spy" in r for r in after.primary.remedies)
    stale = replace(samples, age_s=60.0)  # samples this old are asked for again
    assert diagnose(window(_off_cpu_straggler(stale), cpu)).per_job[0].sample == (602, "forward")


def test_the_runner_passes_a_wish_for_samples_on_once_per_rank_and_interval() -> None:
    asked: list[tuple[int, str]] = []
    runner = VerdictRunner(sample=lambda pid, phase: asked.append((pid, phase)))
    snaps = window(_off_cpu_straggler(), {600: 2.0, 601: 2.0, 602: 3.0})
    for snap in snaps:
        runner.update(snap)
    assert asked == [(602, "forward")]  # the window spans less than RESAMPLE_S


def test_straggler_holding_peers_back_for_less_than_most_of_their_step_is_named_not_answer() -> (
    None
):
    """Rank 1 waits on its input 60 % of its step, rank 0 waits for it 30 %: not most of its
    step, so rank 1's own cause is the job's answer with the straggler named first; with no
    cause a rule names, the job is unknown, explained, the straggler still named first."""
    ranks = [
        rank(100, 0, job_id=DDP, world=2, wait=0.0, phases=(("backward", 0.7), ("comm", 0.3))),
        rank(101, 1, job_id=DDP, world=2, wait=0.6, phases=(("backward", 0.35), ("comm", 0.05))),
    ]
    verdict = diagnose(window(ranks, {100: 8.0, 101: 6.0}))
    assert ids(verdict) == ["data_starved"]
    assert verdict.primary.evidence[0].text.startswith("rank 1 (pid 101) is the straggler")
    unnamed = [ranks[0], replace(ranks[1], data_wait_share=0.0)]
    verdict = diagnose(window(unnamed, {100: 8.0, 101: 6.0}))
    assert verdict.primary.bottleneck == "unknown"
    assert verdict.primary.evidence[0].text.startswith("rank 1 (pid 101) is the straggler")


def test_one_rank_waiting_a_quarter_while_its_peer_barely_waits_is_not_the_network() -> None:
    """A healthy DDP job on a fast link, ranks out of step on a shared CPU: rank 1 waits 26 %
    in the collective, rank 0 only 8 %; the link cannot cost more than rank 0's wait, so the
    verdict is not network (and there is no straggler: the gap is under 20 points)."""
    ranks = [
        rank(
            100,
            0,
            job_id=DDP,
            world=2,
            phases=(("forward", 0.4), ("backward", 0.5), ("comm", 0.08)),
        ),
        rank(
            101,
            1,
            job_id=DDP,
            world=2,
            phases=(("forward", 0.3), ("backward", 0.4), ("comm", 0.26)),
        ),
    ]
    verdict = diagnose(window(ranks, {100: 95.0, 101: 90.0}))
    assert "network" not in ids(verdict)
    alike = [rank(100 + r, r, job_id=DDP, world=2, phases=(("forward", 0.4), ("comm", 0.26)),
                  queued=BACKLOG) for r in range(2)]  # fmt: skip
    assert diagnose(window(alike, {100: 20.0, 101: 20.0})).primary.bottleneck == "network"


def test_ended_runs_never_decide_the_live_verdict() -> None:
    """Crashed and finished runs of a starved loader beside a healthy live job."""
    live = rank(200, wait=0.002, phases=(("forward", 0.5), ("backward", 0.49)))
    dead = [
        rank(300, state="crashed", wait=0.94, age=120.0, name="old.py"),
        rank(301, state="finished", wait=0.93, age=300.0, name="older.py"),
    ]
    verdict = diagnose(window([live, *dead], {200: 395.0}))
    assert verdict.primary.bottleneck == "compute"
    assert [j.pid for j in verdict.jobs] == [200]
    assert all("94 %" not in e.text for e in verdict.primary.evidence)
    data = verdict_to_dict(verdict)
    assert [j["pid"] for j in data["jobs"]] == [200] and data["live_jobs"] == 1
    assert [j["state"] for j in data["per_job"]] == ["live", "crashed", "finished"]
    crashed = data["per_job"][1]
    end = time.strftime("%H:%M", time.localtime(1.7e9 + 1010.0 - 120.0))
    assert crashed["summary"].startswith(f"crashed {end}: was data_starved")
    assert crashed["summary"].endswith(
        "(from its step records alone: its processes were not seen running)"
    )
    assert crashed["ended_at"] == 1.7e9 + 1010.0 - 120.0


def test_no_live_job_says_so_with_the_newest_final_word() -> None:
    dead = [rank(300, state="crashed", wait=0.94, age=60.0, name="old.py")]
    verdict = diagnose(window(dead, {}))
    assert verdict.primary.bottleneck == "unknown" and verdict.idle_box
    assert verdict.jobs == () and verdict.live_jobs == 0
    assert verdict.primary.summary.startswith("no live training job; old.py crashed ")
    assert "was data_starved" in verdict.primary.summary


def test_no_job_at_all_is_not_collecting_data() -> None:
    verdict = diagnose(window([], {}))
    assert verdict.primary.summary == "no live training job"


def test_several_jobs_each_get_a_verdict_worst_first() -> None:
    healthy = rank(200, wait=0.002, phases=(("forward", 0.99),))
    starved = rank(400, wait=0.7, phases=(("forward", 0.3),), name="starved.py")
    verdict = diagnose(window([healthy, starved], {200: 395.0, 400: 5.0}))
    assert [j.primary.bottleneck for j in verdict.per_job] == ["data_starved", "compute"]
    assert verdict.primary.bottleneck == "data_starved" and verdict.job_id == "pid:box/400/1"
    assert [j.job_id for j in verdict.other_jobs] == ["pid:box/200/1"]
    assert [j.pid for j in verdict.jobs] == [400]


def test_job_pid_picks_the_job_even_when_another_is_worse() -> None:
    healthy = rank(200, wait=0.002, phases=(("forward", 0.99),))
    starved = rank(400, wait=0.7, phases=(("forward", 0.3),))
    verdict = diagnose(window([healthy, starved], {200: 395.0, 400: 5.0}), job_pid=200)
    assert verdict.primary.bottleneck == "compute" and [j.pid for j in verdict.jobs] == [200]


def test_unknown_says_where_steps_go_and_what_was_ruled_out() -> None:
    """Eight ranks that spend their steps off-CPU in backward: no rule, but an explanation."""
    job = "run:tcp://127.0.0.1:29701/8"
    phases = (("forward", 0.2), ("backward", 0.7))
    ranks = [rank(500 + r, r, job_id=job, world=8, wait=0.01, phases=phases) for r in range(8)]
    w = window(ranks, {500 + r: 30.0 for r in range(8)})
    verdict = diagnose(w)
    p = verdict.primary
    assert p.bottleneck == "unknown"
    assert p.summary.startswith("no bottleneck found: steps spend 70 % in backward (175 ms)")
    assert "off CPU (trainer at 30 % CPU)" in p.summary
    texts = [e.text for e in p.evidence]
    assert "data wait 1 % (< 20 %)" in texts and "CPU 40 % busy of 8" in texts
    queued = [replace(s, processes=(replace(trainer(500, 30.0), cpu_wait_pct=4.0),)) for s in w]
    cpu = [e.text for e in diagnose(queued).primary.evidence if e.metric == "cpu_busy_pct"]
    assert cpu == ["CPU 40 % busy of 8, trainer queued for a CPU 4 %"]
    assert "GPU (none in use)" in texts and "storage (job reads 0 B/s)" in texts
    assert any(t.startswith("network (no collective timed") for t in texts)
    assert len(verdict.jobs) == 8 and verdict.per_job[0].ranks[7].rank == 7


def test_trainer_barely_running_while_its_threads_queue_is_not_compute() -> None:
    """At load 25 the off-CPU ranks ran 2 % while their threads queued 88 % (summed over
    gloo's threads, woken at every message): waiting, not computing."""
    job = "run:tcp://127.0.0.1:29701/8"
    phases = (("forward", 0.2), ("backward", 0.7))
    ranks = [rank(500 + r, r, job_id=job, world=8, wait=0.01, phases=phases) for r in range(8)]
    queued = {500 + r: replace(trainer(500 + r, 2.0), cpu_wait_pct=88.0) for r in range(8)}
    w = [_with(s, ranks, tuple(queued.values())) for s in CPU_BOX.window()]
    assert diagnose(w).primary.bottleneck == "unknown"


def test_a_live_run_and_an_ended_run_on_the_same_rendezvous_stay_apart() -> None:
    old = [rank(600 + r, r, job_id=DDP, world=2, state="crashed", wait=0.9) for r in range(2)]
    new = [
        rank(700 + r, r, job_id=DDP, world=2, wait=0.0, phases=(("forward", 0.99),))
        for r in range(2)
    ]
    verdict = diagnose(window([*old, *new], {700: 395.0, 701: 395.0}))
    assert verdict.primary.bottleneck == "compute"
    assert {j.pid for j in verdict.jobs} == {700, 701}
    assert [j.live for j in verdict.per_job] == [True, False]


def test_ended_job_keeps_the_verdict_shown_while_it_ran() -> None:
    """Host evidence (busy workers) named data_cpu while it ran; after the crash the ring
    numbers alone would say data_starved, but the final word is what was shown."""
    scene = Scene(data_wait=0.6, worker_cpu=98)
    stab = VerdictStabilizer()
    live = stab.update(scene.window())
    assert live.primary.bottleneck == "data_cpu"
    crashed = scene.but(state="crashed", last_step_age=5.0, workers=0)
    later = stab.update(crashed.window(start=1011.0))
    (job,) = later.per_job
    assert not job.live and job.primary.bottleneck == "data_cpu"
    assert job.primary.summary.startswith("crashed ") and ": was data_cpu: " in job.primary.summary
    assert "step records alone" not in job.primary.summary  # it was seen running
    assert later.jobs == () and later.live_jobs == 0


def test_the_banner_job_does_not_alternate_between_two_close_jobs() -> None:
    """Two starved jobs losing 50 % and 45 % in turns: the verdict stays on the first one
    (a challenger must win for 3 s in a row), and each job's own verdict is kept."""
    stab = VerdictStabilizer()
    shown = []
    for tick in range(12):
        waits = (0.5, 0.45) if tick % 2 == 0 else (0.45, 0.5)
        jobs = [rank(800, wait=waits[0], name="a.py"), rank(900, wait=waits[1], name="b.py")]
        snaps = window(jobs, {800: 5.0, 900: 5.0})
        moved = [replace(s, monotonic=s.monotonic + tick) for s in snaps]
        verdict = stab.update(moved)
        shown.append(verdict.job_id)
        assert [j.primary.bottleneck for j in verdict.per_job] == ["data_starved"] * 2
    assert set(shown) == {"pid:box/800/1"}


def test_a_stalled_job_with_no_ledger_says_which_phase_it_hangs_in() -> None:
    """A ring of an older traintop (no collective ledger): stalled past its limit, the verdict
    is a hang of unknown kind that still names the phase each rank is in."""
    hung = replace(rank(100, state="stalled", age=43.0), live_phase="backward", live_phase_s=42.5)
    verdict = diagnose(window([hung], {100: 0.5}))
    assert verdict.primary.bottleneck == "hang" and verdict.live_jobs == 1
    assert verdict.per_job[0].hang.kind == "unknown"
    assert verdict.primary.summary == "HANG 43s · rank 0 in backward for 42s"
    case = verdict.primary.evidence[0].text
    assert case.startswith("Job stalled 43s: no collective ledger")
    assert "rank 0 in backward for 42s" in case


def test_a_box_wide_finding_is_about_every_live_job() -> None:
    """Host swapping slows every job on the box: the verdict lists all of their ranks."""
    swapping = CPU_BOX.but(swap_bytes_per_s=80e6)
    jobs = [rank(200, wait=0.002), rank(400, wait=0.002), rank(300, state="crashed")]
    verdict = diagnose(window(jobs, {200: 395.0, 400: 395.0}, swapping))
    assert verdict.primary.bottleneck == "host_memory"
    assert sorted(j.pid for j in verdict.jobs) == [200, 400]
    assert [j.primary.bottleneck for j in verdict.per_job[:2]] == ["host_memory", "host_memory"]


def test_ended_segments_that_repeat_a_rank_are_separate_runs() -> None:
    """Two earlier crashed runs on one rendezvous (each rank 0 and 1), and one rank of a hung
    job that crashed while the other is stalled: the hung job is live (stalled), not ended."""
    old = [
        replace(rank(600 + i, i % 2, job_id=DDP, world=2, state="crashed"), started_at=t)
        for i, t in enumerate((100.0, 101.0, 500.0, 501.0))
    ]
    hung = [
        rank(700, 0, job_id="run:x/2", world=2, state="stalled"),
        rank(701, 1, job_id="run:x/2", world=2, state="crashed"),
    ]
    groups = group_jobs(window([*old, *hung], {})[-1])
    assert [(g.state, sorted(g.pids)) for g in groups] == [
        ("stalled", [700, 701]),
        ("crashed", [600, 601]),
        ("crashed", [602, 603]),
    ]


def test_an_ended_runs_end_time_holds_still_from_tick_to_tick() -> None:
    """The end is a wall-clock stamp less an age from the monotonic clock, read milliseconds
    apart: it must not move with that jitter, or every tick remakes each ended run's verdict."""
    last = window([rank(300, state="finished", age=120.0)], {})[-1]
    ends = set()
    for tick, jitter in enumerate((0.0, 0.0031, -0.0042, 0.0007)):
        snap = replace(last, timestamp=last.timestamp + tick + jitter)
        (job,) = snap.jobs
        moved = replace(snap, jobs=(replace(job, last_step_age_s=120.0 + tick),))
        (group,) = group_jobs(moved)
        ends.add(group.ended_at)
    assert ends == {round(last.timestamp - 120.0, 1)}
