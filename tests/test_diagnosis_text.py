"""The verdicts' own number words (diagnosis/text.py): units as the evidence prints them."""

from __future__ import annotations

import pytest

from traintop.diagnosis.text import rate, seconds


@pytest.mark.parametrize(
    ("bytes_per_s", "text"),
    [(0, "0 B/s"), (999.4, "999 B/s"), (3.1e6, "3.1 MB/s"), (2.5e13, "25.0 TB/s"),
     (999.6, "1.0 kB/s"), (999_960, "1.0 MB/s"), (999_940, "999.9 kB/s")],  # at the edges
)  # fmt: skip
def test_rate_steps_up_where_it_would_print_1000(bytes_per_s, text):
    assert rate(bytes_per_s) == text


@pytest.mark.parametrize(
    ("value", "text"),
    [(0.0123, "12 ms"), (0.9994, "999 ms"), (0.9996, "1.0 s"), (1.0, "1.0 s"), (42.0, "42.0 s")],
)  # fmt: skip
def test_seconds_are_seconds_where_milliseconds_would_print_1000(value, text):
    assert seconds(value) == text
