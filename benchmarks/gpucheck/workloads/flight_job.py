"""A one-rank process group, three all-reduces, then PyTorch's flight recorder read two ways.

``python flight_job.py --backend nccl|gloo --port P --out FILE``

The hang work (issue 25) reads the recorder's active entries when a job stalls; its parser can
only be tested against the real dump's format, and this writes that format: torch's own JSON
dump (whichever of its names the installed torch has) to FILE.dump.json.  Then traintop's own
reader is called in the same process if this tree has one (``READER``), else reported as not
available.  Run under ``traintop run``: when the shim turned the recorder on (it does for
NCCL), its size variable is set by the time the group exists, and FILE says so.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.util
import json
import os
import sys
from dataclasses import asdict, is_dataclass
from pathlib import Path

BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
# NCCL's recorder (CUDA builds since 2.3) and the one other backends use (gloo since 2.10): two
# recorders, so the one holding this job's entries is kept (on an H100 with torch 2.11 the first
# name alone read nothing)
DUMPS = ("_dump_nccl_trace_json", "_dump_fr_trace_json")
# The hang work's reader (issue 25): every entry of this process's recorder, or None.
READER = ("traintop.flight_recorder", "read_flight_recorder")
ALL_REDUCES = 3


def dump() -> tuple[str, bytes]:
    """torch's JSON dump of every entry (the recorder that holds most), and the name of the
    function that made it."""
    import torch._C._distributed_c10d as c10d

    dumps = [
        (name, getattr(c10d, name)(includeCollectives=True, onlyActive=False))
        for name in DUMPS
        if hasattr(c10d, name)
    ]
    if not dumps:
        raise RuntimeError(f"this torch has none of {DUMPS}")
    return max(dumps, key=lambda named: len(json.loads(named[1]).get("entries", ())))


def traintop_reader() -> dict:
    """traintop's reading of this process's recorder (every entry, finished ones too: a
    one-rank group has no other), or why there is none."""
    module, function = READER
    try:
        read = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError):
        return {"status": "not available in this tree", "entry_point": f"{module}.{function}"}
    try:
        entries = read(only_active=False)
        rows = None if entries is None else [asdict(e) if is_dataclass(e) else e for e in entries]
        return {"status": "ok", "entries": json.loads(json.dumps(rows, default=repr))}
    except Exception as exc:  # reported, not raised: the dump above is still worth having
        return {"status": "error", "error": f"{type(exc).__name__}: {exc}"}


def collectives(backend: str, port: int) -> None:
    import torch
    import torch.distributed as dist

    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    tensor = torch.ones(1024, device=device)
    for _ in range(ALL_REDUCES):
        dist.all_reduce(tensor)
    if device.type == "cuda":
        torch.cuda.synchronize()


def switch_on(backend: str) -> str | None:
    """Turn the recorder on unless someone did or will: the caller's environment, or the shim,
    which turns it on for NCCL at ``init_process_group`` when this tree's traintop has the
    hang work.  Returns who did it when known now."""
    if any(os.environ.get(v) for v in BUFFER_VARS):
        return "the caller"
    if backend == "nccl" and importlib.util.find_spec(READER[0]) is not None:
        return None  # the shim's turn; if it does not, the dump below comes back empty
    os.environ[BUFFER_VARS[0]] = "64"  # read when the process group is made
    return "this job"


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    opts = p.parse_args(argv)
    by = switch_on(opts.backend)
    collectives(opts.backend, opts.port)
    if by is None:
        by = "traintop run" if any(os.environ.get(v) for v in BUFFER_VARS) else "nobody"
    api, raw = dump()
    opts.out.with_suffix(".dump.json").write_bytes(raw)
    summary = {"backend": opts.backend, "dump_api": api, "recorder_on_by": by,
               "all_reduces": ALL_REDUCES, "reader": traintop_reader()}  # fmt: skip
    import torch.distributed as dist

    dist.destroy_process_group()
    opts.out.write_text(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
