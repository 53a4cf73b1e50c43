"""SVG snapshot tests of the main screen: 3 terminal sizes x 0, 1 and 8 GPUs; and the jobs
table at 80x24 and 200x50 with one job, one 8-rank job on 8 GPUs, a sweep of 24 runs and 64 ranks.

Deterministic by construction: scripted snapshots, a frozen clock, UTC.  After an intended
visual change, look at the new SVGs and accept them with ``pytest --snapshot-update``.
"""

from __future__ import annotations

import pytest

from tests import job_fixtures as jf
from tests.isolation import utc_time_zone
from tests.snapshot_fixtures import EPOCH, ScriptedSource, ddp_job, feed, series, sweep
from traintop.tui.app import build_app

SIZES = [(80, 24), (120, 40), (200, 50)]
GPU_COUNTS = [0, 1, 8]
TICKS = 12

_utc = pytest.fixture(autouse=True)(utc_time_zone)


@pytest.mark.parametrize("gpus", GPU_COUNTS)
@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
def test_main_screen(snap_compare, size, gpus):
    ticks = series(TICKS, gpus=gpus, cores=16 if size[0] < 120 else 32)
    source = ScriptedSource(ticks[:1])
    app = build_app(source, clock=lambda: EPOCH, hostname="gpu-node-07")

    async def play(pilot) -> None:
        await feed(pilot, source, ticks[1:])

    assert snap_compare(app, terminal_size=size, run_before=play)


JOB_STATES = {
    "one-job": (1, lambda tick: (jf.data_bound_job(),)),
    "ddp8-8gpu": (8, lambda tick: ddp_job(8, tick)),
    "sweep24": (8, sweep),
    "ranks64": (8, lambda tick: ddp_job(64, tick)),
}


@pytest.mark.parametrize("state", list(JOB_STATES))
@pytest.mark.parametrize("size", [(80, 24), (200, 50)], ids=lambda s: f"{s[0]}x{s[1]}")
def test_jobs_screen(snap_compare, size, state):
    gpus, jobs = JOB_STATES[state]
    ticks = series(TICKS, gpus=gpus, cores=16 if size[0] < 120 else 32, job_source=jobs)
    source = ScriptedSource(ticks[:1])
    app = build_app(source, clock=lambda: EPOCH, hostname="gpu-node-07")

    async def play(pilot) -> None:
        await feed(pilot, source, ticks[1:])

    assert snap_compare(app, terminal_size=size, run_before=play)
