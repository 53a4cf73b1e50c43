"""The CPU panel's header names the attached job's cgroup limit: the cores it may use."""

from __future__ import annotations

import asyncio
from dataclasses import replace

from tests.snapshot_fixtures import EPOCH, ScriptedSource, ddp_rank, feed, series
from traintop.collectors.snapshot import CpuLimit
from traintop.tui.app import build_app
from traintop.tui.widgets.cpu import CpuPanel
from traintop.views.cpu_limit import limit_line

QUOTA = CpuLimit(cpus=1.0, quota_cpus=1.0, cpuset=None, throttled_share=0.64,
                 throttled_s_per_s=0.4, cgroup="/docker/4f2a")  # fmt: skip
CPUSET = CpuLimit(cpus=4.0, quota_cpus=None, cpuset=(0, 1, 2, 3, 8), cgroup="/slurm/job7")
ROOT = CpuLimit(cpus=32.0, quota_cpus=None, cpuset=None, cgroup="/")


def _job(limit: CpuLimit | None, **changes):
    return replace(ddp_rank(0, 1, slow=None), cpu_limit=limit, **changes)


def test_the_tightest_live_limit_is_named_with_its_throttling() -> None:
    jobs = (_job(ROOT), _job(CPUSET, pid=5000), _job(QUOTA, pid=5001))
    text, throttled = limit_line(jobs, 32)
    assert (
        text == "job llama-7b limited to 1.0 CPU (cgroup quota) of 32 · throttled 64 % of periods"
    )
    assert throttled


def test_a_cpuset_lists_its_cpus_and_ranks_sharing_it_are_counted() -> None:
    jobs = (_job(CPUSET), _job(CPUSET, pid=5000, rank=1))
    text, throttled = limit_line(jobs, 32)
    assert text == "job llama-7b (2 ranks) limited to CPUs 0-3,8 (cgroup cpuset) of 32"
    assert not throttled


def test_no_line_without_a_limit_or_for_an_ended_job() -> None:
    assert limit_line((_job(ROOT), _job(None, pid=5000)), 32) is None
    assert limit_line((_job(QUOTA, state="finished"),), 32) is None


def test_the_panel_shows_it_under_the_machine_line_at_80_and_200_columns() -> None:
    async def run(size: tuple[int, int]) -> list[str]:
        ticks = series(3, gpus=1, cores=16, job_source=lambda tick: (_job(QUOTA),))
        source = ScriptedSource(ticks[:1])
        app = build_app(source, clock=lambda: EPOCH, hostname="gpu-node-07")
        async with app.run_test(size=size) as pilot:
            await feed(pilot, source, ticks[1:])
            panel = app.query_one(CpuPanel)
            lines = panel.render().plain.splitlines()
            assert all(len(line) <= panel.content_size.width for line in lines)
            return lines

    wide, narrow = asyncio.run(run((200, 50))), asyncio.run(run((80, 24)))
    assert wide[1] == (
        "job llama-7b limited to 1.0 CPU (cgroup quota) of 16 · throttled 64 % of periods"
    )
    assert narrow[1].startswith("job llama-7b limited to 1.0 CPU (cgroup quota) of 16")
