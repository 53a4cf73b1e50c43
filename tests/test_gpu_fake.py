"""The fake NVML itself: build cache, scenario files, subprocess loading, waves, concurrency."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pynvml
import pytest

from tests.fakenvml.build import build_fake_nvml
from tests.fakenvml.control import SCENARIO_DIR
from traintop.collectors.gpu import GpuCollector

REPO = Path(__file__).resolve().parent.parent
PROBE = (
    "import pynvml as n; n.nvmlInit(); c = n.nvmlDeviceGetCount(); "
    "print(c, [n.nvmlDeviceGetName(n.nvmlDeviceGetHandleByIndex(i)) for i in range(c)])"
)


def run_python(code: str, lib: Path, scenario: str | Path | None, **env: str):
    full = {**os.environ, "LD_LIBRARY_PATH": str(lib.parent), "FAKE_NVML_TIME": "0", **env}
    if scenario is not None:
        full["FAKE_NVML_SCENARIO"] = str(SCENARIO_DIR / scenario)
    return subprocess.run(
        [sys.executable, "-c", code], env=full, cwd=REPO, capture_output=True, text=True, timeout=60
    )


def test_build_is_cached(fake_nvml_lib: Path) -> None:
    mtime = fake_nvml_lib.stat().st_mtime_ns
    assert build_fake_nvml(fake_nvml_lib.parent) == fake_nvml_lib
    assert fake_nvml_lib.stat().st_mtime_ns == mtime


@pytest.mark.parametrize(
    ("scenario", "expected"),
    [
        ("h100x8_throttle.txt", "8 " + str(["NVIDIA H100 80GB HBM3"] * 8)),
        ("h100x1.txt", "1 ['NVIDIA H100 80GB HBM3']"),
        ("a100_mig.txt", "2 " + str(["NVIDIA A100-SXM4-80GB"] * 2)),
        (
            "mixed_errors.txt",
            "3 ['NVIDIA GeForce RTX 3090', 'NVIDIA H100 80GB HBM3', 'NVIDIA H100 80GB HBM3']",
        ),
        ("nogpu.txt", "0 []"),
    ],
)
def test_scenarios_load_in_subprocess(fake_nvml_lib: Path, scenario: str, expected: str) -> None:
    result = run_python(PROBE, fake_nvml_lib, scenario)
    assert (result.returncode, result.stdout.strip(), result.stderr) == (0, expected, "")


def test_bad_scenario_fails_init_with_one_line(fake_nvml_lib: Path, tmp_path: Path) -> None:
    bad = tmp_path / "bad.txt"
    bad.write_text("devices 1\n0 set warp.drive 9\n")
    result = run_python(PROBE, fake_nvml_lib, bad)
    assert result.returncode != 0
    assert f"fake_nvml: {bad}:2: bad device directive 'set warp.drive 9'" in result.stderr


def test_lost_after_seconds_in_subprocess(fake_nvml_lib: Path) -> None:
    code = (
        "import pynvml as n; n.nvmlInit()\n"
        "print(n.nvmlDeviceGetPowerUsage(n.nvmlDeviceGetHandleByIndex(0)))\n"
        "try:\n    n.nvmlDeviceGetHandleByIndex(1)\nexcept n.NVMLError_GpuIsLost as e:\n"
        "    print('lost:', e)"
    )
    result = run_python(code, fake_nvml_lib, "mixed_errors.txt", FAKE_NVML_TIME="25")
    assert result.stdout.split("\n") == ["27000", "lost: GPU is lost", ""]


def test_waves_move_and_freeze_gives_base(fake_nvml) -> None:
    fake_nvml.directive("0 set util.gpu 90", "0 wave util.gpu 5 4")
    readings = []
    for t in (0.0, 1.0, 3.0):
        fake_nvml.set_time(t)
        readings.append(GpuCollector(pynvml, clock=lambda: 0.0).collect()[0][0].util_gpu_pct)
    assert readings == [90.0, 95.0, 85.0]


def test_uninitialized_calls_are_refused(fake_nvml) -> None:
    with pytest.raises(pynvml.NVMLError_Uninitialized):
        pynvml.nvmlDeviceGetCount()


def test_bad_directive_raises(fake_nvml) -> None:
    with pytest.raises(ValueError, match="rejected directive"):
        fake_nvml.directive("0 frobnicate")


def test_concurrent_collects_are_consistent(fake_nvml) -> None:
    """Several sampler threads and a mutating thread: no exception, every tick complete."""
    fake_nvml.load("h100x8_throttle.txt")
    collector = GpuCollector(pynvml)
    results, errors = [], []

    def poll() -> None:
        try:
            for _ in range(40):
                results.append(collector.collect())
        except Exception as exc:  # surfaced by the assertion below
            errors.append(exc)

    def mutate() -> None:
        for i in range(200):
            fake_nvml.directive(f"{i % 8} set power {600000 + i}")

    threads = [threading.Thread(target=poll) for _ in range(4)] + [threading.Thread(target=mutate)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    collector.close()
    assert errors == []
    assert len(results) == 160
    assert all(status.available and len(gpus) == 8 for gpus, status in results)
    assert all(g.name == "NVIDIA H100 80GB HBM3" for gpus, _ in results for g in gpus)
    assert fake_nvml.init_refcount() == 0
