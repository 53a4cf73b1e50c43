"""Processes that change places move on the terminal as lines, not as redrawn rows.

A near-idle process that wakes climbs the table and pushes every row between down by one; the
terminal driver has the terminal move those lines (a scroll region, line deletes and inserts)
and sends only what differs after the move.  Checked on the minimal terminal of
tests/test_sgr.py, which moves lines as a terminal does: the screen the writes leave is the
screen a full repaint draws, tick after tick, with a toast over the table or without.
"""

from __future__ import annotations

import asyncio
import random
from dataclasses import replace

import pytest
from textual._compositor import ChopsUpdate, Compositor, LayoutUpdate

from tests.snapshot_fixtures import EPOCH, ScriptedSource, _proc, machine
from tests.test_sgr import replay
from tests.test_tui_terminal import _full_repaint, _writes
from traintop.collectors.snapshot import ProcessSnapshot
from traintop.tui import chops
from traintop.tui.app import TraintopApp, build_app
from traintop.views.row_moves import Moves, plan_moves


@pytest.fixture(autouse=True)
def terminal_renders(monkeypatch: pytest.MonkeyPatch) -> None:
    """The driver's renders, for this test only (the driver installs them for good)."""
    monkeypatch.setattr(ChopsUpdate, "render_segments", chops.render_segments)
    monkeypatch.setattr(LayoutUpdate, "render_segments", chops.render_layout)
    monkeypatch.setattr(Compositor, "render_partial_update", chops.render_partial_update)
    monkeypatch.setattr(Compositor, "render_full_update", chops.render_full_update)
    monkeypatch.setattr(chops, "_erase_blanks", True)  # as on a terminal with bce, or tmux


def _apply(moves: Moves, old: list) -> list:
    """The rows a terminal shows after ``moves`` (a blank is ``None``)."""
    rows = list(old)
    for row, count in moves.ops:
        if count < 0:
            rows = rows[:row] + rows[row - count :] + [None] * -count
        else:
            rows = (rows[:row] + [None] * count + rows[row:])[: len(old)]
    return rows


@pytest.mark.parametrize(
    ("old", "new", "drawn"),
    [
        ([1, 2, 3, 4, 5, 6], [5, 1, 2, 3, 4, 6], 1),  # one climbs
        ([1, 2, 3, 4, 5, 6], [2, 3, 4, 5, 1, 6], 1),  # one sinks
        ([1, 2, 3, 4, 5, 6], [1, 9, 2, 3, 4, 5], 1),  # one new, the last pushed off
        ([1, 2, 3, 4, 5, 6], [1, 3, 4, 5, 6, None], 1),  # one gone, a blank enters
        ([1, 2, 3, 4, 5, 6], [6, 5, 1, 2, 3, 4], 2),
        ([1, 2, 3, 4, 5, 6], [7, 2, 3, 8, 9, 4], 3),  # 1 -> 7 redrawn in place
    ],
)
def test_moves_leave_only_the_moved_rows_to_draw(old: list, new: list, drawn: int) -> None:
    moves = plan_moves(old, new)
    assert moves is not None
    shown = _apply(moves, old)
    assert [None if s is None else old[s] for s in moves.source] == shown
    assert sum(s is None or old[s] != new[j] for j, s in enumerate(moves.source)) == drawn


def test_no_moves_where_rows_stay_or_change_in_place() -> None:
    assert plan_moves([1, 2, 3], [1, 2, 3]) is None
    assert plan_moves([1, 2, 3], [1, 7, 3]) is None  # redrawn in place, as before
    assert plan_moves([1, 2, 3], [1, 2]) is None


_COMMANDS = (
    "/usr/sbin/sshd -D -o AuthorizedKeysCommand=/usr/bin/keys-{pid}",
    "/usr/lib/systemd/systemd-journald",
    "bash /dev/fd/{pid}",
    "python -m jupyter lab --port {pid} --no-browser --ip 0.0.0.0",
    "/opt/conda/bin/python /home/alice/runs/sweep-{pid}/eval.py --ckpt last.pt",
    "containerd-shim-runc-v2 -namespace moby -id 9f{pid}ab -address /run/containerd.sock",
    "tmux new-session -d -s run{pid}",
    "sleep 240",
)
"""Commands of every length, as on a real box (rows that trade places differ in most cells)."""


def _daemons(tick: int, rng: random.Random) -> tuple[ProcessSnapshot, ...]:
    """Sixty sleepers of which a few wake each tick (and climb the table), one that comes and
    goes, and a busy trainer on top."""
    procs = [_proc(4000, "alice", "python", "python train.py --steps 100000", 99.0, 2 << 30)]
    for pid in range(100, 160):
        cpu = rng.choice((0.5, 1.0, 1.5)) if rng.random() < 0.08 else 0.0
        cmd = _COMMANDS[pid % len(_COMMANDS)].format(pid=pid)
        procs.append(_proc(pid, "root", f"daemon-{pid}", cmd, cpu, (pid % 7 + 1) << 20))
    if tick % 3:
        procs.append(_proc(300 + tick, "root", "sh", "sh -c cat >> /tmp/pty.log", 0.0, 1 << 20))
    return tuple(procs)


async def _moving_ticks(count: int, toast_at: int | None = None) -> list[str]:
    """Each tick's writes, checked against a full repaint; returns them."""
    now, rng = [EPOCH], random.Random(35)
    source = ScriptedSource([])
    app: TraintopApp = build_app(source, clock=lambda: now[0], hostname="gpu-node-07")
    base = machine(1, tick=0)
    sent: list[str] = []
    async with app.run_test(size=(200, 50)) as pilot:
        source.push(replace(base, processes=_daemons(0, rng)))
        await pilot.pause()
        screen = _full_repaint(app)
        written = _writes(app)
        for tick in range(1, count):
            now[0] = EPOCH + tick
            if tick == toast_at:
                app.notify("a toast over the table", timeout=30)
            source.push(replace(base, processes=_daemons(tick, rng)))
            await pilot.pause()
            for data in written:
                screen = replay(data, screen)
            sent += written
            written.clear()
            assert screen == _full_repaint(app), f"tick {tick}"
    return sent


def test_rows_moved_on_the_terminal_leave_the_screen_a_full_repaint_draws() -> None:
    sent = asyncio.run(_moving_ticks(25))
    assert sum("L" in data.split("\x1b[r")[0] for data in sent if "\x1b[r" in data) >= 5


def test_a_toast_over_the_table_has_its_rows_redrawn_instead() -> None:
    sent = asyncio.run(_moving_ticks(8, toast_at=3))
    assert sent


def test_moves_cut_what_a_climbing_row_sends(monkeypatch: pytest.MonkeyPatch) -> None:
    moved = sum(map(len, asyncio.run(_moving_ticks(15))))
    monkeypatch.setattr(chops, "request_moves", lambda *args: False)
    redrawn = sum(map(len, asyncio.run(_moving_ticks(15))))
    assert moved < 0.8 * redrawn


def test_a_row_handed_back_unchanged_is_not_drawn_again(monkeypatch: pytest.MonkeyPatch) -> None:
    """The collector hands back the same row object for a process that slept through the
    tick; the table keeps that row's line instead of formatting it again."""
    import traintop.tui.widgets.process_table as table

    drawn: list[int] = []
    original = table.row_content
    monkeypatch.setattr(table, "row_content", lambda row, *a: drawn.append(row.proc.pid) or
                        original(row, *a))  # fmt: skip
    procs = _daemons(0, random.Random(1))
    woke = replace(procs[5], cpu_pct=procs[5].cpu_pct + 1.0)

    async def run() -> None:
        source = ScriptedSource([])
        app = build_app(source, clock=lambda: EPOCH, hostname="gpu-node-07")
        async with app.run_test(size=(200, 50)) as pilot:
            source.push(replace(machine(1), processes=procs))
            await pilot.pause()
            drawn.clear()
            source.push(replace(machine(1), processes=(*procs[:5], woke, *procs[6:])))
            await pilot.pause()

    asyncio.run(run())
    assert drawn == [woke.pid]
