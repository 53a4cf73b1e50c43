"""Header facts: hostname, uptime and logical CPU count."""

from __future__ import annotations

import socket
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any

import psutil

from traintop.collectors.snapshot import HostInfo


class HostCollector:
    """Reads the boot time and CPU count once; uptime is derived from the wall clock each tick."""

    def __init__(
        self,
        ps: ModuleType | Any = psutil,
        wall: Callable[[], float] = time.time,
        hostname: Callable[[], str] = socket.gethostname,
    ):
        self._wall = wall
        self._boot_time: float = ps.boot_time()
        self._logical: int = ps.cpu_count(logical=True) or 1
        self._hostname = hostname()

    def collect(self) -> HostInfo:
        """Host facts as of now."""
        return HostInfo(
            hostname=self._hostname,
            uptime_s=max(0.0, self._wall() - self._boot_time),
            logical_cpus=self._logical,
        )
