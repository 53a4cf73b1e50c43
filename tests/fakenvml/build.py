"""Compile the fake NVML into ``<out_dir>/libnvidia-ml.so.1``, cached by a hash of its sources.

The output file name is the one pynvml dlopens, so a directory built here can be put on
``LD_LIBRARY_PATH`` for a subprocess and the unmodified ``pynvml`` finds it.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
from pathlib import Path

SOURCE_DIR = Path(__file__).resolve().parent
SOURCES = ("fake_nvml.c", "fake_state.c")
HEADERS = ("fake_nvml.h",)
LIBRARY_NAME = "libnvidia-ml.so.1"
# Truncating over-long scenario strings into fixed buffers is intended.
WARNINGS = ("-Wall", "-Werror", "-Wno-format-truncation")


class FakeNvmlBuildError(RuntimeError):
    """gcc is missing or rejected the fake's sources."""


def _source_hash(old_driver: bool) -> str:
    digest = hashlib.sha256(b"old-driver" if old_driver else b"current")
    for name in (*SOURCES, *HEADERS):
        digest.update((SOURCE_DIR / name).read_bytes())
    return digest.hexdigest()[:16]


def build_fake_nvml(out_dir: Path | str, old_driver: bool = False) -> Path:
    """Build (or reuse) the fake library in ``out_dir`` and return its path.

    ``old_driver=True`` leaves out the symbols newer drivers added, to exercise fallbacks.
    A stamp file beside the library holds the source hash, so unchanged sources cost nothing.
    """
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    lib, stamp = out / LIBRARY_NAME, out / "fake_nvml.hash"
    wanted = _source_hash(old_driver)
    if lib.exists() and stamp.exists() and stamp.read_text() == wanted:
        return lib
    gcc = shutil.which("gcc")
    if gcc is None:
        raise FakeNvmlBuildError("gcc not found: cannot build the fake NVML")
    tmp = out / f".{LIBRARY_NAME}.{os.getpid()}"
    cmd = [gcc, "-shared", "-fPIC", "-O2", "-pthread", "-o", str(tmp), *WARNINGS]
    cmd += ["-DFAKE_NVML_OLD_DRIVER"] if old_driver else []
    cmd += [str(SOURCE_DIR / name) for name in SOURCES] + ["-lm"]
    result = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if result.returncode != 0:
        raise FakeNvmlBuildError(f"gcc failed: {result.stderr.strip()}")
    tmp.replace(lib)
    stamp.write_text(wanted)
    return lib
