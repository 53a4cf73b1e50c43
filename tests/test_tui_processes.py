"""The process table's pure parts: order, tree, columns, command shortening, compact units."""

from __future__ import annotations

import pytest

from traintop.collectors.snapshot import ProcessSnapshot
from traintop.tui.widgets.processes import (
    compact_bytes,
    compact_rate,
    display_rows,
    header,
    plan_columns,
    row_content,
    short_command,
)


def proc(pid, cpu=0.0, *, ppid=1, group=None, rss=1 << 20, gpu=None, io=0.0, cmd="sleep 9"):
    return ProcessSnapshot(
        pid, ppid, "alice", cmd.split()[0], cmd, cpu, rss, io, 0.0, gpu, 1, group_pid=group
    )


TABLE = [
    proc(10, 5.0, rss=3 << 30),
    proc(20, 90.0, cmd="python train.py", gpu=70 << 30),
    proc(21, 99.0, group=20, ppid=20, io=5e6),
    proc(22, 10.0, group=20, ppid=20),
    proc(30, 1.0, ppid=2, cmd="[kworker/0:1]"),
    proc(2, 0.0, ppid=0, cmd="[kthreadd]"),
]


@pytest.mark.parametrize(
    ("sort", "order"),
    [
        ("cpu", [20, 21, 22, 10]),
        ("mem", [10, 20, 21, 22]),
        ("gpu", [20, 21, 22, 10]),
        ("io", [10, 20, 21, 22]),  # the trainer itself reads nothing: ties go by pid
        ("pid", [10, 20, 21, 22]),
    ],
)
def test_workers_stay_under_their_trainer_whatever_the_sort(sort, order):
    rows = display_rows(TABLE, sort)
    assert [row.proc.pid for row in rows] == order
    assert [row.prefix for row in rows if row.proc.group_pid == 20][-1] == "└─ "


def test_kernel_threads_hidden_unless_asked():
    assert {r.proc.pid for r in display_rows(TABLE, "pid", show_kernel=True)} >= {2, 30}
    assert not {r.proc.pid for r in display_rows(TABLE)} & {2, 30}


def test_tree_branches():
    rows = display_rows(TABLE, "cpu")
    assert [row.prefix for row in rows[:3]] == ["", "├─ ", "└─ "]


def test_eighty_columns_keep_command_room_and_drop_io():
    rows = display_rows(TABLE)
    narrow = [c.key for c in plan_columns(75, rows)]
    assert narrow == ["pid", "user", "cpu", "rss", "gpu"]
    assert "read" in [c.key for c in plan_columns(150, rows)]
    line = row_content(rows[0], plan_columns(75, rows), 75, selected=False).plain
    assert len(line) == 75 and line.rstrip().endswith("python train.py")


def test_header_arrow_marks_the_sort_column():
    columns = plan_columns(150, display_rows(TABLE))
    assert "CPU%▼" in header(columns, "cpu", 150).plain
    assert "PID▲" in header(columns, "pid", 150).plain
    assert "READ/s▼" in header(columns, "io", 150).plain


@pytest.mark.parametrize(
    ("cmdline", "shown"),
    [
        (
            "/root/.pyenv/versions/3.11.7/bin/python3.11 train.py --lr 3e-4",
            "python train.py --lr 3e-4",
        ),
        ("/usr/bin/dockerd -H fd://", "dockerd -H fd://"),
        ("[kworker/0:1-events]", "[kworker/0:1-events]"),
        ("sshd: alice@pts/0", "sshd: alice@pts/0"),
        ("", "fallback"),
    ],
)
def test_short_command(cmdline, shown):
    assert short_command(cmdline, "fallback") == shown


def test_compact_units():
    assert [compact_bytes(v) for v in (None, 780 << 10, 9.2 * 2**20, 24 << 30)] == [
        "n/a",
        "780K",
        "9.2M",
        "24G",
    ]
    assert [compact_rate(v) for v in (0, 950, 180e3, 2e6, 118e6)] == [
        "0",
        "950",
        "180K",
        "2.0M",
        "118M",
    ]


def test_compact_units_step_up_as_printed():
    """A size or rate at a unit's edge reads as the next unit, never five digits wide."""
    assert [compact_bytes(v) for v in (999.6 * 2**10, 9.97 * 2**20, 9.94 * 2**20)] == [
        "1.0M",
        "10M",
        "9.9M",
    ]
    assert [compact_rate(v) for v in (999.6, 999.4, 999_700)] == ["1.0K", "999", "1.0M"]


def test_state_and_wait_columns_stay_after_io_goes_and_leave_before_the_command_room():
    rows = display_rows(TABLE)
    keys = ["pid", "user", "state", "cpu", "wait", "rss", "gpu"]
    assert [c.key for c in plan_columns(90, rows)] == keys
    assert "wait" in [c.key for c in plan_columns(150, rows)]
    assert not {"state", "wait"} & {c.key for c in plan_columns(80, rows)}


def test_wait_cell_shows_the_queueing_share_and_na_when_unmeasured():
    queued = ProcessSnapshot(7, 1, "bob", "python", "python t.py", 40.0, 1, 0.0, 0.0,
                             cpu_wait_pct=61.25, state="R")  # fmt: skip
    columns = plan_columns(100, display_rows([queued]))
    line = row_content(display_rows([queued])[0], columns, 100, selected=False)
    assert line.plain.split()[2:5] == ["R", "40.0", "61.2"]
    assert any(str(span.style) == "$error" for span in line.spans)  # >= 50 %: waits as it runs
    assert any(str(span.style) == "bold $success" for span in line.spans)  # R: runnable
    unmeasured = row_content(display_rows(TABLE)[0], columns, 100, selected=False).plain
    assert unmeasured.split()[2:4] == ["90.0", "n/a"]  # no state letter, no wait figure


def test_sorting_by_wait_puts_the_most_queued_first():
    procs = [
        ProcessSnapshot(p, 1, "a", "x", "x", 1.0, 1, 0.0, 0.0, cpu_wait_pct=w)
        for p, w in ((11, 5.0), (12, 80.0), (13, None))
    ]
    assert [r.proc.pid for r in display_rows(procs, "wait")] == [12, 11, 13]


def test_sm_column_only_where_some_process_has_a_share():
    from dataclasses import replace as _replace

    from traintop.collectors.snapshot import ProcessSnapshot
    from traintop.tui.widgets.processes import Row, plan_columns, row_content

    holder = ProcessSnapshot(7, 1, "u", "python", "python train.py", 99.0, 1 << 30,
                             None, None, gpu_mem_bytes=1 << 30, gpu_sm_pct=57.0)  # fmt: skip
    other = _replace(holder, pid=8, gpu_mem_bytes=None, gpu_sm_pct=None)
    rows = [Row(holder), Row(other)]
    columns = plan_columns(120, rows)
    assert "sm" in [c.key for c in columns]
    assert " 57 " in row_content(rows[0], columns, 120, False).plain
    assert "sm" not in [c.key for c in plan_columns(120, [Row(other)])]


def test_rows_that_read_the_same_cpu_stay_in_pid_order():
    """1.4999999999999987 % (three jiffies over a float's rounding) and 1.5 % both read 1.5:
    ordered by the figure shown, then pid, they never trade places from tick to tick."""
    tick_a = [proc(5, 1.5), proc(10, (0.3 - 0.27) / 2 * 100)]
    tick_b = [proc(5, (0.3 - 0.27) / 2 * 100), proc(10, 1.5)]
    for table in (tick_a, tick_b):
        assert [row.proc.pid for row in display_rows(table, "cpu")] == [5, 10]
    assert [row.proc.pid for row in display_rows([proc(5, 1.0), proc(10, 1.5)])] == [10, 5]


def test_compact_units_take_non_finite_values():
    assert [compact_rate(float("nan")), compact_bytes(float("inf"))] == ["nanP", "infP"]
