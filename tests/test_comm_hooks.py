"""DDP communication timing (traintop.comm_hooks): what is booked, when it stands aside, and
that a real DDP job computes the same bits and keeps its own comm hooks under `traintop run`.

Unit tests drive the booker with fakes of the autograd engine's tensor hooks and final
callbacks (the mechanism is the engine's, the same for gloo and NCCL); the slow tests run real
gloo DDP jobs under torchrun, with and without `traintop run`.
"""

from __future__ import annotations

import json
import os
import re
import statistics
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import torch

from tests.isolation import private_dir
from tests.test_probe import make_probe
from traintop.collectors.ring_reader import discover, open_segment
from traintop.comm_hooks import (
    COMM_PHASE,
    CollectiveBooker,
    Compiling,
    WaitBooker,
    _armed_backward,
    _booked_collective,
)
from traintop.probe import BACKWARD, NO_PHASE

WORKLOADS = Path(__file__).parent / "workloads"
REPO = Path(__file__).resolve().parents[1]


class Handle:
    def __init__(self, hooks: list) -> None:
        self.hooks, self.removed = hooks, False

    def remove(self) -> None:
        self.removed = True


class Loss:
    """The tensor ``backward()`` is called on: a ``grad_fn`` and ``register_hook``."""

    def __init__(self, grad_fn: object = "MeanBackward0") -> None:
        self.grad_fn, self.hooks = grad_fn, []

    def register_hook(self, hook) -> Handle:
        self.hooks.append(hook)
        return Handle(self.hooks)


def booked(auto: bool = True, distributed: bool = True):
    """A probe as the shim leaves it, a booker on it, and the final callbacks it queued."""
    probe, writers, clock = make_probe()
    probe._auto = auto
    queued: list = []
    return probe, writers, clock, WaitBooker(probe, queued.append, lambda: distributed), queued


def test_only_the_tail_after_compute_is_booked_as_comm() -> None:
    probe, writers, clock, booker, queued = booked()
    loss = Loss()
    handle = booker.arm(loss)  # Tensor.backward is called
    probe._switch(BACKWARD)  # ... torch_hooks' timed backward starts
    (started,) = loss.hooks
    started("grad")  # the graph's first node: our final callback is queued before DDP's
    assert len(queued) == 1
    clock.now += 5000  # compute goes on while the buckets' all-reduces overlap it
    queued.pop()()  # autograd ran the last node: the rank now waits on its peers
    clock.now += 70_000
    probe._switch(NO_PHASE)  # backward returns once DDP's final callback has its buckets
    handle.remove()
    probe.step()
    (writer,) = writers
    phases = dict(zip(writer.phases, writer.records[0]["phases"], strict=True))
    assert phases[COMM_PHASE] == 70_010
    assert phases["backward"] == 5_010  # the overlapped part stays compute


@pytest.mark.parametrize(
    ("auto", "distributed", "loss"),
    [
        (False, True, Loss()),  # the script uses the explicit API: its phases are its own
        (True, False, Loss()),  # no process group: no peers to wait on, no "comm" phase
        (True, True, Loss(grad_fn=None)),  # a leaf: backward has no graph to run
    ],
    ids=["explicit-api", "single-process", "leaf"],
)
def test_not_armed(auto: bool, distributed: bool, loss: Loss) -> None:
    _probe, _writers, _clock, booker, _queued = booked(auto, distributed)
    assert booker.arm(loss) is None and loss.hooks == []


def test_explicit_api_taking_over_mid_backward_is_left_alone() -> None:
    probe, writers, _clock, booker, queued = booked()
    loss = Loss()
    booker.arm(loss)
    loss.hooks[0]("grad")
    probe.mark("allreduce")  # the script's own comm hook marks its phase
    queued.pop()()
    probe.step()
    assert COMM_PHASE not in writers[0].phases


def test_the_hook_is_removed_even_when_backward_raises() -> None:
    """The armed wrapper around the real ``Tensor.backward`` of a real tensor."""
    _probe, _writers, _clock, booker, _queued = booked()
    seen = []

    def failing_backward(tensor, *args, **kwargs):
        seen.append(len(tensor._backward_hooks or ()))
        raise RuntimeError("user error")

    wrapped = _armed_backward(booker, failing_backward)
    loss = (torch.ones(2, requires_grad=True) * 2).sum()
    with pytest.raises(RuntimeError, match="user error"):
        wrapped(loss)
    assert seen == [1] and not loss._backward_hooks


def collective_setup(compiling: bool = False):
    """A probe in backward, and a fake ``all_reduce`` that blocks for 40 µs of probe clock."""
    probe, writers, clock = make_probe()
    probe._auto = True
    calls = []

    def all_reduce(tensor, op=None, group=None, async_op=False):
        calls.append(tensor)
        clock.now += 40_000
        return "work" if async_op else None

    booker = CollectiveBooker(probe, Compiling(lambda: compiling))
    return probe, writers, _booked_collective(booker, all_reduce), calls


def phases_of(probe, writers) -> dict:
    probe.step()
    return dict(zip(writers[0].phases, writers[0].records[0]["phases"], strict=True))


def test_a_blocking_collective_is_comm_and_the_interrupted_phase_resumes() -> None:
    probe, writers, all_reduce, calls = collective_setup()
    probe._switch(BACKWARD)
    assert all_reduce("grad") is None and calls == ["grad"]
    assert probe._open == BACKWARD  # FSDP's reduce-scatter inside backward: backward goes on
    phases = phases_of(probe, writers)
    assert phases[COMM_PHASE] == 40_010 and phases["backward"] == 20


@pytest.mark.parametrize(
    "call",
    [
        lambda f: f("grad", async_op=True),
        lambda f: f("grad", None, None, True),  # async_op passed by position
    ],
    ids=["keyword", "positional"],
)
def test_asynchronous_collectives_are_not_booked(call) -> None:
    probe, writers, all_reduce, calls = collective_setup()
    assert call(all_reduce) == "work" and calls == ["grad"]
    probe._switch(NO_PHASE)
    assert COMM_PHASE not in phases_of(probe, writers)


def test_collectives_off_the_training_thread_or_while_compiling_are_not_booked() -> None:
    probe, writers, all_reduce, calls = collective_setup()
    worker = threading.Thread(target=all_reduce, args=("metrics",))
    worker.start()
    worker.join()
    probe._switch(NO_PHASE)
    assert calls == ["metrics"] and COMM_PHASE not in phases_of(probe, writers)
    probe, writers, all_reduce, calls = collective_setup(compiling=True)
    all_reduce("traced")
    probe._switch(NO_PHASE)
    assert COMM_PHASE not in phases_of(probe, writers)


COMPILED = """
import json, sys, tempfile, torch, torch.distributed as dist, traintop
from traintop.comm_hooks import compile_flags
probe = traintop.attach(name="compiled")
dist.init_process_group("gloo", init_method=f"file://{tempfile.mktemp()}", rank=0, world_size=1)
torch._dynamo.config.error_on_recompile = True  # a guard on the compile flag would recompile
def step(x):
    y = x * 2
    dist.all_reduce(y)  # traintop's wrapper, traced: the flag reads True, nothing is booked
    return y + 1
outputs = [torch.compile(step, backend=sys.argv[1], fullgraph=True)(torch.ones(3)).tolist()
           for _ in range(4)]
compiled = probe._ledger.written
dist.all_reduce(torch.ones(3))  # eager, on the training thread: in the ledger
print(json.dumps({"fast": compile_flags(torch) is torch.compiler, "outputs": outputs,
                  "compiled": compiled, "eager": probe._ledger.written}))
"""


@pytest.mark.slow
@pytest.mark.parametrize("backend", ["eager", "aot_eager"])
def test_a_compiled_collective_traces_through_the_wrapper_once_unbooked(tmp_path, backend):
    """Real dynamo, ``fullgraph=True`` (a graph break raises) and no recompiles allowed: the
    wrapper reads ``torch.compiler._is_compiling_flag`` as True while traced, so the compiled
    step holds the collective and the ledger only the eager call."""
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "TRAINTOP_RING_DIR": str(private_dir(tmp_path / "ring")),
    }
    done = subprocess.run([sys.executable, "-c", COMPILED, backend], env=env, capture_output=True,
                          text=True, timeout=180)  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    seen = json.loads(done.stdout.strip().splitlines()[-1])
    assert seen == {"fast": True, "outputs": [[3.0] * 3] * 4, "compiled": 0, "eager": 1}


def _torchrun_argv(world: int, *args: str, shim: bool, ring: Path) -> tuple[list[str], dict]:
    """tests/workloads/ddp_train.py under torchrun (and `traintop run` when ``shim``)."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TRAINTOP")}
    environ.update(TRAINTOP_RING_DIR=str(ring), PYTHONPATH=str(REPO))
    argv = [sys.executable, "-m", "torch.distributed.run", "--standalone",
            f"--nproc_per_node={world}", str(WORKLOADS / "ddp_train.py"), *args]  # fmt: skip
    if shim:
        argv = [sys.executable, "-m", "traintop.launcher", "--", *argv]
    return argv, environ


def _results(done: subprocess.CompletedProcess | subprocess.Popen, out: str, err: str) -> list:
    assert done.returncode == 0, err[-3000:]
    assert "traintop:" not in err, err[-3000:]
    return re.findall(r"params=\S+ hook_calls=\d+", out)


def _torchrun(world: int, *args: str, shim: bool, ring: Path) -> str:
    """Run the workload to its end; returns rank 0's result line."""
    argv, environ = _torchrun_argv(world, *args, shim=shim, ring=ring)
    done = subprocess.run(argv, env=environ, capture_output=True, text=True, timeout=240)
    return _results(done, done.stdout, done.stderr)[0]


@pytest.fixture
def ring(tmp_path: Path) -> Path:
    return private_dir(tmp_path / "ring")


@pytest.fixture(scope="module")
def trained(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, list[str]]:
    """Three ranks trained with DDP's default reduction, then with a user's hook, without and
    with the shim, side by side: rank 0's result lines by ``shim``.  Three ranks: 1/3 is
    inexact in binary, so dividing instead of scaling would show."""
    runs = {}
    for shim in (False, True):
        ring = private_dir(tmp_path_factory.mktemp("run") / "ring")
        argv, environ = _torchrun_argv(3, "--steps", "8", "--then-user-hook", shim=shim, ring=ring)
        runs[shim] = subprocess.Popen(argv, env=environ, stdout=subprocess.PIPE,
                                      stderr=subprocess.PIPE, text=True)  # fmt: skip
    return {shim: _results(proc, *proc.communicate(timeout=240)) for shim, proc in runs.items()}


@pytest.mark.slow
@pytest.mark.parametrize("variant", [0, 1], ids=["default", "user-hook"])
def test_parameters_are_bit_identical_under_the_shim(trained: dict, variant: int) -> None:
    plain, shimmed = trained[False][variant], trained[True][variant]
    assert shimmed == plain
    assert ("hook_calls=0" in plain) != bool(variant)  # the user's hook ran, behind ours


@pytest.mark.slow
@pytest.mark.parametrize("how", [(), ("--manual-allreduce",)], ids=["ddp", "dist.all_reduce"])
def test_waiting_on_a_slow_peer_is_comm_and_the_slow_rank_is_not(ring: Path, how) -> None:
    _torchrun(2, "--steps", "30", "--straggle-ms", "40", *how, shim=True, ring=ring)
    comm = {}
    for path in discover(ring):
        with open_segment(path) as segment:
            index = segment.header.phases.index(COMM_PHASE)
            waits = [r.phase_ns[index] / 1e6 for r in list(segment.last(64))[5:]]
            comm[segment.header.rank] = statistics.median(waits)
    # Rank 0 waits for rank 1's 40 ms sleep inside the all-reduce; rank 1 arrives last, its
    # peer already there: both pay the reduction itself (a few ms, more on a loaded 2-core box:
    # 13 ms once beside a full CI), only rank 0 the straggle, so the gap between them is it.
    assert comm[0] - comm[1] > 30, comm
    assert comm[1] < comm[0] / 2, comm  # the slow rank's own sleep is never its comm
