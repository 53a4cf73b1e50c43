"""The GPU check's training job: a small transformer language model in bf16, trained by a plain
PyTorch loop that ``traintop run`` instruments with no code change, timing itself as the
reference traintop's figures are checked against.

``python train_job.py MODE --out FILE [--device cuda|cpu] [--tiny] [--warmup-steps N]
[--settle-s S] [--steady-s S] [--max-s S] [--profile-steps N] [--latency-ms MS]
[--headroom-mib MIB] [--phase-s S]`` (``--help`` says what each does)

MODE: ``compute`` (the card is the limit), ``launch`` (the launch-bound GPT of issue 33,
``gpt_model.py``: four micro-batches of 16 a step, bf16 autocast (on the CPU too), fused AdamW,
SDPA, not compiled), ``data`` (every sample waits ``--latency-ms`` in the
DataLoader: the card starves), ``sync`` (four micro-batches per optimizer step, a ``.item()``
after each), ``memory`` (after warm-up a ballast tensor takes all but ``--headroom-mib`` of the
card), ``copy`` (no training: pinned host-to-device copies for ``--phase-s``, then
device-to-host, for the PCIe check; FILE.phase names the running direction).

The job times itself with the clock traintop uses (CLOCK_MONOTONIC) and splits each step where
traintop's hooks split it: data = the wait in ``next()``, forward = from the batch's arrival to
``backward()``, backward, optimizer = ``opt.step()``, other = the rest; a step ends when
``opt.step()`` returns, where a ``torch.cuda.Event`` is recorded (the point where traintop's
boundary records its own).  Once steady (``--warmup-steps``, then as many again and at least
``--settle-s``) it writes FILE.steady; it stops on SIGTERM, ``--steady-s`` after that, or
at ``--max-s``, profiles ``--profile-steps`` more steps (the kernels' own busy time, which
event spans cannot see; on the CPU, the attention ops it ran), and writes FILE as JSON, with
what the job does (``knobs``: autocast, optimizer, DataLoader) for traintop's facts to match.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import time
from pathlib import Path

import torch
from gpt_model import GPT, SHAPES
from torch.utils.data import DataLoader, Dataset

FULL = {"vocab": 8192, "width": 1024, "layers": 8, "heads": 16, "seq": 512, "batch": 16}
TINY = {"vocab": 256, "width": 64, "layers": 2, "heads": 4, "seq": 32, "batch": 4}
PHASES = ("data", "forward", "backward", "optimizer", "other")
MIB = 1 << 20
COPY_BYTES = 256 * MIB
ATTENTION_MARKERS = ("attention", "flash", "fmha", "sdpa")  # kernel and op names worth keeping
NAMES_KEPT, NAME_CHARS = 12, 240


class Tokens(Dataset):
    """Random token sequences, each ``latency_s`` late (the model learns nothing; the work of a
    step is real)."""

    def __init__(self, vocab: int, seq: int, latency_s: float) -> None:
        self.vocab, self.seq, self.latency_s = vocab, seq, latency_s

    def __len__(self) -> int:
        return 1 << 30

    def __getitem__(self, index: int) -> tuple[torch.Tensor, torch.Tensor]:
        if self.latency_s:
            time.sleep(self.latency_s)
        tokens = torch.randint(
            0, self.vocab, (self.seq + 1,), generator=torch.Generator().manual_seed(index)
        )
        return tokens[:-1], tokens[1:]


class TinyLM(torch.nn.Module):
    """A pre-norm causal transformer; its forward returns the loss, so the loss is forward."""

    def __init__(self, vocab: int, width: int, layers: int, heads: int, seq: int, **_: int) -> None:
        super().__init__()
        self.embed = torch.nn.Embedding(vocab, width)
        self.pos = torch.nn.Parameter(torch.zeros(seq, width))
        block = torch.nn.TransformerEncoderLayer(
            width, heads, 4 * width, dropout=0.0, batch_first=True, norm_first=True
        )
        self.blocks = torch.nn.TransformerEncoder(block, layers, enable_nested_tensor=False)
        self.head = torch.nn.Linear(width, vocab)
        self.register_buffer("mask", torch.nn.Transformer.generate_square_subsequent_mask(seq))

    def forward(self, tokens: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        x = self.blocks(self.embed(tokens) + self.pos, mask=self.mask, is_causal=True)
        logits = self.head(x).float()
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), targets.flatten())


class Job:
    """The loop's parts and its own record of every step."""

    def __init__(self, opts: argparse.Namespace) -> None:
        self.opts, self.device = opts, torch.device(opts.device)
        self.cuda = self.device.type == "cuda"
        gpt = opts.mode == "launch"
        size = SHAPES["toy" if opts.tiny else "launch"] if gpt else TINY if opts.tiny else FULL
        self.model = (GPT if gpt else TinyLM)(**size).to(self.device)
        # the launch-bound GPT as issue 33 ran it: fused AdamW, bf16 autocast wherever it runs
        self.fused, self.autocast = gpt, self.cuda or gpt
        self.opt = torch.optim.AdamW(self.model.parameters(), lr=1e-4, fused=self.fused)
        self.micro = size["micro"] if gpt else 4 if opts.mode == "sync" else 1
        latency = opts.latency_ms / 1000 if opts.mode == "data" else 0.0
        self.loader = DataLoader(
            Tokens(size["vocab"], size["seq"], latency),
            batch_size=size["batch"],
            num_workers=2,
            pin_memory=self.cuda,
            persistent_workers=True,
        )
        self.batches = iter(self.loader)
        self.end_ns: list[int] = []
        self.phase_ns: dict[str, list[int]] = {p: [] for p in PHASES}
        self.events: list = []
        self.ballast: torch.Tensor | None = None
        self.stop = False

    def step(self) -> dict[str, int]:
        """One optimizer step (``micro`` batches); the ns spent in each phase but "other"."""
        spent = dict.fromkeys(PHASES, 0)
        for _ in range(self.micro):
            t0 = time.monotonic_ns()
            tokens, targets = next(self.batches)
            t1 = time.monotonic_ns()
            tokens = tokens.to(self.device, non_blocking=True)
            targets = targets.to(self.device, non_blocking=True)
            with torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=self.autocast):
                loss = self.model(tokens, targets) / self.micro
            t2 = time.monotonic_ns()
            loss.backward()
            t3 = time.monotonic_ns()
            if self.micro > 1:
                loss.item()  # the logging line that syncs after every micro-step
            spent["data"] += t1 - t0
            spent["forward"] += t2 - t1
            spent["backward"] += t3 - t2
        t4 = time.monotonic_ns()
        self.opt.step()
        spent["optimizer"] = time.monotonic_ns() - t4
        return spent

    def knobs(self) -> dict:
        """What this job does, in the terms of traintop's ``JobFacts``."""
        loader = self.loader
        return {
            "device": self.device.type,
            "autocast": "bf16" if self.autocast else "off",
            "compiled": False,
            "optimizers": [{"name": "AdamW", "fused": self.fused}],
            "loaders": [{"num_workers": loader.num_workers, "pin_memory": loader.pin_memory,
                         "persistent_workers": loader.persistent_workers,
                         "prefetch_factor": loader.prefetch_factor,
                         "batch_size": loader.batch_size}],
        }  # fmt: skip

    def record(self, spent: dict[str, int]) -> None:
        """Close the step where traintop's boundary closes it: as ``opt.step()`` returns."""
        end = time.monotonic_ns()
        if self.cuda:
            event = torch.cuda.Event(enable_timing=True)
            event.record()
            self.events.append(event)
        previous = self.end_ns[-1] if self.end_ns else end - sum(spent.values())
        spent["other"] = max(0, end - previous - sum(spent.values()))
        for phase in PHASES:
            self.phase_ns[phase].append(spent[phase])
        self.end_ns.append(end)
        self.opt.zero_grad(set_to_none=True)


def publish(path: Path, text: str) -> None:
    """Write whole or not at all: the GPU check polls these files while the job runs."""
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def hold_memory(headroom_mib: int) -> torch.Tensor:
    """A ballast that leaves ``headroom_mib`` of the card free (plain cudaMalloc, no UVM)."""
    free, _ = torch.cuda.mem_get_info()
    return torch.empty(max(0, free - headroom_mib * MIB), dtype=torch.uint8, device="cuda")


def _steady(job: Job, warm_at: float | None) -> bool:
    """Warm-up done, as many steps again since, and ``--settle-s`` of them."""
    steps, warm = len(job.end_ns), job.opts.warmup_steps
    return (
        warm_at is not None
        and steps >= 2 * warm
        and time.monotonic() - warm_at >= job.opts.settle_s
    )


def _done(job: Job, steady_at: int | None) -> bool:
    """Told to stop (SIGTERM), or ``--steady-s`` of steady stepping behind us."""
    if job.stop or steady_at is None or not job.opts.steady_s:
        return job.stop
    return (job.end_ns[-1] - job.end_ns[steady_at - 1]) / 1e9 >= job.opts.steady_s


def train(job: Job, out: Path) -> int | None:
    """Step until told to stop; the index of the first steady step (None if never steady)."""
    started, steady_at, warm_at = time.monotonic(), None, None
    while not _done(job, steady_at) and time.monotonic() - started < job.opts.max_s:
        job.record(job.step())
        if len(job.end_ns) == job.opts.warmup_steps:
            warm_at = time.monotonic()
            if job.opts.mode == "memory":
                job.ballast = hold_memory(job.opts.headroom_mib)
        if steady_at is None and _steady(job, warm_at):
            steady_at = len(job.end_ns)
            publish(out.with_suffix(".steady"), str(time.monotonic_ns()))
    return steady_at


def profiled_steps(job: Job, steps: int) -> dict:
    """Profile ``steps`` more steps.  On a card: the time kernels (or copies) ran, the truth a
    span measured by events cannot give, and how many kernels a step launched; on the CPU
    (nothing runs on a device), the operators.  Either way the names that show the attention
    kernel."""
    from torch.profiler import ProfilerActivity, profile

    # GPU activity only on a card: tracing every CPU op would slow the launches, widen the gaps
    activity = ProfilerActivity.CUDA if job.cuda else ProfilerActivity.CPU
    sync = torch.cuda.synchronize if job.cuda else lambda: None
    sync()
    with profile(activities=[activity]) as prof:
        for _ in range(steps):
            job.step()
            job.opt.zero_grad(set_to_none=True)
        sync()
    events = list(prof.events())
    names = sorted({e.name[:NAME_CHARS] for e in events if _attention_name(e.name)})
    found = {"steps": steps, "attention_names": names[:NAMES_KEPT]}
    return {**found, **(kernel_time(events, steps) if job.cuda else {})}


def _attention_name(name: str) -> bool:
    return any(marker in name.lower() for marker in ATTENTION_MARKERS)


def kernel_time(events: list, steps: int) -> dict:
    """The share of the profiled GPU span in which kernels (or copies) ran, and the kernels."""
    from torch.autograd import DeviceType

    gpu = [e for e in events if e.device_type == DeviceType.CUDA]
    spans = sorted((e.time_range.start, e.time_range.end) for e in gpu)
    if not spans:
        return {"error": "the profiler saw no GPU activity"}
    busy, span = covered_us(spans), max(end for _, end in spans) - spans[0][0]
    kernels = sum(not e.name.startswith(("Memcpy", "Memset")) for e in gpu)
    return {
        "busy_share": busy / span if span else None,
        "span_ms": span / 1000,
        "busy_ms": busy / 1000,
        "kernels_per_step": kernels / steps,
    }


def covered_us(spans: list[tuple[float, float]]) -> float:
    """The length of the union of sorted intervals: overlapping kernels count once."""
    busy, reach = 0.0, spans[0][0]
    for start, end in spans:
        busy += max(0.0, end - max(start, reach))
        reach = max(reach, end)
    return busy


def gpu_ms(job: Job) -> list[float | None]:
    """Each step's GPU span in ms (event after the previous step to event after this one)."""
    if not job.events:
        return []
    torch.cuda.synchronize()
    pairs = zip(job.events, job.events[1:], strict=False)
    return [None, *(a.elapsed_time(b) for a, b in pairs)]


def memory_facts() -> dict:
    free, total = torch.cuda.mem_get_info()
    return {
        "allocated": torch.cuda.memory_allocated(),
        "reserved": torch.cuda.memory_reserved(),
        "free": free,
        "total": total,
    }


def run_training(opts: argparse.Namespace, out: Path) -> dict:
    """Train until stopped, then profile, and return the job's own record."""
    job = Job(opts)
    signal.signal(signal.SIGTERM, lambda *_: setattr(job, "stop", True))
    steady = train(job, out)
    facts = {"memory": memory_facts()} if job.cuda else {}
    profile = profiled_steps(job, opts.profile_steps) if opts.profile_steps else None
    return {
        "mode": opts.mode,
        "device": str(job.device),
        "micro_steps": job.micro,
        "steady_index": steady,
        "end_ns": job.end_ns,
        "phase_ns": job.phase_ns,
        "gpu_ms": gpu_ms(job),
        "profile": profile,
        "knobs": job.knobs(),
        **facts,
    }


def run_copies(opts: argparse.Namespace, out: Path) -> dict:
    """Pinned host-to-device copies for ``phase_s``, then device-to-host: bytes/s of each."""
    host = torch.empty(COPY_BYTES, dtype=torch.uint8).pin_memory()
    device = torch.empty(COPY_BYTES, dtype=torch.uint8, device="cuda")
    rates = {}
    for direction, (dst, src) in (("h2d", (device, host)), ("d2h", (host, device))):
        publish(out.with_suffix(".phase"), direction)
        start, copied = time.monotonic(), 0
        while time.monotonic() - start < opts.phase_s:
            dst.copy_(src, non_blocking=True)
            torch.cuda.synchronize()
            copied += COPY_BYTES
        rates[direction] = copied / (time.monotonic() - start)
    publish(out.with_suffix(".phase"), "done")
    return {"mode": "copy", "bytes_per_s": rates}


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("mode", choices=("compute", "launch", "data", "sync", "memory", "copy"))
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--device", default="cuda")
    p.add_argument("--tiny", action="store_true", help="a toy model (CPU smoke runs)")
    p.add_argument("--warmup-steps", type=int, default=10, help="then as many again to steady")
    p.add_argument("--settle-s", type=float, default=3.0, help="warm-up to steady, at least")
    p.add_argument("--steady-s", type=float, default=0.0, help="stop this long after steady")
    p.add_argument("--max-s", type=float, default=180.0)
    p.add_argument("--profile-steps", type=int, default=0)
    p.add_argument("--latency-ms", type=float, default=8.0, help="data mode: wait per sample")
    p.add_argument("--headroom-mib", type=int, default=640, help="memory mode: left free")
    p.add_argument("--phase-s", type=float, default=5.0, help="copy mode: seconds per direction")
    return p.parse_args(argv)


def main(argv: list[str]) -> int:
    opts = parse(argv)
    result = run_copies(opts, opts.out) if opts.mode == "copy" else run_training(opts, opts.out)
    result["pid"] = os.getpid()
    publish(opts.out, json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
