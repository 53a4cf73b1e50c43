"""Shared pytest fixtures.  Keep each area's fixtures in its own section."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

# ---- fake NVML (tests/fakenvml): a C libnvidia-ml.so.1 driven through ctypes ----------------


def _build(tmp_path_factory: pytest.TempPathFactory, old_driver: bool) -> Path:
    from tests.fakenvml.build import FakeNvmlBuildError, build_fake_nvml

    name = "fakenvml_old" if old_driver else "fakenvml"
    try:
        return build_fake_nvml(tmp_path_factory.getbasetemp() / name, old_driver=old_driver)
    except FakeNvmlBuildError as exc:
        pytest.skip(str(exc))


@pytest.fixture(scope="session")
def fake_nvml_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Path of the built fake ``libnvidia-ml.so.1``; its directory suits ``LD_LIBRARY_PATH``."""
    return _build(tmp_path_factory, old_driver=False)


@pytest.fixture(scope="session")
def fake_nvml_old_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The fake built as a pre-R535 driver: TemperatureV, MemoryInfo_v2, ... are missing."""
    return _build(tmp_path_factory, old_driver=True)


def _installed(lib: Path) -> Iterator:
    import pynvml

    from tests.fakenvml.control import FakeNvml

    fake = FakeNvml(lib)
    fake.reset(1)
    fake.install(pynvml)
    yield fake
    FakeNvml.uninstall(pynvml)
    fake.reset(0)


@pytest.fixture
def fake_nvml(fake_nvml_lib: Path) -> Iterator:
    """A reset fake (one idle H100, clock frozen at 0) installed into ``pynvml`` in-process."""
    yield from _installed(fake_nvml_lib)


@pytest.fixture
def fake_nvml_old(fake_nvml_old_lib: Path) -> Iterator:
    """Like ``fake_nvml`` but mimicking an old driver that lacks the newer symbols."""
    yield from _installed(fake_nvml_old_lib)
