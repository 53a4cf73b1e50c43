"""What the job already does (traintop/job_knobs.py), piece by piece on CPU torch: the model
scan, autocast as seen inside forward, loaders and optimizers as built, compile, TF32."""

from __future__ import annotations

import pickle
from collections import Counter, defaultdict
from types import SimpleNamespace

import pytest
import torch
from torch.utils.data import DataLoader, TensorDataset

from traintop.job_knobs import (
    KnobWatch,
    autocast_state,
    loader_facts,
    optimizer_facts,
    scan_model,
    tf32_flags,
)
from traintop.module_samples import _HooksWithout, hook_privately
from traintop.patches import Patches


def conv_net() -> torch.nn.Module:
    return torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3), torch.nn.ReLU(), torch.nn.Conv2d(8, 4, 3))


@pytest.mark.parametrize(
    ("model", "found"),
    [
        (conv_net(), (True, False)),
        (conv_net().to(memory_format=torch.channels_last), (True, True)),
        (torch.nn.Conv2d(1, 1, 1), (True, None)),  # 1x1, one channel: both formats at once
        (torch.nn.Conv3d(2, 4, 3).to(memory_format=torch.channels_last_3d), (True, True)),
        (torch.nn.Sequential(torch.nn.Linear(4, 4)), (False, None)),
    ],
)
def test_the_model_scan(model, found) -> None:
    assert scan_model(torch, model) == found


def test_autocast_is_read_where_it_is_on() -> None:
    assert autocast_state(torch, "cpu") == "off"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert autocast_state(torch, "cpu") == "bf16"
        assert autocast_state(torch, "cuda") == "off"  # another device's autocast
    with torch.autocast("cpu", dtype=torch.float16):
        assert autocast_state(torch, "cpu") == "fp16"


def test_loaders_and_optimizers_as_built() -> None:
    data = TensorDataset(torch.randn(8, 2))
    assert loader_facts(DataLoader(data, batch_size=4)) == {
        "num_workers": 0,
        "pin_memory": False,
        "persistent_workers": False,
        "prefetch_factor": None,
        "batch_size": 4,
    }
    sampler = torch.utils.data.BatchSampler(range(8), batch_size=3, drop_last=False)
    with_sampler = DataLoader(data, batch_sampler=sampler, num_workers=2, prefetch_factor=5)
    assert loader_facts(with_sampler)["batch_size"] == 3
    assert loader_facts(with_sampler)["prefetch_factor"] == 5
    params = [torch.nn.Parameter(torch.zeros(2))]
    assert optimizer_facts(torch.optim.SGD(params, lr=0.1)) == {
        "name": "SGD",
        "fused": None,
        "foreach": None,  # torch's default: could not tell
    }
    assert optimizer_facts(torch.optim.AdamW(params, fused=True))["fused"] is True


def test_loaders_register_and_the_iterated_ones_are_listed_latest_first() -> None:
    sites = ((DataLoader, "__init__"), (DataLoader, "_get_iterator"),
             (torch.optim.Optimizer, "__init__"))  # fmt: skip
    originals = [getattr(owner, name) for owner, name in sites]
    patches = Patches()
    knobs = KnobWatch(torch)
    knobs.install(patches)
    try:
        _registered_and_listed(knobs)
    finally:
        patches.off()  # the cost harness's "off": torch as it was
    assert [getattr(owner, name) for owner, name in sites] == originals


def _registered_and_listed(knobs: KnobWatch) -> None:
    data = TensorDataset(torch.randn(8, 2))
    train, val, unused = (DataLoader(data, batch_size=b) for b in (4, 8, 2))
    next(iter(val))
    next(iter(train))
    optimizer = torch.optim.Adam([torch.nn.Parameter(torch.zeros(2))], foreach=True)
    facts = knobs.facts({})
    assert [lo["batch_size"] for lo in facts["loaders"]] == [4, 8]  # not the unused one
    assert facts["optimizers"] == [{"name": "Adam", "fused": None, "foreach": True}]
    assert facts["device"] == "cpu"  # from the optimizer's parameters, before any forward
    del train, val, unused, optimizer
    facts = knobs.facts({})  # gone at the script's end: the last ones seen stay
    assert len(facts["loaders"]) == 2 and facts["optimizers"][0]["name"] == "Adam"


def test_the_training_loader_is_listed_before_an_evaluations_iterated_after_it() -> None:
    """A validation pass iterates its loader after the training one (under no_grad, or with
    the model in eval mode): the loop's loader stays first, the one remedies and compare read."""
    model = torch.nn.Linear(2, 1)
    patches, knobs = Patches(), KnobWatch(torch, found(model))
    knobs.install(patches)
    try:
        data = TensorDataset(torch.randn(8, 2))
        train, val, test = (DataLoader(data, batch_size=b) for b in (4, 8, 2))
        next(iter(train))
        with torch.no_grad():
            next(iter(val))
        assert [lo["batch_size"] for lo in knobs.facts({})["loaders"]] == [4, 8]
        model.eval()
        next(iter(test))
        model.train()
        assert [lo["batch_size"] for lo in knobs.facts({})["loaders"]] == [4, 2, 8]
        next(iter(val))  # iterated to train on: the latest training loader
        assert [lo["batch_size"] for lo in knobs.facts({})["loaders"]] == [8, 4, 2]
    finally:
        patches.off()


def found(*models: torch.nn.Module) -> SimpleNamespace:
    """A settled ``ModelFinder`` that found ``models`` (and hooked them, as it does)."""
    for model in models:
        hook_privately(model, lambda *args: None)
    return SimpleNamespace(_found=list(models), searching=False)


def test_one_forward_is_sampled_and_the_model_still_pickles() -> None:
    model = conv_net().to(memory_format=torch.channels_last)
    knobs = KnobWatch(torch, found(model))
    assert knobs.arm_forward_sample()
    pickle.dumps(model)  # a checkpoint taken while the hook waits
    with torch.autocast("cpu", dtype=torch.bfloat16):
        model(torch.randn(1, 3, 8, 8))
    assert (knobs.autocast, knobs.device) == ("bf16", "cpu")
    assert len(model._forward_pre_hooks) == 1  # ours is gone; the probe's own stays
    model(torch.randn(1, 3, 8, 8))
    assert knobs.autocast == "bf16"  # not sampled again outside autocast
    facts = knobs.facts({"attention": None})
    assert (facts["has_conv"], facts["channels_last"], facts["compiled"]) == (True, True, False)


def test_a_torch_compiled_model_is_compiled_and_sampled_outside_its_graph() -> None:
    model = torch.compile(torch.nn.Linear(4, 4), backend="eager")
    knobs = KnobWatch(torch, found(model))
    assert knobs.facts({})["compiled"] is True
    assert knobs.arm_forward_sample()
    assert isinstance(vars(model)["_forward_pre_hooks"], _HooksWithout)
    model(torch.randn(2, 4))
    assert knobs.autocast == "off"


def test_a_model_compiled_in_place_is_not_hooked() -> None:
    model = torch.nn.Linear(4, 4)
    model.compile(backend="eager")
    knobs = KnobWatch(torch, found(model))
    assert not knobs.arm_forward_sample() and knobs.facts({})["compiled"] is True


def test_nothing_to_hook_before_the_model_is_found(monkeypatch) -> None:
    import torch._dynamo.utils

    monkeypatch.setattr(torch._dynamo.utils, "counters", defaultdict(Counter))  # no frames yet
    assert not KnobWatch(torch, SimpleNamespace(_found=[], searching=True)).arm_forward_sample()
    assert KnobWatch(torch).facts({})["compiled"] is None  # no model, no forward: can't tell


def test_tf32_flags_follow_the_settings(monkeypatch) -> None:
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", True)
    assert tf32_flags(torch)["tf32_matmul"] is True
    monkeypatch.setattr(torch.backends.cuda.matmul, "allow_tf32", False)
    assert tf32_flags(torch) == {
        "tf32_matmul": False,
        "tf32_cudnn": torch.backends.cudnn.allow_tf32,
    }
