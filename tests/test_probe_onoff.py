"""Switching the zero-code hooks off and on (the cost harness's A/B factor), the model hook that
goes once it tells nothing new, and the harness's statistics.

The hooks are installed into this process's torch and taken out again: ``off()`` leaving torch
exactly as it found it is what the first test asserts, so no other test sees them.
"""

from __future__ import annotations

import multiprocessing.queues
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
from torch.optim import optimizer as optim_module
from torch.utils.data import DataLoader, TensorDataset, dataloader

from tests.test_probe import make_probe
from tests.torch_hooked import hooked_torch
from traintop.step_boundary import MODEL_HOOK_STEPS

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import onoff


def torch_state() -> dict[str, object]:
    """Everything the hooks may replace or register in torch."""
    return {
        "next": dataloader._BaseDataLoaderIter.__next__,
        "iter": DataLoader.__iter__,
        "backward": torch.Tensor.backward,
        "call": torch.nn.Module.__call__,
        "all_reduce": dist.all_reduce,
        "c10d.all_reduce": dist.distributed_c10d.all_reduce,
        "init": dist.init_process_group,
        "pre": dict(optim_module._global_optimizer_pre_hooks),
        "post": dict(optim_module._global_optimizer_post_hooks),
        "pickler": multiprocessing.queues._ForkingPickler,  # type: ignore[attr-defined]
    }


def job(rows: int = 256):
    torch.manual_seed(0)
    x = torch.randn(rows, 4)
    loader = DataLoader(TensorDataset(x, x[:, :1]), batch_size=8)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def epoch() -> int:
        steps = 0
        for xb, yb in loader:
            optimizer.zero_grad()
            torch.nn.functional.mse_loss(model(xb), yb).backward()
            optimizer.step()
            steps += 1
        return steps

    return model, epoch


@pytest.fixture
def hooked():
    """A probe with the zero-code hooks in this process's torch; every hook out afterwards."""
    before = torch_state()
    probe, writers, _clock = make_probe()
    with hooked_torch(probe) as hooks:
        yield before, hooks, writers


def test_off_leaves_torch_as_it_was_and_on_records_again(hooked) -> None:
    before, hooks, writers = hooked
    _model, epoch = job()
    assert torch_state() != before
    steps = epoch()
    (writer,) = writers
    assert len(writer.records) >= steps - 1
    hooks.off()
    assert torch_state() == before  # a real unpatch: torch's own functions, no hooks
    recorded = len(writer.records)
    epoch()
    assert len(writer.records) == recorded  # nothing runs while off
    hooks.on()
    assert torch_state() != before
    epoch()
    after = writer.records[recorded + 1 :]  # the first step after on() starts at a landmark
    assert len(after) >= steps - 2
    assert all(r["samples"] == 8 for r in after)


def test_the_model_hook_goes_once_loader_and_optimizer_tell_all(hooked) -> None:
    _before, hooks, writers = hooked
    model, epoch = job(rows=8 * (MODEL_HOOK_STEPS + 8))
    epoch()
    assert not model._forward_pre_hooks  # torch's fast path again
    phases = [dict(zip(writers[0].phases, r["phases"], strict=True)) for r in writers[0].records]
    assert all(p["forward"] > 0 and p["backward"] > 0 for p in phases[1:])
    hooks.off()
    hooks.on()  # switched on again: hooked again, and it goes again
    assert model._forward_pre_hooks
    epoch()
    assert not model._forward_pre_hooks


def test_the_model_hook_stays_where_it_opens_forward(hooked) -> None:
    """A second model call after backward (a GAN's generator pass) opens forward: kept."""
    _before, _hooks, _writers = hooked
    torch.manual_seed(0)
    x = torch.randn(8 * (MODEL_HOOK_STEPS + 8), 4)
    loader = DataLoader(TensorDataset(x), batch_size=8)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for (xb,) in loader:
        optimizer.zero_grad()
        model(xb).sum().backward()
        model(xb).sum().backward()  # after a backward, between phases: the hook opens forward
        optimizer.step()
    assert model._forward_pre_hooks


def test_an_evaluations_batches_are_no_training_samples(hooked) -> None:
    """Every 10 steps the loop evaluates on a held-out loader (no_grad, eval mode): those rows
    are not the job's samples (they had counted 8 + 64 x 3 in the step that held them)."""
    _before, _hooks, writers = hooked
    torch.manual_seed(0)
    x = torch.randn(8 * 40, 4)
    loader = DataLoader(TensorDataset(x, x[:, :1]), batch_size=8)
    held_out = DataLoader(TensorDataset(torch.randn(192, 4)), batch_size=64)
    model = torch.nn.Linear(4, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)
    for step, (xb, yb) in enumerate(loader, 1):
        optimizer.zero_grad()
        torch.nn.functional.mse_loss(model(xb), yb).backward()
        optimizer.step()
        if step % 10 == 0:
            model.eval()
            with torch.no_grad():
                for (vb,) in held_out:
                    model(vb)
            model.train()
    samples = [r["samples"] for r in writers[0].records[1:]]
    assert len(samples) >= 30 and set(samples) == {8}


def blocks(ds: list[tuple[float, float, float, float]], control: int = 0) -> list[onoff.Block]:
    out = []
    for q, medians in enumerate(ds):
        for on, median in zip(onoff.ORDER, medians, strict=True):
            ctl = q < control
            out.append(onoff.Block(q, ctl, on and not ctl, median, 200))
    return out


def test_quartet_d_cancels_a_linear_drift() -> None:
    drift = [(100.0, 102.0, 103.0, 105.0)]  # +1.0 a block, no probe cost: A1 B1 B2 A2
    assert onoff.quartet_d(blocks(drift)) == pytest.approx(0.0)
    cost = [(100.0, 102.0, 102.0, 100.0)]
    assert onoff.quartet_d(blocks(cost)) == pytest.approx(0.02)


def test_summary_estimates_the_cost_and_its_interval_and_the_control() -> None:
    control = [(100.0, 100.5, 99.5, 100.0), (100.0, 99.6, 100.4, 100.0)]
    costs = [(100.0, 101.0 + e, 101.0, 100.0) for e in (0.4, -0.4, 0.2, -0.2)]
    summary = onoff.summarize(blocks(control + costs, control=2), bound_us=1.5)
    assert summary.control.low <= 0 <= summary.control.high
    assert summary.cost.mean == pytest.approx(0.01)
    assert summary.cost.n == 4 and summary.cost.low < 0.01 < summary.cost.high
    assert summary.bound == pytest.approx(0.015)
    assert summary.median_step_us == pytest.approx(100.0)


def test_throttled_blocks_are_flagged_and_their_quartets_left_out_beside() -> None:
    found = blocks([(100.0, 101.0, 101.0, 100.0)] * 3)
    hot = onoff.Block(1, False, True, 130.0, 200, {"reasons": 0x20, "sm_mhz": 1400})
    found[5] = hot
    summary = onoff.summarize(found)
    assert hot.throttled and "THROTTLED" in onoff.block_line(hot)
    assert summary.throttled_blocks == 1
    assert summary.cost_unthrottled.n == 2 and summary.cost_unthrottled.mean == pytest.approx(0.01)
