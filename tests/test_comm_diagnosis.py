"""The network rule over communication phases: waiting on peers that the network explains, and
the job's own-namespace traffic as evidence (traintop.diagnosis.network_signals)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

import pytest

from tests.diagnosis_factories import TRAINER_PID, Scene
from traintop.collectors.snapshot import NicSnapshot, PhaseShare, Snapshot
from traintop.diagnosis import rules_job
from traintop.diagnosis.api import diagnose
from traintop.diagnosis.context import box_of, context_for
from traintop.diagnosis.memo import Memo

JOB_ID = "run:tcp://127.0.0.1:29600/2"
DDP = Scene(
    gpu_count=0, world_size=2, workers=0, data_wait=0.01, gpu_busy=None, trainer_cpu=20,
    trainer_threads=4, cpu_busy=30, phases=(("forward", 0.02), ("backward", 0.03), ("comm", 0.95)),
)  # fmt: skip
JOB_LO = NicSnapshot("lo", True, None, 2.5e6, 2.4e6, 2400, 2400, 0.0, 0.0, None,
                     job="ddp", job_ids=(JOB_ID,), netns_inode=4026532999)  # fmt: skip


BACKLOG = 256 * 1024  # bytes a rank's connections hold unsent while the link is the limit


def window(scene: Scene, nics: tuple[NicSnapshot, ...] = (JOB_LO,), queued: int | None = BACKLOG):
    """The scene's window, its job carrying ``JOB_ID``, its connections holding ``queued``
    bytes, and the snapshots ``nics`` besides."""
    return [
        dataclasses.replace(
            snap,
            jobs=tuple(
                dataclasses.replace(j, job_id=JOB_ID, send_queue_bytes=queued) for j in snap.jobs
            ),
            nics=(*snap.nics, *nics),
        )
        for snap in scene.window()
    ]


def findings(verdict) -> dict:
    return {f.bottleneck: f for f in (verdict.primary, *verdict.also)}


def test_waiting_on_peers_is_network_with_the_jobs_namespace_traffic() -> None:
    verdict = diagnose(window(DDP))
    assert verdict.primary.bottleneck == "network"
    texts = [e.text for e in verdict.primary.evidence]
    assert "communication (comm) 95 % of step" in texts
    assert "job's network namespace: lo rx 2.5 MB/s, tx 2.4 MB/s" in texts


def test_the_link_is_the_limit_only_while_data_waits_on_it() -> None:
    """The same 95 % in the collective with the connections empty (a peer late, not the link),
    or not read at all: never the network."""
    assert "network" not in findings(diagnose(window(DDP, queued=0)))
    assert "network" not in findings(diagnose(window(DDP, queued=None)))
    texts = [e.text for e in diagnose(window(DDP)).primary.evidence]
    assert (
        "its connections held 256.0 KiB unsent or unacknowledged on 100 % of the readings: "
        "data waits on the link" in texts
    )


def test_another_jobs_namespace_is_not_this_jobs_evidence() -> None:
    other = dataclasses.replace(JOB_LO, job="bert", job_ids=("run:other/4",))
    texts = [e.text for e in diagnose(window(DDP, (other,))).primary.evidence]
    assert not any(t.startswith("job's network namespace") for t in texts)


@pytest.mark.parametrize(
    ("comm", "main_wait", "network"),
    [
        (0.36, 40.0, False),  # peers held up by the run queue explain the whole wait
        (0.36, 20.0, False),  # 16 % left for the network: below the 20 % threshold
        (0.60, 20.0, True),  # 40 % the network must explain
        (0.36, None, True),  # no schedstat: the wait is taken as it is
    ],
)
def test_cpu_queueing_is_not_blamed_on_the_network(comm, main_wait, network) -> None:
    phases = (("forward", 0.3), ("backward", 0.64 - comm), ("comm", comm))
    main = None if main_wait is None else (60.0, main_wait)
    scene = DDP.but(phases=phases, trainer_main=main, trainer_wait=main_wait)
    found = findings(diagnose(window(scene)))
    assert ("network" in found) is network
    if network and main_wait:
        (fact, *_) = found["network"].evidence
        assert fact.text.endswith(
            f"of which rank 0's threads queued for a CPU explain up to {main_wait:.0f} %"
        )


def ranks_window(
    ranks: Sequence[tuple[float, float]], threads_wait: float | None = None
) -> list[Snapshot]:
    """DDP's window with one rank per ``(comm share, main thread's run-queue wait %)``, each
    rank its own trainer process whose threads wait ``threads_wait`` % in all (None: not
    measured), the rest of its step in forward."""
    scene = DDP.but(trainer_wait=threads_wait)
    return [_with_ranks(snap, ranks) for snap in window(scene)]


def _with_ranks(snap: Snapshot, ranks: Sequence[tuple[float, float]]) -> Snapshot:
    job, trainer = snap.jobs[0], snap.processes[0]
    jobs = tuple(
        dataclasses.replace(
            job, pid=TRAINER_PID + r, rank=r, local_rank=r, world_size=len(ranks),
            phases=(PhaseShare("forward", 0.99 - comm, 0.1), PhaseShare("comm", comm, 0.1)),
        )
        for r, (comm, _) in enumerate(ranks)
    )  # fmt: skip
    procs = tuple(
        dataclasses.replace(
            trainer, pid=TRAINER_PID + r, group_pid=TRAINER_PID + r,
            main_thread_cpu_pct=40.0, main_thread_wait_pct=wait,
        )
        for r, (_, wait) in enumerate(ranks)
    )  # fmt: skip
    return dataclasses.replace(snap, jobs=jobs, processes=procs)


def ids(verdict) -> list[str]:
    return [f.bottleneck for f in (verdict.primary, *verdict.also)]


def test_a_rank_waiting_on_a_starved_peer_is_not_network() -> None:
    """Rank 1 is starved of CPU (its main thread queued 48 % of the time, rank 0's 8 %): rank 0
    waits 58 % of its step for it, and would count 50 % of it as network if only its own
    queueing were taken off.  Rank 1's queueing bounds what rank 0's wait can be; the
    straggler is rank 1 (figures of a real fast-link run with rank 1 pinned to a busy core)."""
    snaps = ranks_window([(0.58, 8.0), (0.17, 48.0)])
    last = snaps[-1]
    box = box_of(Memo().window(snaps), last.jobs)
    assert rules_job.network(context_for(box, last.jobs[0])) is None
    verdict = diagnose(snaps)
    assert "network" not in ids(verdict)
    assert verdict.per_job[0].straggler is not None and verdict.per_job[0].straggler.rank == 1


def test_waiting_that_the_starved_peers_queueing_explains_is_not_network() -> None:
    """Both ranks wait, each more than its own queueing by the rule's 20 %: rank 1 queued for a
    CPU 35 % of the time (held in the collective itself once the data has come, too), rank 0
    only 5 %.  Rank 0's 40 % wait is rank 1's lateness: 5 % is left for the link."""
    verdict = diagnose(ranks_window([(0.40, 5.0), (0.56, 35.0)]))
    assert "network" not in ids(verdict)


def test_three_ranks_waiting_on_one_slow_peer_are_not_network() -> None:
    """Ranks 0 and 1 wait 45 % of their step for rank 2, which queued for a CPU 35 % of the
    time: the network can explain 10 % of their wait, so the job is not network-bound."""
    verdict = diagnose(ranks_window([(0.45, 5.0), (0.45, 5.0), (0.60, 35.0)]))
    assert "network" not in ids(verdict)


def test_waiting_on_the_backends_queued_threads_is_not_network() -> None:
    """Both ranks wait 36 % of their step; their main threads queued 12 % of the time, all
    their threads together 30 %: while the main thread blocks in the collective, gloo's threads
    must get a CPU each time bytes arrive, so their queueing is CPU delay too (a fast loopback
    on a moderately loaded 2-core box)."""
    verdict = diagnose(ranks_window([(0.36, 12.0), (0.36, 12.0)], threads_wait=30.0))
    assert "network" not in ids(verdict)


def test_every_rank_waiting_with_little_queueing_is_network() -> None:
    """A slow link holds every rank in the collective, the last to arrive too: the job's figure
    is the least-waiting rank's wait less the slowest rank's queueing (78 % - 10 %)."""
    verdict = diagnose(ranks_window([(0.80, 10.0), (0.78, 3.0)]))
    assert verdict.primary.bottleneck == "network"
    assert verdict.primary.summary == "Communication-bound: 68 % of time in collectives/network"
    texts = [e.text for e in verdict.primary.evidence]
    assert texts[0] == (
        "communication (comm) 78 % of step, of which rank 0's threads queued for a CPU explain"
        " up to 10 %"
    )
    assert "job's network namespace: lo rx 2.5 MB/s, tx 2.4 MB/s" in texts
    assert texts[-1] == "holds on ranks 0-1 (2 of 2)"
    assert verdict.per_job[0].straggler is None
