"""The GPU check (benchmarks/gpu_check.py) runs here, on the fake NVML, so that it is sound on
the day a card is lent; and the rules it judges by hold.

The fake-mode run is the script as the card will run it (the same processes: traintop query,
exporter, snapshot, the monitor headless, a training job under ``traintop run``, a one-rank
process group), with nvidia-smi played by tests/fakenvml/nvidia_smi.py and the CUDA parts
skipped with their reason.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpucheck.fields import compare_field  # noqa: E402
from gpucheck.nvml_checks import _threshold_row, pcie_judged  # noqa: E402
from gpucheck.nvsmi import cell_value, parse_csv  # noqa: E402
from gpucheck.results import FAIL, PASS, passed, run  # noqa: E402
from gpucheck.train_checks import phase_split, steps_rate  # noqa: E402

PASSING = {
    "environment", "nvml_fields", "query_vs_nvidia_smi", "memory_rules", "temperature_thresholds",
    "nvml_cost", "pcie_throughput", "nvml_fields_load", "exporter", "snapshot_json",
    "memory_rules_load", "screenshot", "train_steps", "train_phases", "flight_recorder",
    "flight_recorder_traintop",
    # issue 33 on the fake card: GPM and the job's per-process share (its PID scripted onto the
    # card), the busy share's join, the probe's profile on the CPU and its facts, their cost
    "gpu_counters", "launch_busy_truth", "launch_profile", "launch_facts", "facts_cost",
}  # fmt: skip
NEED_CUDA = {
    "train_gpu_time", "train_busy_truth", "train_verdict", "gpu_process_join", "launch_verdict",
    "sync_job", "sync_busy_truth", "sync_profile", "data_job", "memory_job",
    "probe_onoff_launch", "probe_onoff_gpu",
}  # fmt: skip


@pytest.fixture(scope="module")
def fake_run(tmp_path_factory: pytest.TempPathFactory) -> tuple[subprocess.CompletedProcess, Path]:
    if shutil.which("gcc") is None:
        pytest.skip("gcc not found: cannot build the fake NVML")
    out = tmp_path_factory.mktemp("gpu-check")
    argv = [
        sys.executable,
        str(ROOT / "benchmarks" / "gpu_check.py"),
        "--fake-nvml",
        "--out",
        str(out),
    ]
    done = subprocess.run(argv, cwd=out, capture_output=True, text=True, timeout=240, check=False)
    return done, out


@pytest.mark.slow
def test_fake_mode_passes_every_check_that_needs_no_cuda(fake_run) -> None:
    done, out = fake_run
    assert done.returncode == 0, done.stdout + done.stderr
    checks = {c["id"]: c for c in json.loads((out / "report.json").read_text())["checks"]}
    assert {i for i, c in checks.items() if c["status"] == PASS} >= PASSING, done.stdout
    for name in NEED_CUDA:
        assert checks[name]["status"] == "skip" and "no CUDA" in checks[name]["reason"], name
    assert {"report.json", "summary.md", "gpu-panel.svg", "flight-recorder.json"} <= {
        p.name for p in out.iterdir()
    }
    summary = (out / "summary.md").read_text()
    counts = f"{len(PASSING)} passed, 0 failed, {len(NEED_CUDA)} skipped"
    assert f"# traintop GPU check: {counts}" in summary
    assert set(checks) == PASSING | NEED_CUDA  # nothing unplanned ran, nothing planned went missing


def test_a_reading_between_the_two_around_it_passes_within_its_tolerance() -> None:
    assert compare_field("power.draw", 512.0, (500.0, 520.0)).ok
    assert compare_field("power.draw", 540.0, (500.0, 520.0)).ok  # 5 % of 540 = 27 W slack
    assert not compare_field("power.draw", 600.0, (500.0, 520.0)).ok
    assert not compare_field("memory.total", 81558.0, (81559, 81559)).ok  # exact
    assert compare_field("pstate", "P0", ("P2", "P0")).ok
    assert compare_field("clocks_event_reasons.active", 0x4, (0x0, 0x4)).ok
    assert not compare_field("clocks_event_reasons.active", 0x28, (0x0, 0x4)).ok


def test_unsupported_must_be_unsupported_on_both_sides() -> None:
    assert compare_field("fan.speed", None, (None, None)).ok
    assert not compare_field("fan.speed", None, (40.0, 40.0)).ok
    assert not compare_field("fan.speed", 40.0, (None, None)).ok


def test_nvidia_smi_cells_become_values() -> None:
    assert cell_value(" 81559") == 81559.0
    assert cell_value("0x00000000000001FF") == 0x1FF
    assert cell_value("[N/A]") is None
    assert cell_value("[Requested functionality has been deprecated]") is None
    assert cell_value("NVIDIA H100 80GB HBM3") == "NVIDIA H100 80GB HBM3"
    q = parse_csv(["name", "memory.used"], "name, memory.used [MiB]\nA, 1\nB, 2\n", header=True)
    assert q.header == "name, memory.used [MiB]" and q.values(1) == {
        "name": "B",
        "memory.used": 2.0,
    }


def test_thresholds_from_margins_when_the_driver_prints_only_t_limit() -> None:
    """driver 590 on an H100 (NVML.md §7): 59 °C, 26 °C below T.Limit, slowdown at -2."""
    q = {
        "GPU Current Temp": "59 C",
        "GPU T.Limit Temp": "26 C",
        "GPU Slowdown T.Limit Temp": "-2 C",
    }
    keys = ("GPU Slowdown Temp", "temp_slowdown_c", "GPU Slowdown T.Limit Temp")
    assert _threshold_row({"index": 0, "temp_slowdown_c": 87.0}, q, *keys)["ok"]
    assert not _threshold_row({"index": 0, "temp_slowdown_c": 92.0}, q, *keys)["ok"]
    assert not _threshold_row({"index": 0, "temp_slowdown_c": None}, q, *keys)["ok"]


def _pcie(rx: list[int], rx_smi: float, tx: list[int], tx_smi: float) -> dict:
    return {"phase": "h2d", "gpu": 0, "rx_traintop_kbs": rx, "rx_nvidia_smi_kbs": rx_smi,
            "tx_traintop_kbs": tx, "tx_nvidia_smi_kbs": tx_smi}  # fmt: skip


def test_pcie_agrees_within_a_factor_of_two_or_when_both_are_quiet() -> None:
    copying = 50_000_000.0  # KB/s: a pinned host-to-device copy on PCIe 5
    assert pcie_judged([_pcie([48_000_000], copying, [900_000], 2_000_000.0)]).status == PASS
    assert pcie_judged([_pcie([900_000], copying, [48_000_000], 2_000_000.0)]).status == FAIL
    assert pcie_judged([_pcie([48_000], copying, [0], 1.0)]).status == FAIL  # KB read as bytes
    assert pcie_judged([_pcie([], copying, [], None)]).status == FAIL  # traintop reads none


def test_a_check_that_raises_fails_alone() -> None:
    def broken() -> None:
        raise RuntimeError("boom")

    checks = [run("a", "broken", broken), run("b", "fine", passed, "still ran")]
    assert checks[0].status == FAIL and "boom" in checks[0].reason
    assert "RuntimeError" in checks[0].data["traceback"]
    assert checks[1].status == PASS


def _observed(steps: int, step_s: float, shown_rate: float, shown_data: float = 0.1):
    """What the rate and phase checks read of a job stepping every ``step_s``, a tenth of each
    step waiting for data, and the monitor's last figures (its last poll just after the last
    step)."""
    ends = [round((100 + i * step_s) * 1e9) for i in range(1, steps + 1)]
    data, forward = round(step_s * 0.1 * 1e9), round(step_s * 0.9 * 1e9)
    result = {"end_ns": ends, "phase_ns": {"data": [data] * steps, "forward": [forward] * steps}}
    shown = [SimpleNamespace(name="data", share=shown_data),
             SimpleNamespace(name="forward", share=1 - shown_data)]  # fmt: skip
    job = SimpleNamespace(steps_per_s=shown_rate, phases=shown)
    last_poll = SimpleNamespace(monotonic=ends[-1] / 1e9 + 0.01)
    return SimpleNamespace(job=job, result=result, snapshots=[last_poll], ready_s=1.0,
                           records=[SimpleNamespace(step=steps - 1)])  # fmt: skip


def test_a_window_of_few_steps_allows_one_step_at_its_edge_and_no_more() -> None:
    own = 14 / 7.01  # 14 steps of 0.5 s, the window from the first one's start
    assert steps_rate(_observed(14, 0.5, own * 0.93)).status == PASS  # a step in 14: 7 %
    assert steps_rate(_observed(14, 0.5, own * 0.87)).status == FAIL
    assert steps_rate(_observed(200, 0.05, 200 / 10.01 * 0.93)).status == FAIL  # a card's: 5 %
    assert phase_split(_observed(14, 0.5, own, shown_data=0.2)).status == PASS  # 5 + 7 points
    assert phase_split(_observed(14, 0.5, own, shown_data=0.25)).status == FAIL
    assert phase_split(_observed(200, 0.05, 20.0, shown_data=0.2)).status == FAIL
