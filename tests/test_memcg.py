"""A rank's memory cgroup: v1 and v2 on trees laid out as /sys/fs/cgroup, v1 for real.

The v2 files are those of a real cgroup v2 OOM kill (a python3 service in a 512 MiB
``memory.max``: ``memory.peak`` at the limit, ``memory.events`` max 35, oom 1, oom_kill 1), the
v1 ones in the formats this VM's kernel writes (Linux 6.18, /sys/fs/cgroup/memory).  The trend,
the time left and the readers' cadence run on a fake clock.
"""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from tests.cgroup_files import Clock, write_files
from traintop.collectors.cgroup import CgroupReader
from traintop.collectors.memcg import MemcgReader
from traintop.collectors.memory_state import time_left_s
from traintop.collectors.trend import History, trend

PID = 4242
MIB = 1 << 20
V1_UNLIMITED = "9223372036854771712\n"
V2_EVENTS = "low 0\nhigh 0\nmax 35\noom 1\noom_kill 1\noom_group_kill 0\n"
V2_STAT = (
    "anon 522624000\nfile 8192000\nkernel 9134080\nactive_file 4096000\ninactive_file 4096000\n"
)


def _proc(tmp_path: Path, cgroup: str) -> Path:
    write_files(tmp_path / "proc", {f"{PID}/cgroup": cgroup})
    return tmp_path / "proc"


def _stat(anon: int) -> str:
    """A v1 memory.stat: 100 MiB of page cache beside ``anon`` bytes of anonymous memory."""
    return (f"cache {100 * MIB}\nrss {anon}\nshmem 0\ntotal_cache {100 * MIB}\n"
            f"total_rss {anon}\ntotal_shmem 0\ntotal_inactive_file {60 * MIB}\n")  # fmt: skip


def _v1(tmp_path: Path, usage: int = 900 * MIB, failcnt: int = 0, kills: int = 0) -> Path:
    root = tmp_path / "cg"
    write_files(root, {
        "memory/memory.limit_in_bytes": V1_UNLIMITED,
        "memory/slurm/memory.limit_in_bytes": f"{2048 * MIB}\n",
        "memory/slurm/job7/memory.limit_in_bytes": f"{1200 * MIB}\n",
        "memory/slurm/job7/memory.usage_in_bytes": f"{usage}\n",
        "memory/slurm/job7/memory.max_usage_in_bytes": f"{1100 * MIB}\n",
        "memory/slurm/job7/memory.failcnt": f"{failcnt}\n",
        "memory/slurm/job7/memory.stat": _stat(usage - 100 * MIB),
        "memory/slurm/job7/memory.oom_control": f"oom_kill_disable 0\nunder_oom 0\n"
                                                f"oom_kill {kills}\n",
    })  # fmt: skip
    return root


def _v2(tmp_path: Path) -> Path:
    root = tmp_path / "cg2"
    write_files(root, {
        "cgroup.controllers": "cpuset cpu io memory pids\n",
        "app.slice/memory.max": "max\n",
        "app.slice/svc.service/memory.max": "536870912\n",
        "app.slice/svc.service/memory.current": "536600000\n",
        "app.slice/svc.service/memory.peak": "536870912\n",
        "app.slice/svc.service/memory.events": V2_EVENTS,
        "app.slice/svc.service/memory.stat": V2_STAT,
        "app.slice/svc.service/memory.pressure":
            "some avg10=12.00 avg60=3.00 avg300=1.00 total=500000\n"
            "full avg10=4.00 avg60=1.00 avg300=0.30 total=100000\n",
    })  # fmt: skip
    return root


def test_v1_reads_the_least_limit_up_the_tree_and_its_counters(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "4:memory:/slurm/job7\n0::/\n")
    reader = MemcgReader(CgroupReader(root=_v1(tmp_path), proc=proc), Clock())
    found = reader.read(PID)
    assert found is not None and found.version == 1 and found.cgroup == "/slurm/job7"
    assert found.limit_bytes == 1200 * MIB  # the job's own, under its parent's 2 GiB
    assert found.usage_bytes == 900 * MIB and found.anon_bytes == 800 * MIB  # the cache left out
    assert found.headroom_bytes == 400 * MIB
    assert (found.limit_hits, found.oom_events, found.oom_kills) == (0, None, 0)


def test_v2_reads_memory_max_events_and_its_own_pressure(tmp_path: Path) -> None:
    proc = _proc(tmp_path, "0::/app.slice/svc.service\n")
    reader = MemcgReader(CgroupReader(root=_v2(tmp_path), proc=proc), Clock())
    found = reader.read(PID)
    assert found is not None and found.version == 2
    assert found.limit_bytes == 536870912 and found.peak_bytes == 536870912
    assert found.anon_bytes == 522624000  # anon (no shmem line: 0)
    assert (found.limit_hits, found.oom_events, found.oom_kills) == (35, 1, 1)
    assert found.pressure is not None and found.pressure.some_avg10 == 12.0


def test_no_limit_reads_as_none(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    write_files(root, {"memory/memory.limit_in_bytes": V1_UNLIMITED,
                  "memory/memory.usage_in_bytes": "1000\n"})  # fmt: skip
    reader = MemcgReader(CgroupReader(root=root, proc=_proc(tmp_path, "4:memory:/\n")), Clock())
    found = reader.read(PID)
    assert found is not None and found.limit_bytes is None and found.headroom_bytes is None


def test_the_working_set_trend_comes_from_readings_every_second_once_half_full(
    tmp_path: Path,
) -> None:
    """Read every 2 s; once its anonymous memory is half the limit, every second, so a climb
    to it is timed within seconds: +10 MiB a second from 800 MiB of 1200 reaches it in 40 s."""
    clock, root = Clock(), _v1(tmp_path)
    reader = MemcgReader(CgroupReader(root=root, proc=_proc(tmp_path, "4:memory:/slurm/job7\n"),
                                      clock=clock), clock)  # fmt: skip
    stat = root / "memory/slurm/job7/memory.stat"
    for second in range(5):
        stat.write_text(_stat((800 + 10 * second) * MIB))
        found = reader.read(PID)
        clock.now += 1.0
    assert found is not None and found.growth_bytes_per_s == pytest.approx(10 * MIB, rel=1e-4)
    left = time_left_s(found.headroom_bytes, found.growth_bytes_per_s)
    assert left == pytest.approx(36.0, rel=1e-3)


def test_a_limited_group_is_read_every_second_until_it_has_a_trend(tmp_path: Path) -> None:
    """A limited group far from full: its first three readings a tick apart (a trend 2 s
    after the monitor starts, before a lesser verdict is shown), then every 2 s; ticks come a
    little early (0.95 s apart), and count as due."""
    clock, root = Clock(), _v1(tmp_path)
    reader = MemcgReader(CgroupReader(root=root, proc=_proc(tmp_path, "4:memory:/slurm/job7\n"),
                                      clock=clock), clock)  # fmt: skip
    stat = root / "memory/slurm/job7/memory.stat"
    growth = []
    for second in range(6):
        stat.write_text(_stat((300 + 10 * second) * MIB))
        found = reader.read(PID)
        assert found is not None
        growth.append(found.growth_bytes_per_s)
        clock.now += 0.95
    assert growth[:2] == [None, None]
    assert growth[2] == pytest.approx(10 * MIB / 0.95, rel=1e-4)  # three readings, 1.9 s
    assert found.anon_bytes == 340 * MIB  # second 5 not read: every 2 s after the third
    assert reader.read(PID) is not None and reader.read(PID).anon_bytes == 350 * MIB


def test_a_trend_needs_steady_steps_and_a_span() -> None:
    assert trend([(0.0, 0.0), (1.0, 10.0), (2.0, 20.0), (3.0, 30.0)]) == pytest.approx(10.0)
    assert trend([(0.0, 0.0), (1.0, 10.0)]) is None  # two readings, 1 s: too few
    assert trend([(0.0, 0.0), (1.0, 30.0), (2.0, 0.0), (3.0, 30.0), (4.0, 0.0)]) is None
    history = History(span_s=5.0)
    for t in range(10):
        history.add(float(t), 100.0 - t)
    assert history.trend() == pytest.approx(-1.0)
    assert time_left_s(100, -1.0) is None and time_left_s(None, 5.0) is None


def test_the_cgroup_of_a_rank_that_ended_is_read_again_by_its_path(tmp_path: Path) -> None:
    """The witness of an end reads the counters of a cgroup whose process is gone."""
    proc = _proc(tmp_path, "4:memory:/slurm/job7\n")
    root = _v1(tmp_path)
    reader = MemcgReader(CgroupReader(root=root, proc=proc), Clock())
    before = reader.read(PID)
    assert before is not None and reader.last(PID) == before
    (root / "memory/slurm/job7/memory.oom_control").write_text(
        "oom_kill_disable 0\nunder_oom 0\noom_kill 1\n"
    )
    after = reader.again(before)
    assert after is not None and after.oom_kills == 1
    assert reader.limit_of("/slurm/job7") == 1200 * MIB
    assert reader.limit_of("/gone") is None


V1_MEMORY = Path("/sys/fs/cgroup/memory")


def test_a_real_v1_memory_cgroup() -> None:
    """This VM's writable v1 memory hierarchy: a process moved into a group with a limit."""
    if os.geteuid() != 0 or not (V1_MEMORY / "memory.limit_in_bytes").exists():
        pytest.skip("needs root and a v1 memory hierarchy")
    group = V1_MEMORY / f"tt-memcg-test-{os.getpid()}"
    group.mkdir()
    child = subprocess.Popen(["sleep", "30"])
    try:
        (group / "memory.limit_in_bytes").write_text(str(256 * MIB))
        (group / "cgroup.procs").write_text(str(child.pid))
        found = MemcgReader(CgroupReader(), time.monotonic).read(child.pid)
        assert found is not None and found.version == 1
        assert found.cgroup == "/" + group.name
        assert found.limit_bytes == 256 * MIB and found.usage_bytes is not None
        assert found.oom_kills == 0 and found.limit_hits == 0
    finally:
        child.kill()
        child.wait()
        for _ in range(50):
            try:
                group.rmdir()
                break
            except OSError:
                time.sleep(0.1)
