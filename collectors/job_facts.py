"""What a rank's probe knows of its job beyond its steps: the facts side file, read back.

The probe's helper thread keeps ``<segment>.facts`` (``traintop/facts_file.py``, format in
docs/ring-format.md): what the job already does (``JobFacts``), where it syncs, its caching
allocator's retries and its latest sampled step profile.  ``FactsReader`` rereads it only when
its mtime moved, keeps the last good copy (a file that vanished or went bad changes nothing),
and turns the sync counts into per-step rates over the window: the count and steps of the
newest copy against those of the copy a window before it (since the start, until there is
one).
"""

from __future__ import annotations

import json
import os
from collections import deque
from pathlib import Path
from typing import Any

from traintop.collectors.snapshot import (
    GpuStepProfile,
    JobFacts,
    LoaderFacts,
    OptimizerFacts,
    SyncSite,
)
from traintop.facts_file import MAX_BYTES, VERSION, facts_path

MAX_SITES = 16  # sync sites kept in a snapshot, most per step first
_NS = 1e9
_FLAGS = (
    "compiled",
    "cuda_graphs",
    "has_conv",
    "channels_last",
    "tf32_matmul",
    "tf32_cudnn",
    "pinned_copies",
    "syncs_watched",
)
_NAMES = ("device", "autocast", "attention", "sharing_strategy")
_SHARES = ("kernel_share", "host_wait_share", "sync_share", "kernel_wait_share", "other_share")
_SiteKey = tuple[str, int, str, str]


class FactsReader:
    """Follows one segment's facts file; ``read(now)`` gives its ``JobSnapshot`` fields."""

    def __init__(self, segment: str | os.PathLike[str], window_s: float, same_clock: bool) -> None:
        self._path = facts_path(Path(segment))
        self._window_ns = int(window_s * _NS)
        self._same_clock = same_clock
        self._mtime_ns: int | None = None
        self._doc: dict[str, Any] | None = None
        self._read_s = 0.0  # when the newest copy was read, on the monitor's clock
        self._history: deque[tuple[int, int, dict[_SiteKey, int]]] = deque()

    def read(self, now_s: float) -> dict[str, Any]:
        """``facts``, ``sync_sites``, ``gpu_profile`` and ``cuda_alloc_retries`` with the steps
        the probe had counted when it counted them (the ring's count runs ahead of the file's)."""
        self._poll(now_s)
        doc = self._doc
        if doc is None:
            return {}
        retries = _count(doc.get("alloc_retries"))
        return {
            "facts": job_facts(doc.get("facts")),
            "sync_sites": self._sites(),
            "gpu_profile": self._profile(doc, now_s),
            "cuda_alloc_retries": retries,
            "cuda_alloc_retries_steps": None if retries is None else _count(doc.get("steps")),
        }

    def _poll(self, now_s: float) -> None:
        try:
            st = os.stat(self._path, follow_symlinks=False)
        except OSError:
            return
        if st.st_mtime_ns == self._mtime_ns or st.st_size > MAX_BYTES:
            return
        self._mtime_ns = st.st_mtime_ns
        doc = _load(self._path)
        if doc is not None:
            self._doc, self._read_s = doc, now_s
            self._remember(doc)

    def _remember(self, doc: dict[str, Any]) -> None:
        """Keep the copies of the window, and the newest one before it (the baseline)."""
        taken, steps = _count(doc.get("taken_ns")) or 0, _count(doc.get("steps")) or 0
        if self._history and steps < self._history[-1][1]:
            self._history.clear()  # a new probe under the same name: start again
        self._history.append((taken, steps, _site_counts(doc.get("sync"))))
        while len(self._history) > 2 and self._history[1][0] <= taken - self._window_ns:
            self._history.popleft()

    def _sites(self) -> tuple[SyncSite, ...]:
        (_, steps, counts), meta = self._history[-1], _site_meta(self._doc)
        base_steps, base = (0, {})
        if len(self._history) > 1 and self._history[0][1] < steps:
            _, base_steps, base = self._history[0]
        span = max(steps - base_steps, 1)
        sites = [
            SyncSite(
                *key,
                per_step=(count - base.get(key, 0)) / span,
                total=count,
                code=meta.get(key, ""),
            )
            for key, count in counts.items()
        ]
        sites.sort(key=lambda s: (-s.per_step, -s.total, s.file, s.line))
        return tuple(sites[:MAX_SITES])

    def _profile(self, doc: dict[str, Any], now_s: float) -> GpuStepProfile | None:
        entry = doc.get("profile")
        if not isinstance(entry, dict):
            return None
        taken = _count(entry.get("taken_ns")) or 0
        if self._same_clock:
            age = now_s - taken / _NS
        else:  # another boot's clock: the file's own time says how old it was when read
            age = ((_count(doc.get("taken_ns")) or 0) - taken) / _NS + now_s - self._read_s
        return gpu_profile(entry, max(age, 0.0))


def _load(path: Path) -> dict[str, Any] | None:
    """The file's document, or None when it is not one of ours (bad JSON, another version)."""
    try:
        with open(path, "rb") as f:
            doc = json.loads(f.read(MAX_BYTES + 1))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) and doc.get("v") == VERSION else None


def job_facts(raw: Any) -> JobFacts | None:
    """``JobFacts`` from the file's ``facts``; a field of the wrong type reads None."""
    if not isinstance(raw, dict):
        return None
    read: dict[str, Any] = {k: _text(raw.get(k)) for k in _NAMES}
    read.update({k: _flag(raw.get(k)) for k in _FLAGS})
    return JobFacts(
        **read,
        optimizers=tuple(o for o in map(_optimizer, _items(raw.get("optimizers"))) if o),
        loaders=tuple(lo for lo in map(_loader, _items(raw.get("loaders"))) if lo),
        threads=_count(raw.get("threads")) or None,
    )


def _optimizer(raw: dict[str, Any]) -> OptimizerFacts | None:
    name = _text(raw.get("name"))
    if name is None:
        return None
    return OptimizerFacts(name, _flag(raw.get("fused")), _flag(raw.get("foreach")))


def _loader(raw: dict[str, Any]) -> LoaderFacts | None:
    workers = _count(raw.get("num_workers"))
    if workers is None:
        return None
    return LoaderFacts(
        num_workers=workers,
        pin_memory=raw.get("pin_memory") is True,
        persistent_workers=raw.get("persistent_workers") is True,
        prefetch_factor=_count(raw.get("prefetch_factor")),
        batch_size=_count(raw.get("batch_size")),
    )


def gpu_profile(raw: dict[str, Any], age_s: float) -> GpuStepProfile | None:
    """``GpuStepProfile`` from the file's ``profile`` entry; None when a share is missing."""
    shares = {k: _number(raw.get(k)) for k in _SHARES}
    step, step_s, kernels = (
        _count(raw.get("step")),
        _number(raw.get("step_s")),
        _count(raw.get("kernels")),
    )
    if None in shares.values() or step is None or step_s is None or kernels is None:
        return None
    return GpuStepProfile(
        step=step,
        age_s=age_s,
        step_s=step_s,
        kernels=kernels,
        median_kernel_us=_number(raw.get("median_kernel_us")),
        launch_us_p50=_number(raw.get("launch_us_p50")),
        pageable_copies=_count(raw.get("pageable_copies")) or 0,
        attention=_text(raw.get("attention")),
        every_s=_number(raw.get("every_s")),
        cost_share=_number(raw.get("cost_share")),
        graph_launches=_count(raw.get("graph_launches")) or 0,
        **shares,  # type: ignore[arg-type]
    )


def _site_counts(raw: Any) -> dict[_SiteKey, int]:
    counts: dict[_SiteKey, int] = {}
    for site in _items(raw):
        key, count = _site_key(site), _count(site.get("count"))
        if key is not None and count is not None:
            counts[key] = counts.get(key, 0) + count
    return counts


def _site_meta(doc: dict[str, Any] | None) -> dict[_SiteKey, str]:
    sites = _items(doc.get("sync")) if doc else []
    return {k: _text(s.get("code")) or "" for s in sites if (k := _site_key(s)) is not None}


def _site_key(site: dict[str, Any]) -> _SiteKey | None:
    file, line = _text(site.get("file")), _count(site.get("line"))
    function, kind = _text(site.get("function")), _text(site.get("kind"))
    if file is None or line is None or function is None or kind is None:
        return None
    return file, line, function, kind


def _items(raw: Any) -> list[dict[str, Any]]:
    return [item for item in raw if isinstance(item, dict)] if isinstance(raw, list) else []


def _text(value: Any) -> str | None:
    return value if isinstance(value, str) else None


def _flag(value: Any) -> bool | None:
    return value if isinstance(value, bool) else None


def _count(value: Any) -> int | None:
    ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
    return value if ok else None


def _number(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if value == value and abs(value) != float("inf") else None
