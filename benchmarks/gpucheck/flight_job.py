"""A one-rank process group, three all-reduces, then PyTorch's flight recorder read two ways.

``python flight_job.py --backend nccl|gloo --port P --out FILE``

The hang work (issue 25) reads the recorder's active entries when a job stalls; its parser can
only be tested against the real dump's format, and this writes that format: torch's own JSON
dump (whichever of its names the installed torch has) to FILE.dump.json.  Then traintop's own
reader is called in the same process if this tree has one (``READER``), else reported as not
available.  Run under ``traintop run``: when the shim already turned the recorder on, the
buffer variables are set before this script starts, and FILE says so.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
from pathlib import Path

BUFFER_VARS = ("TORCH_FR_BUFFER_SIZE", "TORCH_NCCL_TRACE_BUFFER_SIZE")
DUMPS = ("_dump_nccl_trace_json", "_dump_fr_trace_json")  # newest torch has the second only
READER = ("traintop.flight_recorder", "read_entries")  # the hang work's entry point, when landed
ALL_REDUCES = 3


def dump() -> tuple[str, bytes]:
    """torch's JSON dump of every entry, and the name of the function that made it."""
    import torch._C._distributed_c10d as c10d

    for name in DUMPS:
        function = getattr(c10d, name, None)
        if function is not None:
            return name, function(includeCollectives=True, onlyActive=False)
    raise RuntimeError(f"this torch has none of {DUMPS}")


def traintop_reader() -> dict:
    """traintop's reading of this process's recorder, or why there is none."""
    module, function = READER
    try:
        read = getattr(importlib.import_module(module), function)
    except (ImportError, AttributeError):
        return {"status": "not available in this tree", "entry_point": f"{module}.{function}"}
    try:
        return {"status": "ok", "result": json.loads(json.dumps(read(), default=repr))}
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


def main(argv: list[str]) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", choices=("nccl", "gloo"), required=True)
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    opts = p.parse_args(argv)
    by_shim = any(os.environ.get(v) for v in BUFFER_VARS)
    for var in BUFFER_VARS:
        os.environ.setdefault(var, "64")  # read when the process group is made, below
    collectives(opts.backend, opts.port)
    api, raw = dump()
    opts.out.with_suffix(".dump.json").write_bytes(raw)
    summary = {
        "backend": opts.backend,
        "dump_api": api,
        "recorder_on_by": "traintop run" if by_shim else "this job",
        "all_reduces": ALL_REDUCES,
        "reader": traintop_reader(),
    }
    import torch.distributed as dist

    dist.destroy_process_group()
    opts.out.write_text(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
