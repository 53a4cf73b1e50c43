"""PSI readings: the kernel's pressure files, exact shares between two readings, and nothing
(no error) where the kernel has no PSI.  The texts are copied from this VM's files
(/proc/pressure/cpu and the cgroup v2 root's io.pressure, Linux 6.18)."""

from __future__ import annotations

from pathlib import Path

import pytest

from traintop.collectors.memory_state import Pressure
from traintop.collectors.pressure import (
    PressureCollector,
    PressureFile,
    Totals,
    parse,
    shares,
)

CPU = "some avg10=28.10 avg60=47.32 avg300=55.01 total=3782435939\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n"  # noqa: E501
IO = "some avg10=0.00 avg60=0.04 avg300=1.88 total=178540461\nfull avg10=0.00 avg60=0.00 avg300=0.20 total=44247189\n"  # noqa: E501
OLD_CPU = "some avg10=1.53 avg60=0.87 avg300=0.30 total=127329\n"  # before 5.13: no "full" line


def test_parse_reads_the_totals_and_the_ten_second_average() -> None:
    assert parse(CPU) == Totals(3782435939, 0, 28.10)
    assert parse(IO.encode()) == Totals(178540461, 44247189, 0.0)
    assert parse(OLD_CPU) == Totals(127329, None, 1.53)
    assert parse("not a pressure file") is None


def test_shares_are_exact_over_the_interval() -> None:
    before, after = Totals(1_000_000, 200_000, 5.0), Totals(1_350_000, 250_000, 6.0)
    assert shares(before, after, 1.0) == Pressure(0.35, 0.05, 6.0)
    assert shares(None, after, 0.0) == Pressure(None, None, 6.0)  # a first reading
    assert shares(after, before, 1.0) == Pressure(None, None, 5.0)  # the group was recreated
    assert shares(before, Totals(3_000_000, None, 1.0), 1.0).some == 1.0  # capped at the time


def _write(folder: Path, **files: str) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        (folder / name).write_text(text)
    return folder


def test_the_collector_gives_each_resource_its_share(tmp_path: Path) -> None:
    root = _write(tmp_path / "pressure", cpu=CPU, memory=IO, io=IO)
    now = [100.0]
    collector = PressureCollector(str(root), clock=lambda: now[0])
    first = collector.collect()
    assert first is not None and first.cpu == Pressure(None, None, 28.10)
    (root / "cpu").write_text(CPU.replace("total=3782435939", "total=3782935939", 1))
    now[0] = 102.0
    second = collector.collect()
    assert second is not None and second.cpu is not None
    assert second.cpu.some == pytest.approx(0.25)  # 0.5 s stalled over 2 s
    assert second.io == Pressure(0.0, 0.0, 0.0)


def test_no_psi_means_no_reading_and_no_error(tmp_path: Path) -> None:
    """A kernel without PSI has no /proc/pressure; with psi=0 on its command line the files
    exist and their read fails (EOPNOTSUPP): a directory stands in for such a file here."""
    assert PressureCollector(str(tmp_path / "absent")).collect() is None
    root = tmp_path / "off"
    for name in ("cpu", "memory", "io"):
        (root / name).mkdir(parents=True)
    collector = PressureCollector(str(root))
    assert collector.collect() is None
    assert collector.collect() is None  # asked no more


def test_a_file_read_again_within_half_a_second_repeats_its_answer(tmp_path: Path) -> None:
    """The ranks of one cgroup read its files on the same tick: one reading serves them."""
    path = _write(tmp_path, **{"cpu.pressure": CPU}) / "cpu.pressure"
    reader = PressureFile(str(path))
    assert reader.read(10.0) == reader.read(10.2) == Pressure(None, None, 28.10)


def test_this_hosts_pressure_files_read_where_the_kernel_has_them() -> None:
    found = PressureCollector().collect()
    if not Path("/proc/pressure").is_dir():
        assert found is None
        return
    assert found is not None and found.cpu is not None and found.cpu.some_avg10 is not None
