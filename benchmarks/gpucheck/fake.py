"""Fake mode: the same check on the fake NVML (tests/fakenvml), so it runs, and is tested, here.

The fake is what pynvml loads instead of the driver's ``libnvidia-ml.so.1``; the dynamic loader
reads ``LD_LIBRARY_PATH`` only when a process starts, so the check restarts itself once with it
set, and this process and every process it starts (traintop query, the exporter, the jobs) load
the fake exactly as they would load the driver.  nvidia-smi is the stand-in of
tests/fakenvml/nvidia_smi.py.  No CUDA: the training job is a toy on the CPU.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

from gpucheck.context import HERE

REPO = HERE.parents[1]
FAKE_DIR = REPO / "tests" / "fakenvml"
SCENARIO = FAKE_DIR / "scenarios" / "gpu_check.txt"
STAND_IN = FAKE_DIR / "nvidia_smi.py"
ACTIVE = "TRAINTOP_GPU_CHECK_FAKE_NVML"
NO_CUDA = "fake NVML mode, no GPU here (the CUDA parts run on a real card)"


def _build_library() -> Path:
    """Compile the fake (cached by its sources' hash) without putting the repository on
    sys.path, where its ``traintop/`` folder would shadow the installed package."""
    spec = importlib.util.spec_from_file_location("fakenvml_build", FAKE_DIR / "build.py")
    build = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(build)
    return build.build_fake_nvml(Path(tempfile.gettempdir()) / f"traintop-fakenvml-{os.getuid()}")


def restart_on_fake(argv: list[str]) -> None:
    """Once: restart this script with the fake library and its scenario in the environment."""
    if os.environ.get(ACTIVE):
        return
    lib = _build_library()
    paths = [str(lib.parent), *filter(None, [os.environ.get("LD_LIBRARY_PATH")])]
    env = dict(os.environ, LD_LIBRARY_PATH=os.pathsep.join(paths), FAKE_NVML_SCENARIO=str(SCENARIO))
    env[ACTIVE] = "1"
    sys.stdout.flush()
    os.execve(sys.executable, [sys.executable, *argv], env)


def stand_in() -> list[str]:
    """argv of the nvidia-smi stand-in."""
    return [sys.executable, str(STAND_IN)]


# The fake card's per-process SM share of a job the check scripts onto it (the job itself runs
# on the CPU): what traintop's busy share must read, from the "process" source.
FAKE_JOB_SM_PCT, FAKE_JOB_MEM_PCT, FAKE_JOB_BYTES = 64, 22, 3 << 30


def _directives(*lines: str) -> None:
    """Script the fake as loaded in this process (its state is per process: the collectors the
    check runs here see it; traintop started as another process does not)."""
    import ctypes

    import pynvml

    pynvml.nvmlInit()  # the scenario is read at a process's first init: never after this
    try:
        lib = ctypes.CDLL("libnvidia-ml.so.1")  # the one pynvml loaded: same state
        lib.fakenvml_directive.argtypes = [ctypes.c_char_p]
        for line in lines:
            if not lib.fakenvml_directive(line.encode()):
                raise RuntimeError(f"the fake NVML refused {line!r}")
    finally:
        pynvml.nvmlShutdown()


def put_job_on_card(pid: int) -> None:
    """GPU 0 lists ``pid`` as a compute process with its own utilization samples."""
    _directives(f"0 proc {pid} {FAKE_JOB_BYTES}",
                f"0 procutil {pid} {FAKE_JOB_SM_PCT} {FAKE_JOB_MEM_PCT}")  # fmt: skip


def take_jobs_off_card() -> None:
    _directives("0 noprocs", "0 noprocutil")
