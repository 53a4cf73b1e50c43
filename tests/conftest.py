"""Shared pytest fixtures.  Keep each area's fixtures in its own section."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest

pytest_plugins = ("tests.tiers", "tests.budget")  # the tiers, the quick guard, the time budget

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


# ---- scenarios (tests/test_scenarios*.py): real workloads under `traintop run` -------------

MATRIX_ENV = "TRAINTOP_MATRIX"  # set by tests/scenarios/matrix.py for every run it starts


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Scenarios marked ``matrix`` repeat what a suite test already covers in one shared run:
    the matrix runner runs them (it sets ``TRAINTOP_MATRIX``), the suite skips them."""
    if os.environ.get(MATRIX_ENV):
        return
    skip = pytest.mark.skip(reason=f"a matrix scenario: python -m tests.scenarios.matrix sets "
                                   f"{MATRIX_ENV}")  # fmt: skip
    for item in items:
        if item.get_closest_marker("matrix") is not None:
            item.add_marker(skip)


@pytest.fixture
def ring_dir(tmp_path: Path) -> Iterator[Path]:
    """A private ring directory, so only this scenario's jobs are visible to diagnose; after
    the scenario no workload writing there may survive (it would skew the next one).  Other
    scenarios running beside this one on a shared machine write elsewhere and do not count.
    Modules that want a bare private directory (no survivor check) define their own."""
    from tests.isolation import private_dir
    from tests.scenarios.harness import workload_processes

    rings = private_dir(tmp_path / "rings")
    yield rings
    survivors = workload_processes(rings)
    assert not survivors, f"workload processes left running: {survivors}"
