"""Table tests for views/format.py (units, None, bars, sparklines) and the row text the panels
build from it: whole fields that fit the width, never two fields run together."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.snapshot_fixtures import cpu, h100
from traintop.tui.widgets.cpu import summary_line
from traintop.tui.widgets.disk import fmt_await
from traintop.tui.widgets.gpu_row import badge_need, gpu_row, plan_layout, throttle_badge
from traintop.tui.widgets.hanging_list import hanging_lines
from traintop.views.format import (
    bar_cells,
    fmt_age,
    fmt_bytes,
    fmt_count,
    fmt_duration,
    fmt_interval,
    fmt_mhz,
    fmt_number,
    fmt_pct,
    fmt_rate,
    fmt_seconds,
    fmt_settled_age,
    fmt_share,
    fmt_watts,
    level_style,
    short_gpu_name,
    sparkline,
    split_bar,
    temp_style,
    truncate,
)
from traintop.views.source import next_interval


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "n/a"),
        (0, "0 B"),
        (1023, "1023 B"),
        (1536 * 2**20, "1.5 GiB"),
        (81_559 * 2**20, "79.6 GiB"),
        (3 * 2**40, "3.0 TiB"),
        (2**60, "1024.0 PiB"),
        (1023.6, "1.0 KiB"),  # as printed: never "1024 B"
        (1024 * 1023.96, "1.0 MiB"),  # never "1024.0 KiB"
    ],
)
def test_fmt_bytes(value, text):
    assert fmt_bytes(value) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (None, "n/a"),
        (0.0, "0 B/s"),
        (999, "999 B/s"),
        (999.6, "1.0 kB/s"),
        (999_960, "1.0 MB/s"),  # a rate wobbling at a unit's edge: never "1000.0 kB/s"
        (999_940, "999.9 kB/s"),
        (12_300_000, "12.3 MB/s"),
        (1.25e9, "1.2 GB/s"),
        (2.5e13, "25.0 TB/s"),
    ],
)
def test_fmt_rate(value, text):
    assert fmt_rate(value) == text


@pytest.mark.parametrize(
    ("func", "value", "text"),
    [
        (fmt_pct, None, "n/a"),
        (fmt_pct, 45.6, "46%"),
        (fmt_mhz, 1980, "1980 MHz"),
        (fmt_mhz, None, "n/a"),
        (fmt_watts, 699.6, "700 W"),
        (fmt_count, 9_671.2, "9671"),
        (fmt_count, 14_000, "14k"),
        (fmt_count, 1.4e6, "1.4M"),
        (fmt_count, 9_999.7, "10k"),  # compared as printed: never "10000"
        (fmt_count, 999_600, "1.0M"),  # never "1000k"
        (fmt_count, 999_499, "999k"),
        (fmt_count, None, "n/a"),
        (fmt_duration, 3 * 86400 + 4 * 3600 + 5 * 60, "3d 04:05"),
        (fmt_duration, 3725, "01:02:05"),
        (fmt_interval, 0.25, "0.25s"),
        (fmt_interval, 1.0, "1s"),
    ],
)
def test_small_formatters(func, value, text):
    assert func(value) == text


def test_pct_decimals():
    assert fmt_pct(166.25, 1) == "166.2%"


@pytest.mark.parametrize(
    ("text", "width", "out"),
    [
        ("python train.py", 20, "python train.py"),
        ("python train.py", 8, "python …"),
        ("abc", 0, ""),
    ],
)
def test_truncate(text, width, out):
    assert truncate(text, width) == out


@pytest.mark.parametrize(
    ("name", "short"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 80GB HBM3"),
        ("NVIDIA GeForce RTX 3090", "RTX 3090"),
        (None, "GPU"),
        ("Tesla V100-SXM2-16GB", "V100-SXM2-16GB"),
    ],
)
def test_short_gpu_name(name, short):
    assert short_gpu_name(name) == short


@pytest.mark.parametrize(
    ("pct", "width", "bar"),
    [
        (None, 4, "    "),
        (0, 4, "    "),
        (100, 4, "████"),
        (50, 4, "██  "),
        (150, 2, "██"),
        (-5, 2, "  "),
        (56.25, 2, "█▏"),
    ],
)
def test_bar_cells(pct, width, bar):
    assert bar_cells(pct, width) == bar


def test_split_bar_never_exceeds_width():
    assert split_bar([60, 30, 20], 10) == [6, 3, 1]
    assert split_bar([None, 50], 10) == [0, 5]


def test_sparkline_scales_and_pads():
    assert sparkline([0, 50, 100], 5) == "   ▄█"
    assert sparkline([0, 100], 2) == " █"
    assert sparkline([None, 100], 2) == " █"
    assert sparkline([25, 50, 100, 200], 2, top=200) == "▄█"
    assert sparkline([1, 2, 3], 0) == ""


@pytest.mark.parametrize(
    ("pct", "style"), [(None, "dim"), (10, "$success"), (80, "$warning"), (95, "$error")]
)
def test_level_style(pct, style):
    assert level_style(pct) == style


@pytest.mark.parametrize(
    ("temp", "slowdown", "style"),
    [
        (None, 89, "dim"),
        (58, 89, "$success"),
        (76, 89, "$warning"),
        (84, 89, "$error"),
        (84, None, "$error"),
        (70, 95, "$success"),
    ],
)
def test_temp_style_uses_the_gpus_own_threshold(temp, slowdown, style):
    assert temp_style(temp, slowdown) == style


@pytest.mark.parametrize(
    ("current", "step", "new"),
    [
        (1.0, 1, 2.0),
        (1.0, -1, 0.5),
        (0.25, -1, 0.25),
        (10.0, 1, 10.0),
        (3.0, 1, 5.0),
        (3.0, -1, 2.0),
    ],
)
def test_next_interval(current, step, new):
    assert next_interval(current, step) == new


# --- UI polish: whole fields, never cut mid-word ---------------------------------------------

HOT = 0x8 | 0x20  # HW Slowdown + SW Thermal Slowdown


@pytest.mark.parametrize(
    ("width", "expected"),
    [
        (40, "HW Slowdown, SW Thermal Slowdown"),
        (25, "HW Slow, SW Thermal Slow"),
        (14, "HW Slowdown +1"),
        (10, "HW Slow +1"),
    ],
)
def test_throttle_badge_shortens_by_whole_words(width, expected):
    assert throttle_badge(HOT, width)[0] == expected


def test_badge_need_is_the_widest_full_badge():
    gpus = [h100(0, throttling=True), h100(2, throttling=True), h100(5, throttling=True)]
    assert badge_need(gpus) == len("HW Slowdown, SW Thermal Slowdown")
    assert badge_need([h100(0, throttling=False)]) == 0


def test_wide_layout_gives_the_badge_its_room_before_pcie():
    layout = plan_layout(196, badge_need=32, fans=False)
    assert layout.badge >= 32 and layout.pcie and layout.spark > 0
    narrow = plan_layout(140, badge_need=32, fans=False)
    assert narrow.badge >= 32 and not narrow.pcie


def test_fan_column_only_when_some_gpu_has_a_fan():
    assert plan_layout(196, fans=True).fan
    assert not plan_layout(196, fans=False).fan


def test_gpu_row_fills_its_width_and_columns_align():
    layout = plan_layout(196, badge_need=32, fans=False)
    rows = [gpu_row(h100(i), layout, [50.0] * 12) for i in range(8)]
    assert "HW Slowdown, SW Thermal Slowdown" in rows[2].plain
    assert {row.plain.index("↑") for row in rows} == {rows[0].plain.index("↑")}
    assert all(row.cell_length <= 196 for row in rows)


@pytest.mark.parametrize(
    ("ms", "text"), [(None, "n/a"), (0.41, "0.4ms"), (12.34, "12.3ms"), (250, "250ms")]
)
def test_fmt_await_fits_six_cells(ms, text):
    assert fmt_await(ms) == text


def test_cpu_summary_drops_whole_fields_when_narrow():
    wide = summary_line(cpu(16), 200).plain
    narrow = summary_line(cpu(16), 76).plain
    assert "freq" in wide and "(8 cores)" in wide and "iowait" in wide
    assert "load" in narrow and "(8 co" not in narrow and not narrow.endswith("…")


def test_hanging_list_indents_continuation_under_the_text():
    lines = hanging_lines([("1. ", "alpha beta gamma delta epsilon zeta")], 20)
    assert lines[0].plain.startswith("1. alpha")
    assert all(line.plain.startswith("   ") for line in lines[1:]) and len(lines) > 1


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(None, "n/a"), (0.00042, "420 µs"), (0.0123, "12.3 ms"), (0.311, "311 ms"),
     (1.5, "1.50 s"), (754.0, "754 s"),
     (0.0009996, "1.00 ms"), (0.99996, "1.00 s"), (0.0099996, "10.0 ms")],  # as printed
)  # fmt: skip
def test_fmt_seconds(seconds, expected):
    assert fmt_seconds(seconds) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(None, None), (34.4, "34 s"), (119.0, "119 s"), (150.0, "2 min"), (9000.0, "2.5 h"),
     (3 * 86400.0, "3.0 d")],
)  # fmt: skip
def test_fmt_age(seconds, expected):
    assert fmt_age(seconds) == expected


@pytest.mark.parametrize(
    ("seconds", "expected"),
    [(None, None), (4.4, "4 s"), (15.0, "10 s"), (29.9, "20 s"), (119.0, "110 s"),
     (150.0, "2 min")],
)  # fmt: skip
def test_fmt_settled_age_counts_in_ten_second_steps_under_two_minutes(seconds, expected):
    assert fmt_settled_age(seconds) == expected


def test_fmt_number_and_share_keep_three_digits():
    assert [fmt_number(v) for v in (3.214, 41.23, 1644.2, None)] == ["3.21", "41.2", "1,644", "n/a"]
    assert [fmt_number(v) for v in (9.999, 99.97)] == ["10.0", "100"]  # as printed
    assert [fmt_share(v) for v in (0.621, 0.0, None)] == ["62%", "0%", "n/a"]


def test_80_columns_show_bandwidth_sm_and_tensor_active():
    gpus = [h100(i) for i in range(8)]
    row = gpu_row(gpus[1], plan_layout(80, badge_need(gpus), fans=False, gpm=True), []).plain
    assert len(row) <= 80
    g = gpus[1]
    for label, pct in (("bw", g.util_mem_pct), ("sm", g.sm_active_pct),
                       ("tc", g.tensor_active_pct), ("util", g.util_gpu_mean_pct)):  # fmt: skip
        assert f"{label}  {pct:.0f}%" in row, (label, row)


def test_no_gpm_columns_where_no_gpu_has_gpm_and_a_gap_where_one_lacks_it():
    plain = plan_layout(200, fans=False, gpm=False)
    assert not plain.gpm and not plain.gpm_more and plain.bw
    mixed = plan_layout(200, fans=False, gpm=True)
    old = replace(h100(0), sm_active_pct=None, tensor_active_pct=None)
    assert " sm  n/a tc  n/a " in gpu_row(old, mixed, []).plain


@pytest.mark.parametrize("value", [float("nan"), float("inf")])
def test_units_compared_as_printed_take_non_finite_values(value):
    """``round(x)`` raises on NaN and infinity where ``round(x, 0)`` does not: a reading gone
    bad must print, not take the panel down."""
    assert fmt_seconds(value).endswith(" s")
    assert [fmt_number(value), fmt_rate(value), fmt_count(value)]
