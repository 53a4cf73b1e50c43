"""What users read off a GPU box, on the card: the exporter's dcgm-exporter series, ``snapshot
--json``, and the monitor itself (an SVG screenshot taken headless, no terminal needed).

Each is read between two nvidia-smi readings and judged by the rules of ``gpucheck.fields``;
while the compute job runs, each must also show that job.
"""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import time
import urllib.request
from typing import Any

from gpucheck import nvsmi
from gpucheck.context import Context
from gpucheck.fields import compare_all, compare_field, from_gpu
from gpucheck.nvml_checks import SMI_FIELDS
from gpucheck.results import Result, failed, judged
from traintop.collectors.factory import build_collectors
from traintop.collectors.gpu import GpuCollector
from traintop.collectors.jobs import JobCollector
from traintop.collectors.sampler import Sampler
from traintop.exporter.gpu_families import GPU_METRICS
from traintop.pipeline.live import Pipeline
from traintop.views.format import short_gpu_name

# dcgm-exporter name -> the nvidia-smi field it must agree with (in that field's unit)
DCGM_AS_SMI = {
    "DCGM_FI_DEV_GPU_UTIL": "utilization.gpu",
    "DCGM_FI_DEV_MEM_COPY_UTIL": "utilization.memory",
    "DCGM_FI_DEV_FB_USED": "memory.used",
    "DCGM_FI_DEV_FB_FREE": "memory.free",
    "DCGM_FI_DEV_FB_TOTAL": "memory.total",
    "DCGM_FI_DEV_GPU_TEMP": "temperature.gpu",
    "DCGM_FI_DEV_POWER_USAGE": "power.draw",
    "DCGM_FI_DEV_POWER_MGMT_LIMIT": "enforced.power.limit",
    "DCGM_FI_DEV_SM_CLOCK": "clocks.sm",
    "DCGM_FI_DEV_MAX_SM_CLOCK": "clocks.max.sm",
    "DCGM_FI_DEV_MEM_CLOCK": "clocks.mem",
    "DCGM_FI_DEV_CLOCKS_EVENT_REASONS": "clocks_event_reasons.active",
}
SERVING = re.compile(r"serving (http://\S+/metrics)")
SAMPLE = re.compile(r"^(\w+)\{([^}]*)\} (\S+)$", re.M)
SCRAPE_AFTER_S = 2.2  # two samples 1 s apart after the reading: the PCIe rates exist
SCREEN = (160, 50)
SHOT_TRIES = 5
SCREEN_S = 2.0  # two ticks of the sampler: rates and history on screen


def _metrics(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    """The exposition's samples, by metric name, with their labels."""
    found: dict[str, list[tuple[dict[str, str], float]]] = {}
    for name, labels, value in SAMPLE.findall(text):
        pairs = dict(re.findall(r'(\w+)="((?:[^"\\]|\\.)*)"', labels))
        found.setdefault(name, []).append((pairs, float(value)))
    return found


def _scrape(ctx: Context) -> tuple[str, nvsmi.Query, nvsmi.Query]:
    """Start the exporter, read nvidia-smi, let it sample, scrape once, read nvidia-smi again."""
    argv = ctx.traintop("exporter", "--listen", "127.0.0.1:0", "--interval", "1")
    proc = ctx.start(argv, stderr=subprocess.PIPE, text=True)
    try:
        line = proc.stderr.readline()
        match = SERVING.search(line)
        if match is None:
            raise RuntimeError(f"the exporter did not start: {line.strip()}")
        before = nvsmi.query(ctx, list(DCGM_AS_SMI.values()))
        time.sleep(SCRAPE_AFTER_S)
        text = urllib.request.urlopen(match.group(1), timeout=10).read().decode()
        return text, before, nvsmi.query(ctx, list(DCGM_AS_SMI.values()))
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(10)


def exporter(ctx: Context, job_name: str | None) -> Result:
    """``traintop exporter`` scraped once: every dcgm-exporter series traintop can read on this
    card is there for GPU 0, with values nvidia-smi agrees with, and the job's step rate."""
    collector = GpuCollector()
    collector.collect()  # the PCIe rates of the reading after the scrape need a previous one
    text, before, after = _scrape(ctx)
    gpus, _ = collector.collect()
    series = _metrics(text)
    gpu0 = {
        name: v for name, rows in series.items() for labels, v in rows if labels.get("gpu") == "0"
    }
    readable = {m.name for m in GPU_METRICS if gpus and m.read(gpus[0]) is not None}
    missing = sorted(readable - gpu0.keys())
    rows = [
        compare_field(smi, gpu0[name], (before.values().get(smi), after.values().get(smi)))
        for name, smi in DCGM_AS_SMI.items()
        if name in gpu0
    ]
    wrong = [r.field for r in rows if not r.ok]
    rate = _job_rate(series, job_name)
    job_ok = job_name is None or bool(rate and rate[0] > 0)
    reason = (
        f"{len(gpu0)} GPU series; missing {missing or 'none'}; disagree with nvidia-smi: "
        f"{wrong or 'none'}; job rate {rate[0] if rate else None if job_name else 'n/a'}"
    )
    return judged(
        not missing and not wrong and job_ok,
        reason,
        gpu0=gpu0,
        compared=[r.row() for r in rows],
        job_steps_per_second=rate,
    )


def _job_rate(series: dict[str, list], job_name: str | None) -> list[float]:
    """The exported steps/s of the job's ranks (one here)."""
    rows = series.get("traintop_job_steps_per_second", ())
    return [value for labels, value in rows if labels.get("job_name") == job_name]


def snapshot_json(ctx: Context, job_pid: int | None) -> Result:
    """``traintop snapshot --json`` between two nvidia-smi readings: its GPU entries agree, and
    the running job is listed live."""
    before = nvsmi.query(ctx, SMI_FIELDS)
    done = ctx.run(ctx.traintop("snapshot", "--json"))
    after = nvsmi.query(ctx, SMI_FIELDS)
    if done.returncode != 0:
        return failed(f"snapshot --json exited {done.returncode}: {done.stderr.strip()[-500:]}")
    data = json.loads(done.stdout)
    gpus, status = data["gpus"], data["gpu_status"]
    rows = [_snapshot_gpu(g, status, len(gpus), before, after) for g in gpus]
    wrong = [
        f"GPU {g['index']} {r.field}"
        for g, rs in zip(gpus, rows, strict=True)
        for r in rs
        if not r.ok
    ]
    jobs = {j["pid"]: j["state"] for j in data["jobs"]}
    job_ok = job_pid is None or jobs.get(job_pid) == "live"
    reason = (
        f"{len(gpus)} GPUs, {sum(map(len, rows)) - len(wrong)} fields agree; differ: "
        f"{wrong or 'none'}; job {job_pid} {jobs.get(job_pid, 'not listed') if job_pid else 'n/a'}"
    )
    ok = bool(gpus) and status["available"] and not wrong and job_ok
    return judged(
        ok, reason, gpu_status=status, gpus=[[r.row() for r in rs] for rs in rows], jobs=jobs
    )


def _snapshot_gpu(gpu: dict, status: dict, count: int, before, after) -> list:
    ours = from_gpu(gpu, status.get("driver_version"), count)
    # numbers as numbers, so each field's tolerance applies (memory moves while a job runs)
    reference = {name: _number(ours[name]) for name in before.fields if name in ours}
    return compare_all(reference, [before.values(gpu["index"]), after.values(gpu["index"])])


def _number(value: Any) -> Any:
    return float(value) if isinstance(value, int) and not isinstance(value, bool) else value


async def _shoot(app, seconds: float) -> str:
    """The screen after ``seconds`` of live ticks; a tick that is rebuilding rows right then
    leaves a widget without a screen (Textual's NoScreen): the next frame is whole."""
    from textual.dom import NoScreen

    async with app.run_test(size=SCREEN) as pilot:
        await pilot.pause(seconds)
        for _ in range(SHOT_TRIES - 1):
            try:
                return app.export_screenshot()
            except NoScreen:
                await pilot.pause(0.2)
        return app.export_screenshot()


def screenshot(ctx: Context, job_pid: int | None, job_name: str | None) -> Result:
    """The live monitor, headless (Textual's ``run_test``), on the real sampler: an SVG of the
    screen, which must show the card (and the job, attached, while one runs)."""
    try:
        from traintop.tui.app import build_app
    except ImportError as exc:  # textual travels as a wheel: benchmarks/gpu_wheels.sh
        return failed(f"the monitor cannot start here: {exc}")
    jobs = JobCollector(directory=str(ctx.ring_dir))
    jobs.focus_pid = job_pid  # attached, as `traintop attach PID` opens it
    collectors = build_collectors(jobs=jobs)
    sampler = Sampler(collectors, interval_s=1.0)
    first = sampler.sample_once()
    pipeline = Pipeline(sampler, collectors=collectors, jobs=jobs, job_pid=job_pid, first=first)
    app = build_app(pipeline, focus_job=job_pid)
    try:
        svg = asyncio.run(_shoot(app, SCREEN_S))
    finally:
        pipeline.close()
    path = ctx.out / "gpu-panel.svg"
    path.write_text(svg, encoding="utf-8")
    text = svg.replace("&#160;", " ")
    names = [short_gpu_name(g.name).split()[0] for g in first.gpus] + (
        [job_name] if job_name else []
    )
    shown = {name: name in text for name in names}
    return judged(
        bool(first.gpus) and all(shown.values()),
        f"{path.name}: shows {shown}",
        file=path.name,
        size=list(SCREEN),
        gpus=len(first.gpus),
    )
