"""Each process's own memory from ``smaps_rollup``: the parse (text copied from this VM), the
cadence and the budget on a fake /proc and clock, and a real forked child whose private pages
grow as it writes its copy of the parent's list (copy on write)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.cgroup_files import Clock
from traintop.collectors.unique_memory import UniqueMemoryReader, parse_rollup, readable

ROLLUP = """55ff8f1cb000-7ffc2cbe3000 ---p 00000000 00:00 0                          [rollup]
Rss:                1768 kB
Pss:                 230 kB
Pss_Dirty:           112 kB
Pss_Anon:            112 kB
Pss_File:            118 kB
Pss_Shmem:             0 kB
Shared_Clean:       1616 kB
Shared_Dirty:          0 kB
Private_Clean:        40 kB
Private_Dirty:       112 kB
Referenced:         1768 kB
Anonymous:           112 kB
Swap:                  8 kB
SwapPss:               8 kB
Locked:                0 kB
"""


def test_parse_rollup_reads_uss_pss_and_swap() -> None:
    assert parse_rollup(ROLLUP.encode()) == (152 * 1024, 230 * 1024, 8 * 1024)
    assert parse_rollup(b"Rss: 10 kB\n") is None


def _proc(tmp_path: Path, pids: dict[int, int]) -> Path:
    """A fake /proc whose processes own ``uss_kib`` each; started at boot."""
    for pid, uss in pids.items():
        folder = tmp_path / str(pid)
        folder.mkdir(parents=True, exist_ok=True)
        text = ROLLUP.replace("Private_Dirty:       112", f"Private_Dirty:  {uss - 40}")
        (folder / "smaps_rollup").write_text(text)
        (folder / "stat").write_text(f"{pid} (python) S " + "0 " * 16 + "0 0 0\n")
    return tmp_path


def test_each_process_is_read_at_most_every_five_seconds_and_grows(tmp_path: Path) -> None:
    clock = Clock(1000.0)
    reader = UniqueMemoryReader(str(_proc(tmp_path, {1: 1000, 2: 2000})), clock, budget=1.0)
    (first,) = [m for m in reader.read([1]) if m.pid == 1]
    assert first.uss_bytes == 1000 * 1024 and first.growth_bytes_per_s is None
    for step in range(1, 6):
        clock.now += 2.5
        _proc(tmp_path, {1: 1000 + 2560 * step})  # +1 MiB a second
        reader.read([1, 2])
    (one,) = [m for m in reader.read([1, 2]) if m.pid == 1]
    assert one.growth_bytes_per_s == pytest.approx(1 << 20, rel=0.01)
    assert one.age_s <= 2.5 and one.process_age_s is not None


def test_the_budget_spaces_the_reads(tmp_path: Path) -> None:
    """After a read of t seconds the next waits t / budget: a tiny budget reads one a call."""
    clock = Clock(1000.0)
    reader = UniqueMemoryReader(str(_proc(tmp_path, {1: 100, 2: 100, 3: 100})), clock,
                                budget=1e-9)  # fmt: skip
    assert len(reader.read([1, 2, 3])) == 1
    clock.now += 6.0
    assert len(reader.read([1, 2, 3])) == 1  # still waiting out the first read's cost
    assert reader.spent_s > 0


def test_a_forked_childs_own_memory_grows_as_it_writes_its_copy() -> None:
    """Copy on write, measured: after the fork the child owns next to nothing of the list;
    touching every element's reference count copies the pages into it."""
    if not readable():
        pytest.skip("no smaps_rollup")
    items = [float(i) for i in range(2_000_000)]  # ~64 MB of float objects and list
    go_read, go_write = os.pipe()
    done_read, done_write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: wait, touch every float, say so, wait
        os.read(go_read, 1)
        total = 0.0
        for x in items:
            total += x
        os.write(done_write, b"x")
        time.sleep(30)
        os._exit(0)
    try:
        reader = UniqueMemoryReader(budget=1.0, every_s=0.0)
        (before,) = reader.read([pid])
        os.write(go_write, b"g")
        os.read(done_read, 1)
        (after,) = reader.read([pid])
        assert after.uss_bytes - before.uss_bytes > 40 << 20
    finally:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
