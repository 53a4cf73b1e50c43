"""The trainer's handoff of each worker's batch: timed by the probe where it happens (the
unpickling in the DataLoader's ``next()``), carried in two words of the segment, read over the
monitor's window, and judged: a wait that is the handoff is ``data_handoff``, no count of workers
shortens it, and the remedy for a job that shares tensors by descriptor is to share them by name
(never offered to one that already does)."""

from __future__ import annotations

import multiprocessing.queues
import os
from dataclasses import replace
from pathlib import Path
from typing import NamedTuple

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from tests.diagnosis_factories import Scene
from tests.isolation import private_dir
from tests.torch_hooked import hooked_torch
from traintop import torch_hooks
from traintop.collectors.handoff import Handoffs
from traintop.collectors.ring_reader import open_segment
from traintop.collectors.snapshot import JobFacts, LoaderFacts
from traintop.diagnosis.context import box_of, context_for
from traintop.diagnosis.data_split import data_split
from traintop.diagnosis.engine import diagnose
from traintop.diagnosis.knob_diff import change_line, changes, settings
from traintop.diagnosis.loop_inputs import measured_loop
from traintop.diagnosis.memo import Memo
from traintop.probe import Probe
from traintop.ring import RingWriter
from traintop.ring_format import HANDOFF_COUNT_WORD, HANDOFF_NS_WORD

PHASES = ("data", "forward", "backward", "optimizer", "other")


class Hot(NamedTuple):
    """The words as a poll reads them (a HotBlock's fields of the handoff)."""

    handoff_ns: int
    handoffs: int
    handoff_cpu_ns: int = 0


# ---- the probe --------------------------------------------------------------------------------


@pytest.fixture
def hooked(tmp_path: Path):
    """A probe on a real segment with the zero-code hooks in this process's torch (a forked
    worker goes quiet, as ``traintop``'s own probe does); every hook out afterwards."""
    ring = private_dir(tmp_path / "ring")
    writer = RingWriter.create(name="handoff", phases=PHASES, directory=str(ring))
    probe = Probe("handoff", writer_factory=lambda _phases: writer)
    probe._create_writer()  # as traintop.run_start does at start-up
    os.register_at_fork(after_in_child=probe._forget_in_child)
    original = multiprocessing.queues._ForkingPickler  # type: ignore[attr-defined]
    with hooked_torch(probe):
        yield probe, writer, original
    probe.close()


def _epoch(workers: int, batches: int = 12) -> int:
    x = torch.randn(batches * 4, 8)
    loader = DataLoader(TensorDataset(x, x[:, :1]), batch_size=4, num_workers=workers)
    model = torch.nn.Linear(8, 1)
    seen = 0
    for xb, yb in loader:
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        seen += 1
    return seen


def test_the_probe_times_each_batch_the_trainer_takes_over_from_a_worker(hooked) -> None:
    """One handoff a batch, counted by the trainer alone (the worker unpickles indices with
    the same code: forked, it writes nothing), its time in the segment's words; the hooks'
    off switch puts multiprocessing's pickler back."""
    _probe, writer, original = hooked
    assert multiprocessing.queues._ForkingPickler is not original  # type: ignore[attr-defined]
    batches = _epoch(workers=1)
    hot = open_segment(writer.path).hot()
    assert hot.handoffs == batches == 12
    assert hot.handoff_ns > 0 and hot.handoff_cpu_ns > 0  # its CPU read on 1 batch in 8
    assert writer._q is not None and writer._q[HANDOFF_COUNT_WORD] == batches
    assert writer._q[HANDOFF_NS_WORD] == hot.handoff_ns


def test_a_loader_without_workers_hands_nothing_over(hooked) -> None:
    _probe, writer, _original = hooked
    _epoch(workers=0)
    assert open_segment(writer.path).hot().handoffs == 0


def test_the_off_switch_restores_the_pickler(hooked) -> None:
    probe, _writer, original = hooked
    torch_hooks.installed.off()  # type: ignore[union-attr]
    assert multiprocessing.queues._ForkingPickler is original  # type: ignore[attr-defined]
    torch_hooks.installed.on()  # type: ignore[union-attr]
    assert multiprocessing.queues._ForkingPickler is not original  # type: ignore[attr-defined]
    assert probe.enabled


# ---- the reader's window ----------------------------------------------------------------------


def _per_batch(seen: Handoffs) -> float | None:
    return seen.per_batch()["handoff_s"]


def test_the_window_divides_the_time_by_the_batches_it_saw() -> None:
    seen = Handoffs(window_s=10.0)
    assert seen.per_batch() == {"handoff_s": None, "handoff_cpu_s": None}
    seen.add(0.0, Hot(1_000_000, 10, 100_000))  # type: ignore[arg-type]
    seen.add(1.0, Hot(3_000_000, 12, 300_000))  # type: ignore[arg-type]
    assert seen.per_batch() == pytest.approx({"handoff_s": 0.001, "handoff_cpu_s": 0.0001})
    seen.add(20.0, Hot(13_000_000, 17, 800_000))  # type: ignore[arg-type]  # the first left
    assert seen.per_batch() == pytest.approx({"handoff_s": 0.002, "handoff_cpu_s": 0.0001})


def test_no_batch_handed_over_reads_none_and_a_new_writer_starts_over() -> None:
    seen = Handoffs(window_s=10.0)
    seen.add(0.0, Hot(0, 0))  # type: ignore[arg-type]
    seen.add(1.0, Hot(0, 0))  # type: ignore[arg-type]
    assert _per_batch(seen) is None  # a pin-memory thread's, or an older writer
    seen.add(2.0, Hot(9_000_000, 3))  # type: ignore[arg-type]
    seen.add(3.0, Hot(1_000_000, 1))  # words went back: another writer
    seen.add(4.0, Hot(4_000_000, 2))  # type: ignore[arg-type]
    assert _per_batch(seen) == pytest.approx(0.003)


# ---- the verdict ------------------------------------------------------------------------------

# A CPU job whose one worker parses rows in Python (85 % CPU) while the trainer spends most of
# its step taking each batch over: 170 ms of a 250 ms step, 120 ms of it its own CPU, tensors
# shared by descriptor.
DESCRIPTOR = JobFacts(device="cpu", sharing_strategy="file_descriptor",
                      loaders=(LoaderFacts(1, False, True, 2, 32),))  # fmt: skip
HANDOFF = Scene(cpus=8, gpu_count=0, gpu_busy=None, workers=1, worker_cpu=85, worker_read=0,
                trainer_cpu=30, cpu_busy=20, data_wait=0.75, handoff=0.17, handoff_cpu=0.12,
                facts=DESCRIPTOR)  # fmt: skip


def _context(scene: Scene):
    window = scene.window()
    jobs = list(window[-1].jobs)
    return context_for(box_of(Memo().window(window), jobs), jobs[0])


def test_the_handoff_is_taken_out_of_the_wait_before_the_loaders_split_it() -> None:
    split = data_split(_context(HANDOFF))
    assert split is not None and split.handoff == pytest.approx(0.12 * 4.0)
    assert split.cpu + split.io + split.starved == pytest.approx(0.75 - 0.48)
    loop = measured_loop(_context(HANDOFF))
    assert loop is not None and loop.loop.handoff_s == pytest.approx(0.12)


def test_a_wait_that_is_the_handoff_is_named_and_more_workers_are_not_offered() -> None:
    primary = diagnose(HANDOFF.window()).primary
    assert primary.bottleneck == "data_handoff"
    assert primary.summary.endswith("limited by the handoff of each batch: 48 % of time lost")
    texts = [e.text for e in primary.evidence]
    assert any(
        t.startswith("the trainer takes 170 ms to take each batch over from its worker, 120 ms")
        and t.endswith("a round trip to the worker each")
        for t in texts
    ), texts
    assert primary.remedies[0].startswith('torch.multiprocessing.set_sharing_strategy("file_sys')
    assert not any("num_workers" in r for r in primary.remedies)
    first = primary.gains[0]
    assert first.knob == "sharing_strategy" and first.speedup is None
    assert first.high is not None and first.high > 1.05  # the handoff gone: its bound


def test_a_job_that_shares_by_name_is_not_told_to() -> None:
    named = HANDOFF.but(facts=JobFacts(device="cpu", sharing_strategy="file_system",
                                       loaders=DESCRIPTOR.loaders))  # fmt: skip
    primary = diagnose(named.window()).primary
    assert primary.bottleneck == "data_handoff"
    assert not any("sharing_strategy" in r for r in primary.remedies)
    assert primary.remedies[0].startswith("return each batch as fewer, larger tensors")


def test_a_handoff_that_waits_on_a_busy_worker_is_the_workers_time() -> None:
    """The trial's CPU-bound worker (20 ms of Python a batch): asked for each tensor while its
    Python makes the next batch, it answers after the switch interval, so the handoff is long
    (170 ms here) but the trainer's own CPU in it short (10 ms): the wait is the worker's, the
    verdict data_cpu, and more workers are offered (a second bought that job 1.75×)."""
    busy = HANDOFF.but(worker_cpu=98, handoff_cpu=0.01, facts=None)
    primary = diagnose(busy.window()).primary
    assert primary.bottleneck == "data_cpu"
    assert primary.remedies[0].startswith("raise DataLoader num_workers from 1 to")


def test_a_small_handoff_leaves_the_loaders_verdict_alone() -> None:
    """A latency-bound loader whose batches take 10 ms each to hand over is still starved."""
    latency = HANDOFF.but(worker_cpu=8, handoff=0.01, facts=None)
    primary = diagnose(latency.window()).primary
    assert primary.bottleneck == "data_starved"
    assert not any("take each batch over" in e.text for e in primary.evidence)


def test_compare_names_the_sharing_strategy_and_the_bound_a_predicted() -> None:
    """``traintop compare`` of a run sharing by descriptor and one sharing by name: the knob,
    and A's bound for it."""
    primary = diagnose(HANDOFF.window()).primary
    named = replace(DESCRIPTOR, sharing_strategy="file_system")
    (change,) = changes(settings(DESCRIPTOR, None), settings(named, None), (primary,))
    assert change.words == "sharing_strategy file_descriptor → file_system"
    assert change.predicted is not None and change.predicted.high is not None
    assert change_line(change, 1.3, None).startswith(
        "sharing_strategy file_descriptor → file_system: 1.30× steps/s measured, up to "
    )
