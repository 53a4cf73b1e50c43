"""PyTorch's flight recorder: which collectives the communication library has not finished.

On NCCL a Python ``all_reduce`` returns once the kernel is queued, so the ledger
(``traintop.ledger``) shows the call finished while the GPU still waits for a peer; the hang
surfaces later, in ``.item()`` or ``synchronize()``.  PyTorch's flight recorder keeps a ring of
the collectives each process group issued, with their state as its watchdog last saw it.  The
shim turns it on before ``init_process_group`` when the user has not set
``TORCH_FR_BUFFER_SIZE`` (``TORCH_NCCL_TRACE_BUFFER_SIZE`` before torch 2.7) and the backend is
NCCL (``FLIGHT_RECORDER_ENTRIES`` entries; docs/probe.md says what they cost), and the stack
helper reads its unfinished entries when a monitor asks for a stack (a stall).

The read is feature-detected, and reads every recorder the installed torch has: NCCL's
(``torch._C._distributed_c10d._dump_nccl_trace_json``, CUDA builds since 2.3) and the one other
backends record into (``_dump_fr_trace_json``, gloo since 2.10).  They are two recorders, not two
names for one: on a real H100 with torch 2.11 the NCCL group's all-reduces were in the first, and
the second was empty (the GPU check, docs/gpu-check.md).  Both return the JSON of
``FlightRecorder::dump_json`` (torch/csrc/distributed/c10d/FlightRecorderDetail.hpp): ``{"version",
"pg_config", "pg_status", "entries": [...]}``, each entry with ``process_group`` ([name, desc]),
``collective_seq_id``, ``profiling_name`` ("nccl:all_reduce"), ``input_sizes``, ``input_dtypes``,
``state`` (scheduled, started, completed), ``retired``, ``time_created_ns``, ``timeout_ms``; the key
``entries`` is absent when there are none.  Stdlib only; torch is looked up, never imported.
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import asdict, dataclass
from typing import Any

ENV_SIZES = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
FLIGHT_RECORDER_ENTRIES = 2000
DUMPERS = ("_dump_nccl_trace_json", "_dump_fr_trace_json")


@dataclass(frozen=True, slots=True)
class FlightEntry:
    """One collective as the flight recorder saw it."""

    group: str  # the process group's name, with its description after ":" when it has one
    seq: int  # collective_seq_id: the group's sequence number (p2p ops count apart)
    op: str  # "all_reduce" (the backend prefix of profiling_name dropped)
    sizes: tuple[tuple[int, ...], ...]  # the input tensors' sizes
    dtypes: tuple[str, ...]  # their dtypes as torch names them ("Float", "BFloat16")
    state: str  # scheduled, started or completed
    retired: bool  # the watchdog is done with it (retired without completing: timed out)
    created_ns: int  # wall clock ns when the collective was issued
    timeout_ms: int

    @property
    def unfinished(self) -> bool:
        """Still in the communication library's hands: issued, not completed, not given up."""
        return self.state != "completed" and not self.retired


def enable_before_init(backend: Any, cuda_available: Any) -> bool:
    """Ask for the recorder before the first process group, if the user did not decide.

    ``backend`` is ``init_process_group``'s argument; a missing one means NCCL when CUDA is
    available (``cuda_available``, torch's function, called only then).  True if turned on.
    """
    if any(os.environ.get(name) for name in ENV_SIZES):
        return False
    text = "" if backend is None else str(backend).lower()
    if "nccl" not in text and not (backend is None and cuda_available()):
        return False
    os.environ[ENV_SIZES[0]] = str(FLIGHT_RECORDER_ENTRIES)
    return True


def enabled() -> bool:
    """Whether this process asked torch for the recorder (its size variable, above 0)."""
    for name in ENV_SIZES:
        value = os.environ.get(name)
        if value:
            return value.strip().isdigit() and int(value) > 0
    return False


def _dumpers() -> list[Any]:
    """The installed torch's JSON dumps (none when torch is not loaded or has none of them)."""
    c10d = getattr(getattr(sys.modules.get("torch"), "_C", None), "_distributed_c10d", None)
    return [getattr(c10d, name) for name in DUMPERS if hasattr(c10d, name)]


def read_flight_recorder(only_active: bool = True) -> list[FlightEntry] | None:
    """Every recorder's entries (only those not completed by default), oldest first; None when
    this torch has no recorder to read.  Raises what torch raised when no recorder could be
    read (the caller decides); one that fails does not hide the other's entries."""
    dumps, readings, error = _dumpers(), [], None
    for dump in dumps:
        try:
            readings.append(parse(dump(includeCollectives=True, onlyActive=only_active)))
        except Exception as exc:
            error = exc
    if error is not None and not readings:
        raise error
    return merged(readings) if dumps else None


def merged(readings: list[list[FlightEntry]]) -> list[FlightEntry]:
    """The entries of several recorders in the order they were issued; one collective seen by
    two of them (a torch whose two names dump the same recorder) is kept once."""
    unique = {(e.group, e.seq, e.op, e.created_ns): e for reading in readings for e in reading}
    return sorted(unique.values(), key=lambda e: e.created_ns)


def parse(raw: bytes | str) -> list[FlightEntry]:
    """Entries of a ``dump_json`` document; entries it cannot read are left out."""
    document = json.loads(raw)
    entries = document.get("entries", []) if isinstance(document, dict) else []
    parsed = (_entry(e) for e in entries if isinstance(e, dict))
    return [entry for entry in parsed if entry is not None]


def _entry(e: dict) -> FlightEntry | None:
    try:
        name, desc = [*(e.get("process_group") or ("?",)), ""][:2]
        group = f"{name}:{desc}" if desc and desc != "undefined" else str(name)
        op = str(e.get("profiling_name", "?")).split(":", 1)[-1]
        sizes = tuple(tuple(int(d) for d in size) for size in e.get("input_sizes", ()))
        dtypes = tuple(str(d) for d in e.get("input_dtypes", ()))
        state, retired = str(e.get("state", "scheduled")), bool(e.get("retired", False))
        created, timeout = int(e.get("time_created_ns", 0)), int(e.get("timeout_ms", 0))
        seq = int(e["collective_seq_id"])
        return FlightEntry(group, seq, op, sizes, dtypes, state, retired, created, timeout)
    except (KeyError, TypeError, ValueError):
        return None


def unfinished() -> list[dict] | None:
    """The unfinished entries as plain dicts, for the stack helper's reply; None when there
    is no recorder (or reading it failed: a stall is no time to raise)."""
    if not enabled():
        return None
    try:
        entries = read_flight_recorder(only_active=True)
    except Exception:
        return None
    if entries is None:
        return None
    return [asdict(entry) for entry in entries if entry.unfinished]
