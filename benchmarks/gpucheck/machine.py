"""The machine the report is about (card, driver, library versions) and whether it can run the
check at all: NVML sees a GPU, nvidia-smi answers, torch sees CUDA, the monitor's libraries are
there.  torch is probed in a child process: importing it here would put a CUDA context, and
this process, on the card the check measures.
"""

from __future__ import annotations

import json
import os
import platform
import socket
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import traintop
from gpucheck import nvsmi
from gpucheck.context import Context
from gpucheck.results import Result, judged
from traintop.collectors.gpu import GpuCollector

NVML_BINDINGS_FLOOR = (12, 560)  # pyproject.toml: nvidia-ml-py>=12.560
PACKAGES = ("traintop", "nvidia-ml-py", "textual", "rich", "psutil", "prometheus-client", "numpy")
TORCH_PROBE = (
    "import json, torch, torch.distributed; c = torch.cuda.is_available(); print(json.dumps({"
    "'torch': torch.__version__, 'cuda': c, 'cuda_runtime': torch.version.cuda,"
    " 'device': torch.cuda.get_device_name(0) if c else None,"
    " 'bf16': c and torch.cuda.is_bf16_supported(),"
    " 'nccl': c and torch.distributed.is_nccl_available()}))"
)


def _version(name: str) -> str | None:
    try:
        return metadata.version(name)
    except metadata.PackageNotFoundError:
        return None


def torch_facts(ctx: Context) -> dict[str, Any]:
    done = ctx.run([sys.executable, "-c", TORCH_PROBE], timeout=120)
    if done.returncode != 0:
        return {"torch": None, "cuda": False, "error": done.stderr.strip()[-300:]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine_facts(ctx: Context) -> dict[str, Any]:
    """What the report's header says about the machine."""
    gpus, status = GpuCollector().collect()
    facts: dict[str, Any] = {
        "host": socket.gethostname(),
        "python": platform.python_version(),
        "cpus": os.cpu_count(),
        "gpus": [g.name for g in gpus],
        "driver": status.driver_version,
        "cuda_driver": status.cuda_driver_version,
        "nvml": status.message or "available",
    }
    facts |= {name: _version(name) for name in PACKAGES}
    facts["traintop_from"] = str(Path(traintop.__file__).parent)  # installed, not the tree
    return facts | (torch_facts(ctx) if not ctx.fake else {"torch": "not started (fake mode)"})


def _floor_ok(version: str | None) -> bool:
    parts = tuple(int(p) for p in (version or "0").split(".")[:2] if p.isdigit())
    return parts >= NVML_BINDINGS_FLOOR


def environment(ctx: Context, facts: dict[str, Any]) -> Result:
    """Can this machine run the check: NVML, nvidia-smi, CUDA, the monitor's libraries."""
    problems = []
    if not facts["gpus"]:
        problems.append(f"NVML sees no GPU ({facts['nvml']})")
    try:
        smi = nvsmi.query(ctx, ["name", "driver_version"]).values()
    except (OSError, RuntimeError, subprocess.SubprocessError) as exc:
        smi = {}
        problems.append(f"nvidia-smi: {exc}")
    if not ctx.fake and not facts.get("cuda"):
        problems.append(f"torch sees no CUDA device ({facts.get('error') or facts.get('torch')})")
    if facts["textual"] is None:
        problems.append("textual is missing: carry the wheels (benchmarks/gpu_wheels.sh)")
    if not _floor_ok(facts["nvidia-ml-py"]):
        problems.append(f"nvidia-ml-py {facts['nvidia-ml-py']} is below traintop's floor 12.560")
    reason = "; ".join(problems) or f"{', '.join(facts['gpus'])}, driver {facts['driver']}"
    return judged(not problems, reason, nvidia_smi=smi, **facts)
