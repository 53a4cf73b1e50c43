"""Drive the compiled fake NVML in-process and swap it into ``pynvml``.

pynvml caches function pointers in ``_nvmlGetFunctionPointer_cache`` beyond ``nvmlShutdown``
and library swaps, so installing and removing the fake both clear that cache under
``libLoadLock``; otherwise one test would silently talk to the previous test's library.
"""

from __future__ import annotations

import ctypes
from pathlib import Path
from types import ModuleType

SCENARIO_DIR = Path(__file__).resolve().parent / "scenarios"


class FakeNvml:
    """The fake's scripting API: scenario directives, a settable clock, call counters."""

    def __init__(self, lib_path: Path) -> None:
        self.path = Path(lib_path)
        self.lib = ctypes.CDLL(str(self.path))
        self.lib.fakenvml_directive.argtypes = [ctypes.c_char_p]
        self.lib.fakenvml_set_time.argtypes = [ctypes.c_double]
        self.lib.fakenvml_calls.restype = ctypes.c_longlong

    def reset(self, count: int = 1) -> None:
        """Forget all scripting: ``count`` idle H100s, waves off, time frozen at 0."""
        self.lib.fakenvml_reset(count)
        self.set_time(0.0)

    def directive(self, *lines: str) -> None:
        """Apply scenario lines (README.md grammar); a bad line fails loudly."""
        for line in lines:
            if not self.lib.fakenvml_directive(line.encode()):
                raise ValueError(f"fake NVML rejected directive: {line!r}")

    def load(self, scenario: str) -> None:
        """Apply a shipped scenario file by name, e.g. ``"h100x8_throttle.txt"``."""
        for line in (SCENARIO_DIR / scenario).read_text().splitlines():
            self.directive(line)

    def set_time(self, seconds: float) -> None:
        """Freeze the fake's clock at ``seconds`` (waves, PCIe counters, timed loss follow it)."""
        self.lib.fakenvml_set_time(seconds)

    def calls(self, index: int) -> int:
        """How many NVML device calls GPU ``index`` has answered."""
        return self.lib.fakenvml_calls(index)

    def gpm_samples_live(self) -> int:
        """GPM samples allocated and not yet freed (a collector that leaks them shows here)."""
        return self.lib.fakenvml_gpm_samples_live()

    def init_refcount(self) -> int:
        """Outstanding nvmlInit calls not yet matched by nvmlShutdown."""
        return self.lib.fakenvml_init_refcount()

    def install(self, nvml: ModuleType) -> None:
        """Make ``nvml`` (the pynvml module) call this library."""
        _swap_library(nvml, self.lib)

    @staticmethod
    def uninstall(nvml: ModuleType) -> None:
        """Leave ``nvml`` with no library loaded, as in a fresh process."""
        _swap_library(nvml, None)


def _swap_library(nvml: ModuleType, lib: ctypes.CDLL | None) -> None:
    with nvml.libLoadLock:
        nvml.nvmlLib = lib
        nvml._nvmlGetFunctionPointer_cache.clear()
