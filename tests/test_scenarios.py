"""End-to-end bottleneck scenarios: real PyTorch jobs that `traintop diagnose` must explain.

Each test starts a real, bounded training workload under `traintop run` (zero-code probe), waits
for its ring segment, runs `traintop diagnose --for 12 --json` as a subprocess (7 s in the suite:
tests/scenarios/harness.py says why) and checks that the
primary verdict names the bottleneck the workload was built to have, with measured numbers in
its evidence, in time (15 s from the job's start is the target the matrix reports; the suite
allows ``SUITE_SLACK`` times it).  Only `network` adds explicit probe phases.  Every verdict
depends on the CPU time the job gets, so the suite runs these tests ``solo``: one after
another, with the CPUs to themselves.
Setting TRAINTOP_SCENARIO_RESULTS to a file appends one JSON line per scenario (the source of
docs/scenarios.md).
"""

from __future__ import annotations

import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.scenarios.blockdev import ThrottledDisk, throttled_disk, write_dataset
from tests.scenarios.harness import (
    DIAGNOSE_FOR_S,
    DiagnoseRun,
    ScenarioUnavailable,
    Workload,
    describe,
    in_time,
    record,
    run_diagnose,
    running,
    scenario_env,
    start_workload,
    traintop_run,
    wait_for_segments,
)
from tests.scenarios.netns import SlowLink, slow_link

pytestmark = [pytest.mark.solo, pytest.mark.timeout(180)]

VERDICT_DEADLINE_S = 15.0
DATA_FILES = 100
DATA_FILE_BYTES = 4 * 1024 * 1024
READ_BPS = 16 * 1024 * 1024
DDP_PORT = 29517


@pytest.fixture
def slow_disk(tmp_path: Path) -> Iterator[ThrottledDisk]:
    """An ext4 loop device whose reads are capped at READ_BPS for the workload's cgroup."""
    size = DATA_FILES * DATA_FILE_BYTES + 256 * 1024 * 1024
    try:
        with throttled_disk(tmp_path, size, READ_BPS) as disk:
            yield disk
    except ScenarioUnavailable as exc:
        pytest.skip(f"data_io needs a throttled loop device: {exc}")


@pytest.fixture
def link() -> Iterator[SlowLink]:
    """Two network namespaces joined by a 20 Mbit/s veth."""
    try:
        with slow_link("20mbit") as made:
            yield made
    except ScenarioUnavailable as exc:
        pytest.skip(f"network needs network namespaces: {exc}")


def _check(scenario: str, workload: Workload, run: DiagnoseRun) -> None:
    """The scenario contract: expected primary, measured evidence, in time."""
    ttv = record(scenario, workload, run)
    context = f"{describe(run)}\n--- workload log ---\n{workload.log_tail()}"
    assert run.verdict is not None, context
    assert run.bottleneck == scenario, context
    evidence = run.verdict.get("evidence") or []
    assert any(re.search(r"\d", text) for text in evidence), context
    assert in_time(ttv, VERDICT_DEADLINE_S), f"time-to-verdict {ttv} s\n{context}"


def _single(scenario: str, script: str, ring_dir: Path, tmp_path: Path, *args: str) -> None:
    """One workload under `traintop run`, diagnosed as soon as its ring segment appears."""
    env = scenario_env(ring_dir)
    argv = traintop_run(script, *args)
    with running([start_workload(argv, env, tmp_path / f"{scenario}.log")]) as jobs:
        pids = wait_for_segments(ring_dir, 1, jobs)
        _check(scenario, jobs[0], run_diagnose(env, job_pid=next(iter(pids))))


def test_data_cpu(ring_dir: Path, tmp_path: Path) -> None:
    _single("data_cpu", "data_cpu.py", ring_dir, tmp_path)


def test_data_starved(ring_dir: Path, tmp_path: Path) -> None:
    _single("data_starved", "data_starved.py", ring_dir, tmp_path)


def test_data_handoff(ring_dir: Path, tmp_path: Path) -> None:
    """The trainer waits in ``next()`` for batches already made: each tensor comes by a round
    trip to the worker, which answers when it gets its own GIL.  The first remedy shares the
    tensors by name, and no worker count is offered (none shortens the handoff)."""
    env = scenario_env(ring_dir)
    with running([start_workload(traintop_run("data_handoff.py"), env,
                                 tmp_path / "data_handoff.log")]) as jobs:  # fmt: skip
        pids = wait_for_segments(ring_dir, 1, jobs)
        run = run_diagnose(env, job_pid=next(iter(pids)))
        _check("data_handoff", jobs[0], run)
    remedies = run.verdict["remedies"] if run.verdict else []
    assert remedies[0].startswith("torch.multiprocessing.set_sharing_strategy"), describe(run)
    assert not any("num_workers" in r for r in remedies), describe(run)


def test_data_handoff_by_name_is_not_told_to_share_by_name(ring_dir: Path, tmp_path: Path) -> None:
    """The control: the same job sharing its tensors by name (the remedy applied) is never
    told to, whatever its verdict."""
    env = scenario_env(ring_dir)
    argv = traintop_run("data_handoff.py", "--by-name")
    with running([start_workload(argv, env, tmp_path / "by_name.log")]) as jobs:
        pids = wait_for_segments(ring_dir, 1, jobs)
        run = run_diagnose(env, job_pid=next(iter(pids)))
    context = f"{describe(run)}\n--- workload log ---\n{jobs[0].log_tail()}"
    assert run.verdict is not None and run.bottleneck.startswith("data_"), context
    assert not any("sharing_strategy" in r for r in run.verdict["remedies"]), context


def test_compute(ring_dir: Path, tmp_path: Path) -> None:
    _single("compute", "compute.py", ring_dir, tmp_path)


def test_periodic_stall(ring_dir: Path, tmp_path: Path) -> None:
    """Checkpoints go to the real disk under tmp_path, removed afterwards (205 MB each)."""
    ckpt = tmp_path / "checkpoints"
    ckpt.mkdir()
    try:
        _single("periodic_stall", "periodic_stall.py", ring_dir, tmp_path, "--ckpt-dir", str(ckpt))
    finally:
        shutil.rmtree(ckpt)


def test_periodic_evaluation_is_told_from_a_checkpoint(ring_dir: Path, tmp_path: Path) -> None:
    """A validation pass in the loop every 60 steps: a periodic stall whose first remedy, once
    the rank's stacks in the pauses' phase came, is to evaluate less often or elsewhere, not
    to save checkpoints asynchronously (the model called from a second place of the loop)."""
    env = scenario_env(ring_dir)
    argv = traintop_run("periodic_eval.py")
    with running([start_workload(argv, env, tmp_path / "periodic_eval.log")]) as jobs:
        pids = wait_for_segments(ring_dir, 1, jobs)
        run = run_diagnose(env, job_pid=next(iter(pids)), for_s=DIAGNOSE_FOR_S)
    context = f"{describe(run)}\n--- workload log ---\n{jobs[0].log_tail()}"
    assert run.verdict is not None and run.bottleneck == "periodic_stall", context
    assert run.verdict["remedies"][0].startswith("evaluate less often"), context
    assert any("samples)" in text for text in run.verdict["evidence"]), context


def test_data_io(ring_dir: Path, tmp_path: Path, slow_disk: ThrottledDisk) -> None:
    """The workload joins the throttled cgroup before it execs, so its workers inherit it."""
    data = slow_disk.mountpoint / "data"
    write_dataset(data, DATA_FILES, DATA_FILE_BYTES)
    env = scenario_env(ring_dir)
    argv = traintop_run("data_io.py", "--data-dir", str(data), prefix=slow_disk.join_prefix())
    with running([start_workload(argv, env, tmp_path / "data_io.log")]) as jobs:
        pids = wait_for_segments(ring_dir, 1, jobs)
        _check("data_io", jobs[0], run_diagnose(env, job_pid=next(iter(pids))))


def test_oversubscribed(ring_dir: Path, tmp_path: Path) -> None:
    """Three trainers of 4 threads each on two cores; diagnose focuses on the first, and must
    see all three."""
    env = scenario_env(ring_dir)
    argv = traintop_run("oversubscribed.py", "--threads", "4")
    with running([]) as jobs:
        for copy in range(3):
            jobs.append(start_workload(argv, env, tmp_path / f"oversubscribed-{copy}.log"))
        wait_for_segments(ring_dir, 1, jobs)  # the others attach during the window,
        run = run_diagnose(env, job_pid=jobs[0].pid, for_s=DIAGNOSE_FOR_S)  # the whole of it
        _check("oversubscribed", jobs[0], run)
        assert {job["pid"] for job in run.verdict["jobs"]} == {job.pid for job in jobs}


def test_network(ring_dir: Path, tmp_path: Path, link: SlowLink) -> None:
    """Two ranks on two "hosts" (namespaces); diagnose runs on rank 0's host, as a user would."""
    master = link.hosts[0]
    rendezvous = {
        "MASTER_ADDR": master.address,
        "MASTER_PORT": str(DDP_PORT),
        "WORLD_SIZE": "2",
        "GLOO_SOCKET_IFNAME": "eth0",
    }
    with running([]) as jobs:
        for rank, host in enumerate(link.hosts):
            env = scenario_env(ring_dir, RANK=str(rank), LOCAL_RANK="0", **rendezvous)
            argv = traintop_run("ddp_network.py", "--timed-allreduce", prefix=host.exec_prefix())
            jobs.append(start_workload(argv, env, tmp_path / f"network-rank{rank}.log"))
        wait_for_segments(ring_dir, 2, jobs)
        run = run_diagnose(scenario_env(ring_dir), job_pid=jobs[0].pid, prefix=master.exec_prefix())
        _check("network", jobs[0], run)
