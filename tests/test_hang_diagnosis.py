"""The hang verdict on scripted ranks (diagnosis/hang.py): each kind, the ranks it names, where
they are, when a stop is stalled or hung, and the verdict, the JSON and the banner built on it.

The real-process cases (gloo, torchrun, `traintop run`) are in tests/test_hangs.py; here every
branch is driven with the ledgers and stacks a collector would report.
"""

from __future__ import annotations

from dataclasses import replace

from tests import snapshot_fixtures as sf
from traintop.collectors.snapshot import (
    Collective,
    Ending,
    Frame,
    PhaseSamples,
    ProcState,
    RankStack,
    StackSample,
)
from traintop.diagnosis.api import VerdictStabilizer, diagnose, verdict_to_dict
from traintop.diagnosis.hang import crash_of, hang_of
from traintop.diagnosis.stack_text import fold, phase_sample_evidence, where


def job(waited_s: float = 72.0, **changes) -> list:
    return [replace(r, **changes) for r in sf.hung_job(waited_s)]


def entered(rank, op="all_reduce", seq=1042, shape="f32[1]", age=72.0, done=None, raised=False):
    """``rank`` with one collective in its ledger (inside it unless ``done``)."""
    c = Collective(
        "0:default_pg", seq, op, shape, 4, age, done, raised, 1800.0, "train.py:train:120"
    )
    return replace(rank, collectives=(c,))


def snaps(ranks) -> list:
    """Two snapshots 5 s apart holding ``ranks`` (a window the engine judges)."""
    return [sf.machine(gpus=0, jobs=tuple(ranks), tick=t) for t in (0, 5)]


def test_a_rank_that_never_entered_is_named_with_where_it_is() -> None:
    hang = hang_of(job())
    assert (hang.level, hang.kind, hang.group, hang.seq, hang.op) == (
        "hung", "not_entered", "0:default_pg", 1042, "all_reduce")  # fmt: skip
    assert hang.inside == (0, 1, 3) and hang.missing == (2,) and hang.shapes == ("f32[1]",)
    assert hang.waited_s == 72.0 and hang.aborts_in_s == 1728.0
    assert hang.summary.startswith("rank 2 never reached all_reduce #1042 (0:default_pg, f32[1])")
    assert "rank 2 is in _api_call (client.py) at data.py:41 in fetch_shard" in hang.summary
    assert [f.ranks for f in hang.folds] == [(0, 1, 3), (2,)]
    assert hang.folds[0].where == "all_reduce (distributed_c10d.py) at train.py:120 in train"
    assert "the group's timeout (30m00s) ends the wait in 28m48s" in hang.evidence
    places = {p.rank: p.text for p in hang.ranks}
    assert places[0] == "in all_reduce #1042 for 1m12s" and places[2] == "not entered (last #1041)"


def test_stalled_then_hung_by_the_job_limits() -> None:
    assert hang_of(job(9.0)) is None  # no rank stepped for 9.5 s: under the 10 s stall limit
    assert hang_of(job(14.0)).level == "stalled"
    assert hang_of(job(14.0, stall_after_s=30.0)) is None  # a job of long steps: not yet
    assert hang_of(job(75.0)).level == "hung"
    ranks = job(14.0)
    ranks[0] = replace(ranks[0], state="live", last_step_age_s=0.3)  # one rank still steps
    assert hang_of(ranks) is None


def test_ranks_in_different_collectives_are_a_desync() -> None:
    ranks = job()
    ranks[1] = entered(ranks[1], op="barrier", shape="")
    hang = hang_of(ranks)
    assert hang.kind == "desync" and hang.inside == (0, 3) and hang.missing == (1, 2)
    assert "rank 1 in barrier #1042 (0:default_pg)" in hang.summary
    assert "ranks 0, 3 in all_reduce #1042 (0:default_pg, f32[1])" in hang.summary
    assert "rank 2 is in _api_call (client.py)" in hang.summary  # in none: where it is instead


def test_two_ranks_reducing_other_shapes_are_a_desync_naming_both_shapes() -> None:
    ranks = [entered(r, shape="f32[2]" if r.rank >= 2 else "f32[1]") for r in job()]
    hang = hang_of(ranks)
    assert hang.kind == "desync" and hang.shapes == ("f32[1]", "f32[2]")
    assert "ranks 2-3 in all_reduce #1042 (0:default_pg, f32[2])" in hang.summary


def test_every_rank_inside_and_none_leaving_is_not_finished() -> None:
    hang = hang_of([entered(r) for r in job()])
    assert hang.kind == "not_finished" and hang.inside == (0, 1, 2, 3) and hang.missing == ()
    assert "every rank entered all_reduce #1042" in hang.summary


def test_a_rank_one_collective_ahead_left_it_and_is_not_a_desync() -> None:
    """gloo's ring lets a rank finish all_reduce #1042 before a peer stuck in its middle has:
    that rank waits in #1043, which says every rank entered #1042."""
    ranks = [entered(r, seq=1043 if r.rank == 1 else 1042) for r in job()]
    hang = hang_of(ranks)
    assert hang.kind == "not_finished" and hang.inside == (0, 2, 3) and hang.missing == ()
    assert "entered all_reduce #1042 (0:default_pg, f32[1]) and rank 1 left it, ranks 0, 2-3 " \
           "did not" in hang.summary  # fmt: skip
    assert next(p for p in hang.ranks if p.rank == 1).text.startswith("left #1042, in all_reduce")


def test_a_rank_ahead_of_a_stopped_one_is_not_held_with_it() -> None:
    """Rank 3 stopped in the middle of #1042 (its entry is where it was, not a wait): rank 1
    left #1042, ranks 0 and 2 wait in it; only rank 3 holds the job."""
    ranks = [entered(r, seq=1043 if r.rank == 1 else 1042) for r in job()]
    ranks[3] = replace(ranks[3], proc=ProcState("T", 1.0, 0.0))
    hang = hang_of(ranks)
    assert hang.kind == "stopped" and hang.inside == (0, 2) and hang.missing == (3,)
    assert "rank 3 stopped (kill -CONT" in hang.line and "ranks 0,2 wait in" in hang.line


def test_a_rank_whose_process_is_gone_is_a_dead_rank() -> None:
    ranks = job()
    ranks[2] = replace(ranks[2], state="crashed", stack=None)
    hang = hang_of(ranks)
    assert hang.kind == "dead_rank" and 2 in hang.missing and hang.inside == (0, 1, 3)
    assert hang.summary.startswith("rank 2 gone (crashed); ranks 0-1, 3 wait in all_reduce #1042")


def test_no_rank_in_a_collective_is_a_data_or_compute_hang_with_its_stack() -> None:
    stuck = replace(sf.hung_job()[2], world_size=1, rank=0)
    hang = hang_of([stuck])
    assert hang.kind == "no_collective" and hang.inside == ()
    assert "rank 0 is in _api_call (client.py) at data.py:41 in fetch_shard" in hang.summary


def test_nccl_unfinished_flight_recorder_entries_count_as_inside() -> None:
    """On NCCL the Python call returned (the ledger says done) but the GPU still waits: the
    flight recorder's unfinished entry places the rank in the collective."""
    ranks = []
    for r in job():
        pending = ()
        if r.rank != 2:
            pending = (Collective("0:default_pg", 1042, "all_reduce", "f32[1]", 0, 70.0, None),)
        done = entered(r, seq=1042 if r.rank != 2 else 1041, done=0.001)
        ranks.append(replace(done, stack=replace(r.stack, pending=pending)))
    hang = hang_of(ranks)
    assert hang.kind == "not_entered" and hang.missing == (2,) and hang.inside == (0, 1, 3)


def test_an_ended_job_whose_collectives_raised_says_who_went_first() -> None:
    ranks = [replace(entered(r, done=0.4, raised=True), state="finished") for r in job()]
    ranks[3] = replace(entered(ranks[3], seq=1041, done=0.002), state="finished")
    hang = crash_of(ranks)
    assert (hang.level, hang.kind, hang.missing) == ("crashed", "dead_rank", (3,))
    assert (
        hang.summary
        == "rank 3 gone (finished); ranks 0-2 failed in all_reduce #1042 (0:default_pg)"
    )
    clean = [replace(entered(r, done=0.002), state="finished") for r in job()]
    assert crash_of(clean) is None


def test_an_ended_rank_is_said_as_its_probe_wrote_its_end() -> None:
    """Rank 1 raised (an ``mp.spawn`` job): its exception, not "gone (crashed)"; rank 0 was in
    the backward's all-reduce when the launcher stopped it."""
    ranks = [replace(entered(r), state="stopped", ending=Ending("signal", "SIGTERM"))
             for r in job()[:2]]  # fmt: skip
    ranks[1] = replace(ranks[1], collectives=(), state="crashed",
                       ending=Ending("raised", "ValueError: bad batch"))  # fmt: skip
    hang = crash_of(ranks)
    assert hang.summary.startswith("rank 1 raised ValueError; rank 0 was in all_reduce #1042")
    assert hang.line.endswith("rank 1 raised ValueError · rank 0 was in all_reduce #1042")


def test_ranks_fold_by_where_they_are() -> None:
    a = (Frame("/w/train.py", 10, "main"), Frame("/w/train.py", 20, "step", "dist.barrier()"))
    b = (Frame("/w/train.py", 10, "main"), Frame("/w/train.py", 31, "save", "torch.save(m, f)"))
    folds = fold([(0, b), (1, a), (2, a), (3, a)])
    assert [(f.ranks, f.where) for f in folds] == [
        ((1, 2, 3), "train.py:20 in step: dist.barrier()"),
        ((0,), "train.py:31 in save: torch.save(m, f)"),
    ]


def test_where_names_the_library_call_a_frame_runs_inside() -> None:
    lib = "/v/lib/python3.11/site-packages/torch"
    frames = (
        Frame("/w/train.py", 120, "train", "loss = model(x)"),
        Frame(f"{lib}/nn/modules/module.py", 1775, "_wrapped_call_impl"),
        Frame(f"{lib}/nn/parallel/distributed.py", 1660, "forward"),
        Frame(f"{lib}/nn/modules/module.py", 1786, "_call_impl"),
        Frame("/w/model.py", 44, "forward", "time.sleep(600)"),
    )
    assert where(frames) == (
        "model.py:44 in forward: time.sleep(600), inside forward (distributed.py) at "
        "train.py:120 in train"
    )


def test_phase_samples_become_one_evidence_line() -> None:
    a = (Frame("/w/train.py", 10, "main"), Frame("/w/data.py", 7, "decode", "img = png(b)"))
    b = (Frame("/w/train.py", 10, "main"), Frame("/w/train.py", 12, "augment"))
    samples = PhaseSamples("data", 20, 16, (StackSample(a, 12), StackSample(b, 4)), 0.5)
    fact = phase_sample_evidence(samples, 1)
    assert fact.text == (
        "rank 1 in data (16 samples): 75% data.py:7 in decode: img = png(b); "
        "25% train.py:12 in augment"
    )
    assert phase_sample_evidence(None, 1) is None


def test_the_verdict_json_and_stabilizer_carry_the_hang() -> None:
    verdict = diagnose(snaps(job()))
    assert verdict.primary.bottleneck == "hang" and verdict.primary.severity == "error"
    line = "HANG 1m12s · rank 2 in fetch_shard (data.py:41) · others wait in all_reduce"
    assert verdict.primary.summary == line  # the case's one line: who, where, how long
    assert verdict.primary.evidence[0].text.startswith("Job hung 1m12s: rank 2 never reached")
    (per_job,) = verdict_to_dict(verdict)["per_job"]
    case = per_job["hang"]
    assert case["line"] == per_job["summary"] == line
    assert (case["kind"], case["group"], case["seq"], case["op"]) == (
        "not_entered", "0:default_pg", 1042, "all_reduce")  # fmt: skip
    assert case["inside"] == [0, 1, 3] and case["missing"] == [2] and case["shapes"] == ["f32[1]"]
    stuck = next(r for r in case["ranks"] if r["rank"] == 2)
    assert stuck["stack"][-3][2] == "fetch_shard" and stuck["stack_source"] == "helper"
    stab = VerdictStabilizer()
    healthy = [sf.machine(gpus=0, jobs=sf.ddp_job(4), tick=t) for t in (0, 5)]
    assert stab.update(healthy).primary.bottleneck != "hang"
    moved = [replace(s, monotonic=s.monotonic + 6) for s in snaps(job())]
    assert stab.update(moved).primary.bottleneck == "hang"  # at once: no 3 s hold for a stop


def test_a_stack_taken_by_faulthandler_is_used_like_the_helpers() -> None:
    ranks = job()
    ranks[2] = replace(ranks[2], stack=RankStack(sf.STUCK, 1.0, "signal"))
    hang = hang_of(ranks)
    assert next(p for p in hang.ranks if p.rank == 2).stack_source == "signal"
