"""traintop.collectors.turns: which live ranks are summarised on a tick, simulated over many
ticks."""

from __future__ import annotations

from traintop.collectors.turns import MAX_HOLD_S, RANKS_PER_TICK, in_turn, rounds


def simulate(ranks: int, ticks: int, interval_s: float, focus: str | None = None, size: int = 8):
    """Each tick's due ranks, and the oldest snapshot shown on any tick, from the first, for
    jobs of ``size`` ranks named j0, j1, ..."""
    jobs = [f"j{i // size}" for i in range(ranks)]
    last: list[float | None] = [None] * ranks
    dues, oldest = [], 0.0
    for tick in range(ticks):
        now = 1000.0 + tick * interval_s
        due = in_turn(last, jobs, focus, now, interval_s if tick else None)
        last = [now if d else t for d, t in zip(due, last, strict=True)]
        oldest = max(oldest, max(now - t for t in last))
        dues.append({i for i, d in enumerate(due) if d})
    return dues, oldest


def whole_jobs(due: set[int], size: int = 8) -> bool:
    return all({i // size * size + k for k in range(size)} <= due for i in due)


def test_up_to_16_ranks_every_rank_every_tick():
    dues, oldest = simulate(RANKS_PER_TICK, 6, 1.0)
    assert all(due == set(range(RANKS_PER_TICK)) for due in dues) and oldest == 0.0


def test_64_ranks_take_turns_of_16_job_by_job():
    dues, oldest = simulate(64, 13, 1.0)
    assert dues[0] == set(range(64))  # all new: the first frame is whole
    assert dues[1:5] == [set(range(k * 16, k * 16 + 16)) for k in range(4)]
    assert dues[5:9] == dues[1:5] and dues[9:13] == dues[1:5]
    assert oldest == 3.0  # at 1 s ticks a rank waits at most 3 ticks


def test_the_focused_job_every_tick_and_the_others_whole_in_turns():
    dues, oldest = simulate(64, 30, 1.0, focus="j1")
    focused = set(range(8, 16))
    assert all(focused <= due for due in dues)
    assert all(whole_jobs(due - focused) for due in dues)  # an even share is 14: whole jobs
    assert sum(len(due) for due in dues[2:30]) / 28 <= 8 + 16 and oldest == 3.0


def test_a_job_of_more_than_16_ranks_takes_its_turns_in_parts():
    dues, oldest = simulate(64, 9, 1.0, size=64)
    assert [len(due) for due in dues[1:]] == [16] * 8 and oldest == 3.0
    dues, _ = simulate(64, 9, 1.0, focus="j0", size=64)
    assert all(len(due) == 64 for due in dues)  # on screen: every tick


def test_no_snapshot_is_held_the_hold_limit_at_slow_intervals():
    for interval in (0.25, 0.5, 1.0, 1.5, 2.0, 3.0, 5.0, 10.0):
        _, oldest = simulate(128, 40, interval, focus="j3")
        assert oldest < MAX_HOLD_S, interval
    assert rounds(64, 5.0) == 1 and rounds(64, 2.0) == 2 and rounds(64, 0.25) == 4


def test_a_new_rank_is_summarised_at_once_and_joins_the_turns():
    last: list[float | None] = [10.0] * 47 + [None]
    due = in_turn(last, [f"j{i}" for i in range(48)], None, 11.0, 1.0)
    assert due[47] and sum(due) == 16  # the new one, and 15 of those waiting longest
    assert rounds(48) == 3 and rounds(49) == 4 and rounds(0) == 1


def test_a_late_tick_summarises_what_waited_too_long():
    last: list[float | None] = [100.0] * 32 + [103.5] * 32
    due = in_turn(last, [f"j{i // 8}" for i in range(64)], None, 104.0, 1.0)
    assert all(due[:32]) and not any(due[32:])  # held 4 s: due, even beyond an even share


def test_ranks_of_a_job_found_on_different_ticks_come_to_share_their_turns():
    jobs = [f"j{i // 8}" for i in range(64)]
    last: list[float | None] = [100.0 + (i % 8 >= 5) + (i // 8) % 3 for i in range(64)]
    dues = []
    for tick in range(1, 9):
        due = in_turn(last, jobs, "j7", 103.0 + tick, 1.0)
        last = [103.0 + tick if d else t for d, t in zip(due, last, strict=True)]
        dues.append({i for i, d in enumerate(due) if d})
    assert all(whole_jobs(due) for due in dues[1:])
