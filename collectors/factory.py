"""Builds the real collectors; the CLI, the benchmarks and the tests all go through here."""

from __future__ import annotations

import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import psutil

from traintop.collectors.cpu import CpuCollector
from traintop.collectors.disks import DiskCollector
from traintop.collectors.host import HostCollector
from traintop.collectors.job_nics import JobNicCollector
from traintop.collectors.memory import MemoryCollector
from traintop.collectors.nics import NicCollector
from traintop.collectors.pressure import PressureCollector
from traintop.collectors.processes import ProcessCollector
from traintop.collectors.sampler import Collectors, GpuSource, JobSource


def build_collectors(
    nvml: Any = None,
    jobs: JobSource | None = None,
    include_virtual: bool = False,
    include_loopback: bool = False,
    top_processes: int = 30,
    ps: ModuleType | Any = psutil,
    clock: Callable[[], float] = time.monotonic,
    gpu: GpuSource | None = None,
) -> Collectors:
    """All collectors, sharing one ``ps`` and ``clock``.

    ``nvml`` is handed to the GPU collector (``None`` = the real pynvml); ``gpu`` replaces that
    collector outright, for tests and for hosts where another GPU source is wanted.
    ``include_virtual`` shows loop/dm/zram disks and container NICs; ``jobs`` is an optional
    ``JobCollector`` (or a source that makes one) whose training jobs land in ``Snapshot.jobs``.
    """
    processes = ProcessCollector(ps=ps, clock=clock, top_n=top_processes)
    share = getattr(jobs, "share_process_scan", None)
    if share is not None:  # DataLoader workers from the same scan, not a second one
        share(processes)
    return Collectors(
        gpu=gpu if gpu is not None else _nvml_gpu(nvml, clock),
        cpu=CpuCollector(ps=ps, clock=clock),
        memory=MemoryCollector(ps=ps, clock=clock),
        disks=DiskCollector(ps=ps, clock=clock, include_virtual=include_virtual),
        nics=NicCollector(
            ps=ps, clock=clock, include_loopback=include_loopback, include_virtual=include_virtual
        ),
        processes=processes,
        host=HostCollector(ps=ps),
        jobs=jobs,
        job_nics=JobNicCollector(clock=clock, include_virtual=include_virtual),
        pressure=PressureCollector(clock=clock) if ps is psutil else None,
    )


def _nvml_gpu(nvml: Any, clock: Callable[[], float]) -> GpuSource:
    """The NVML collector, imported here so an injected ``gpu`` never loads pynvml."""
    from traintop.collectors.gpu import GpuCollector

    return GpuCollector(nvml=nvml, clock=clock)
