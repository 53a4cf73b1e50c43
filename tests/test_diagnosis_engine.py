"""Engine-level behaviour: ranking, confidence, minimum window, input checks, JSON shape."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.diagnosis_factories import Scene
from traintop.diagnosis.api import BOTTLENECKS, diagnose, verdict_to_dict
from traintop.diagnosis.engine import RULES
from traintop.diagnosis.findings import PREFERENCE

HEALTHY = Scene()


def test_rules_table_covers_every_bottleneck() -> None:
    """Every id but three comes from a per-rank rule: ``straggler`` is found across a job's
    ranks (diagnosis/fold.py), ``hang`` on a whole job that stopped stepping
    (diagnosis/hang.py), ``unknown`` when nothing is; the tie order knows them all."""
    assert {name for name, _ in RULES} == set(BOTTLENECKS) - {"unknown", "straggler", "hang"}
    assert len(BOTTLENECKS) == len(set(BOTTLENECKS)) == 19
    assert sorted(PREFERENCE) == sorted(BOTTLENECKS)


def test_rules_report_their_own_id() -> None:
    window = HEALTHY.but(data_wait=0.6, worker_cpu=98, reasons=0x4, swap_bytes_per_s=9e6).window()
    verdict = diagnose(window)
    for f in (verdict.primary, *verdict.also):
        assert f.bottleneck in BOTTLENECKS


def test_several_findings_ranked_by_time_lost() -> None:
    scene = HEALTHY.but(data_wait=0.3, worker_cpu=98, gpu_busy=0.7, reasons=0x4, sm_clock=1800)
    verdict = diagnose(scene.but(swap_bytes_per_s=100e6).window())
    ids = [verdict.primary.bottleneck, *(f.bottleneck for f in verdict.also)]
    assert ids == ["host_memory", "data_cpu", "throttle_power"]


def test_data_bottleneck_outranks_mild_throttle() -> None:
    scene = HEALTHY.but(data_wait=0.6, worker_cpu=98, gpu_busy=0.4, reasons=0x4, sm_clock=1700)
    verdict = diagnose(scene.window())
    assert verdict.primary.bottleneck == "data_cpu"
    assert [f.bottleneck for f in verdict.also] == ["throttle_power"]


def test_full_gpu_memory_is_advice_not_the_primary() -> None:
    verdict = diagnose(HEALTHY.but(gpu_mem_share=0.97).window())
    assert verdict.primary.bottleneck == "compute"
    memory = next(f for f in verdict.also if f.bottleneck == "memory")
    assert memory.severity == "info"
    assert "97 %" in memory.evidence[0].text


def test_system_mode_is_less_confident_than_attach() -> None:
    attach = diagnose(HEALTHY.window()).primary
    system = diagnose(HEALTHY.but(attach=False).window()).primary
    assert attach.bottleneck == system.bottleneck == "compute"
    assert system.confidence < attach.confidence


def test_short_windows_are_less_confident() -> None:
    long = diagnose(HEALTHY.window(n=11)).primary.confidence
    short = diagnose(HEALTHY.window(n=4)).primary.confidence
    assert short < long


def test_unknown_before_minimum_window() -> None:
    verdict = diagnose(HEALTHY.window(n=3))
    assert verdict.primary.bottleneck == "unknown"
    assert verdict.primary.summary == "collecting data: 2.0 of 3 s"
    assert diagnose([]).primary.bottleneck == "unknown"


def test_no_gpu_and_no_job_is_unknown() -> None:
    verdict = diagnose(HEALTHY.but(attach=False, gpu_count=0).window())
    assert verdict.primary.bottleneck == "unknown"


def test_window_order_does_not_matter() -> None:
    window = HEALTHY.but(data_wait=0.62, worker_cpu=98).window()
    assert diagnose(window[::-1]) == diagnose(window)


def test_noisy_window_uses_the_mean() -> None:
    verdict = diagnose(HEALTHY.but(data_wait=0.62, data_wait_alt=0.1, worker_cpu=98).window())
    assert verdict.primary.bottleneck == "data_cpu"
    assert verdict.primary.evidence[0].text == "data wait 38 % of time"


def test_bad_input_gives_one_line_error() -> None:
    with pytest.raises(TypeError, match=r"^diagnose\(\) needs Snapshot objects, got dict$"):
        diagnose([{"gpu": 1}])


def test_verdict_to_dict_is_json_with_contract_keys() -> None:
    verdict = diagnose(HEALTHY.but(data_wait=0.62, worker_cpu=98, reasons=0x4).window())
    data = json.loads(json.dumps(verdict_to_dict(verdict)))
    contract = {"bottleneck", "confidence", "summary", "evidence", "remedies", "also", "jobs"}
    assert contract | {"mode", "severity"} <= data.keys()
    assert data["bottleneck"] == "data_cpu" and data["mode"] == "attach"
    assert data["evidence"][:2] == ["data wait 62 % of time", "4/4 workers at 98 % CPU"]
    assert data["also"][0]["bottleneck"] == "throttle_power"
    assert data["jobs"] == [
        {
            "pid": 4242,
            "name": "train.py",
            "rank": 0,
            "job_id": "",
            "state": "live",
            "steps_per_s": 4.0,
            "samples_per_s": 1024.0,
            "data_wait_share": 0.62,
        }
    ]
    assert data["live_jobs"] == 1 and data["job_id"] == "pid:4242"
    (job,) = data["per_job"]
    assert job["bottleneck"] == "data_cpu" and job["live"] and job["straggler"] is None
    assert [r["pid"] for r in job["ranks"]] == [4242] and job["ended_at"] is None


def test_num_workers_suggestion_uses_free_cores() -> None:
    starved = diagnose(HEALTHY.but(data_wait=0.4, workers=2, cpus=16).window()).primary
    assert starved.remedies[0] == "raise DataLoader num_workers from 2 to 4 (16 logical CPUs)"
    full = diagnose(HEALTHY.but(data_wait=0.6, worker_cpu=99, cpu_busy=97).window()).primary
    assert full.bottleneck == "data_cpu"
    (more,) = [g for g in full.gains if g.knob == "num_workers"]
    assert more.value is not None and more.value <= 8, "no more busy workers than the CPUs"
    assert more.bound_by == "cores" and more.speedup is not None and more.speedup < 1.3


def test_diagnosis_imports_no_ui_or_hardware_library() -> None:
    code = (
        "import sys, traintop.diagnosis.api; "
        "print(sorted(m for m in ('textual', 'rich', 'psutil', 'pynvml', 'torch') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
