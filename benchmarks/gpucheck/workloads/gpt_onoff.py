"""The probe's cost on a card: a small GPT trained under ``traintop run``, its hooks switched off
and on in A B B A blocks inside the one warm process (``benchmarks/onoff.py``).

``traintop run -- python gpt_onoff.py --out FILE [--shape launch|gpu] [--steps 200]
[--quartets 12] [--controls 3] [--max-s S] [--device cuda|cpu]``

Shapes: ``launch``, the launch-bound case of issue 33 (8 layers, width 512, sequence 512, four
micro-batches of 16 a step, bf16 autocast, fused AdamW, flash attention, not compiled: about
70 ms a step on an H100/H200, the card idle between kernels a third of the time, so every µs on
the launching thread adds to the step; target ≤ 1 %); ``gpu``, the card the limit (width 1024,
one micro-batch of 64; target ≤ 0.5 %).  Each step: the micro-batches from a DataLoader, their
backward, one optimizer step: every hook the probe has runs.  Steps are timed from start to
start (the queue stays full, no sync but at the blocks' ends); each block logs the SM clock,
temperature, power and clock-event reasons.  Quartets stop early at ``--max-s`` (the control
quartets first), and FILE says how many ran.  Without ``traintop run`` the hooks are installed
here, as the shim does.  ``--device cpu`` runs a toy of the same code (CI, no card).
"""

from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from torch.utils.data import DataLoader, TensorDataset

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # benchmarks/: the harness

import onoff
from gpt_model import GPT, SHAPES


def make_step(shape: dict, device: str):
    """One training step of ``shape``: micro-batches from a DataLoader, one optimizer step."""
    torch.manual_seed(0)
    model = GPT(**shape).to(device)
    cuda = device == "cuda"
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, fused=cuda)
    tokens = torch.randint(0, shape["vocab"], (shape["batch"] * 64, shape["seq"] + 1))
    loader = DataLoader(TensorDataset(tokens), batch_size=shape["batch"], shuffle=True,
                        pin_memory=cuda, drop_last=True)  # fmt: skip
    batches = onoff.endless(loader)
    dtype = torch.bfloat16 if cuda else torch.float32

    def step() -> None:
        for _ in range(shape["micro"]):
            (batch,) = next(batches)
            batch = batch.to(device, non_blocking=True)
            with torch.autocast(device, dtype=dtype, enabled=cuda):
                logits = model(batch[:, :-1])
            loss = F.cross_entropy(logits.float().flatten(0, 1), batch[:, 1:].flatten())
            (loss / shape["micro"]).backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)

    return step


def the_hooks(ring: str):
    """The hooks ``traintop run`` installed, or installed here as the shim does."""
    from traintop import torch_hooks

    return torch_hooks.installed or onoff.hooked_probe(torch, ring)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--shape", choices=("launch", "gpu"), default="launch")
    p.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    p.add_argument("--steps", type=int, default=200)
    p.add_argument("--quartets", type=int, default=12)
    p.add_argument("--controls", type=int, default=3)
    p.add_argument("--warmup-steps", type=int, default=30)
    p.add_argument("--max-s", type=float, default=math.inf, help="start no quartet after")
    p.add_argument("--bound-us", type=float, help="the accounting bound (bench_budget.py)")
    args = p.parse_args()
    cuda = args.device == "cuda"
    step = make_step(SHAPES[args.shape if cuda else "toy"], args.device)
    sync = torch.cuda.synchronize if cuda else None
    hooks = the_hooks(tempfile.mkdtemp(prefix="onoff-"))
    for _ in range(args.warmup_steps):  # kernels loaded, the model found, the step learnt
        step()
    start, deadline = time.monotonic(), time.monotonic() + args.max_s
    per_quartet = onoff.quartet_s(step, args.steps, sync)
    left = (deadline - time.monotonic()) / per_quartet
    fits = args.controls + args.quartets if math.isinf(left) else max(0, int(left))
    controls = min(args.controls, fits)
    quartets = min(args.quartets, fits - controls)
    blocks = onoff.run_quartets(step, onoff.switcher(hooks, "unpatch"), steps=args.steps,
                                quartets=quartets, controls=controls, sync=sync,
                                telemetry=onoff.nvml_telemetry() if cuda else None,
                                report=lambda b: print(onoff.block_line(b), flush=True),
                                )  # fmt: skip
    summary = onoff.summarize(blocks, args.bound_us)
    print("\n".join(summary.lines()))
    onoff.save(args.out, blocks, summary, {
        "shape": args.shape, "device": args.device, "steps": args.steps,
        "quartets_asked": args.quartets, "controls_asked": args.controls,
        "seconds": round(time.monotonic() - start, 1), "torch": torch.__version__,
        "gpu": torch.cuda.get_device_name() if cuda else None})  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
