"""What the card says it did, read back while a job runs: GPM and per-process utilization.

traintop's busy share rests on these (``collectors/gpu_activity.py``, ``gpu_truth.py``), and no
fake can say what a real driver answers: whether GPM is there on this card, whether its values
are percentages, which of the two per-process calls answers, and whether the job's PID is in it.
The collector is read a few ticks apart, as the monitor reads it; beside it both per-process
calls are asked directly, so the report says which answered (traintop asks the newer first).

The rules: on Hopper and newer GPM must be supported, each of its four metrics in 0-100 on every
tick after the first (it needs two samples), and SM active above 0 while the job runs; on an
older card, no GPM figure at all.  Per-process: one of the calls lists the job's PID, and the
collector reads the job's SM share (0-100, above 0 on some tick).
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable
from contextlib import suppress
from typing import Any

from gpucheck.context import Context
from gpucheck.results import Result, judged
from traintop.collectors.gpu import GpuCollector
from traintop.collectors.gpu_activity import gpm_request
from traintop.collectors.snapshot import GpuSnapshot

GPM_FIELDS = ("sm_active_pct", "sm_occupancy_pct", "tensor_active_pct", "dram_active_pct")
TICKS = 5  # read after the first, which only primes GPM
TICK_S = 1.0  # the monitor's interval
PROCESS_CALLS = ("nvmlDeviceGetProcessesUtilizationInfo", "nvmlDeviceGetProcessUtilization")
ARCH_HOPPER, ARCH_UNKNOWN = 9, 0xFFFF  # NVML_DEVICE_ARCH_HOPPER (Blackwell 10); UNKNOWN
# by name, where the driver does not say its architecture (the fake answers no such call)
HOPPER_OR_NEWER = re.compile(r"\b(GH|GB)?(H100|H200|H800|H20|B100|B200|B300)\b")


def _ticks(pid: int | None) -> tuple[int, list[GpuSnapshot]]:
    """The job's GPU (where its PID holds memory, else GPU 0) and its readings, 1 s apart."""
    collector, readings = GpuCollector(), []
    try:
        for _ in range(TICKS + 1):
            gpus, _ = collector.collect()
            readings.append(gpus)
            time.sleep(TICK_S)
    finally:
        collector.close()
    held = [g.index for g in readings[-1] if any(p.pid == pid for p in g.processes)]
    index = held[0] if held else 0
    return index, [gpus[index] for gpus in readings[1:] if len(gpus) > index]


def _job_share(gpu: GpuSnapshot, pid: int | None) -> float | None:
    return next((p.sm_util_pct for p in gpu.processes if p.pid == pid), None)


def _tick_row(gpu: GpuSnapshot, pid: int | None) -> dict[str, Any]:
    row = {"util_gpu_pct": gpu.util_gpu_pct, "util_gpu_mean_pct": gpu.util_gpu_mean_pct}
    return row | {f: getattr(gpu, f) for f in GPM_FIELDS} | {"job_sm_pct": _job_share(gpu, pid)}


def _asked(nv: Any, handle: Any, pid: int | None) -> dict[str, Any]:
    """Each per-process call asked directly (all the samples the driver kept): what it said
    and the job's SM samples in it; then GPM's support and the card's architecture."""
    answers: dict[str, Any] = {}
    for name in PROCESS_CALLS:
        try:
            rows = getattr(nv, name)(handle, 0)
        except (nv.NVMLError, AttributeError) as exc:
            answers[name] = {"answer": f"{type(exc).__name__}: {exc}"}
            continue
        job = [r.smUtil for r in rows if r.pid == pid]
        answers[name] = {"answer": f"{len(rows)} samples", "job_sm_pct": job}
    return answers | {"gpm": _gpm_support(nv, handle), "arch": _architecture(nv, handle)}


def _gpm_support(nv: Any, handle: Any) -> bool | str:
    try:
        return bool(nv.nvmlGpmQueryDeviceSupport(handle).isSupportedDevice)
    except (nv.NVMLError, AttributeError) as exc:
        return f"{type(exc).__name__}: {exc}"


def _architecture(nv: Any, handle: Any) -> int | None:
    """NVML_DEVICE_ARCH_*; None where the driver does not say (or says UNKNOWN)."""
    try:
        arch = int(nv.nvmlDeviceGetArchitecture(handle))
    except (nv.NVMLError, AttributeError):
        return None
    return arch if arch < ARCH_UNKNOWN else None


def ask_driver(index: int, pid: int | None) -> dict[str, Any]:
    import pynvml as nv

    nv.nvmlInit()
    try:
        return _asked(nv, nv.nvmlDeviceGetHandleByIndex(index), pid)
    finally:
        nv.nvmlShutdown()


def hopper_or_newer(arch: int | None, name: str | None) -> bool:
    """By the driver's architecture where it says one, else by the board's name."""
    if arch is not None:
        return arch >= ARCH_HOPPER
    return bool(HOPPER_OR_NEWER.search(name or ""))


def gpm_problems(rows: list[dict[str, Any]], hopper: bool, supported: bool | str) -> list[str]:
    """What is wrong with GPM as traintop read it (empty: nothing)."""
    values = [row[f] for row in rows for f in GPM_FIELDS]
    if not hopper:
        return [] if all(v is None for v in values) else ["GPM figures on a card without GPM"]
    problems = [] if supported is True else [f"GPM not supported: {supported}"]
    if not rows or any(v is None or not 0 <= v <= 100 for v in values):
        problems.append("a GPM figure missing or outside 0-100")
    if not any((row["sm_active_pct"] or 0) > 0 for row in rows):
        problems.append("SM active never above 0 under load")
    return problems


def process_problems(rows: list[dict[str, Any]], asked: dict[str, Any]) -> list[str]:
    shares = [row["job_sm_pct"] for row in rows if row["job_sm_pct"] is not None]
    listed = [n for n in PROCESS_CALLS if asked[n].get("job_sm_pct")]
    problems = [] if listed else ["no per-process call lists the job's PID"]
    if not shares or any(not 0 <= s <= 100 for s in shares) or max(shares) <= 0:
        problems.append(f"traintop's SM share of the job: {shares or 'none'}")
    return problems


def gpu_counters(_ctx: Context, pid: int | None) -> Result:
    """GPM and the job's per-process utilization, as traintop reads them (see the module)."""
    index, gpus = _ticks(pid)
    asked = ask_driver(index, pid)
    rows = [_tick_row(g, pid) for g in gpus]
    name = gpus[0].name if gpus else None
    hopper = hopper_or_newer(asked["arch"], name)
    problems = gpm_problems(rows, hopper, asked["gpm"]) + process_problems(rows, asked)
    first = next((n for n in PROCESS_CALLS if "samples" in asked[n]["answer"]), None)
    reason = (
        f"GPU {index} ({name}, {'Hopper or newer' if hopper else 'before Hopper'}): "
        f"GPM {asked['gpm']}, per-process from {first or 'no call'}; "
        + ("; ".join(problems) if problems else "all read back")
    )
    by = "its architecture" if asked["arch"] is not None else "its name"
    return judged(not problems and bool(gpus), reason, ticks=rows, driver=asked, job_pid=pid,
                  per_process_call=first, hopper_told_by=by)  # fmt: skip


def _gpm_pair(nv: Any, handle: Any, pair: list[Any]) -> str | None:
    """Fill ``pair`` with two GPM samples taken 0.1 s apart (what a metrics read compares);
    why not, where the card or the bindings have no GPM.  The caller frees what is in it."""
    try:
        for _ in range(2):
            pair.append(nv.nvmlGpmSampleAlloc())
            nv.nvmlGpmSampleGet(handle, pair[-1])
            time.sleep(0.1)
    except (nv.NVMLError, AttributeError) as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


Timer = Callable[[Callable[[], Any], int], dict[str, Any]]


def activity_costs(nv: Any, handle: Any, timed: Timer, repeats: int) -> dict[str, Any]:
    """The calls behind the busy share, timed as ``nvml_cost`` times the others: the newer
    per-process call, GPM's support query, a sample and a four-metric read."""
    costs = {
        "ProcessesUtilizationInfo": timed(
            lambda: nv.nvmlDeviceGetProcessesUtilizationInfo(handle, 0), repeats
        ),
        "GpmQueryDeviceSupport": timed(lambda: nv.nvmlGpmQueryDeviceSupport(handle), repeats),
    }
    pair: list[Any] = []
    try:
        failed = _gpm_pair(nv, handle, pair)
        if failed:
            return costs | {"GpmSampleGet": {"answer": failed}}
        get = gpm_request(nv)  # the four metrics traintop asks for, between the two samples
        get.sample1, get.sample2 = pair
        return costs | {
            "GpmSampleGet": timed(lambda: nv.nvmlGpmSampleGet(handle, pair[1]), repeats),
            "GpmMetricsGet (4 metrics)": timed(lambda: nv.nvmlGpmMetricsGet(get), repeats),
        }
    finally:
        for sample in pair:
            with suppress(nv.NVMLError):
                nv.nvmlGpmSampleFree(sample)
