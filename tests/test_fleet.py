"""The fleet's model and job verdict, from real exporter output shaped as Prometheus answers."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests.fleet_fixtures import (
    LIVE_JOB,
    NOW,
    OLD_END,
    OLD_JOB,
    answers,
    beside_ended,
    fleet,
    node,
    two_exporters,
)
from traintop.fleet.build import build_fleet, host_of, job_of
from traintop.fleet.model import FleetGpu, FleetNode, FleetRank
from traintop.fleet.verdict import gpu_throttle, job_verdict, mark_straggler

JOB = "run:tcp://10.0.0.7:29500/8"


@pytest.mark.parametrize("honor_labels", [True, False])
def test_throttled_node_named_as_the_cause_of_the_whole_job(honor_labels):
    snap = fleet(two_exporters(), honor_labels=honor_labels)
    assert snap.job is not None and snap.job.job_id == JOB and snap.job.world_size == 8
    assert [n.hostname for n in snap.nodes] == ["node-a", "node-b"]
    assert [r.rank for r in snap.ranks] == list(range(8))
    assert {r.rank: r.hostname for r in snap.ranks}[6] == "node-b"
    (straggler,) = [r for r in snap.ranks if r.straggler]
    assert (straggler.rank, straggler.hostname) == (6, "node-b")
    v = snap.verdict
    assert v.bottleneck == "throttle_thermal" and v.severity == "error"
    assert v.summary == "node-b: GPU 2 thermally throttled, holding back all 8 ranks of the job"
    assert v.confidence >= 0.9  # the throttle and the straggler agree
    assert (
        "node-b GPU 2: HW Slowdown + SW Thermal Slowdown; 84 °C (slowdown 89 °C)" in v.evidence[0]
    )
    assert "rank 6 on node-b is the straggler" in v.evidence[1]


def test_node_rows_count_busy_hot_throttled_gpus_and_carry_the_node_verdict():
    snap = fleet(two_exporters())
    a, b = snap.nodes
    assert (len(a.gpus), len(b.gpus)) == (4, 4)
    assert [gpu_throttle(g) for g in b.gpus].count("throttle_thermal") == 1
    assert not any(gpu_throttle(g) for g in a.gpus)
    assert a.ranks == (0, 1, 2, 3) and b.ranks == (4, 5, 6, 7)
    assert b.steps_per_s == pytest.approx(1 / 0.512, rel=0.05)
    assert b.verdict is not None and b.verdict.bottleneck != "unknown"
    assert not a.stale and a.age_s == pytest.approx(1.0)


def test_straggler_without_throttle_names_rank_and_node():
    snap = fleet(two_exporters(b_throttling=False, slow=2))
    v = snap.verdict
    assert [r.rank for r in snap.ranks if r.straggler] == [2]
    assert v.summary.startswith("rank 2 on node-a holds back all 8 ranks")


def test_balanced_job_takes_the_nodes_consensus():
    snap = fleet(two_exporters(b_throttling=False, slow=None))
    assert not any(r.straggler for r in snap.ranks)
    assert snap.verdict.summary.startswith("2 of 2 nodes: ")


def test_node_that_stops_answering_is_stale_and_keeps_its_ranks():
    nodes = two_exporters()
    first = fleet(nodes)
    snap = fleet(nodes, down=("10.0.0.2:19400",), previous=first)
    b = snap.nodes[1]
    assert b.stale and not snap.nodes[0].stale
    stale = {r.rank for r in snap.ranks if r.state == "stale"}
    assert stale == {4, 5, 6, 7} and len(snap.ranks) == 8
    assert any("node-b is stale" in e for e in snap.verdict.evidence)


def test_old_samples_are_stale_even_while_scraped():
    snap = fleet(two_exporters(), now=NOW + 120)
    assert all(n.stale for n in snap.nodes)
    assert snap.verdict.bottleneck == "unknown" and snap.verdict.summary == "every node is stale"


def test_job_chosen_by_name_or_id_and_a_missing_one_is_one_line():
    nodes = two_exporters()
    assert fleet(nodes, wanted="llama-7b").job.job_id == JOB
    assert fleet(nodes, wanted=JOB).job.name == "llama-7b"
    missing = fleet(nodes, wanted="gpt-9")
    assert missing.job is None and missing.ranks == ()
    assert missing.error == "no training job 'gpt-9' in Prometheus; jobs seen: llama-7b"


def test_labels_of_either_scrape_config_and_old_dcgm_exporters():
    assert job_of({"job": "traintop", "exported_job": "run:x/2"}) == "run:x/2"
    assert job_of({"job": "run:x/2"}) == "run:x/2"
    assert host_of({"Hostname": "old-node"}) == "old-node"
    assert host_of({"instance": "10.0.0.9:9400"}) == "10.0.0.9"


def _rank(rank: int, host: str, step: float, comm: float | None) -> FleetRank:
    return FleetRank(rank, host, rank, "live", 1 / step, step, step * 1.1, 0.0, comm)


def test_straggler_needs_a_wait_worth_a_tenth_of_a_step():
    close = (_rank(0, "a", 0.5, 0.20), _rank(1, "b", 0.5, 0.15))  # 25 ms of a 500 ms step
    assert not any(r.straggler for r in mark_straggler(close))
    far = (_rank(0, "a", 0.5, 0.30), _rank(1, "a", 0.5, 0.30), _rank(2, "b", 0.5, 0.02))
    assert [r.rank for r in mark_straggler(far) if r.straggler] == [2]
    untimed = (_rank(0, "a", 0.5, None), _rank(1, "b", 0.5, None))
    assert not any(r.straggler for r in mark_straggler(untimed))


def test_idle_or_hot_but_unthrottled_gpus_are_not_throttled():
    hot = FleetGpu("n", "0", util_pct=95, temp_c=86, slowdown_c=89, reasons=0)
    assert gpu_throttle(hot) is None
    idle = replace(hot, util_pct=0, reasons=0x20)
    assert gpu_throttle(idle) is None
    hw_cool = replace(hot, temp_c=60, reasons=0x8)  # HW slowdown on a cool card: power brake
    assert gpu_throttle(hw_cool) == "throttle_power"
    assert gpu_throttle(replace(hot, reasons=0x8)) == "throttle_thermal"


def test_power_throttled_node_without_job():
    gpu = FleetGpu("n1", "0", util_pct=90, power_w=699, power_limit_w=700, reasons=0x4)
    v = job_verdict((FleetNode("n1", "i", 1.0, False, (gpu,)),), ())
    assert v.bottleneck == "throttle_power" and v.severity == "warning"
    assert v.evidence == ("n1 GPU 0: SW Power Cap; 699 of 700 W",)


def test_a_throttled_node_without_ranks_of_the_job_is_not_its_cause():
    nodes = two_exporters(b_throttling=False, slow=None)
    nodes["10.0.0.3:19400"] = [
        replace(snap, jobs=()) for snap in node("node-c", range(0), throttling=True, slow=None)
    ]
    snap = fleet(nodes)
    assert len(snap.nodes) == 3 and snap.nodes[2].verdict.bottleneck == "throttle_thermal"
    assert snap.verdict.bottleneck != "throttle_thermal"
    assert snap.verdict.summary.startswith("2 of 2 nodes: ")


def test_the_fleet_opens_on_the_running_job_not_the_bigger_one_that_ended():
    snap = fleet(beside_ended())
    assert snap.job.job_id == LIVE_JOB and not snap.job.ended
    assert [j.job_id for j in snap.jobs] == [LIVE_JOB, OLD_JOB]  # ended ones after, for `j`
    old = snap.jobs[1]
    assert (old.ranks, old.state, old.ended_at) == (3, "crashed", OLD_END) and old.ended
    assert [r.steps_per_s is not None for r in snap.ranks] == [True, True]


def test_an_ended_job_shows_its_end_and_last_verdict_never_a_rate():
    snap = fleet(beside_ended(), wanted="old")
    assert snap.job.job_id == OLD_JOB
    assert [(r.state, r.steps_per_s, r.step_p50_s, r.ended_at) for r in snap.ranks] == [
        ("crashed", None, None, OLD_END)
    ] * 3
    (node_a,) = snap.nodes
    assert node_a.steps_per_s is None and node_a.verdict is not None  # its last verdict
    assert snap.verdict.bottleneck == node_a.verdict.bottleneck
    assert snap.verdict.summary == f"1 of 1 nodes: {node_a.verdict.bottleneck}"


def test_with_no_running_job_the_last_ended_one_is_shown():
    snap = fleet(beside_ended(live=False))
    assert snap.job.job_id == OLD_JOB and snap.job.ended


def test_an_old_exporters_rate_for_an_ended_rank_is_not_shown():
    """An exporter from before ended runs stepped aside still serves their last rates."""
    given = answers(beside_ended(), now=NOW)
    ended = [lab for lab, _ in given.jobs if lab["__name__"] == "traintop_job_info"]
    rate = "traintop_job_steps_per_second"
    given.jobs.extend(({**lab, "__name__": rate}, 26.7) for lab in ended if lab["job"] == OLD_JOB)
    snap = build_fleet(given, wanted=OLD_JOB, stale_after_s=30.0, source="p")
    assert all(r.steps_per_s is None for r in snap.ranks)


def test_a_crashed_rank_whose_series_went_is_dropped_not_kept_stale():
    """Its grace period ended on its exporter: the rank is gone, not on a node gone quiet."""

    def rank_1_crashed(snap, keep: bool):
        crashed = replace(snap.jobs[1], state="crashed", ended_at=NOW - 60.0)
        return replace(snap, jobs=(snap.jobs[0], *([crashed] if keep else [])))

    nodes = beside_ended(live=True)
    first = fleet({k: [rank_1_crashed(s, True) for s in v] for k, v in nodes.items()})
    assert [(r.rank, r.state, r.steps_per_s) for r in first.ranks][1] == (1, "crashed", None)
    later = fleet({k: [rank_1_crashed(s, False) for s in v] for k, v in nodes.items()},
                  previous=first)  # fmt: skip
    assert [(r.rank, r.state) for r in later.ranks] == [(0, "live")]


def test_an_ended_run_on_the_same_rendezvous_gives_way_to_the_running_one():
    """The same MASTER_ADDR:PORT reused by the next run (another name): one job id, and its
    ranks are the running run's, never the dead one's figures or name."""
    nodes = beside_ended(live=True)
    for snap_list in nodes.values():
        for i, snap in enumerate(snap_list):
            old = tuple(
                replace(r, name="llama-old", job_id=LIVE_JOB, world_size=2) for r in snap.jobs[2:4]
            )
            snap_list[i] = replace(snap, jobs=(*snap.jobs[:2], *old))
    snap = fleet(nodes)
    assert [(j.job_id, j.name, j.state) for j in snap.jobs] == [(LIVE_JOB, "llama-7b", "live")]
    assert [(r.rank, r.state) for r in snap.ranks] == [(0, "live"), (1, "live")]
    assert all(r.steps_per_s is not None for r in snap.ranks)
