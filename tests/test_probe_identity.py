"""Rank identity and job names: traintop.dist_identity, dist_hooks, job_names, and the header
rewrite when a process group comes after the segment (traintop/ring.py, collectors/)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from tests.isolation import private_dir
from tests.ring_helpers import without_token
from tests.scenarios.harness import kill_tree
from traintop import dist_identity, job_names
from traintop.collectors.jobs import JobCollector
from traintop.collectors.ring_reader import discover, open_segment
from traintop.dist_identity import Identity, rendezvous
from traintop.ring import RingWriter

RUN_LIMIT_S = 240.0  # a whole `traintop run` of a test workload, as in test_loop_styles
LAUNCH_ENV = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR",
              "MASTER_PORT", "TORCHELASTIC_RUN_ID")  # fmt: skip


@pytest.fixture(autouse=True)
def _no_launcher(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in LAUNCH_ENV:
        monkeypatch.delenv(name, raising=False)


def test_rendezvous_prefers_the_run_id_then_the_shared_address(monkeypatch) -> None:
    class Store:
        host, port = "10.0.0.7", 29500

    assert rendezvous("tcp://h:1?rank=1&world_size=2", None) == "tcp://h:1"  # rank differs
    assert rendezvous("file:///tmp/rdzv", None) == "file:///tmp/rdzv"
    assert rendezvous(None, Store()) == "tcp://10.0.0.7:29500"
    assert rendezvous("env://", None) == ""
    monkeypatch.setenv("MASTER_ADDR", "node1")
    monkeypatch.setenv("MASTER_PORT", "29400")
    assert rendezvous("env://", None) == rendezvous(None, None) == "tcp://node1:29400"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "none")  # torchrun's default: shared by all jobs
    assert rendezvous(None, None) == "tcp://node1:29400"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "llama-pretrain")
    assert rendezvous("tcp://h:1", Store()) == "llama-pretrain"


def test_environment_guess_for_lightning_children(monkeypatch) -> None:
    assert dist_identity.from_env() == Identity(0, 0, 1, "")
    monkeypatch.setenv("LOCAL_RANK", "1")  # Lightning's launcher: no RANK
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert dist_identity.from_env() == Identity(1, 1, 2, "")


def test_local_rank_from_launcher_or_spawn_index(monkeypatch) -> None:
    assert dist_identity.local_rank(5) == 5  # one host, nothing else known
    namespace = {"__name__": "torch.multiprocessing.spawn", "local_rank": dist_identity.local_rank}
    exec("def _wrap(fn, i, args, error_file):\n    return fn(*args)", namespace)
    assert namespace["_wrap"](namespace["local_rank"], 1, (9,), None) == 1  # node 1 of 8 x 8
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "4")
    assert dist_identity.local_rank(6) == 2
    monkeypatch.setenv("LOCAL_RANK", "3")
    assert dist_identity.local_rank(6) == 3


def test_generic_scripts_are_named_after_their_folder(monkeypatch, tmp_path: Path) -> None:
    assert job_names.script_name("/x/examples/word_language_model/main.py") == (
        "word_language_model/main"
    )
    assert job_names.script_name("/x/gpt2/train.py") == "gpt2/train"
    assert job_names.script_name("finetune_llama.py") == "finetune_llama"
    assert job_names.launcher_run_name() is None
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "2f1e7c3a-9d1b-4c8e-a1f0-6b2d9e4c7a11")
    assert job_names.launcher_run_name() is None  # torchrun --standalone: random
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "llama-7b-sft")
    assert job_names.launcher_run_name() == "llama-7b-sft"


def test_header_rewrite_is_followed_by_a_running_collector(tmp_path: Path) -> None:
    ring = private_dir(tmp_path / "ring")
    writer = RingWriter.create(name="late", phases=("data", "other"), directory=str(ring))
    writer.record(0, time.monotonic_ns(), (1, 2), 8)
    collector = JobCollector(directory=str(ring))
    try:
        (before,) = collector.collect()
        writer.rewrite_identity(Identity(3, 1, 4, "tcp://10.1.1.1:29500"))
        writer.record(1, time.monotonic_ns(), (1, 2), 8)
        (after,) = collector.collect()
    finally:
        collector.close()
        writer.close()
    assert (before.rank, before.world_size, before.job_id.startswith("pid:")) == (0, 1, True)
    assert (after.rank, after.local_rank, after.world_size) == (3, 1, 4)
    assert after.job_id == "run:tcp://10.1.1.1:29500/4" and after.steps_total == 2
    with open_segment(discover(ring)[0]) as fresh:  # crc valid for a reader opening it now
        assert (fresh.header.rank, fresh.header.run_id, fresh.header.name) == (
            3, "tcp://10.1.1.1:29500", "late")  # fmt: skip


def test_header_rewrite_refuses_bad_values_without_raising(tmp_path: Path, capsys) -> None:
    ring = private_dir(tmp_path / "ring")
    writer = RingWriter.create(name="j", phases=("data",), directory=str(ring))
    writer.rewrite_identity(Identity(-1, 0, 0, ""))
    writer.close()
    assert "rank identity not written" in capsys.readouterr().err
    with open_segment(discover(ring)[0]) as segment:
        assert (segment.header.rank, segment.header.world_size) == (0, 1)


@pytest.mark.slow
def test_process_group_after_the_first_steps_rewrites_both_ranks(tmp_path: Path) -> None:
    """mp.spawn ranks that train alone first, then join a group: the monitor, already
    following their segments as rank 0 of 1, sees ranks 0 and 1 of 2 under one job id."""
    import subprocess

    ring = private_dir(tmp_path / "ring")
    env = {k: v for k, v in os.environ.items() if k not in LAUNCH_ENV and "TRAINTOP" not in k}
    env.update(TRAINTOP_RING_DIR=str(ring), LOOP_SECONDS="2", PYTHONWARNINGS="ignore")
    script = Path(__file__).parent / "workloads" / "loops" / "spawn_ddp.py"
    command = [str(Path(sys.executable).parent / "traintop"), "run", "--", sys.executable,
               str(script), "29551", "--group-late"]  # fmt: skip
    collector = JobCollector(directory=str(ring))
    seen: dict[int, set] = {}
    with subprocess.Popen(command, env=env, cwd=tmp_path, stderr=subprocess.PIPE,
                          start_new_session=True) as proc:  # fmt: skip
        # Bounded: torch's gloo can deadlock a rank in the process group's destructor (its
        # worker thread waits for the GIL the joining thread holds), and a hang must fail.
        deadline = time.monotonic() + RUN_LIMIT_S
        try:
            while proc.poll() is None and time.monotonic() < deadline:
                for job in collector.collect():  # ranks that step (not mp.spawn's parent,
                    if job.steps_total:  # listed as starting until they make their segments)
                        seen.setdefault(job.pid, set()).add((job.rank, job.world_size, job.job_id))
                time.sleep(0.1)
        finally:
            kill_tree(proc)
        assert proc.returncode == 0, proc.stderr.read()[-2000:]
    collector.close()
    finals = sorted(max(states, key=lambda s: s[1]) for states in seen.values())
    assert [(rank, world) for rank, world, _ in finals] == [(0, 2), (1, 2)]
    assert {without_token(job_id) for *_, job_id in finals} == {"run:tcp://127.0.0.1:29551/2"}
    assert all(any(world == 1 for _, world, _ in states) for states in seen.values())


def test_name_precedence_run_name_then_launcher_then_script(monkeypatch) -> None:
    from traintop import default_name

    monkeypatch.setattr(sys, "argv", ["/src/examples/mnist/main.py"])
    for name in ("TRAINTOP_RUN_NAME", "TRAINTOP_SCRIPT_NAME"):
        monkeypatch.delenv(name, raising=False)
    assert default_name() == "mnist/main"
    monkeypatch.setenv("TRAINTOP_SCRIPT_NAME", "vision/train")  # what `traintop run` guessed
    assert default_name() == "vision/train"
    monkeypatch.setenv("TORCHELASTIC_RUN_ID", "resnet50-sweep-3")
    assert default_name() == "resnet50-sweep-3"
    monkeypatch.setenv("TRAINTOP_RUN_NAME", "mine")  # --name
    assert default_name() == "mine"


def test_a_job_that_counts_no_samples_has_no_sample_rate(tmp_path: Path) -> None:
    """Unknown ("—" in panels, `jobs` and evidence), never 0 samples/s."""
    ring = private_dir(tmp_path / "ring")
    writer = RingWriter.create(name="no-samples", phases=("data", "other"), directory=str(ring))
    now = time.monotonic_ns()
    for step in range(3):
        writer.record(step, now - (3 - step) * 10_000_000, (0, 10_000_000), 0)
    collector = JobCollector(directory=str(ring))
    try:
        (job,) = collector.collect()
    finally:
        collector.close()
        writer.close()
    assert job.steps_per_s and job.samples_per_s is None
