"""The network rule over communication phases: waiting on peers that the network explains, and
the job's own-namespace traffic as evidence (diagnosis.network_signals)."""

from __future__ import annotations

import dataclasses

import pytest

from collectors.snapshot import NicSnapshot
from diagnosis.api import diagnose
from tests.diagnosis_factories import Scene

JOB_ID = "run:tcp://127.0.0.1:29600/2"
DDP = Scene(
    gpu_count=0, world_size=2, workers=0, data_wait=0.01, gpu_busy=None, trainer_cpu=20,
    trainer_threads=4, cpu_busy=30, phases=(("forward", 0.02), ("backward", 0.03), ("comm", 0.95)),
)  # fmt: skip
JOB_LO = NicSnapshot("lo", True, None, 2.5e6, 2.4e6, 2400, 2400, 0.0, 0.0, None,
                     job="ddp", job_ids=(JOB_ID,), netns_inode=4026532999)  # fmt: skip


def window(scene: Scene, nics: tuple[NicSnapshot, ...] = (JOB_LO,)):
    """The scene's window, its job carrying ``JOB_ID`` and the snapshots ``nics`` besides."""
    return [
        dataclasses.replace(
            snap,
            jobs=tuple(dataclasses.replace(j, job_id=JOB_ID) for j in snap.jobs),
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
        assert fact.text.endswith(f"of which ranks queued for a CPU explain {main_wait:.0f} %")
