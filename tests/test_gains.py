"""Predicted gains (issue 42): the loader model, each remedy's figure or bound, the words every
surface prints, the order remedies come in, and what the JSON and the exporter carry."""

from __future__ import annotations

import json
import math

import pytest

from tests.diagnosis_factories import Scene
from traintop.collectors.snapshot import CpuLimit, JobFacts, LoaderFacts
from traintop.diagnosis.context import box_of, context_for
from traintop.diagnosis.engine import diagnose
from traintop.diagnosis.export import expected, verdict_to_dict
from traintop.diagnosis.gain_text import gain_words, ordered, remedy_line
from traintop.diagnosis.loader_model import (
    Loop,
    batch_time,
    chain_rate,
    loop_rate,
    rate,
    workers_for,
)
from traintop.diagnosis.loop_inputs import Measured, measured_loop
from traintop.diagnosis.memo import Memo
from traintop.diagnosis.model import Finding, Gain

# A CPU job whose two workers wait on a fetch (8 % CPU each) half the time it steps.
LATENCY = Scene(cpus=8, gpu_count=0, gpu_busy=None, workers=2, worker_cpu=8, worker_read=0,
                trainer_cpu=15, cpu_busy=12, data_wait=0.5)  # fmt: skip


def _gain(finding: Finding, knob: str) -> Gain:
    (found,) = [g for g in finding.gains if g.knob == knob]
    return found


# ---- the closed loop ------------------------------------------------------------------------


def test_one_index_in_flight_runs_the_loop_in_series():
    """One customer: each step waits for its batch, whatever the distribution (Little)."""
    assert chain_rate(1, 1, 0.02, 0.03) == pytest.approx(1 / 0.05)


def test_the_chain_matches_the_closed_form_of_two_matched_stations():
    """Two exponential stations of equal rate μ and N customers: X = μ N / (N + 1)."""
    assert chain_rate(1, 4, 0.01, 0.01) == pytest.approx(100 * 4 / 5)


def test_the_loop_lies_between_constant_and_exponential_service():
    steady, chain = min(2 / 0.02, 1 / 0.012), chain_rate(2, 4, 0.02, 0.012)
    assert chain < loop_rate(2, 2, 0.02, 0.012) < steady


def test_a_deeper_prefetch_only_helps_where_the_sides_are_matched():
    matched = loop_rate(2, 4, 0.02, 0.01) / loop_rate(2, 2, 0.02, 0.01)
    lopsided = loop_rate(2, 4, 0.08, 0.01) / loop_rate(2, 2, 0.08, 0.01)
    assert matched > lopsided >= 1.0 and lopsided < 1.01


@pytest.mark.parametrize(("workers", "rate_"), [(0, 30.0), (1, 40.0), (4, 70.0)])
def test_the_batch_time_inverts_the_loop(workers, rate_):
    batch = batch_time(workers, 2, rate_, 0.012)
    assert batch is not None
    assert loop_rate(workers, 2, batch, 0.012) == pytest.approx(rate_, rel=1e-4)


def test_the_step_alone_explains_a_rate_at_its_pace():
    assert batch_time(2, 2, 1 / 0.012, 0.012) is None


def test_workers_reach_the_next_bound_and_no_further():
    """Latency-bound workers: as many as carry the loop to the step's pace (compute bounds it
    then); with two cores they stop where the CPU does."""
    loop = Loop(workers=1, prefetch=2, batch_s=0.04, step_s=0.01, cpu_s=0.004, cores=8.0)
    n, value, bound = workers_for(loop)
    assert bound == "compute" and value >= 0.95 * 100 and 4 <= n <= 10
    crowded = Loop(workers=1, prefetch=2, batch_s=0.04, step_s=0.01, cpu_s=0.03, cores=2.0)
    n, value, bound = workers_for(crowded)
    assert bound == "cores" and value == pytest.approx(2 / 0.03, rel=0.05) and n < 4


def test_the_trainers_handoff_of_each_batch_is_in_series_with_its_step():
    """Batches from workers cost the trainer their handoff (unpickling, mapping their shared
    memory), so however many workers, the loop runs no faster than the step and the handoff
    together; a trainer that loads its own batches has none."""
    loop = Loop(workers=1, prefetch=2, batch_s=0.04, step_s=0.008, cpu_s=0.004, cores=8.0,
                handoff_s=0.002)  # fmt: skip
    _, value, bound = workers_for(loop)
    assert bound == "compute" and value == pytest.approx(1 / 0.010, rel=0.05)
    assert rate(loop, workers=0)[0] == pytest.approx(1 / 0.048)


def test_saturated_cores_give_no_gain_for_more_workers():
    loop = Loop(workers=2, prefetch=2, batch_s=0.02, step_s=0.004, cpu_s=0.021, cores=2.0)
    now, _ = rate(loop)
    later, bound = rate(loop, workers=4)
    assert later / now == pytest.approx(1.0, abs=0.03) and bound == "cores"


# ---- predictions through the engine ---------------------------------------------------------


def test_a_latency_bound_loader_is_told_the_workers_that_reach_the_step():
    """Issue 42's case: workers that idle on a fetch get the count the model says reaches the
    next bound, with the figure, its range and what bounds the job then."""
    primary = diagnose(LATENCY.window()).primary
    assert primary.bottleneck == "data_starved"
    first = primary.gains[0]
    assert first.knob == "num_workers" and first.remedy == primary.remedies[0]
    assert first.value is not None and first.value > 2 + 1  # not a fixed step of one or two
    assert first.speedup is not None and 1.5 < first.speedup <= 1 / (1 - 0.5) + 1e-9
    assert first.low is not None and first.high is not None
    assert first.low <= first.speedup <= first.high and first.bound_by == "compute"


def test_saturated_cores_say_no_gain_and_come_last():
    full = diagnose(LATENCY.but(cpus=2, worker_cpu=92, trainer_cpu=20, cpu_busy=99).window())
    workers = _gain(full.primary, "num_workers")
    assert workers.speedup == pytest.approx(1.0, abs=0.03)
    assert gain_words(workers).startswith("no gain: the job's CPUs are all in use")
    assert full.primary.remedies[-1] == workers.remedy


def test_a_disk_at_its_read_limit_says_no_gain_and_ram_says_what_it_buys():
    disk = LATENCY.but(worker_read=4e6, read_limit=4e6, worker_state="D", worker_cpu=3)
    primary = diagnose(disk.window()).primary
    assert primary.bottleneck == "data_io"
    assert gain_words(_gain(primary, "num_workers")) == "no gain: storage is at its limit"
    ram = _gain(primary, "storage")
    assert ram.remedy == primary.remedies[0] and ram.speedup is not None and ram.speedup > 1.5


def test_reads_counted_short_under_a_limit_promise_no_room():
    """Blocked loaders reading at 80 % of a limit as counted: the rest went to the kernel's
    thread that released it, so the job is at its limit (the first trial gave +24 % here)."""
    short = LATENCY.but(worker_read=1.6e6, read_limit=4e6, worker_state="D", worker_cpu=3)
    primary = diagnose(short.window()).primary
    assert gain_words(_gain(primary, "num_workers")) == "no gain: storage is at its limit"


def test_a_quota_is_raised_to_what_the_next_bound_needs():
    limit = CpuLimit(cpus=1.0, quota_cpus=1.0, cpuset=None, throttled_share=0.6,
                     throttled_s_per_s=0.5, cgroup="/docker/abc")  # fmt: skip
    scene = Scene(cpus=16, gpu_count=0, gpu_busy=None, workers=0, trainer_threads=4,
                  trainer_cpu=99, cpu_busy=10, data_wait=0.01, cpu_limit=limit,
                  facts=JobFacts(device="cpu", autocast="bf16", compiled=False))  # fmt: skip
    primary = diagnose(scene.window()).primary
    quota = _gain(primary, "cpu_quota")
    assert quota.remedy == primary.remedies[0]
    assert quota.value == 2.0 and quota.speedup == pytest.approx(2.0, rel=0.05)
    assert quota.change == "cpu_quota 1 → 2"


def test_a_quota_that_throttles_every_period_sets_the_cpu_bound_at_the_rate():
    """A period the kernel throttled the job in is one whose quota it spent: per-process
    samples that miss some of its CPU (0.9 CPU read under a quota of 1.0 throttling every
    period) must not set the CPUs' bound above the rate, so no worker count promises a gain;
    and the workers the quota cannot feed are lowered, never raised beside it (CI's case)."""
    limit = CpuLimit(cpus=1.0, quota_cpus=1.0, cpuset=None, throttled_share=1.0,
                     throttled_s_per_s=0.97, cgroup="/traintop-test-quota")  # fmt: skip
    scene = LATENCY.but(cpus=2, workers=2, worker_cpu=40, worker_wait=51, trainer_cpu=10,
                        cpu_busy=60, data_wait=0.95, cpu_limit=limit)  # fmt: skip
    loop = _measured(scene)
    assert loop.cpu_s * _rate(scene) == pytest.approx(1.0, rel=0.01)
    primary = diagnose(scene.window()).primary
    assert primary.bottleneck == "data_cpu"
    assert primary.remedies[0].startswith("raise the job's CPU limit")
    assert any(r.startswith("lower DataLoader num_workers from 2 to 1") for r in primary.remedies)
    assert not any(r.startswith("raise DataLoader num_workers") for r in primary.remedies)


def test_a_kernel_change_gets_no_invented_figure():
    gpu = diagnose(Scene().window()).primary
    assert gpu.bottleneck == "compute" and gpu.gains
    assert all(g.speedup is None and g.high is None for g in gpu.gains)
    assert all("kernel" in g.reason for g in gpu.gains)


def test_every_remedy_of_a_rule_carries_a_prediction_in_its_order():
    for scene in (LATENCY, Scene(), LATENCY.but(cpus=2, worker_cpu=92, cpu_busy=99)):
        primary = diagnose(scene.window()).primary
        assert tuple(g.remedy for g in primary.gains) == primary.remedies


# ---- words, lines and order -----------------------------------------------------------------

FIGURE = Gain("raise DataLoader num_workers from 1 to 4", 2.95, 2.6, 3.2, "compute",
              steps_per_s=31.0, change="num_workers 1 → 4", knob="num_workers",
              value=4.0)  # fmt: skip


def test_the_words_of_a_figure_a_bound_no_gain_and_none():
    assert gain_words(FIGURE) == "≈ 3.0× (2.6×–3.2×, 31 → 91 steps/s), then compute-bound"
    pause = Gain("save asynchronously", 1.09, 1.07, 1.11, reason="the 25 s pause every 400 steps")
    assert gain_words(pause) == "≈ +9 % (+7 %–+11 %) (the 25 s pause every 400 steps)"
    assert gain_words(Gain("x", high=1.31, reason="the 31 % the card idles")) == (
        "up to +31 % (the 31 % the card idles)"
    )
    no_gain = Gain("x", 1.0, 1.0, 1.0, "cores")
    assert gain_words(no_gain) == "no gain: the job's CPUs are all in use"
    assert gain_words(Gain("x", reason="a kernel change")) == "no figure (a kernel change)"


def test_the_remedy_line_with_its_gain_fits_80_columns():
    """The details screen's list on an 80-column terminal has 71 cells, 68 after the rank."""
    line = remedy_line(FIGURE)
    assert line == "num_workers 1 → 4: ≈ 3.0× (31 → 91 steps/s), then compute-bound"
    assert len(line) <= 68
    quota = Gain("raise the quota", 1.96, steps_per_s=11.5, bound_by="compute",
                 change="cpu_quota 0.5 → 1")  # fmt: skip
    assert len(remedy_line(quota)) <= 68


def test_remedies_are_ordered_by_what_they_buy():
    small = Gain("small", 1.05)
    none = Gain("none", reason="x")
    nothing = Gain("nothing", 1.0, bound_by="cores")
    upto = Gain("upto", high=2.0)
    order = ordered([nothing, none, small, upto, FIGURE])
    assert [g.remedy for g in order] == [FIGURE.remedy, "upto", "small", "none", "nothing"]


# ---- the JSON and the exporter --------------------------------------------------------------


def test_diagnose_json_gives_each_remedy_its_expected_gain():
    data = json.loads(json.dumps(verdict_to_dict(diagnose(LATENCY.window()))))
    assert [f["remedy"] for f in data["fixes"]] == data["remedies"]
    first = data["fixes"][0]["expected"]
    assert {"speedup", "low", "high", "bound_by"} <= first.keys()
    assert first["bound_by"] == "compute" and first["speedup"] > 1.5
    assert data["per_job"][0]["fixes"] == data["fixes"]
    nothing = [f["expected"] for f in data["fixes"] if "none" in f["expected"]]
    assert nothing and all(e["none"] for e in nothing)


def test_a_finding_without_predictions_says_so():
    assert "none" in expected(None)


def test_the_exporter_serves_the_best_remedies_with_their_gain():
    from prometheus_client.core import GaugeMetricFamily

    from traintop.exporter.published import ExportedVerdict
    from traintop.exporter.verdict_families import remedy_families

    primary = diagnose(LATENCY.window()).primary
    (family,) = remedy_families((ExportedVerdict("j1", "train.py", primary, 3.0),), "host")
    assert isinstance(family, GaugeMetricFamily)
    first = family.samples[0]
    assert first.labels["rank"] == "1" and first.labels["kind"] == "figure"
    assert first.labels["change"].startswith("num_workers 2 → ")
    assert math.isclose(first.value, primary.gains[0].speedup or 0.0)
    assert len({s.labels["rank"] for s in family.samples}) <= 3


def test_loader_facts_set_the_loop_the_model_reads():
    """The probe's prefetch_factor and num_workers are the loop's, not the workers counted."""
    facts = JobFacts(device="cpu", loaders=(LoaderFacts(2, False, True, 4),))
    primary = diagnose(LATENCY.but(facts=facts).window()).primary
    prefetch = _gain(primary, "prefetch_factor")
    assert prefetch.change == "prefetch_factor 4 → 8"


# ---- the monitor at 80x24 -------------------------------------------------------------------


def test_at_80x24_the_first_remedy_and_its_gain_fit_one_line():
    """The details screen at 80x24: each remedy's first line is its change and its gain, on
    one line; the advice in full and the range come beneath it."""
    from tests.test_tui_verdict import async_test, make, settle
    from traintop.tui.screens.details import DetailsScreen

    @async_test
    async def run() -> None:
        window = LATENCY.window()
        source, app = make(window[0])
        async with app.run_test(size=(80, 24)) as pilot:
            await settle(pilot, source, window)
            await pilot.press("d")
            assert isinstance(app.screen, DetailsScreen)
            widget = app.screen.query_one("#details-remedies")
            lines = widget.render().plain.splitlines()
            assert widget.content_size.width <= 80
            first = lines[0]
            assert first.startswith("1. num_workers 2 → ") and "steps/s" in first
            assert first.endswith("then compute-bound")
            assert len(first) <= widget.content_size.width
            assert lines[1].startswith("   raise DataLoader num_workers from 2 to ")

    run()


def test_the_details_screen_holds_a_restarted_job_against_its_run_before():
    from tests.test_tui_verdict import async_test, make, settle
    from traintop.diagnosis.verdict_runner import VerdictUpdate
    from traintop.tui.screens.details import DetailsScreen

    line = "train.py, against its run before: num_workers 2 → 4: 1.71× steps/s measured, ..."

    @async_test
    async def run() -> None:
        window = LATENCY.window()
        source, app = make(window[0])
        async with app.run_test(size=(120, 40)) as pilot:
            await settle(pilot, source, window)
            await pilot.press("d")
            screen = app.screen
            assert isinstance(screen, DetailsScreen)
            assert not screen.query_one("#details-against").display
            screen.show(VerdictUpdate(diagnose(window), (), (line,)))
            await pilot.pause()
            assert screen.query_one("#details-against").display
            assert line in screen.query_one("#details-against").render().plain

    run()


# ---- the loop as measured ---------------------------------------------------------------------


def _measured(scene: Scene) -> Loop:
    return _measured_of(scene).loop


def _rate(scene: Scene) -> float:
    return _measured_of(scene).steps_per_s


def _measured_of(scene: Scene) -> Measured:
    window = scene.window()
    jobs = list(window[-1].jobs)
    found = measured_loop(context_for(box_of(Memo().window(window), jobs), jobs[0]))
    assert found is not None
    return found


def test_a_main_thread_busy_beyond_its_own_phases_is_taking_batches_in():
    """A trainer whose main thread computes 60 % of the time, longer than its own phases last,
    spends the rest taking its batches in; one at 20 % hands off half of what it computes a
    step (its phases may hold the rest, off the CPU)."""
    busy = _measured(LATENCY.but(trainer_main=(60.0, 0.0)))
    assert busy.handoff_s == pytest.approx(0.6 / 4.0 - busy.step_s) and busy.handoff_s > 0
    idle = _measured(LATENCY.but(trainer_main=(20.0, 0.0), worker_cpu=30.0))
    assert idle.handoff_s == pytest.approx(0.2 / 4.0 / 2)
    assert _measured(LATENCY).handoff_s == 0.0  # the main thread's share unmeasured


def test_run_queue_waits_on_a_host_with_cpus_to_spare_are_not_other_processes():
    """The same waits mean other processes' threads only where the host had no CPU to spare:
    on one 40 % busy they are the scheduler's latency, and others count what they used.  A full
    host's idle share is its gaps between a thread's wake-up and its run: more threads do not
    fill them."""
    waits = {"cpus": 2, "worker_cpu": 60.0, "worker_wait": 30.0, "trainer_wait": 5.0}
    spare = _measured(LATENCY.but(cpu_busy=40.0, **waits))
    full = _measured(LATENCY.but(cpu_busy=97.0, **waits))
    assert spare.others < 0.05 < full.others
    assert spare.host == 2.0 and full.host == pytest.approx(2 * 0.97)  # its gaps stay idle


def test_waits_in_bursts_of_a_round_of_workers_are_read_as_constant_service():
    """Two workers started together deliver a batch after a long wait, then one almost at
    once: the waits' spread is the round's pattern, and each round waits the same."""
    steps = [{"data": 0.03 if i % 2 else 0.001, "forward": 0.01} for i in range(110)]
    times = tuple(sum(s.values()) for s in steps)
    columns = tuple(tuple(s[name] for s in steps) for name in ("data", "forward"))
    scene = LATENCY.but(workers=2, step_times=times, phase_times=columns,
                        phases=(("data", 0.6), ("forward", 0.4)), steps_per_tick=10)  # fmt: skip
    assert _measured(scene).variability == pytest.approx(0.0, abs=1e-9)
