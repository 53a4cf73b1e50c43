"""The loop closed (issue 42): what changed between two runs, the gain measured beside A's
prediction, for two recordings' data, for a job restarted under the same name, and the read
limit a disk's cgroup sets (the bound "no gain: storage is at its limit" comes from)."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import pytest

from tests.cgroup_files import write_files
from tests.diagnosis_factories import Scene
from tests.test_cgroup import PID, _proc
from traintop.collectors.cgroup import CgroupReader, parse_read_limits
from traintop.collectors.job_facts import job_facts
from traintop.collectors.snapshot import CpuLimit, JobFacts, LoaderFacts
from traintop.diagnosis.engine import diagnose
from traintop.diagnosis.knob_diff import change_line, changes, settings
from traintop.diagnosis.model import Finding, Gain
from traintop.diagnosis.run_memory import RunMemory
from traintop.store.compare import knob_changes, measured
from traintop.store.run_data import RunData, _add_job


def _facts(workers: int, autocast: str = "off", threads: int = 1) -> JobFacts:
    loader = LoaderFacts(workers, False, workers > 0, 2 if workers else None, 32)
    return JobFacts(device="cpu", autocast=autocast, compiled=False, loaders=(loader,),
                    threads=threads)  # fmt: skip


PREDICTED = Gain("raise DataLoader num_workers from 2 to 4", 1.8, 1.6, 2.0, "compute",
                 steps_per_s=31.0, change="num_workers 2 → 4", knob="num_workers",
                 value=4.0)  # fmt: skip
AUTOCAST = Gain("bf16 autocast on the CPU", reason="a kernel change: not in the budget",
                knob="autocast")  # fmt: skip
A_FINDING = Finding("data_starved", 0.9, "warning", "slow input", (), (PREDICTED.remedy,
                    AUTOCAST.remedy), 0.4, (PREDICTED, AUTOCAST))  # fmt: skip


def _run(facts: JobFacts, rate: float, findings: tuple[Finding, ...] = ()) -> RunData:
    return RunData("x", job="train.py", steps_per_s=rate, samples_per_s=rate * 32, facts=facts,
                   findings=findings)  # fmt: skip


def test_settings_are_what_the_probe_saw_and_the_quota():
    limit = CpuLimit(cpus=2.0, quota_cpus=1.5, cpuset=None)
    seen = settings(_facts(2, "bf16", 4), limit)
    assert seen["num_workers"] == "2" and seen["autocast"] == "bf16" and seen["threads"] == "4"
    assert seen["batch_size"] == "32" and seen["cpu_quota"] == "1.5"
    assert settings(None, None) == {}


def test_compare_names_the_changed_knob_and_the_prediction_beside_the_measured_gain():
    a, b = _run(_facts(2), 31.0, (A_FINDING,)), _run(_facts(4), 53.0)
    (change,) = knob_changes(a, b)
    assert (change.knob, change.before, change.after) == ("num_workers", "2", "4")
    steps, samples = measured(a, b)
    assert change_line(change, steps, samples) == (
        "num_workers 2 → 4: 1.71× steps/s measured, 1.80× predicted "
        "(≈ 1.8× (1.6×–2.0×, 31 → 56 steps/s), then compute-bound)"
    )


def test_a_prediction_for_another_value_says_which():
    a, b = _run(_facts(2), 31.0, (A_FINDING,)), _run(_facts(3), 45.0)
    (change,) = knob_changes(a, b)
    assert "1.80× predicted for num_workers 4 (" in change_line(change, *measured(a, b))


def test_autocast_on_a_cpu_has_no_prediction_and_says_why():
    a, b = _run(_facts(2), 31.0, (A_FINDING,)), _run(_facts(2, "bf16"), 33.0)
    (change,) = knob_changes(a, b)
    assert change_line(change, *measured(a, b)) == (
        "autocast off → bf16: 1.06× steps/s measured, no prediction: a kernel change: not in "
        "the budget"
    )


def test_a_change_a_was_not_told_about_and_several_changes():
    a, b = _run(_facts(2, threads=4), 31.0), _run(_facts(4, threads=1), 40.0)
    found = {c.knob: c for c in knob_changes(a, b)}
    assert set(found) == {"num_workers", "threads"}
    line = change_line(found["threads"], 1.3, None)
    assert line.endswith("A's verdict predicted nothing for this change")


def test_more_torch_threads_on_a_cpu_job_is_a_bound_compare_sets_beside_the_gain():
    """A CPU-bound trainer on one thread of two cores: "up to 2.0×" (how well its step's work
    spreads is not in the budget), the threads knob set, and compare says so beside the gain
    (it said "predicted nothing" of a run that went from 1 to 2 threads)."""
    scene = Scene(gpu_count=0, gpu_busy=None, cpus=2, cpu_busy=50.0, trainer_cpu=99.0,
                  workers=0, data_wait=0.0, facts=_facts(0, threads=1))  # fmt: skip
    found = diagnose(scene.window()).primary
    gain = next(g for g in found.gains if g.knob == "threads")
    assert (gain.speedup, gain.high, gain.value) == (None, pytest.approx(2.0, rel=0.02), 2)
    a, b = _run(_facts(0, threads=1), 18.1, (found,)), _run(_facts(0, threads=2), 25.9)
    (change,) = knob_changes(a, b)
    assert change_line(change, *measured(a, b)) == (
        "threads 1 → 2: 1.43× steps/s measured, up to 2.0× predicted (if its step's work "
        "spreads over 2 threads)"
    )


def test_a_batch_size_change_says_samples_per_second_too():
    before = {"batch_size": "32"}
    (change,) = changes(before, {"batch_size": "64"})
    assert change_line(change, 0.55, 1.1).startswith(
        "batch_size 32 → 64: 0.55× steps/s, 1.10× samples/s measured"
    )


def test_a_short_runs_settings_are_read_from_its_end_when_no_live_tick_read_them():
    """A run of a few seconds can end before a live tick read its facts file; the recorder's
    last tick reads the copy its probe wrote as it closed (a recording of such a run compared
    with nothing changed, once in a fresh-clone suite)."""
    snap = Scene().snapshot(1000.0)
    job = snap.jobs[0]
    run = RunData("x", job=job.name)
    _add_job(replace(snap, jobs=(replace(job, facts=None),)), None, run)
    assert run.facts is None
    _add_job(replace(snap, jobs=(replace(job, state="finished", facts=_facts(2)),)), None, run)
    assert run.facts == _facts(2)
    earlier = replace(job, pid=job.pid + 1, job_id="pid:node/1/0", state="finished",
                      facts=_facts(0))  # a run before  # fmt: skip
    _add_job(replace(snap, jobs=(earlier,)), None, run)
    assert run.facts == _facts(2)  # another run's settings only fill a gap


def test_a_short_runs_close_time_settings_win_over_what_a_live_tick_read_before_its_loader():
    """A live tick read the facts file before the DataLoader was first iterated (no loader);
    the copy written at the close has it (a fresh-clone suite compared a 2-worker run of
    three live ticks with nothing changed)."""
    snap = Scene().snapshot(1000.0)
    job = replace(snap.jobs[0], job_id="pid:node/4242/7")  # each run keyed, as collected
    run = RunData("x", job=job.name)
    _add_job(replace(snap, jobs=(replace(job, facts=replace(_facts(2), loaders=())),)), None, run)
    assert settings(run.facts, None).get("num_workers") is None
    _add_job(replace(snap, jobs=(replace(job, state="finished", facts=_facts(2)),)), None, run)
    assert settings(run.facts, None)["num_workers"] == "2"


def test_the_live_runs_settings_win_over_an_ended_run_of_its_name():
    snap = Scene().snapshot(1000.0)
    job = snap.jobs[0]
    ended = replace(job, pid=job.pid + 1, state="crashed", facts=_facts(0))
    run = RunData("x", job=job.name)
    _add_job(replace(snap, jobs=(ended, replace(job, facts=_facts(2)))), None, run)
    assert run.facts == _facts(2)


def test_a_job_restarted_under_its_name_is_held_against_the_run_before():
    """The first run's live verdict predicted num_workers 2 → 5; it ended; a run of the same
    name with 5 workers then steps faster: the monitor's line says both."""
    slow = Scene(cpus=8, gpu_count=0, gpu_busy=None, workers=2, worker_cpu=8, worker_read=0,
                 trainer_cpu=15, cpu_busy=12, data_wait=0.5, facts=_facts(2))  # fmt: skip
    memory = RunMemory()
    window = slow.window()
    for end in range(3, len(window) + 1):
        assert memory.update(window[end - 1], diagnose(window[:end])) == ()
    faster = slow.but(facts=_facts(5), steps_per_s=7.6, data_wait=0.05)
    restarted = [replace(s, jobs=tuple(replace(j, job_id="run-2") for j in s.jobs))
                 for s in faster.window()]  # fmt: skip
    lines = memory.update(restarted[-1], diagnose(restarted))
    (line,) = lines
    assert line.startswith("train.py, against its run before: num_workers 2 → 5: 1.90× steps/s")
    assert "predicted (≈ " in line


def test_read_limits_of_both_hierarchies():
    assert parse_read_limits("8:0 4000000\n7:3 2000000\n") == [4000000, 2000000]
    assert parse_read_limits("8:0 rbps=4000000 wbps=max riops=max wiops=max") == [4000000]
    assert parse_read_limits("8:0 rbps=max wbps=10\n") == []


def test_the_least_read_limit_up_the_chain(tmp_path: Path):
    root = tmp_path / "cgroup"
    write_files(root, {"blkio/blkio.throttle.read_bps_device": "",
                  "blkio/slow/blkio.throttle.read_bps_device": "7:0 8000000\n",
                  "blkio/slow/job/blkio.throttle.read_bps_device": "7:0 20000000\n"})  # fmt: skip
    reader = CgroupReader(root=root, proc=_proc(tmp_path, "9:blkio:/slow/job\n0::/\n"))
    assert reader.read_limit(PID) == 8e6
    free = CgroupReader(root=root, proc=_proc(tmp_path / "b", "9:blkio:/\n"))
    assert free.read_limit(PID) is None


def test_the_facts_file_carries_torchs_threads():
    assert job_facts({"threads": 4}).threads == 4
    assert job_facts({"threads": "4"}).threads is None
