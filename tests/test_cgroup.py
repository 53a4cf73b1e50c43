"""The CPUs a job may use, from its cgroup: v2 on a fake tree, v1 on a fake tree and for real.

The parsers and the reader run against temporary directories laid out as ``/sys/fs/cgroup``
and ``/proc`` (v2 unified, v1 per controller); the end-to-end test puts a real loader-bound CPU
training job inside a one-CPU quota on this VM's writable v1 ``cpu`` hierarchy and asks
``traintop diagnose`` about it, as the issue found it.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from tests.cgroup_files import Clock, write_files
from tests.ring_helpers import make_segment
from tests.scenarios.cpu_quota import cpu_quota, throttled_share
from tests.scenarios.harness import (
    ScenarioUnavailable,
    describe,
    run_diagnose,
    running,
    scenario_env,
    start_workload,
    traintop_run,
    wait_for_segments,
)
from traintop.collectors.cgroup import (
    CgroupReader,
    Mount,
    memberships,
    mounts_from,
    parse_cpu_stat,
    parse_cpuset,
)
from traintop.collectors.jobs import JobCollector

PID = 4242
BINDING = 0.3  # the kernel throttled the group in this share of periods: the quota bound
NOT_BINDING = 0.1  # ... in fewer than this: the host's load, not the quota, held it


def _proc(tmp_path: Path, cgroup: str) -> Path:
    proc = tmp_path / "proc"
    write_files(proc, {f"{PID}/cgroup": cgroup})
    return proc


def _v2_tree(tmp_path: Path, throttled: int = 0, usec: int = 0) -> Path:
    """A pod limited to 1.5 CPUs (its container sets none of its own) on CPUs 0-3 of 16."""
    root = tmp_path / "cgroup"
    stat = f"usage_usec 9\nnr_periods {100 + throttled * 2}\nnr_throttled {throttled}\n"
    write_files(
        root,
        {
            "cgroup.controllers": "cpuset cpu io memory pids\n",
            "cpuset.cpus.effective": "0-15\n",
            "kubepods/pod1/cpu.max": "150000 100000\n",
            "kubepods/pod1/cpu.stat": stat + f"throttled_usec {usec}\n",
            "kubepods/pod1/cpuset.cpus.effective": "0-3\n",
            "kubepods/pod1/ctr/cpu.max": "max 100000\n",
            "kubepods/pod1/ctr/cpu.stat": "nr_periods 0\nnr_throttled 0\nthrottled_usec 0\n",
        },
    )
    return root


def test_v2_quota_cpuset_and_throttling_on_a_fake_tree(tmp_path: Path) -> None:
    root, clock = _v2_tree(tmp_path), Clock()
    proc = _proc(tmp_path, "0::/kubepods/pod1/ctr\n")
    reader = CgroupReader(root=root, proc=proc, clock=clock, host_cpus=16)
    first = reader.limit(PID)
    assert first is not None
    assert (first.cpus, first.quota_cpus, first.cpuset) == (1.5, 1.5, (0, 1, 2, 3))
    assert first.cgroup == "/kubepods/pod1/ctr"
    assert first.throttled_share is None  # a rate needs two readings
    _v2_tree(tmp_path, throttled=30, usec=1_200_000)  # 60 periods later, 30 throttled, 1.2 s
    clock.now += 1.0
    assert reader.limit(PID) is first  # read at most every 2 s
    clock.now += 1.0
    second = reader.limit(PID)
    assert second.throttled_share == pytest.approx(0.5)
    assert second.throttled_s_per_s == pytest.approx(0.6)


def test_v2_cpuset_is_inherited_where_the_controller_is_not_enabled(tmp_path: Path) -> None:
    """cgroup v2 writes cpuset files only where the controller is on: a child without them
    runs on its parent's CPUs."""
    root = _v2_tree(tmp_path)
    (root / "kubepods/pod1/ctr/sub").mkdir()
    proc = _proc(tmp_path, "0::/kubepods/pod1/ctr/sub\n")
    limit = CgroupReader(root=root, proc=proc, host_cpus=16).limit(PID)
    assert limit.cpuset == (0, 1, 2, 3)


def test_v2_without_a_limit_gives_the_host(tmp_path: Path) -> None:
    root = _v2_tree(tmp_path)
    proc = _proc(tmp_path, "0::/\n")
    limit = CgroupReader(root=root, proc=proc, host_cpus=16).limit(PID)
    assert (limit.cpus, limit.quota_cpus, limit.cpuset) == (16.0, None, None)


def test_v1_cpu_cpuacct_and_cpuset_on_a_fake_tree(tmp_path: Path) -> None:
    """v1: quota / period in µs, throttled time in ns, the cpuset's own folder; the least quota
    of the chain binds (a parent's 2 CPUs over a child's 3)."""
    root = tmp_path / "cgroup"
    write_files(
        root,
        {
            "cpu,cpuacct/cpu.cfs_quota_us": "-1\n",
            "cpu,cpuacct/docker/cpu.cfs_quota_us": "200000\n",
            "cpu,cpuacct/docker/cpu.cfs_period_us": "100000\n",
            "cpu,cpuacct/docker/cpu.stat": "nr_periods 10\nnr_throttled 2\nthrottled_time 5\n",
            "cpu,cpuacct/docker/abc/cpu.cfs_quota_us": "300000\n",
            "cpu,cpuacct/docker/abc/cpu.cfs_period_us": "100000\n",
            "cpuset/docker/abc/cpuset.effective_cpus": "2,5-6\n",
        },
    )
    text = "12:cpuset:/docker/abc\n4:cpu,cpuacct:/docker/abc\n0::/\n"
    limit = CgroupReader(root=root, proc=_proc(tmp_path, text), host_cpus=8).limit(PID)
    assert (limit.quota_cpus, limit.cpuset, limit.cpus) == (2.0, (2, 5, 6), 2.0)


def test_a_gone_process_has_no_limit(tmp_path: Path) -> None:
    reader = CgroupReader(root=_v2_tree(tmp_path), proc=tmp_path / "proc", host_cpus=16)
    assert reader.limit(PID) is None


def test_mountinfo_finds_each_hierarchy_and_its_root() -> None:
    """A hybrid host (v1 cpu and cpuset, v2 unified beside them), and a container that sees
    only its own subtree of the v1 cpu hierarchy."""
    text = (
        "30 25 0:26 / /sys/fs/cgroup/unified rw - cgroup2 cgroup2 rw\n"
        "31 25 0:27 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
        "32 25 0:28 /docker/abc /sys/fs/cgroup/cpuset rw - cgroup cgroup rw,cpuset\n"
        "33 25 0:29 / /mnt/a\\040b rw - ext4 /dev/sda1 rw\n"
    )
    found = mounts_from(text)
    assert found["cpu"] == Mount(1, Path("/sys/fs/cgroup/cpu,cpuacct"), "/")
    assert found["cpuset"] == Mount(1, Path("/sys/fs/cgroup/cpuset"), "/docker/abc")
    assert found[""] == Mount(2, Path("/sys/fs/cgroup/unified"), "/")


def test_the_small_parsers() -> None:
    assert memberships("4:cpu,cpuacct:/a\n0::/b\n") == {"cpu": "/a", "cpuacct": "/a", "": "/b"}
    assert parse_cpuset("0-2,7,9-10\n") == (0, 1, 2, 7, 9, 10)
    assert parse_cpu_stat("nr_periods 4\nnr_throttled 1\nthrottled_usec 500\n").throttled_s == (
        pytest.approx(0.0005)
    )
    assert parse_cpu_stat("usage_usec 3\n") is None


def test_the_job_collector_fills_each_live_ranks_limit(tmp_path: Path) -> None:
    """The wiring: a live segment's rank gets the CPU limit of its pid's cgroup (here this
    test's own process, in whatever cgroup runs it), and a closed one none."""
    writer = make_segment(tmp_path / "ring")
    writer.record(0, 1000 * 10**9, (1, 2, 3), 32)
    collector = JobCollector(str(tmp_path / "ring"), clock=lambda: 1000.5)
    (job,) = collector.collect()
    expected = collector.cgroups.limit(os.getpid())
    assert job.cpu_limit == expected
    if Path("/proc/self/cgroup").exists():
        assert expected is not None and 0 < expected.cpus <= (os.cpu_count() or 1)
    writer.close()
    (ended,) = collector.collect()
    assert ended.cpu_limit is None


@pytest.mark.solo
@pytest.mark.timeout(180)
def test_a_loader_bound_job_in_a_one_cpu_quota(ring_dir: Path, tmp_path: Path) -> None:
    """The issue's case on this VM: the data_cpu workload (two augmenting workers) inside a
    quota of one CPU.  It must read data_cpu and advise workers by the job's CPUs, not the
    host's (more workers: no gain where the quota binds); and, by the kernel's own count of the
    group's throttled periods over the window, name the quota, its throttling and the workers'
    wait as the quota's where the quota bound (a quiet host: 79 % of periods measured), and not
    blame it where other processes' load kept the job below it (the shared VM at load 12)."""
    try:
        quota = cpu_quota(1.0, "traintop-test-quota")
        made = quota.__enter__()
    except ScenarioUnavailable as exc:
        pytest.skip(f"needs a writable cgroup v1 cpu hierarchy: {exc}")
    try:
        env = scenario_env(ring_dir)
        argv = traintop_run("data_cpu.py", prefix=made.join_prefix())
        with running([start_workload(argv, env, tmp_path / "quota.log")]) as jobs:
            pids = wait_for_segments(ring_dir, 1, jobs)
            before = made.counters()
            run = run_diagnose(env, job_pid=next(iter(pids)))
            share = throttled_share(before, made.counters())
    finally:
        quota.__exit__(None, None, None)
    context = f"throttled {share}\n{describe(run)}\n--- workload log ---\n{jobs[0].log_tail()}"
    verdict = run.verdict
    assert verdict is not None and run.bottleneck == "data_cpu", context
    evidence, remedies = verdict["evidence"], verdict["remedies"]
    assert not any("logical CPUs" in r for r in remedies), context
    more = [f["expected"] for f in verdict["fixes"] if f["remedy"].startswith("raise DataLoader")]
    named = "cgroup quota of 1.0 CPU" in verdict["summary"]
    print(f"\nthe kernel throttled the group in {share} of its periods: {verdict['summary']}")
    if share is not None and share >= BINDING:
        assert named, context
        assert any(
            re.search(r"quota of 1\.0 CPU \(the host has \d+\) throttled", e) for e in evidence
        )
        assert any("throttles them" in e for e in evidence if "waiting for a CPU" in e), context
        assert remedies[0].startswith("raise the job's CPU limit (its cgroup quota is 1.0"), context
        fewer = any(r.startswith("lower DataLoader num_workers") for r in remedies)
        assert not (fewer and more), context  # never more workers beside fewer
        assert all(e.get("speedup") is not None and e["speedup"] < 1.1 for e in more), context
    elif share is not None and share < NOT_BINDING:
        assert not named, context  # others' load held it below its quota: not the quota's doing
