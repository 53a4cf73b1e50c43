"""The Network panel tags a job's own-namespace interfaces with the job (Pilot, scripted)."""

from __future__ import annotations

import asyncio
import dataclasses

from tests.snapshot_fixtures import EPOCH, ScriptedSource, feed, series
from traintop.collectors.snapshot import NicSnapshot
from traintop.tui.app import build_app
from traintop.tui.widgets.network import NetworkPanel, header_for, nic_label

HOST_ETH0 = NicSnapshot("eth0", True, 25_000, 31e6, 2.4e6, 22_000, 9_000, 0.0, 0.0, 0.99)
JOB_ETH0 = dataclasses.replace(
    HOST_ETH0, rx_bytes_per_s=2.5e6, tx_bytes_per_s=2.4e6, speed_mbps=None, link_util_pct=None,
    job="llama-7b", job_ids=("run:abc/8",), netns_inode=4026532999,
)  # fmt: skip


def with_job_nics(snapshots):
    return [dataclasses.replace(s, nics=(*s.nics, JOB_ETH0)) for s in snapshots]


def test_labels_and_name_column() -> None:
    assert nic_label(HOST_ETH0) == "eth0" and nic_label(JOB_ETH0) == "eth0 @llama-7b"
    assert header_for((HOST_ETH0,), 120)[0] == ("iface", 8)
    assert header_for((HOST_ETH0, JOB_ETH0), 120)[0] == ("iface", len("eth0 @llama-7b"))
    assert header_for((HOST_ETH0, JOB_ETH0), 36)[0] == ("iface", 12)  # a third of the panel


def test_the_panel_shows_the_jobs_interface_beside_the_hosts() -> None:
    async def run() -> None:
        ticks = with_job_nics(series(3, gpus=1))
        source = ScriptedSource(ticks[:1])
        app = build_app(source, clock=lambda: EPOCH)
        async with app.run_test(size=(200, 50)) as pilot:
            await feed(pilot, source, ticks[1:])
            panel = app.query_one(NetworkPanel)
            lines = panel.render().plain.splitlines()
            (tagged,) = [line for line in lines if "@llama-7b" in line]
            assert tagged.startswith("eth0 @llama-7b") and "2.5 MB/s" in tagged
            assert any(line.startswith("eth0 ") and "@" not in line for line in lines)
            host, job = panel._history.get("eth0"), panel._history.get("eth0#4026532999")
            assert len(job) == 3 and job != host  # two eth0s, two histories

    asyncio.run(run())
