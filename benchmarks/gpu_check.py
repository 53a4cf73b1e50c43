"""Check every GPU path of traintop on a real card, in one command; report in a folder.

``python benchmarks/gpu_check.py --out DIR [--budget-s 480] [--fake-nvml] [--work DIR]
[--checks STEPS | --skip STEPS]``

Writes DIR/summary.md (read this first), DIR/report.json (every figure), DIR/gpu-panel.svg (the
monitor, headless), DIR/flight-recorder.json (PyTorch's dump) and DIR/job-logs.tar.gz.  Covers:
each NVML field the monitor shows against nvidia-smi read at the same moment, every memory
field by nvidia-smi's MiB rule with the raw bytes beside it, ``traintop query`` against
nvidia-smi, temperature thresholds, PCIe throughput under copies, the time each NVML call takes;
a bf16 transformer under ``traintop run`` (steps/s, step count, GPU time per step, phase split,
its busy share against the profiler's kernel time, the verdict, the GPU-process join) with the
exporter, ``snapshot --json`` and the monitor read while it runs; issue 33's launch-bound GPT
(``host_overhead`` and remedies it does not follow, its busy share, traintop's sampled profile,
the facts the probe saw, GPM and per-process utilization read back); ``.item()`` stalls
(``sync_stall`` naming the line); a starved DataLoader and a full card; the NCCL flight
recorder; what the probe's facts cost (``bench_facts.py``); the probe's cost, its hooks switched
off and on in A B B A blocks inside one warm job (launch-bound and GPU-bound: ``--checks
probe_onoff_launch`` runs one alone, ``--skip`` leaves steps out).  Each check passes, fails
or is skipped with its reason; one failing never stops the others; the exit status is 0 only
when none failed.  ``--fake-nvml`` runs the same script on tests/fakenvml without a GPU (the
CUDA parts skipped, the jobs toys on the CPU): CI runs it so that the check is sound on the day a
card is lent.
docs/gpu-check.md has the details.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from gpucheck import fake, report
from gpucheck.context import Context, make_context
from gpucheck.facts_checks import facts_cost
from gpucheck.flight import flight_checks
from gpucheck.idle_jobs import launch_steps, sync_steps
from gpucheck.jobs import Job
from gpucheck.machine import environment, machine_facts
from gpucheck.memory_rules import memory_rules
from gpucheck.nvml_checks import (
    fields_vs_nvidia_smi,
    nvml_cost,
    pcie_check,
    query_vs_nvidia_smi,
    thresholds,
)
from gpucheck.onoff_check import probe_onoff
from gpucheck.results import FAIL, Check, Result, run, skipped
from gpucheck.surfaces import exporter, screenshot, snapshot_json
from gpucheck.train_checks import compute_checks, data_job, memory_job

BUDGET_S = 480.0  # the 8 minutes on one GPU


NVML = (
    ("nvml_fields", "every NVML field the monitor shows, against nvidia-smi (idle)",
     fields_vs_nvidia_smi),
    ("query_vs_nvidia_smi", "traintop query against nvidia-smi, same field list",
     query_vs_nvidia_smi),
    ("memory_rules", "every memory field by nvidia-smi's MiB rule, the raw bytes beside",
     memory_rules),
    ("temperature_thresholds", "slowdown, shutdown and max operating temperatures", thresholds),
    ("nvml_cost", "time per NVML call and per monitor tick on this card", nvml_cost),
    ("pcie_throughput", "PCIe rx/tx against nvidia-smi -q, under copies each way", pcie_check),
)  # fmt: skip
# While the compute job steps, side by side (each reads nvidia-smi around its own reading);
# the monitor's screenshot meanwhile, in this thread: (id, title, body(ctx, pid, job name))
BESIDE = (
    ("nvml_fields_load", "every NVML field against nvidia-smi, the job running",
     lambda ctx, pid, name: fields_vs_nvidia_smi(ctx)),
    ("exporter", "traintop exporter scraped once: dcgm-exporter series, real values",
     lambda ctx, pid, name: exporter(ctx, name)),
    ("snapshot_json", "traintop snapshot --json against nvidia-smi, the job listed",
     lambda ctx, pid, name: snapshot_json(ctx, pid)),
    ("memory_rules_load", "every memory field by nvidia-smi's MiB rule, the job running",
     lambda ctx, pid, name: memory_rules(ctx)),
)  # fmt: skip
SCREENSHOT = "the monitor headless (Textual run_test): SVG of the GPU panel"


def nvml_steps(ctx: Context) -> list[Check]:
    return [run(check_id, title, body, ctx) for check_id, title, body in NVML]


def under_load(ctx: Context) -> Callable[[Job | None], list[Check]]:
    """The checks made while the compute job steps: what users read, with a job on the card
    (or without one, when the job could not run)."""

    def checks(job: Job | None) -> list[Check]:
        name, pid = (f"check-{job.name}", job.pid) if job else (None, None)
        with ThreadPoolExecutor(len(BESIDE)) as pool:
            beside = [pool.submit(run, i, t, body, ctx, pid, name) for i, t, body in BESIDE]
            shot = run("screenshot", SCREENSHOT, screenshot, ctx, pid, name)
        return [*(future.result() for future in beside), shot]

    return checks


def cuda_job(check_id: str, title: str, body: Callable[[Context], Result]):
    """A plan step of one job that needs CUDA: run, or skipped with the reason there is none."""

    def step(ctx: Context) -> list[Check]:
        if ctx.no_cuda:
            return [run(check_id, title, skipped, f"no CUDA: {ctx.no_cuda}")]
        return [run(check_id, title, body, ctx)]

    return step


# (seconds a step needs at least, name, what it runs), in this order while time is left: the
# cheap, broad checks first, the probe's cost (many blocks of steps) last
PLAN: tuple[tuple[float, str, Callable[[Context], list[Check]]], ...] = (
    (60, "nvml", nvml_steps),
    (90, "compute_job", lambda ctx: compute_checks(ctx, under_load(ctx))),
    (75, "launch_job", launch_steps),
    (60, "sync_job", sync_steps),
    (45, "flight_recorder", flight_checks),
    (45, "data_job", cuda_job("data_job", "a starved DataLoader: a data verdict, low GPU use",
                              data_job)),
    (45, "memory_job", cuda_job("memory_job", "most of the card's memory held: the memory "
                                "finding", memory_job)),
    (45, "facts_cost", lambda ctx: [run("facts_cost", "what the probe's facts cost: the sync "
                                        "hook, the sampled profile (bench_facts.py)",
                                        facts_cost, ctx)]),
    (150, "probe_onoff_launch", cuda_job("probe_onoff_launch", "the probe's cost on a "
                                         "launch-bound GPT, hooks off/on in A B B A blocks",
                                         probe_onoff("launch"))),
    (150, "probe_onoff_gpu", cuda_job("probe_onoff_gpu", "the probe's cost on a GPU-bound "
                                      "GPT, hooks off/on in A B B A blocks", probe_onoff("gpu"))),
)  # fmt: skip


def parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", type=Path, required=True, help="folder for the report")
    p.add_argument("--budget-s", type=float, default=BUDGET_S, help="stop starting checks after")
    p.add_argument("--fake-nvml", action="store_true", help="run on tests/fakenvml (no GPU)")
    p.add_argument("--work", type=Path, help="folder for job logs and records (kept)")
    steps = p.add_mutually_exclusive_group()
    steps.add_argument("--checks", help="run only these plan steps (comma-separated names)")
    steps.add_argument("--skip", help="leave these plan steps out (comma-separated names)")
    args = p.parse_args(argv)
    unknown = {*_names(args.checks), *_names(args.skip)} - {name for _, name, _ in PLAN}
    if unknown:
        p.error(f"no plan step {', '.join(sorted(unknown))} (steps: "
                f"{', '.join(name for _, name, _ in PLAN)})")  # fmt: skip
    return args


def _names(text: str | None) -> set[str]:
    return set(filter(None, (text or "").split(",")))


def run_plan(ctx: Context, checks: list[Check], save: Callable[[], None],
             only: set[str] | None = None, skip: frozenset[str] = frozenset()) -> None:  # fmt: skip
    """Each step (of ``only``, or all but ``skip``) while time is left, the report saved after
    each: a run cut short by the device's time limit still leaves every answer it reached."""
    for need_s, name, step in PLAN:
        if only is not None and name not in only:
            continue
        if name in skip:
            checks.append(run(name, name, skipped, "left out (--skip)"))
        elif ctx.remaining() < need_s:
            left = f"no time left: {ctx.remaining():.0f} s of the budget, {need_s:g} s needed"
            checks.append(run(name, name, skipped, left))
        else:
            checks += step(ctx)
        save()


def main(argv: list[str]) -> int:
    args = parse(argv)
    if args.fake_nvml:
        fake.restart_on_fake([sys.argv[0], *argv])
    work = args.work or Path(tempfile.mkdtemp(prefix="traintop-gpu-check-"))
    smi = fake.stand_in() if args.fake_nvml else ["nvidia-smi"]
    ctx = make_context(args.out, work, args.fake_nvml, smi, args.budget_s)
    t0 = time.monotonic()
    facts = machine_facts(ctx)
    ctx.no_cuda = fake.NO_CUDA if ctx.fake else None if facts.get("cuda") else "torch sees no CUDA"
    meta = {"mode": "fake NVML" if ctx.fake else "real GPU",
            "started": time.strftime("%Y-%m-%d %H:%M:%S %Z"), "machine": facts}  # fmt: skip
    checks = [run("environment", "the machine can run the check", environment, ctx, facts)]

    def save() -> None:
        report.save(args.out, {**meta, "seconds": round(time.monotonic() - t0, 1)}, checks)

    try:
        only = _names(args.checks) if args.checks else None
        run_plan(ctx, checks, save, only, frozenset(_names(args.skip)))
    finally:
        report.archive_logs(work, args.out / "job-logs.tar.gz")
        shutil.rmtree(ctx.ring_dir, ignore_errors=True)
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(f"gpu_check: {report.counts(checks)}; {args.out / 'summary.md'}")
    return 1 if any(c.status == FAIL for c in checks) else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
