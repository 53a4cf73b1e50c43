"""Compare's statistics and syntax: Mann–Whitney U, the noise floor, ranges of a recording."""

from __future__ import annotations

import math

import pytest

from traintop.store.compare import metrics
from traintop.store.ranges import parse_duration, parse_goto, parse_span
from traintop.store.run_data import RunData
from traintop.store.schema import StoreError
from traintop.store.stats import beyond_noise, mann_whitney_p, mean, quantile


def test_u_matches_the_textbook_normal_approximation():
    """U = 0 for two fully separated samples of 5: z = 12.5 / sqrt(25·11/12) = 2.611.
    The orders are shuffled so the series have no lag-1 autocorrelation to correct for."""
    p = mann_whitney_p([3, 1, 5, 2, 4], [8, 6, 10, 7, 9])
    assert p == pytest.approx(math.erfc(12.5 / math.sqrt(25 * 11 / 12) / math.sqrt(2)))


def test_u_of_identical_samples_is_not_significant():
    assert mann_whitney_p([1.0] * 50, [1.0] * 50) == 1.0
    assert mann_whitney_p([1, 2, 3, 4] * 20, [4, 3, 2, 1] * 20) > 0.5


def test_autocorrelated_steps_count_as_fewer_observations():
    """A slow stretch that lasts many steps is one event, not many independent ones."""
    drift_a = [1.0 + 0.001 * (i // 50) for i in range(200)]
    drift_b = [1.002 + 0.001 * (i // 50) for i in range(200)]
    shuffled_a, shuffled_b = ([d[(i * 37) % 200] for i in range(200)] for d in (drift_a, drift_b))
    assert mann_whitney_p(drift_a, drift_b) > 10 * mann_whitney_p(shuffled_a, shuffled_b)


def test_a_small_consistent_shift_is_below_the_noise_floor():
    a = [0.100 + 0.001 * ((i * 7) % 10) for i in range(2000)]
    b = [v * 1.01 for v in a]  # 1 % slower: U finds it, the 2 % floor calls it noise
    assert mann_whitney_p(a, b) < 1e-6
    assert beyond_noise(a, b, mean, 1.0) is False
    c = [v * 1.5 for v in a]
    assert beyond_noise(a, c, mean, 50.0) is True


def test_a_run_that_disagrees_with_itself_raises_its_own_floor():
    a = [0.1] * 500 + [0.2] * 500  # halves differ by 100 %
    b = [v * 1.3 for v in a]
    assert beyond_noise(a, b, mean, 30.0) is False


def test_quantiles_interpolate_like_numpy():
    assert quantile([1, 2, 3, 4], 0.5) == 2.5
    assert quantile(list(range(101)), 0.95) == 95


@pytest.mark.parametrize(
    ("text", "seconds"),
    [("90", 90), ("90s", 90), ("10m", 600), ("1h30m", 5400), ("1:30:00", 5400), ("1.5m", 90)],
)
def test_durations(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "m", "10x", "h10", "1:2:3:4"])
def test_bad_durations(text):
    with pytest.raises(ValueError):
        parse_duration(text)


def test_ranges_of_a_recording():
    assert parse_span("run.ttrec").start_s is None
    span = parse_span("run.ttrec@10m..20m")
    assert (span.path, span.start_s, span.end_s) == ("run.ttrec", 600, 1200)
    assert parse_span("a@b.ttrec@..5m").path == "a@b.ttrec"
    assert parse_span("run.ttrec@1h..").end_s is None
    with pytest.raises(StoreError, match="ends before it starts"):
        parse_span("run.ttrec@20m..10m")
    with pytest.raises(StoreError, match=r"FILE@START\.\.END"):
        parse_span("run.ttrec@1x..2m")


def test_goto_reads_offsets_and_clock_times(monkeypatch):
    start, end = 1_750_000_000.0, 1_750_003_600.0  # 15:06:40 UTC
    assert parse_goto("+10m", start, end) == start + 600
    assert parse_goto("10m", start, end) == start + 600
    assert parse_goto("-5m", start, end) == end - 300
    monkeypatch.setenv("TZ", "UTC")
    import time

    time.tzset()
    try:
        assert parse_goto("15:30", start, end) == start + 23 * 60 + 20
    finally:
        monkeypatch.undo()
        time.tzset()


def _run(label: str, step_s: list[float], gpu: list[float], verdicts: list[str]) -> RunData:
    run = RunData(label, job="train", ranks=1, start=0.0, end=sum(step_s))
    run.step_s, run.sample_s = step_s, [s / 32 for s in step_s]
    run.steps_per_s, run.samples_per_s = len(step_s) / sum(step_s), 32 * len(step_s) / sum(step_s)
    run.data_wait = [0.5] * len(step_s)
    run.gpu_util, run.verdicts = gpu, verdicts
    return run


def test_metrics_name_every_change_and_judge_it():
    slow = _run("a", [0.02 + 0.0001 * (i % 7) for i in range(500)], [40.0] * 60, ["data_cpu"] * 60)
    fast = _run("b", [0.01 + 0.0001 * (i % 7) for i in range(500)], [80.0] * 60, ["compute"] * 60)
    rows = {m.name: m for m in metrics(slow, fast)}
    assert rows["steps_per_s"].significant and rows["steps_per_s"].change_pct > 90
    assert rows["step_p50_s"].change_pct < -40
    assert rows["gpu_util_pct"].change_pct == 100.0
    assert (rows["verdict"].a, rows["verdict"].b, rows["verdict"].significant) == (
        "data_cpu",
        "compute",
        True,
    )
    assert rows["data_wait_share"].significant is False
    assert rows["gpu_power_w"].a is None and rows["gpu_power_w"].significant is None
