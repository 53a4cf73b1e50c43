"""Keep a test apart from the machine it runs on: its own ring directory, no real NVML, UTC.

Engineers and CI share machines; a job of someone else's in the default ring directory, a real
GPU driver, or the local time zone would otherwise leak into what a test sees.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest


def private_dir(path: Path) -> Path:
    """Create ``path`` with mode 0700, as the ring reader refuses a directory others can read."""
    path.mkdir(mode=0o700)
    return path


def no_gpu_env(tmp_path: Path) -> dict[str, str]:
    """A private ring directory and an empty library path, so no NVML can load: no GPUs."""
    empty = tmp_path / "no-nvml"
    empty.mkdir()
    ring = private_dir(tmp_path / "ring")
    return {"TRAINTOP_RING_DIR": str(ring), "LD_LIBRARY_PATH": str(empty)}


def utc_time_zone(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Clock text in UTC, whatever TZ the machine has; the old zone comes back afterwards.

    A plain generator, so that a module turns it on for all its tests with
    ``_utc = pytest.fixture(autouse=True)(utc_time_zone)``.
    """
    monkeypatch.setenv("TZ", "UTC")
    time.tzset()
    yield
    monkeypatch.undo()
    time.tzset()
