"""A memo changes what a diagnosis costs, never what it says.

The stabilizer keeps a :class:`traintop.diagnosis.memo.Memo` from one tick to the next (each
snapshot indexed once, the processes, GPUs and job summaries it averages kept as columns that move
with the window, the verdicts on ended runs); ``diagnose`` without one starts from nothing.  Every
stream here is diagnosed both ways, tick by tick, as the monitor grows and slides its window, and
the verdicts must be equal down to the last bit of every figure.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import replace

import pytest

from tests.diagnosis_factories import Scene
from tests.test_diagnosis_jobs import CPU_BOX, rank, trainer
from tests.test_diagnosis_rules import ATTACH_CASES, NEAR_MISSES, SYSTEM_CASES
from tests.test_diagnosis_scenarios import POSITIVE
from traintop.collectors.snapshot import JobSnapshot, Snapshot
from traintop.diagnosis import job_verdicts
from traintop.diagnosis.api import diagnose
from traintop.diagnosis.memo import Memo

WINDOW = 12  # snapshots in a window: short enough to slide many times along a stream
SCENES = {
    name: scene
    for cases in (ATTACH_CASES, SYSTEM_CASES, NEAR_MISSES, POSITIVE)
    for name, (scene, _) in cases.items()
}


def _windows(stream: Sequence[Snapshot], size: int = WINDOW) -> Iterator[list[Snapshot]]:
    """The windows a monitor holds while ``stream`` arrives: growing, then sliding."""
    for end in range(1, len(stream) + 1):
        yield list(stream[max(0, end - size) : end])


def _assert_same(windows: Iterator[list[Snapshot]], job_pid: int | None = None) -> None:
    memo = Memo()
    for tick, window in enumerate(windows):
        kept = diagnose(window, job_pid=job_pid, memo=memo)
        assert kept == diagnose(window, job_pid=job_pid), f"tick {tick}"


@pytest.mark.parametrize("name", SCENES)
def test_every_rule_case_reads_the_same_through_a_memo(name: str) -> None:
    """The rule tests' scenes, odd ticks alternating, steps revealed tick by tick."""
    _assert_same(_windows(SCENES[name].window(n=30)))


def _runs(tick: int) -> tuple[list[JobSnapshot], dict[int, float]]:
    """Two live 2-rank jobs and a sweep's ended runs, as the collector reports them at
    ``tick``: job A's rank 1 crashes at tick 8, the rest of job A at 14, and A is restarted at
    20; ended runs age (two of them starved for data: a finding the window's length weighs); a
    container's run repeats an ended pid, its numbers moving.  Also the running trainers' CPU."""
    state = "live" if tick < 14 else "crashed" if tick < 20 else "restarted"
    first = "crashed" if tick >= 8 else state
    a = [
        rank(100, 0, job_id="run:a/2", world=2, state=state, age=max(0.1, tick - 14.0)),
        rank(101, 1, job_id="run:a/2", world=2, state=first, wait=0.4, age=max(0.1, tick - 8.0)),
    ]
    b = [rank(200 + r, r, job_id="run:b/2", world=2, wait=0.02 + 0.01 * (tick % 3)) for r in (0, 1)]
    sweep = [rank(300 + i, state="finished", age=60.0 * i + tick, wait=0.3 * i) for i in range(3)]
    repeat = rank(301, state="crashed", age=5.0 + tick, name="other", wait=0.1 * (tick % 3))
    running = [j.pid for j in (*a, *b) if j.state == "live"]
    return [*a, *b, *sweep, repeat], {pid: 80.0 + (tick + pid) % 7 for pid in running}


def _job_stream(ticks: int = 30) -> list[Snapshot]:
    stream = []
    for tick, snap in enumerate(CPU_BOX.window(n=ticks)):
        jobs, cpu = _runs(tick)
        procs = tuple(trainer(pid, c) for pid, c in cpu.items())
        stream.append(replace(snap, jobs=tuple(jobs), processes=procs))
    return stream


def test_ranks_and_runs_that_end_read_the_same_through_a_memo() -> None:
    _assert_same(_windows(_job_stream()))


def test_the_job_asked_for_reads_the_same_through_a_memo() -> None:
    """Focused on a rank that crashes, then on one of a sweep's ended runs."""
    _assert_same(_windows(_job_stream()), job_pid=101)
    _assert_same(_windows(_job_stream()), job_pid=302)


def _lossy(stream: list[Snapshot]) -> list[Snapshot]:
    """GPU 1 lost for ticks 5-8, the trainer's process unseen for ticks 10-12, every process's
    CPU moving."""
    out = []
    for tick, snap in enumerate(stream):
        procs = tuple(replace(p, cpu_pct=(p.cpu_pct or 0.0) + tick % 5) for p in snap.processes)
        gpus = snap.gpus
        if 5 <= tick <= 8:
            gpus = (gpus[0], replace(gpus[1], lost=True))
        out.append(replace(snap, gpus=gpus, processes=procs[1:] if 10 <= tick <= 12 else procs))
    return out


def test_lost_gpus_and_missing_processes_read_the_same_through_a_memo() -> None:
    scene = Scene(gpu_count=2, gpu_util_alt=60.0, gpu_busy=0.5, trainer_cpu=93, reasons=0x4)
    _assert_same(_windows(_lossy(scene.window(n=30))))


def test_windows_that_jump_read_the_same_through_a_memo() -> None:
    """Not only one-snapshot slides: the same window twice, two snapshots at once, a window
    that starts over (the clock went back), one snapshot alone."""
    stream = Scene(step_times=(0.25,) * 40 + (5.0,) * 3, steps_per_tick=4).window(n=30)
    later = Scene(data_wait=0.5).window(n=15, start=10.0)
    windows = [
        stream[:12],
        stream[:12],
        stream[2:14],
        stream[5:15],
        later[:12],
        later[3:],
        [later[0]],
    ]
    _assert_same(iter(windows))


def test_an_ended_run_is_judged_once_while_its_numbers_stay(monkeypatch) -> None:
    """Its age moves on every tick, its verdict is kept; a run whose final numbers change
    (its state, here) is judged again."""
    judged: list[str] = []
    judge = job_verdicts.judge

    def counting(box, group, rules):
        judged.append(group.job_id)
        return judge(box, group, rules)

    monkeypatch.setattr(job_verdicts, "judge", counting)
    final = rank(300, state="finished", job_id="run:sweep1")
    stream = [
        replace(snap, jobs=(replace(final, state=state, last_step_age_s=60.0 + tick),))
        for tick, snap in enumerate(CPU_BOX.window(n=30))
        for state in ["finished" if tick < 20 else "crashed"]
    ]
    memo = Memo()
    for end in range(WINDOW, len(stream) + 1):
        diagnose(stream[end - WINDOW : end], memo=memo)
    assert judged == ["run:sweep1", "run:sweep1"]  # the first window, and once it crashed
