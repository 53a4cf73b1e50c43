"""The sampled step profile (traintop/step_profiler.py) on CPU torch: its cycle over three step
boundaries, its budget, its deference to a profiler of the user's, and its silence."""

from __future__ import annotations

import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from traintop.hta_split import TraceEvent
from traintop.step_profiler import (
    DONE,
    IDLE,
    RECORDING,
    WARMING,
    ProfileConfig,
    StepProfiler,
    trace_events,
)

REPO = Path(__file__).resolve().parents[1]
CONFIG = ProfileConfig(mode="cpu", every_s=300.0, first_s=60.0, share=0.001)


def work() -> None:
    model = torch.nn.Linear(32, 32)
    model(torch.randn(8, 32)).sum().backward()


def cycle(profiler: StepProfiler, first_step: int = 10) -> None:
    """Three step boundaries with a step's work between them, as the probe's tick drives it."""
    profiler.want(typical_step_s=0.0005)
    assert profiler.at_boundary(first_step) and profiler.state == WARMING
    work()
    assert profiler.at_boundary(first_step + 1) and profiler.state == RECORDING
    work()
    assert not profiler.at_boundary(first_step + 2) and profiler.state == DONE


def test_one_profiled_step_is_summarised_with_its_cost(tmp_path, monkeypatch) -> None:
    monkeypatch.chdir(tmp_path)
    profiler = StepProfiler(torch, CONFIG, cuda=False)
    cycle(profiler)
    entry, split = profiler.collect(now_s=1000.0, start_s=900.0)
    assert profiler.state == IDLE and entry["step"] == 12  # the step after the warm-up
    shares = [entry[k] for k in entry if k.endswith("_share") and k != "cost_share"]
    assert math.isclose(sum(shares), 1.0) and entry["kernels"] == 0
    assert 0 < entry["step_s"] < 5 and entry["cost_share"] == profiler.spent_s / 100.0 > 0
    assert entry["every_s"] == pytest.approx(300.0) and split.attention is None
    assert entry["joined"] is None  # the kernel/launch join the GPU check reads: no kernel here
    assert list(tmp_path.iterdir()) == []  # no trace file, ever


def test_the_first_profile_waits_and_the_next_ones_keep_to_the_budget() -> None:
    profiler = StepProfiler(torch, CONFIG, cuda=False)
    assert not profiler.due(now_s=159.0, start_s=100.0)
    assert profiler.due(now_s=160.0, start_s=100.0)
    cycle(profiler)
    profiler.collect(now_s=160.0, start_s=100.0)
    spent = profiler.spent_s
    expected = max(160.0 + 300.0, 100.0 + spent / 0.001)
    assert not profiler.due(now_s=expected - 0.01, start_s=100.0)
    assert profiler.due(now_s=expected, start_s=100.0)
    assert profiler.every_s == pytest.approx(expected - 160.0)


def test_a_profiler_of_the_users_comes_first() -> None:
    profiler = StepProfiler(torch, CONFIG, cuda=False)
    with torch.profiler.profile():
        profiler.want(0.001)
        assert not profiler.at_boundary(1) and profiler.state == IDLE
        work()
    assert not profiler.due(now_s=0.0, start_s=0.0)  # tried again later, not at once


def test_a_profiler_the_user_starts_cancels_ours(monkeypatch) -> None:
    profile = torch.autograd.profiler.profile
    monkeypatch.setattr(profile, "_prepare_trace", profile._prepare_trace)  # undone after
    profiler = StepProfiler(torch, CONFIG, cuda=False)
    profiler.yield_to_user(torch.autograd.profiler)
    profiler.want(0.001)
    profiler.at_boundary(1)
    with torch.profiler.profile() as theirs:
        work()
    assert profiler.state == IDLE and len(theirs.events()) > 0
    cycle(profiler, first_step=5)  # and ours runs again afterwards
    assert profiler.collect(1.0, 0.0) is not None


def test_a_failure_turns_profiling_off_with_one_line(capsys) -> None:
    profiler = StepProfiler(torch, CONFIG, cuda=False)

    def broken(*_args: object) -> None:
        raise RuntimeError("CUPTI_ERROR_INSUFFICIENT_PRIVILEGES")

    profiler._kineto.enable = broken
    profiler.want(0.001)
    profiler.at_boundary(1)
    assert not profiler.at_boundary(2) and profiler.state == IDLE
    assert profiler.config.mode == "off" and not profiler.due(1e9, 0.0)
    assert capsys.readouterr().err == (
        "traintop: step profile disabled (RuntimeError: CUPTI_ERROR_INSUFFICIENT_PRIVILEGES)\n"
    )


def test_kineto_prints_nothing_into_the_jobs_stderr(tmp_path: Path) -> None:
    """Kineto logs each start and stop to stderr by default; the first profile silences it."""
    script = tmp_path / "job.py"
    script.write_text(
        textwrap.dedent("""
        import os, torch
        from traintop.step_profiler import ProfileConfig, StepProfiler
        profiler = StepProfiler(torch, ProfileConfig("cpu", 1, 1, 1), cuda=False)
        for _ in range(3):
            profiler.want(0.001)
            for step in range(3):
                torch.randn(64, 64).mm(torch.randn(64, 64))
                profiler.at_boundary(step)
            assert profiler.collect(1.0, 0.0) is not None
        print("KINETO_LOG_LEVEL" in os.environ)
    """)
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINTOP", "KINETO"))}
    environ["PYTHONPATH"] = str(REPO)
    done = subprocess.run(
        [sys.executable, str(script)], env=environ, text=True, capture_output=True, timeout=120
    )
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout == "False\n"  # the user's environment is left as it was


class FakeEvent:
    """A ``_KinetoEvent`` as torch's profiler gives it."""

    def __init__(self, activity: str, name: str, start: int, end: int, stream: int, corr: int):
        self._fields = (activity, name, start, end, stream, corr)

    def activity_type(self) -> str:
        return self._fields[0]

    def name(self) -> str:
        return self._fields[1]

    def start_ns(self) -> int:
        return self._fields[2]

    def end_ns(self) -> int:
        return self._fields[3]

    def device_resource_id(self) -> int:
        return self._fields[4]

    def correlation_id(self) -> int:
        return self._fields[5]


def test_kineto_events_become_the_splits_events() -> None:
    events = [
        FakeEvent("cpu_op", "aten::addmm", 0, 50, 9, 1),
        FakeEvent("cpu_op", "aten::_scaled_dot_product_flash_attention", 5, 40, 9, 2),
        FakeEvent("cuda_runtime", "cudaLaunchKernel", 10, 15, 9, 77),
        FakeEvent("kernel", "ampere_bf16_s16816gemm", 20, 30, 7, 77),
        FakeEvent("gpu_memcpy", "Memcpy HtoD (Pinned -> Device)", 31, 32, 7, 78),
        FakeEvent("gpu_memset", "Memset (Device)", 33, 34, 7, 79),
        FakeEvent("user_annotation", "ProfilerStep#3", 0, 60, 9, 0),
        FakeEvent("cuda_sync", "Stream Sync", 35, 36, 7, 0),
    ]
    assert trace_events(SimpleNamespace(events=lambda: events)) == [
        TraceEvent("op", "aten::_scaled_dot_product_flash_attention", 5, 40, 0, 2),
        TraceEvent("runtime", "cudaLaunchKernel", 10, 15, 0, 77),
        TraceEvent("kernel", "ampere_bf16_s16816gemm", 20, 30, 7, 77),
        TraceEvent("memcpy", "Memcpy HtoD (Pinned -> Device)", 31, 32, 7, 78),
        TraceEvent("memset", "Memset (Device)", 33, 34, 7, 79),
    ]


@pytest.mark.parametrize(
    ("value", "mode"), [(None, "cuda"), ("1", "cuda"), ("0", "off"), ("off", "off"), ("cpu", "cpu")]
)
def test_the_switch(value, mode, monkeypatch) -> None:
    monkeypatch.delenv("TRAINTOP_PROFILE", raising=False)
    if value is not None:
        monkeypatch.setenv("TRAINTOP_PROFILE", value)
    monkeypatch.setenv("TRAINTOP_PROFILE_EVERY_S", "nonsense")
    config = ProfileConfig.from_env()
    assert config.mode == mode and config.every_s == 300.0 and config.share == 0.001
