"""What the job already does, end to end: real CPU torch training processes under ``traintop
run`` (tests/workloads/facts_job.py), each fact read back through the monitor's collector from
the facts side file, against what the script really does."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.isolation import private_dir
from traintop.collectors.jobs import JobCollector
from traintop.collectors.snapshot import JobSnapshot, LoaderFacts, OptimizerFacts

REPO = Path(__file__).resolve().parents[1]
JOB = [
    sys.executable,
    "-m",
    "traintop.launcher",
    "--name",
    "facts",
    "--",
    sys.executable,
    str(REPO / "tests" / "workloads" / "facts_job.py"),
]
QUICK_PROFILE = {
    "TRAINTOP_PROFILE_FIRST_S": "1",
    "TRAINTOP_PROFILE_EVERY_S": "2",
    "TRAINTOP_PROFILE_SHARE": "1",
}

pytestmark = pytest.mark.slow


def environ(ring: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINTOP", "PYTHONW"))}
    return {**env, "TRAINTOP_RING_DIR": str(ring), "PYTHONPATH": str(REPO), **extra}


def run(ring: Path, *args: str, **env: str) -> tuple[subprocess.CompletedProcess, JobSnapshot]:
    done = subprocess.run(
        [*JOB, *args],
        env=environ(ring, **env),
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ring.parent,
    )
    assert done.returncode == 0, done.stderr
    (job,) = JobCollector(str(ring)).collect()
    return done, job


@pytest.fixture
def ring(tmp_path: Path) -> Path:
    return private_dir(tmp_path / "ring")


def test_a_bf16_conv_net_in_channels_last_with_its_loader_and_fused_adamw(ring: Path) -> None:
    done, job = run(
        ring,
        "--model",
        "conv",
        "--channels-last",
        "--autocast",
        "bf16",
        "--loader",
        "--optimizers",
        "adamw-fused",
        "--seconds",
        "5",
    )
    facts = job.facts
    assert facts is not None and done.stderr == ""
    assert (facts.device, facts.autocast, facts.compiled) == ("cpu", "bf16", False)
    assert (facts.has_conv, facts.channels_last) == (True, True)
    assert facts.optimizers == (OptimizerFacts("AdamW", fused=True, foreach=None),)
    assert facts.loaders == (
        LoaderFacts(
            num_workers=2,
            pin_memory=False,
            persistent_workers=True,
            prefetch_factor=3,
            batch_size=16,
        ),
    )
    assert facts.tf32_matmul is False and facts.tf32_cudnn is True  # torch's defaults
    # A CPU job: no sync hook, no profile, no allocator; none of it read as "off".
    assert facts.syncs_watched is False and job.sync_sites == () and job.gpu_profile is None
    assert facts.cuda_graphs is None and facts.pinned_copies is None
    assert job.cuda_alloc_retries is None


def test_a_compiled_model_with_two_optimizers_and_no_autocast(ring: Path) -> None:
    _, job = run(ring, "--compile", "--optimizers", "two", "--seconds", "4")
    facts = job.facts
    assert facts.compiled is True and facts.autocast == "off" and facts.device == "cpu"
    assert facts.optimizers == (
        OptimizerFacts("SGD", None, True),
        OptimizerFacts("Adam", None, False),
    )
    assert facts.has_conv is False and facts.channels_last is None  # no conv: does not apply
    assert facts.loaders == ()


def test_without_the_helper_thread_there_are_no_facts(ring: Path) -> None:
    _, job = run(ring, "--seconds", "3", TRAINTOP_STACKS="0")
    assert job.facts is None and job.sync_sites == () and job.gpu_profile is None
    assert job.steps_total > 0 and list(ring.glob("*.facts")) == []


@pytest.mark.parametrize("strict", [False, True], ids=["default-filters", "warnings-as-errors"])
def test_sync_sites_read_live_with_their_rate_per_step(ring: Path, strict: bool) -> None:
    """A CUDA job (torch.cuda faked over CPU torch): two ``.item()`` a step on one line,
    ``synchronize()`` every other step, ``Event.synchronize()`` every fourth; under ``-W
    error`` and the script's own ``simplefilter("error")``, catchers and resets too."""
    flags = ["-W", "error"] if strict else []
    args = [*JOB[:5], sys.executable, *flags, JOB[-1], "--fake-cuda", "--seconds", "12"]
    proc = subprocess.Popen(
        [*args, *(["--strict-warnings"] if strict else [])],
        env=environ(ring, **QUICK_PROFILE),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ring.parent,
    )
    collector, live = JobCollector(str(ring), window_s=6.0), None
    while proc.poll() is None:
        for job in collector.collect():
            if job.state == "live" and job.sync_sites:
                live = job
        time.sleep(0.5)
    out, err = proc.communicate()
    assert proc.returncode == 0 and err == "", err
    assert ("raised: a warning of the script's own" if strict else 'own_warnings=["a w') in out
    rates: dict[str, float] = {}
    for site in live.sync_sites:  # under --strict-warnings one .item() line in three differs
        rates[site.kind] = rates.get(site.kind, 0.0) + site.per_step
    assert rates == pytest.approx({"item": 2.0, "synchronize": 0.5, "event": 0.25}, abs=0.1)
    item = max((s for s in live.sync_sites if s.kind == "item"), key=lambda s: s.per_step)
    assert item.file.endswith("facts_job.py") and item.function == "sync_twice"
    assert item.code == "value = (scalar.item(), scalar.item())"
    (ended,) = collector.collect()
    assert ended.facts.syncs_watched is True and ended.cuda_alloc_retries == 3
    profile = ended.gpu_profile
    assert profile is not None and profile.cost_share > 0 and profile.every_s >= 2
    assert profile.kernels == 0 and profile.host_wait_share == 1.0  # no GPU here: all host
    assert ended.facts.cuda_graphs is False
