"""GPU-only bottleneck scenarios end to end, through the fake NVML and scripted ring records.

A real process (tests/scenarios/gpu_writer.py) steps at 20 steps/s and writes ring records
shaped like one bottleneck, with the probe's facts side file beside them (what the job does, the
lines where it syncs, a profiled step), while the C fake NVML plays its GPU
(tests/fakenvml/scenarios/job_*.txt plus lines naming the trainer's pid and its per-process
utilization).  `traintop diagnose --for 10 --json --job PID` runs as a subprocess and must name
the case, quote the scripted numbers, offer the remedies that apply and none the job already
follows, and list no finding a healthy job must not have.  Two tmux tests run the monitor
itself on the same jobs and require the banner to show the verdict, hold it without flicker and
colour the evidence panel's border.  Every case runs at once (one module fixture); each test
asserts on its case.  Times to verdict are printed and recorded; the test's bound is generous.
Setting TRAINTOP_GPU_SCENARIO_RESULTS to a file appends one JSON line per diagnose case (the
source of the table in docs/scenarios.md, rendered by tests/scenarios/gpu_report.py).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.isolation import private_dir
from tests.scenarios.gpu_cases import (
    CASES,
    GpuCase,
    missing_evidence,
    remedy_faults,
    start_case,
)
from tests.scenarios.gpu_screen import BannerWatch, border_colour, border_colours, watch_banner
from tests.scenarios.gpu_writer import CASES as SHAPES
from tests.scenarios.harness import (
    DiagnoseRun,
    Workload,
    describe,
    diagnose_for_s,
    in_time,
    run_diagnose,
    time_to_verdict,
    wait_for_segments,
)
from tests.scenarios.report import append_result
from tests.tmux import TmuxSession
from traintop.ring_paths import ENV_DIR
from traintop.views.verdict_text import label

pytestmark = [pytest.mark.solo, pytest.mark.timeout(180)]  # the trainers' CPU shares are the cases'

VERDICT_DEADLINE_S = 15.0
DIAGNOSE_FOR_S = 10.0
HOLD_S = 5.0  # the banner must keep the verdict this long once shown
RESULTS_ENV = "TRAINTOP_GPU_SCENARIO_RESULTS"
BANNER_CASES = ("throttle_thermal", "sync_stall")
WAVE_CPUS = 1.6  # the trainers' CPU in one wave, of the 2 cores this suite is run on


@dataclass
class CaseRun:
    """One case's scripted trainer and what diagnose and (for some) the monitor made of it."""

    case: GpuCase
    job: Workload
    diagnose: DiagnoseRun | None = None
    banner: BannerWatch | None = None
    colours: object = None


def _wanted(items: list[pytest.Item]) -> dict[str, set[str]]:
    """The cases this session's tests of this module ask about, and which checks of each."""
    wanted: dict[str, set[str]] = {}
    for item in items:
        if item.module.__name__ == __name__ and hasattr(item, "callspec"):
            check = "banner" if "banner" in item.name else "diagnose"
            wanted.setdefault(item.callspec.params["case"], set()).add(check)
    return wanted


def _watch(run: CaseRun, env: dict[str, str]) -> None:
    """The monitor itself in tmux on the same job: the banner over time, the border colours."""
    with TmuxSession(["traintop"], width=200, height=50, env=env) as session:
        run.banner = watch_banner(session, label(run.case.bottleneck), run.job.started, HOLD_S)
        run.colours = border_colours(session)


def _observe(run: CaseRun, env: dict[str, str], check: str) -> None:
    """Once the trainer's segment exists: diagnose it, or watch the monitor's banner."""
    wait_for_segments(Path(env[ENV_DIR]), 1, [run.job])
    if check == "diagnose":
        run.diagnose = run_diagnose(env, job_pid=run.job.pid, for_s=diagnose_for_s(DIAGNOSE_FOR_S))
    else:
        _watch(run, env)


@pytest.fixture(scope="module")
def runs(request, fake_nvml_lib: Path, tmp_path_factory) -> Iterator[dict[str, CaseRun]]:
    """Every case asked for, in waves: each trainer has its own ring directory and fake GPU,
    and its diagnose (and monitor) start together with the others of its wave.  The trainers
    are scripted processes that burn a set share of a core each step; a wave holds no more of
    that than ``WAVE_CPUS``, so the diagnose and monitor processes beside them get the CPU a
    user's would (ten trainers at once wanted 4.8 of the 2 cores, and every verdict came late)."""
    wanted = _wanted(request.session.items)
    runs: dict[str, CaseRun] = {}
    for wave in waves(sorted(wanted), lambda name: SHAPES[CASES[name].shape].cpu_share):
        runs.update(_run_wave(wave, wanted, fake_nvml_lib, tmp_path_factory))
    yield runs


def _run_wave(names: list[str], wanted: dict[str, set[str]], lib: Path,
              tmp_path_factory) -> dict[str, CaseRun]:  # fmt: skip
    """Start the wave's trainers, observe them all at once, stop them."""
    started: dict[str, tuple[Workload, dict[str, str]]] = {}
    try:
        for name in names:
            out = tmp_path_factory.mktemp(name)
            started[name] = start_case(CASES[name], private_dir(out / "rings"), lib, out)
        runs = {name: CaseRun(CASES[name], job) for name, (job, _) in started.items()}
        tasks = [(runs[n], started[n][1], check) for n in runs for check in wanted[n]]
        with ThreadPoolExecutor(max_workers=len(tasks) or 1) as pool:
            list(pool.map(_observe, *zip(*tasks, strict=True)))
        return runs
    finally:
        for job, _ in started.values():
            job.stop()


def waves(names: list[str], cpus: Callable[[str], float]) -> list[list[str]]:
    """``names`` packed first-fit, busiest first, into waves of at most ``WAVE_CPUS``."""
    packed: list[tuple[float, list[str]]] = []
    for name in sorted(names, key=lambda n: -cpus(n)):
        fit = next((i for i, (load, _) in enumerate(packed) if load + cpus(name) <= WAVE_CPUS),
                   None)  # fmt: skip
        if fit is None:
            packed.append((cpus(name), [name]))
        else:
            packed[fit] = (packed[fit][0] + cpus(name), [*packed[fit][1], name])
    return [wave for _, wave in packed]


def _record(case: GpuCase, job: Workload, run: DiagnoseRun) -> float | None:
    """Print the measured figures and append them to $TRAINTOP_GPU_SCENARIO_RESULTS if set."""
    ttv = time_to_verdict(job.started, run)
    print(f"\n{case.name}: verdict {run.bottleneck}, time-to-verdict {ttv} s")
    append_result(RESULTS_ENV, case.name, ttv, run.verdict, wanted=case.bottleneck)
    return ttv


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(CASES))
def test_diagnose_names_the_gpu_bottleneck(runs: dict[str, CaseRun], case: str) -> None:
    found = runs[case]
    run, job = found.diagnose, found.job
    ttv = _record(found.case, job, run)
    context = f"{describe(run)}\n--- trainer log ---\n{job.log_tail()}"
    assert run.verdict is not None, context
    assert run.bottleneck == found.case.bottleneck, context
    assert run.verdict["mode"] == "attach", context
    assert not missing_evidence(found.case, run.verdict["evidence"]), context
    assert not remedy_faults(found.case, run.verdict["remedies"]), context
    also = {other["bottleneck"] for other in run.verdict.get("also") or []}
    assert not also & set(found.case.not_also), context
    assert in_time(ttv, VERDICT_DEADLINE_S), f"time-to-verdict {ttv} s\n{context}"


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("case", BANNER_CASES)
def test_monitor_banner_shows_verdict_steadily(runs: dict[str, CaseRun], case: str) -> None:
    found = runs[case]
    shown, colours = found.banner, found.colours
    assert in_time(shown.first_s, VERDICT_DEADLINE_S), shown.describe()
    assert shown.steady, shown.describe()
    assert re.search(found.case.evidence[0], shown.banner), shown.describe()
    print(f"\n{case}: banner at {shown.first_s:.1f} s, held {HOLD_S:.0f} s, {colours}")
    assert None not in (colours.evidence, colours.other), colours
    assert colours.evidence != colours.other, colours


def test_border_colour_is_the_sgr_in_force_at_the_corner() -> None:
    """Side-by-side panels share a line, and tmux emits a colour only when it changes."""
    line = "\x1b[90m╭─\x1b[1m 7 Training \x1b[0m\x1b[90m──╮╭─ 8 DataLoader ─╮"
    red = "\x1b[38;5;196m╭─ 1 GPU ─╮\x1b[0m"
    assert border_colour(line, "8 DataLoader") == "90"
    assert border_colour(f"{red}\n{line}", "1 GPU") == "38;5;196"
    assert border_colour(line, "2 CPU") is None
