"""GPU-only bottleneck scenarios end to end, through the fake NVML and scripted ring records.

A real process (tests/scenarios/gpu_writer.py) steps at 20 steps/s and writes ring records
shaped like one bottleneck while the C fake NVML plays its GPU (tests/fakenvml/scenarios/job_*.txt
plus a line naming the trainer's pid).  `traintop diagnose --for 10 --json --job PID` runs as a
subprocess and must name the case, quote the scripted numbers and commit within 15 s of the job
starting.  Two tmux tests run the monitor itself on the same setup and require the banner to
show the verdict within 15 s, hold it without flicker and colour the evidence panel's border.
Setting TRAINTOP_GPU_SCENARIO_RESULTS to a file appends one JSON line per diagnose case (the
source of the table in docs/scenarios.md, rendered by tests/scenarios/gpu_report.py).
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.isolation import private_dir
from tests.scenarios.gpu_cases import CASES, GpuCase, missing_evidence, start_case
from tests.scenarios.gpu_screen import border_colour, border_colours, watch_banner
from tests.scenarios.harness import (
    DiagnoseRun,
    Workload,
    describe,
    run_diagnose,
    running,
    time_to_verdict,
    wait_for_segments,
)
from tests.scenarios.report import append_result
from tests.tmux import TmuxSession
from traintop.views.verdict_text import label

pytestmark = pytest.mark.timeout(120)

VERDICT_DEADLINE_S = 15.0
DIAGNOSE_FOR_S = 10.0
HOLD_S = 5.0  # the banner must keep the verdict this long once shown
RESULTS_ENV = "TRAINTOP_GPU_SCENARIO_RESULTS"


@pytest.fixture
def ring_dir(tmp_path: Path) -> Path:
    """A private ring directory, so only this case's trainer is visible."""
    return private_dir(tmp_path / "rings")


@pytest.fixture
def started(request, ring_dir: Path, fake_nvml_lib: Path, tmp_path: Path) -> Iterator[tuple]:
    """The case's trainer stepping with its fake GPU: (case, workload, env); killed after."""
    case = CASES[request.param]
    job, env = start_case(case, ring_dir, fake_nvml_lib, tmp_path)
    with running([job]):
        wait_for_segments(ring_dir, 1, [job])
        yield case, job, env


def _record(case: GpuCase, job: Workload, run: DiagnoseRun) -> float | None:
    """Print the measured figures and append them to $TRAINTOP_GPU_SCENARIO_RESULTS if set."""
    ttv = time_to_verdict(job.started, run)
    print(f"\n{case.bottleneck}: verdict {run.bottleneck}, time-to-verdict {ttv} s")
    append_result(RESULTS_ENV, case.bottleneck, ttv, run.verdict)
    return ttv


@pytest.mark.slow
@pytest.mark.parametrize("started", sorted(CASES), indirect=True)
def test_diagnose_names_the_gpu_bottleneck(started: tuple) -> None:
    case, job, env = started
    run = run_diagnose(env, job_pid=job.pid, for_s=DIAGNOSE_FOR_S)
    ttv = _record(case, job, run)
    context = f"{describe(run)}\n--- trainer log ---\n{job.log_tail()}"
    assert run.verdict is not None, context
    assert run.bottleneck == case.bottleneck, context
    assert run.verdict["mode"] == "attach", context
    assert not missing_evidence(case, run.verdict["evidence"]), context
    assert ttv is not None and ttv <= VERDICT_DEADLINE_S, f"time-to-verdict {ttv} s\n{context}"


@pytest.mark.slow
@pytest.mark.e2e
@pytest.mark.parametrize("started", ["throttle_thermal", "sync_stall"], indirect=True)
def test_monitor_banner_shows_verdict_steadily(started: tuple) -> None:
    case, job, env = started
    with TmuxSession(["traintop"], width=200, height=50, env=env) as session:
        shown = watch_banner(session, label(case.bottleneck), job.started, HOLD_S)
        assert shown.first_s <= VERDICT_DEADLINE_S, shown.describe()
        assert shown.steady, shown.describe()
        assert re.search(case.evidence[0], shown.banner), shown.describe()
        colours = border_colours(session)
        print(
            f"\n{case.bottleneck}: banner at {shown.first_s:.1f} s, held {HOLD_S:.0f} s, {colours}"
        )
        assert None not in (colours.evidence, colours.other), colours
        assert colours.evidence != colours.other, colours


def test_border_colour_is_the_sgr_in_force_at_the_corner() -> None:
    """Side-by-side panels share a line, and tmux emits a colour only when it changes."""
    line = "\x1b[90m╭─\x1b[1m 7 Training \x1b[0m\x1b[90m──╮╭─ 8 DataLoader ─╮"
    red = "\x1b[38;5;196m╭─ 1 GPU ─╮\x1b[0m"
    assert border_colour(line, "8 DataLoader") == "90"
    assert border_colour(f"{red}\n{line}", "1 GPU") == "38;5;196"
    assert border_colour(line, "2 CPU") is None
