"""A stopped multi-node job in the fleet view: the exporter's ledger series, and the stuck rank
and its node named from them (fleet/hang.py), with the monitor's own hang rules."""

from __future__ import annotations

from dataclasses import replace

from tests.fleet_fixtures import fleet, hung_nodes, scrape, two_exporters
from traintop.collectors.snapshot import ProcState
from traintop.tui.fleet_rows import rank_row, rank_rows, verdict_lines


def test_the_exporter_publishes_each_ranks_newest_collective_and_its_wait() -> None:
    served = scrape(hung_nodes()["10.0.0.2:19400"])
    sequence = {s.labels["rank"]: s.value for s in served["traintop_job_collective_sequence"]}
    assert sequence == {"4": 1042, "5": 1041, "6": 1042, "7": 1042}
    waits = {s.labels["rank"]: (s.labels["op"], s.value)
             for s in served["traintop_job_collective_wait_seconds"]}  # fmt: skip
    assert waits == {"4": ("all_reduce", 72.0), "6": ("all_reduce", 72.0),
                     "7": ("all_reduce", 72.0)}  # fmt: skip
    ages = {s.labels["rank"] for s in served["traintop_job_last_step_age_seconds"]}
    assert ages == {"4", "5", "6", "7"}


def test_fleet_names_the_stuck_rank_and_its_node() -> None:
    snap = fleet(hung_nodes())
    verdict = snap.verdict
    assert (verdict.bottleneck, verdict.severity) == ("hang", "error")
    line = "HANG 1m12s · rank 5 on node-b in fetch_shard · others wait in all_reduce"
    assert verdict.summary == line  # the monitor's one line, with the node
    assert verdict.evidence[0] == (
        "Job hung 1m12s: rank 5 on node-b never reached all_reduce #1042 (0:default_pg), "
        "which the 7 ranks in it have waited in for 1m12s"
    )
    assert [r.rank for r in snap.ranks if r.stuck] == [5]
    row = rank_row(next(r for r in snap.ranks if r.rank == 5))
    assert str(row[0]) == "5 ◀" and str(row[-1]) == "◀ stuck"


def test_one_rank_waiting_is_named_with_its_node_and_its_verb_agrees() -> None:
    """A 2-rank job: rank 1 never came, so one rank waits, named rather than counted."""
    snap = fleet(hung_nodes(world=2, stuck=1))
    assert snap.verdict.evidence[0] == (
        "Job hung 1m12s: rank 1 on node-b never reached all_reduce #1042 (0:default_pg), "
        "which rank 0 on node-a has waited in for 1m12s"
    )


def test_a_node_that_stops_answering_is_a_dead_rank() -> None:
    """node-b's last scrape failed: its ranks are gone, and node-a's wait for them."""
    snap = fleet(hung_nodes(), down=("10.0.0.2:19400",), previous=fleet(hung_nodes()))
    assert snap.verdict.bottleneck == "hang"
    assert snap.verdict.evidence[0].startswith("Job hung 1m12s: ranks 4-7 on node-b gone")
    line = "HANG 1m12s · rank 5 on node-b gone (crashed) · ranks 4,6-7 on node-b failed"
    assert snap.verdict.summary == line


def test_a_job_that_steps_gets_no_hang_verdict() -> None:
    snap = fleet(two_exporters())
    assert snap.verdict.bottleneck != "hang" and not any(r.stuck for r in snap.ranks)


def test_a_short_pause_is_not_a_stop() -> None:
    """No step for 8 s: under the 10 s stall limit."""
    assert fleet(hung_nodes(waited_s=7.0)).verdict.bottleneck != "hang"


def _stopped_rank5(waited_s: float = 72.0) -> dict:
    """hung_nodes with rank 5 (node-b) stopped and without a stack, as its exporter sees it."""
    nodes = hung_nodes(waited_s)
    snaps = nodes["10.0.0.2:19400"]
    for i, snap in enumerate(snaps):
        jobs = tuple(replace(j, proc=ProcState("T", 3.0, 0.0), stack=None) if j.rank == 5
                     else replace(j, proc=ProcState("S", 1.0, 0.0)) for j in snap.jobs)  # fmt: skip
        snaps[i] = replace(snap, jobs=jobs)
    return nodes


def test_the_exporter_says_where_each_stalled_rank_is_and_nothing_for_a_stepping_one() -> None:
    served = scrape(hung_nodes()["10.0.0.2:19400"])
    places = {s.labels["rank"]: s.labels for s in served["traintop_job_stuck_info"]}
    assert set(places) == {"4", "5", "6", "7"}  # every rank of node-b has stalled
    assert places["5"]["collective"] == "after all_reduce #1041 (0:default_pg)"
    assert places["5"]["where"] == "fetch_shard (data.py:41)"
    assert places["5"]["frames"].startswith("data.py:41 fetch_shard < train.py:")
    assert places["4"]["collective"] == "all_reduce #1042 (0:default_pg)"
    stepping = scrape(two_exporters()["10.0.0.1:19400"])
    assert not stepping.get("traintop_job_stuck_info")


def test_the_fleet_says_a_stopped_rank_with_its_node_and_shows_its_place_under_it() -> None:
    snap = fleet(_stopped_rank5())
    pid = next(r.pid for r in snap.ranks if r.rank == 5)
    line = f"HANG 1m12s · rank 5 on node-b stopped (kill -CONT {pid})"
    assert snap.verdict.summary.startswith(line), snap.verdict.summary
    tone, head, _facts = verdict_lines(snap)
    assert head == f"◆ {snap.verdict.summary}" and tone == "error"
    rows = rank_rows(snap.ranks)
    under = [str(row[-1]) for row in rows if str(row[-1]).startswith("↳")]
    assert under == ["↳ after all_reduce #1041 (0:default_pg) · stopped"]
    assert str(rows[rows.index(next(r for r in rows if str(r[0]) == "5 ◀")) + 1][-1]) == under[0]
