"""NVML as the monitor reads it, against nvidia-smi read at the same moment, and what it costs.

The readings come from traintop's own ``GpuCollector`` (what the GPU panel, ``snapshot``, the
verdict and the exporter show); ``traintop query`` is run as a user runs it.  nvidia-smi is
called between two readings, and the rules of ``gpucheck.fields`` decide.
"""

from __future__ import annotations

import statistics
import time
from collections.abc import Callable
from dataclasses import asdict
from itertools import pairwise
from typing import Any

from gpucheck import nvsmi
from gpucheck.context import Context
from gpucheck.fields import FieldResult, compare_all, compare_field, from_gpu, tolerance_table
from gpucheck.gpu_counters import activity_costs
from gpucheck.jobs import Job
from gpucheck.results import Result, judged
from traintop.collectors.gpu import GpuCollector
from traintop.collectors.nvsmi_query import FIELDS as QUERY_FIELDS

SMI_FIELDS = list(from_gpu({"index": 0}))
TICKS = 30  # collector ticks timed
CALL_REPEATS = 100  # per NVML call; the 20 ms PCIe window call gets SLOW_REPEATS
SLOW_REPEATS = 5
TICK_BUDGET_MS = 25.0  # per GPU: 2.5 % of the monitor's 1 s tick
QUIET = 0.05  # of the busy direction: the other direction of a copy, too small to compare


def readings(collector: GpuCollector) -> list[dict[str, Any]]:
    """One collector tick, each GPU under nvidia-smi's field names."""
    gpus, status = collector.collect()
    return [from_gpu(asdict(g), status.driver_version, len(gpus)) for g in gpus]


def _verdict(results: list[list[FieldResult]], what: str, **data: Any) -> Result:
    wrong = [f"GPU {i} {r.field}" for i, rows in enumerate(results) for r in rows if not r.ok]
    count = sum(len(rows) for rows in results)
    reason = f"{count - len(wrong)} of {count} fields agree with {what}"
    reason += f"; differ: {', '.join(wrong)}" if wrong else ""
    gpus = [[r.row() for r in rows] for rows in results]
    return judged(not wrong and count > 0, reason, gpus=gpus, **data)


def fields_vs_nvidia_smi(ctx: Context) -> Result:
    """Every field the monitor shows against ``nvidia-smi --query-gpu`` between two readings."""
    collector = GpuCollector()
    before = readings(collector)
    smi = nvsmi.query(ctx, SMI_FIELDS)
    after = readings(collector)
    results = [
        compare_all(smi.values(i), [before[i], after[i]])
        for i in range(min(len(before), len(smi.rows)))
    ]
    refused = list(smi.refused)
    return _verdict(results, "nvidia-smi", refused_by_nvidia_smi=refused, rules=tolerance_table())


def _traintop_query(ctx: Context, fields: list[str]) -> nvsmi.Query:
    done = ctx.run(ctx.traintop("query", f"--query-gpu={','.join(fields)}", "--format=csv,nounits"))
    if done.returncode != 0:
        raise RuntimeError(f"traintop query exited {done.returncode}: {done.stderr.strip()}")
    return nvsmi.parse_csv(fields, done.stdout, header=True)


def query_vs_nvidia_smi(ctx: Context) -> Result:
    """``traintop query`` and nvidia-smi on the same field list: the header byte for byte, each
    value by the field's rule (traintop query runs before and after nvidia-smi)."""
    accepted = nvsmi.query(ctx, list(QUERY_FIELDS))
    fields = list(accepted.fields)
    before = _traintop_query(ctx, fields)
    smi = nvsmi.query(ctx, fields, "csv,nounits")
    after = _traintop_query(ctx, fields)
    headers = _header_diff(smi.header, before.header)
    values = [
        [
            compare_field(name, value, (before.values(i)[name], after.values(i)[name]))
            for name, value in smi.values(i).items()
            if name != "timestamp"
        ]
        for i in range(len(smi.rows))
    ]
    result = _verdict(
        values,
        "nvidia-smi",
        refused_by_nvidia_smi=list(accepted.refused),
        header_differs=headers,
        header=smi.header,
    )
    if headers:
        return judged(
            False, f"header differs in {len(headers)} columns; " + result.reason, **result.data
        )
    return result


def _header_diff(theirs: str, ours: str) -> list[dict[str, str]]:
    pairs = zip(theirs.split(", "), ours.split(", "), strict=False)
    diff = [{"nvidia_smi": a, "traintop": b} for a, b in pairs if a != b]
    if len(theirs.split(", ")) != len(ours.split(", ")):
        diff.append({"nvidia_smi": theirs, "traintop": ours})
    return diff


THRESHOLDS = (
    ("GPU Shutdown Temp", "temp_shutdown_c", "GPU Shutdown T.Limit Temp"),
    ("GPU Slowdown Temp", "temp_slowdown_c", "GPU Slowdown T.Limit Temp"),
    ("GPU Max Operating Temp", "temp_max_operating_c", "GPU Max Operating T.Limit Temp"),
)


def thresholds(ctx: Context) -> Result:
    """The slowdown (and shutdown, max operating) temperatures the GPU panel and the thermal
    rule measure against, against ``nvidia-smi -q``: absolute where it prints them; where a
    newer driver prints only T.Limit margins, the absolute value they imply (current
    temperature + T.Limit margin - the threshold's margin) within 2 °C."""
    gpus, _ = GpuCollector().collect()
    report = nvsmi.q_report(ctx)
    rows = [
        _threshold_row(asdict(g), q, *t)
        for g, q in zip(gpus, report.gpus, strict=False)
        for t in THRESHOLDS
    ]
    bad = [f"GPU {r['gpu']} {r['threshold']}" for r in rows if not r["ok"]]
    reason = f"{len(rows) - len(bad)} of {len(rows)} thresholds agree"
    return judged(
        bool(rows) and not bad,
        reason + (f"; differ: {', '.join(bad)}" if bad else ""),
        thresholds=rows,
    )


def _threshold_row(gpu: dict, q: dict[str, str], absolute: str, ours: str, margin: str) -> dict:
    value = gpu.get(ours)
    row = {
        "gpu": gpu["index"],
        "threshold": absolute,
        "traintop": value,
        "nvidia_smi": q.get(absolute),
    }
    theirs = nvsmi.q_number(q.get(absolute))
    if theirs is None and nvsmi.q_number(q.get(margin)) is not None:
        theirs = _implied(q, margin)
        row.update(nvidia_smi=f"{q.get(margin)} T.Limit margin (implies {theirs:g} °C)")
        row["ok"] = value is not None and abs(value - theirs) <= 2
        return row
    row["ok"] = (value is None and theirs is None) or (value is not None and value == theirs)
    return row


def _implied(q: dict[str, str], margin: str) -> float:
    current = nvsmi.q_number(q.get("GPU Current Temp")) or 0.0
    headroom = nvsmi.q_number(q.get("GPU T.Limit Temp")) or 0.0
    return current + headroom - (nvsmi.q_number(q.get(margin)) or 0.0)


def pcie_vs_nvidia_smi(ctx: Context, phase: str) -> list[dict[str, Any]]:
    """traintop's PCIe rates (cumulative counters, per tick) against nvidia-smi -q's Tx/Rx
    Throughput (NVML's 20 ms window), KB/s both, nvidia-smi between two in-phase readings."""
    collector = GpuCollector()
    collector.collect()  # primes the counters: rates need two readings
    time.sleep(0.5)
    before, _ = collector.collect()
    report = nvsmi.q_report(ctx)
    after, _ = collector.collect()
    return [_pcie_row(phase, b, a, q) for b, a, q in zip(before, after, report.gpus, strict=False)]


def _pcie_row(phase: str, before, after, q: dict[str, str]) -> dict[str, Any]:
    row: dict[str, Any] = {"phase": phase, "gpu": before.index}
    for name, attr, key in (
        ("rx", "pcie_rx_bytes_per_s", "Rx Throughput"),
        ("tx", "pcie_tx_bytes_per_s", "Tx Throughput"),
    ):
        ours = [v / 1024 for v in (getattr(before, attr), getattr(after, attr)) if v is not None]
        row[f"{name}_traintop_kbs"] = [round(v) for v in ours]
        row[f"{name}_nvidia_smi_kbs"] = nvsmi.q_number(q.get(key))
    return row


def pcie_judged(rows: list[dict[str, Any]]) -> Result:
    """Each direction within a factor of 2 of nvidia-smi (a busy link reads GB/s: unit and
    direction mistakes are factors of 1000 or a swap, not 2), or quiet on both sides: under
    QUIET of the phase's busy direction (the acknowledgements running against a copy), or
    under 1 MB/s."""
    bad = [
        f"{r['phase']} GPU {r['gpu']} {d}" for r in rows for d in ("rx", "tx") if not _close(r, d)
    ]
    reason = f"{2 * len(rows) - len(bad)} of {2 * len(rows)} directions agree with nvidia-smi"
    return judged(
        bool(rows) and not bad,
        reason + (f"; differ: {', '.join(bad)}" if bad else ""),
        rows=rows,
        rule=f"x0.5 to x2, or both under {QUIET:.0%} of the busy direction",
    )


def _close(row: dict[str, Any], direction: str) -> bool:
    ours, theirs = row[f"{direction}_traintop_kbs"], row[f"{direction}_nvidia_smi_kbs"]
    if not ours or theirs is None:
        return not ours and theirs is None
    busy = max(row["rx_nvidia_smi_kbs"] or 0, row["tx_nvidia_smi_kbs"] or 0)
    if max(*ours, theirs) < max(1000, QUIET * busy):
        return True
    return any(0.5 <= (v + 1) / (theirs + 1) <= 2.0 for v in ours)


def pcie_check(ctx: Context) -> Result:
    """PCIe rx/tx against nvidia-smi: on a card while pinned copies run host-to-device, then
    device-to-host (the direction each counter names is read off, not assumed); with the fake,
    at its scripted rates."""
    if ctx.no_cuda:
        return pcie_judged(pcie_vs_nvidia_smi(ctx, "scripted"))
    rows = []
    with Job(ctx, "copy", "copy", traintop=False) as job:
        for phase in ("h2d", "d2h"):
            job.wait_for(".phase", phase)
            rows += pcie_vs_nvidia_smi(ctx, phase)
        copied = job.finish(stop=False)["bytes_per_s"]
    result = pcie_judged(rows)
    return Result(result.status, result.reason, {**result.data, "copy_bytes_per_s": copied})


def _calls(nv, h) -> list[tuple[str, Callable[[], Any], int]]:
    """Each NVML call the collector makes per tick (the samples and the older per-process call
    included: the newer one and GPM are ``activity_costs``), then the ones it makes rarely
    (thresholds are read once; the 20 ms PCIe window only while a link is busy)."""
    calls = [
        ("UtilizationRates", lambda: nv.nvmlDeviceGetUtilizationRates(h)),
        ("MemoryInfo v2", lambda: nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2)),
        ("TemperatureV", lambda: nv.nvmlDeviceGetTemperatureV(h, nv.NVML_TEMPERATURE_GPU)),
        ("PowerUsage", lambda: nv.nvmlDeviceGetPowerUsage(h)),
        ("PerformanceState", lambda: nv.nvmlDeviceGetPerformanceState(h)),
        ("FanSpeed", lambda: nv.nvmlDeviceGetFanSpeed(h)),
        ("ClockInfo SM", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM)),
        ("ClockInfo MEM", lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_MEM)),
        ("CurrentClocksEventReasons", lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h)),
        ("FieldValues PCIe 197,198", lambda: nv.nvmlDeviceGetFieldValues(h, [197, 198])),
        ("ComputeRunningProcesses", lambda: nv.nvmlDeviceGetComputeRunningProcesses(h)),
        ("GraphicsRunningProcesses", lambda: nv.nvmlDeviceGetGraphicsRunningProcesses(h)),
        (
            "TemperatureThreshold SLOWDOWN",
            lambda: nv.nvmlDeviceGetTemperatureThreshold(h, nv.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN),
        ),
        (
            "Samples GPU_UTILIZATION",
            lambda: nv.nvmlDeviceGetSamples(h, nv.NVML_GPU_UTILIZATION_SAMPLES, 0),
        ),
        ("ProcessUtilization", lambda: nv.nvmlDeviceGetProcessUtilization(h, 0)),
    ]
    slow = [
        ("PcieThroughput RX", lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES))
    ]
    return [(n, f, CALL_REPEATS) for n, f in calls] + [(n, f, SLOW_REPEATS) for n, f in slow]


def _timed(call: Callable[[], Any], repeats: int) -> dict[str, Any]:
    """µs per call (median, p95, max) and what the call answered."""
    times, answer = [], "ok"
    for _ in range(repeats):
        start = time.perf_counter_ns()
        try:
            call()
        except Exception as exc:  # what the call answers is the finding (an old binding too)
            answer = f"{type(exc).__name__}: {exc}"
        times.append((time.perf_counter_ns() - start) / 1000)
    times.sort()
    return {
        "median_us": round(statistics.median(times), 1),
        "p95_us": round(times[int(0.95 * (len(times) - 1))], 1),
        "max_us": round(times[-1], 1),
        "repeats": repeats,
        "answer": answer,
    }


def _samples(nv, h) -> dict[str, Any]:
    """One GetSamples(GPU_UTILIZATION) buffer: how many samples, how far apart (NVML.md §8)."""
    try:
        _, samples = nv.nvmlDeviceGetSamples(h, nv.NVML_GPU_UTILIZATION_SAMPLES, 0)
    except nv.NVMLError as exc:
        return {"answer": f"{type(exc).__name__}: {exc}"}
    stamps = sorted(s.timeStamp for s in samples)
    gaps = [(b - a) / 1000 for a, b in pairwise(stamps)]
    return {
        "count": len(stamps),
        "span_ms": round((stamps[-1] - stamps[0]) / 1000) if stamps else 0,
        "median_gap_ms": round(statistics.median(gaps), 1) if gaps else None,
    }


def _tick_ms(ticks: int) -> tuple[float, list[float]]:
    """The first collect (opens handles, reads static facts) and each later one, in ms."""
    collector, times = GpuCollector(), []
    for _ in range(ticks + 1):
        start = time.perf_counter_ns()
        collector.collect()
        times.append((time.perf_counter_ns() - start) / 1e6)
    collector.close()
    return times[0], sorted(times[1:])


ACTIVITY = (  # what the busy share asks each tick: words, how its calls add up, the calls
    ("samples", "+", ("Samples GPU_UTILIZATION",)),
    ("per-process (newer/older call)", "/", ("ProcessesUtilizationInfo", "ProcessUtilization")),
    ("GPM sample+metrics", "+", ("GpmSampleGet", "GpmMetricsGet (4 metrics)")),
)


def _activity_words(calls: dict[str, dict[str, Any]]) -> str:
    """``; the busy share's calls: samples 4 µs, per-process (newer/older call) 12/n.a. µs, GPM
    sample+metrics 30+8 µs`` (medians; "n.a." for a call the card refused)."""

    def median(name: str) -> str:
        timing = calls.get(name, {})
        return f"{timing['median_us']:g}" if timing.get("answer") == "ok" else "n.a."

    parts = [f"{words} {sep.join(map(median, names))} µs" for words, sep, names in ACTIVITY]
    return "; the busy share's calls: " + ", ".join(parts)


def nvml_cost(_ctx: Context) -> Result:
    """How long each NVML call takes here, and one monitor tick's GPU collect (the panel's cost
    per refresh): passes when the median tick stays within the per-GPU budget."""
    import pynvml as nv

    nv.nvmlInit()
    try:
        h = nv.nvmlDeviceGetHandleByIndex(0)
        calls = {name: _timed(call, n) for name, call, n in _calls(nv, h)}
        calls |= activity_costs(nv, h, _timed, CALL_REPEATS)
        samples, count = _samples(nv, h), nv.nvmlDeviceGetCount()
    finally:
        nv.nvmlShutdown()
    first, ticks = _tick_ms(TICKS)
    median = statistics.median(ticks)
    budget = TICK_BUDGET_MS * count
    reason = f"one GPU collect {median:.2f} ms median ({count} GPU, budget {budget:g} ms)"
    return judged(
        median <= budget,
        reason + _activity_words(calls),
        calls_gpu0=[{"call": name, **timing} for name, timing in calls.items()],
        util_samples=samples,
        first_tick_ms=round(first, 2),
        tick_ms_median=round(median, 3),
        tick_ms_p95=round(ticks[int(0.95 * (len(ticks) - 1))], 3),
    )
