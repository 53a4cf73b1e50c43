"""The GPU check's judgments for issue 33 hold on the readings a card could give: each rule
passes what it should and fails what it must (the fake-mode run, tests/test_gpu_check.py, only
ever shows them one card's worth of readings)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path
from types import SimpleNamespace

import pytest

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "benchmarks"))

from gpu_check import parse, run_plan  # noqa: E402
from gpucheck.busy_checks import _kernel_problems, busy_truth, scripted_busy  # noqa: E402
from gpucheck.facts_checks import _cost_problems, fact_rows  # noqa: E402
from gpucheck.gpu_counters import gpm_problems, hopper_or_newer, process_problems  # noqa: E402
from gpucheck.idle_jobs import launch_verdict, sync_line, sync_verdict  # noqa: E402
from gpucheck.jobs import TRAIN_JOB  # noqa: E402
from gpucheck.memory_rules import _row, settled, traintop_rule  # noqa: E402
from gpucheck.observed import Observed  # noqa: E402
from gpucheck.results import FAIL, PASS, SKIP  # noqa: E402

from tests.job_fixtures import data_bound_job  # noqa: E402
from tests.snapshot_fixtures import machine  # noqa: E402
from traintop.collectors.snapshot import (  # noqa: E402
    GpuStepProfile,
    JobFacts,
    LoaderFacts,
    OptimizerFacts,
    SyncSite,
)

MIB = 1 << 20
PID = 4242


def observed(*jobs, verdict=None, result=None) -> Observed:
    """The job as the monitor showed it at each tick, and what diagnose said."""
    snapshots = [machine(gpus=1, jobs=(job,)) for job in jobs]
    return Observed(PID, 1.0, result or {}, snapshots, verdict, [])


def test_memory_readings_tell_nvidia_smis_rules_apart_by_their_fraction() -> None:
    used = _row(0, 0, "memory.used", 5196 * MIB + MIB // 4, 5196 * MIB + MIB // 4, 5197.0)
    assert used["rules_that_agree"] == ["up"] and used["decides"] and used["ok"]
    nearest = _row(0, 0, "memory.used", 5196 * MIB + MIB // 4, 5196 * MIB + MIB // 4, 5196.0)
    assert nearest["rules_that_agree"] == ["truncate", "nearest"] and not nearest["ok"]
    reserved = int(615.7 * MIB)  # the H200's reading that rounding to the nearest got wrong
    assert _row(0, 0, "memory.reserved", reserved, reserved, 615.0)["ok"]
    assert not _row(0, 0, "memory.reserved", reserved, reserved, 616.0)["ok"]
    moved = _row(0, 0, "memory.used", 100 * MIB + 1, 101 * MIB + 1, 102.0)
    assert moved["ok"] and not moved["decides"]  # up from the reading after it
    whole = _row(0, 0, "memory.total", 81559 * MIB, 81559 * MIB, 81559.0)
    assert not whole["decides"] and whole["rules_that_agree"] == ["truncate", "nearest", "up"]
    rules = settled([used, whole, _row(1, 0, "memory.used", 9 * MIB + MIB - 1, 9 * MIB + MIB - 1,
                                       10.0)])  # fmt: skip
    assert rules["memory.used"] == {"nvidia_smi_rule": ["up"], "traintop_rule": "up",
                                    "deciding_readings": 2}  # fmt: skip
    assert {f: traintop_rule(f) for f in ("memory.used", "memory.free")} == {
        "memory.used": "up", "memory.free": "truncate"}  # fmt: skip


def _tick(**gpm) -> dict:
    row = dict.fromkeys(("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct",
                         "dram_active_pct"), 40.0)  # fmt: skip
    return row | {"job_sm_pct": 64.0} | gpm


def test_gpm_must_be_there_in_range_and_active_on_hopper_and_absent_before() -> None:
    assert hopper_or_newer(9, None) and not hopper_or_newer(8, "NVIDIA H100 80GB HBM3")
    assert hopper_or_newer(None, "NVIDIA H200") and not hopper_or_newer(None, "NVIDIA A100 80GB")
    assert gpm_problems([_tick(), _tick()], hopper=True, supported=True) == []
    assert gpm_problems([_tick()], hopper=True, supported="NVMLError_NotSupported")
    assert gpm_problems([_tick(tensor_active_pct=2147483632.0)], hopper=True, supported=True)
    assert gpm_problems([_tick(dram_active_pct=None)], hopper=True, supported=True)
    assert gpm_problems([_tick(sm_active_pct=0.0)], hopper=True, supported=True)
    assert gpm_problems([], hopper=True, supported=True)
    blank = dict.fromkeys(_tick(), None)
    assert gpm_problems([blank], hopper=False, supported=False) == []
    assert gpm_problems([_tick()], hopper=False, supported=False)  # figures with no GPM


def test_the_jobs_per_process_share_must_come_from_a_call_that_lists_it() -> None:
    new_only = {"nvmlDeviceGetProcessesUtilizationInfo": {"job_sm_pct": [64]},
                "nvmlDeviceGetProcessUtilization": {"answer": "NotSupported"}}  # fmt: skip
    assert process_problems([_tick()], new_only) == []
    nobody = {name: {"answer": "3 samples", "job_sm_pct": []} for name in new_only}
    assert process_problems([_tick()], nobody)  # the job's PID is in no answer
    assert process_problems([_tick(job_sm_pct=None)], new_only)  # traintop read none
    assert process_problems([_tick(job_sm_pct=0.0)], new_only)  # never above 0 under load


def test_the_busy_share_shown_must_sit_within_ten_points_of_the_truth() -> None:
    def job(share: float, source: str = "process"):
        return replace(data_bound_job(PID), gpu_busy_share=share, gpu_busy_source=source)

    launch_bound = observed(job(0.66), job(0.68), job(0.70))
    assert busy_truth(launch_bound, 0.62, "kernels").status == PASS
    assert busy_truth(launch_bound, 0.55, "kernels").status == FAIL
    queued = observed(*(replace(job(0.99), gpu_busy_source=None) for _ in range(3)))
    assert busy_truth(queued, 0.76, "kernels").status == FAIL  # the H200's 98 vs 76 %
    assert busy_truth(observed(job(0.68)), None, "kernels").status == FAIL
    assert scripted_busy(observed(job(0.64))).status == PASS
    assert scripted_busy(observed(job(0.64, "device"))).status == FAIL


def _profile(**change) -> GpuStepProfile:
    base = GpuStepProfile(step=120, age_s=3.0, step_s=0.080, kernel_share=0.6,
                          host_wait_share=0.3, sync_share=0.02, kernel_wait_share=0.05,
                          other_share=0.03, kernels=1000)  # fmt: skip
    return replace(base, **change)


def test_the_profiles_join_kernels_and_clock_are_checked_against_the_jobs_profiler() -> None:
    theirs = {"steps": 10, "busy_ms": 480.0, "kernels_per_step": 1010}  # 48 ms a step
    assert _kernel_problems(_profile(), 0.99, theirs) == []
    assert _kernel_problems(_profile(), 0.90, theirs)  # a tenth of kernels without a launch
    assert _kernel_problems(_profile(), None, theirs)
    assert _kernel_problems(_profile(kernels=400), 0.99, theirs)  # activity names missed
    assert _kernel_problems(_profile(kernel_share=0.3), 0.99, theirs)  # the window cut them
    assert _kernel_problems(_profile(), 0.99, {"steps": 10})


FACTS = JobFacts(device="cuda", autocast="bf16", compiled=False,
                 optimizers=(OptimizerFacts("AdamW", True, None),),
                 loaders=(LoaderFacts(2, True, True, 2, 16),), attention="flash")  # fmt: skip
KNOBS = {"device": "cuda", "autocast": "bf16", "compiled": False,
         "optimizers": [{"name": "AdamW", "fused": True}],
         "loaders": [{"num_workers": 2, "pin_memory": True, "persistent_workers": True,
                      "prefetch_factor": 2, "batch_size": 16}]}  # fmt: skip


def test_facts_agree_only_when_traintop_read_what_the_job_does() -> None:
    assert all(row["ok"] for row in fact_rows(FACTS, KNOBS, "flash"))
    unknown = {r["knob"]: r["ok"] for r in fact_rows(replace(FACTS, autocast=None), KNOBS, "flash")}
    assert not unknown["autocast"]  # "could not tell" is not bf16
    assert not {r["knob"]: r["ok"] for r in fact_rows(FACTS, KNOBS, "cudnn")}["attention"]
    assert not {r["knob"]: r["ok"] for r in fact_rows(FACTS, KNOBS, None)}["attention"]
    unfused = replace(FACTS, optimizers=(OptimizerFacts("AdamW", False, True),))
    assert not {r["knob"]: r["ok"] for r in fact_rows(unfused, KNOBS, "flash")}["optimizers"]


HOST_OVERHEAD = {
    "bottleneck": "host_overhead",
    "summary": "Launch-bound: the GPU waits 31 % of the time for the host's kernels",
    "evidence": ["GPU busy only 66 % of the time (NVML, the job's processes)",
                 "1,420 kernel launches a step, median kernel 21 µs",
                 "seen in the job: bf16 autocast on, fused AdamW, not compiled, no CUDA graphs"],
    "remedies": ["torch.compile the model: fused kernels mean fewer launches",
                 "raise the batch size (fewer micro-batches with gradient accumulation)"],
}  # fmt: skip


def test_the_launch_bound_verdict_offers_nothing_the_job_already_does() -> None:
    assert launch_verdict(observed(verdict=HOST_OVERHEAD)).status == PASS
    compute = HOST_OVERHEAD | {"bottleneck": "compute"}
    assert launch_verdict(observed(verdict=compute)).status == FAIL
    for extra in (
        "use mixed precision: torch.autocast(dtype=torch.bfloat16)",
        "a fused optimizer (AdamW(fused=True))",
        "capture the step in CUDA graphs (if not already: the probe could not tell)",
    ):
        offered = HOST_OVERHEAD | {"remedies": [*HOST_OVERHEAD["remedies"], extra]}
        assert launch_verdict(observed(verdict=offered)).status == FAIL, extra  # fmt: skip
    no_compile = HOST_OVERHEAD | {"remedies": HOST_OVERHEAD["remedies"][1:]}
    assert launch_verdict(observed(verdict=no_compile)).status == FAIL
    unseen = HOST_OVERHEAD | {"evidence": HOST_OVERHEAD["evidence"][:2]}
    assert launch_verdict(observed(verdict=unseen)).status == FAIL


def test_the_sync_verdict_must_name_the_line_and_count_it() -> None:
    line = sync_line()
    assert "loss.item()" in TRAIN_JOB.read_text().splitlines()[line - 1]
    where = f"train_job.py:{line}"
    site = SyncSite(str(TRAIN_JOB), line, "step", "item", per_step=4.0, total=400,
                    code="loss.item()")  # fmt: skip
    verdict = {"bottleneck": "sync_stall",
               "summary": f"Sync stalls idle the GPU 21 % of the time: {where} `loss.item()` ×4",
               "evidence": [f"{where} `loss.item()` ×4 a step; the GPU idles 21 %"]}  # fmt: skip

    def judged(sites, v=verdict):
        job = replace(data_bound_job(PID), sync_sites=sites)
        return sync_verdict(observed(job, verdict=v, result={"micro_steps": 4})).status

    assert judged((site,)) == PASS
    assert judged((replace(site, per_step=1.0),)) == FAIL  # counted once a step, not four
    assert judged((replace(site, line=line + 1),)) == FAIL  # another line
    assert judged((site,), verdict | {"bottleneck": "compute"}) == FAIL
    unnamed = verdict | {"summary": "Host-GPU synchronisation stalls", "evidence": []}
    assert judged((site,), unnamed) == FAIL


def test_the_facts_cost_bounds() -> None:
    figures = {"sync_hook": {"per_sync_us": 8.0, "step_without_sync_ns": 30.0},
               "profile": {"first_hour_share": 0.0002}}  # fmt: skip
    assert _cost_problems(figures) == []
    assert _cost_problems(figures | {"sync_hook": {"per_sync_us": 45.0,
                                                   "step_without_sync_ns": 30.0}})  # fmt: skip
    assert _cost_problems(figures | {"profile": {"first_hour_share": 0.004}})


def test_plan_steps_are_named_and_skipped_with_their_reason(capsys) -> None:
    with pytest.raises(SystemExit):
        parse(["--out", "x", "--checks", "sync_jobs"])
    assert "no plan step sync_jobs" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        parse(["--out", "x", "--checks", "nvml", "--skip", "sync_job"])
    assert parse(["--out", "x", "--skip", "probe_onoff_launch,probe_onoff_gpu"]).skip
    checks: list = []
    ctx = SimpleNamespace(remaining=lambda: 1e9)
    run_plan(ctx, checks, lambda: None, {"facts_cost"}, frozenset({"facts_cost"}))  # type: ignore[arg-type]
    assert [(c.id, c.status, c.reason) for c in checks] == [
        ("facts_cost", SKIP, "left out (--skip)")]  # fmt: skip
