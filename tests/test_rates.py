"""Rate math tables: first sample, wrap, reset, devices coming and going, dt = 0."""

from collections import namedtuple

import pytest

from traintop.collectors.rates import counter_delta, cpu_util, measured, rate, rates_by_key

U32 = 1 << 32
U64 = 1 << 64


@pytest.mark.parametrize(
    ("prev", "cur", "expected"),
    [
        (100, 150, 50),
        (150, 150, 0),
        (U32 - 10, 5, 15),  # 32-bit wrap
        (U64 - 10, 5, 15),  # 64-bit wrap
        (1000, 10, None),  # small counter restarted: a reset, not a 4 GiB jump
        (U32 * 5, 10, None),  # 64-bit counter restarted
        (U32 // 4, 10, None),  # wrapped delta would exceed half the 32-bit range
    ],
)
def test_counter_delta(prev, cur, expected):
    assert counter_delta(prev, cur) == expected


@pytest.mark.parametrize(
    ("prev", "cur", "dt", "expected"),
    [
        (None, 100, 1.0, None),  # first sample
        (100, 300, 2.0, 100.0),
        (100, 300, 0.0, None),  # dt = 0
        (100, 300, -1.0, None),  # clock went backwards
        (U32 - 100, 100, 0.5, 400.0),  # wrap
        (5000, 10, 1.0, None),  # reset
        (100, None, 1.0, None),
    ],
)
def test_rate(prev, cur, dt, expected):
    assert rate(prev, cur, dt) == expected


def test_rates_by_key_follows_current_devices():
    prev = {"sda": 100, "gone": 7}
    cur = {"sda": 300, "new": 50}
    assert rates_by_key(prev, cur, 2.0) == {"sda": 100.0, "new": None}


def test_rates_by_key_first_tick_is_all_none():
    assert rates_by_key({}, {"eth0": 5}, 1.0) == {"eth0": None}


Times = namedtuple(
    "Times",
    "user nice system idle iowait irq softirq steal guest guest_nice",
)


def _t(user=0.0, nice=0.0, system=0.0, idle=0.0, iowait=0.0, irq=0.0, softirq=0.0, guest=0.0):
    return Times(user, nice, system, idle, iowait, irq, softirq, 0.0, guest, 0.0)


def test_cpu_util_splits_like_htop():
    prev = _t()
    cur = _t(user=30, nice=10, system=10, idle=40, iowait=5, irq=3, softirq=2)
    util = cpu_util(prev, cur)
    assert util.busy_pct == pytest.approx(55.0)
    assert util.user_pct == pytest.approx(40.0)
    assert util.system_pct == pytest.approx(15.0)
    assert util.iowait_pct == pytest.approx(5.0)


def test_cpu_util_ignores_guest_time_already_in_user():
    util = cpu_util(_t(), _t(user=50, idle=50, guest=50))
    assert util.busy_pct == pytest.approx(50.0)


@pytest.mark.parametrize(
    ("prev", "cur"),
    [(None, _t(user=1)), (_t(user=5, idle=5), _t(user=5, idle=5))],
    ids=["first-sample", "no-time-passed"],
)
def test_cpu_util_unavailable(prev, cur):
    assert cpu_util(prev, cur) is None


def test_cpu_util_clamps_backwards_iowait():
    util = cpu_util(_t(idle=10, iowait=10), _t(user=50, idle=60, iowait=8))
    assert util.busy_pct == pytest.approx(50.0)
    assert util.iowait_pct == 0.0


def test_cpu_util_without_linux_fields():
    Basic = namedtuple("Basic", "user system idle")
    util = cpu_util(Basic(0, 0, 0), Basic(25, 25, 50))
    assert (util.busy_pct, util.iowait_pct) == (50.0, None)


def test_cpu_share_from_jiffies_is_the_share_the_jiffies_give():
    """3 jiffies busy of 200 is 1.5 %: float seconds made it 1.4999999999999998, drawn "1%"
    where the true share draws "2%"."""
    start = [12_345_678, 2_000, 3_456_789, 98_765_432]  # user nice system idle, in jiffies
    deltas = [(2, 0, 1, 197), (1, 0, 2, 197), (3, 0, 0, 197), (0, 0, 3, 197), (2, 0, 1, 197)]
    for delta in deltas:
        prev = _t(*(j / 100 for j in start))
        cur = _t(*((j + d) / 100 for j, d in zip(start, delta, strict=True)))
        busy = cpu_util(prev, cur).busy_pct
        assert busy == 1.5
        start = [j + d for j, d in zip(start, delta, strict=True)]


def test_a_rate_keeps_the_digits_a_reading_has_and_drops_the_clock_noise():
    assert rate(0, 1, 3.0) == 0.333333
    assert rate(0, 850_049_999, 1.0000000001) == 850_050_000.0
    assert rate(0, 123, 1.0) == 123.0  # exact readings stay exact
    assert measured(1e-9 / 3) == 3.33333e-10
