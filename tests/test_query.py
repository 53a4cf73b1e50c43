"""``traintop query``: nvidia-smi CSV compatibility, flags, exit codes, subprocess end to end."""

from __future__ import annotations

import io
import os
import re
import subprocess
import sys
from pathlib import Path

import pynvml
import pytest

from tests.fakenvml.control import SCENARIO_DIR
from traintop.collectors.gpu import GpuCollector
from traintop.collectors.nvsmi_query import (
    QueryArgs,
    QueryArgsError,
    main_query,
    nvsmi_timestamp,
    parse_query_args,
    run_query,
)

REPO = Path(__file__).resolve().parent.parent
FIELDS = (
    "index,name,pci.bus_id,driver_version,count,utilization.gpu,utilization.memory,memory.total,"
    "memory.used,memory.free,memory.reserved,temperature.gpu,power.draw,power.limit,clocks.sm,"
    "clocks.mem,clocks.max.sm,clocks.max.mem,pstate,fan.speed"
)
HEADER = (
    "index, name, pci.bus_id, driver_version, count, utilization.gpu [%], "
    "utilization.memory [%], memory.total [MiB], memory.used [MiB], memory.free [MiB], "
    "memory.reserved [MiB], temperature.gpu, power.draw [W], power.limit [W], "
    "clocks.current.sm [MHz], clocks.current.memory [MHz], clocks.max.sm [MHz], "
    "clocks.max.memory [MHz], pstate, fan.speed [%]"
)
GPU3 = (
    "3, NVIDIA H100 80GB HBM3, 00000000:48:00.0, 590.48.01, 8, 95 %, 41 %, 81559 MiB, "
    "70000 MiB, 11080 MiB, 479 MiB, 84, 512.00 W, 700.00 W, 1410 MHz, 2619 MHz, 1980 MHz, "
    "2619 MHz, P0, [N/A]"
)
REASON_FIELDS = (
    "clocks_event_reasons.active,clocks_throttle_reasons.supported,"
    "clocks_event_reasons.gpu_idle,clocks_event_reasons.applications_clocks_setting,"
    "clocks_event_reasons.sw_power_cap,clocks_event_reasons.hw_slowdown,"
    "clocks_event_reasons.hw_thermal_slowdown,clocks_event_reasons.hw_power_brake_slowdown,"
    "clocks_throttle_reasons.sw_thermal_slowdown,clocks_event_reasons.sync_boost"
)


def query(fake, scenario: str, *argv: str) -> tuple[int, list[str], str]:
    fake.load(scenario)
    fake.set_time(0.0)
    out, err = io.StringIO(), io.StringIO()
    collector = GpuCollector(pynvml)
    code = run_query(
        parse_query_args(argv), collector, out, lambda s: None, err, wall_clock=lambda: 0.0
    )
    collector.close()
    return code, out.getvalue().splitlines(), err.getvalue()


def test_values_match_scripted_gpu(fake_nvml) -> None:
    code, lines, _ = query(
        fake_nvml, "h100x8_throttle.txt", f"--query-gpu={FIELDS}", "--format=csv"
    )
    assert code == 0
    assert lines[0] == HEADER
    assert len(lines) == 9
    assert lines[4] == GPU3


def test_nounits_noheader(fake_nvml) -> None:
    _, lines, _ = query(
        fake_nvml, "h100x8_throttle.txt", "--query-gpu", FIELDS, "--format=csv,noheader,nounits"
    )
    assert lines[3] == re.sub(r" (%|MiB|W|MHz)(?=,|$)", "", GPU3)
    assert len(lines) == 8


def test_reason_fields_and_legacy_aliases(fake_nvml) -> None:
    _, lines, _ = query(
        fake_nvml, "h100x8_throttle.txt", f"--query-gpu={REASON_FIELDS}", "--format=csv"
    )
    assert lines[0] == (
        "clocks_event_reasons.active, clocks_event_reasons.supported, "
        "clocks_event_reasons.gpu_idle, clocks_event_reasons.applications_clocks_setting, "
        "clocks_event_reasons.sw_power_cap, clocks_event_reasons.hw_slowdown, "
        "clocks_event_reasons.hw_thermal_slowdown, clocks_event_reasons.hw_power_brake_slowdown, "
        "clocks_event_reasons.sw_thermal_slowdown, clocks_event_reasons.sync_boost"
    )
    assert lines[4] == (
        "0x0000000000000028, 0x00000000000001FF, Not Active, Not Active, Not Active, Active, "
        "Not Active, Not Active, Active, Not Active"
    )
    assert lines[6].startswith(
        "0x0000000000000004, 0x00000000000001FF, Not Active, Not Active, Active,"
    )


def test_mig_utilization_and_timestamp(fake_nvml) -> None:
    _, lines, _ = query(
        fake_nvml, "a100_mig.txt", "--query-gpu=timestamp,utilization.gpu,uuid", "--format=csv"
    )
    assert lines[1] == f"{nvsmi_timestamp(0.0)}, [N/A], GPU-7f3a9c2e-5b1d-4e8f-a6c0-0000d15ea5e0"
    assert lines[2].split(", ")[1] == "88 %"


def test_lost_gpu_row(fake_nvml) -> None:
    fake_nvml.load("mixed_errors.txt")
    fake_nvml.directive("1 lost")
    fake_nvml.set_time(0.0)
    out = io.StringIO()
    args = parse_query_args(
        ["--query-gpu=index,name,clocks.sm,power.draw", "--format=csv,noheader"]
    )
    assert run_query(args, GpuCollector(pynvml), out, lambda s: None) == 0
    assert out.getvalue().splitlines() == [
        "0, NVIDIA GeForce RTX 3090, 0 MHz, 27.00 W",
        "1, [N/A], [GPU is lost], [GPU is lost]",
        "2, NVIDIA H100 80GB HBM3, 345 MHz, [N/A]",
    ]


def test_loop_prints_header_once_and_ctrl_c_exits_zero(fake_nvml) -> None:
    fake_nvml.load("h100x1.txt")
    fake_nvml.set_time(0.0)
    sleeps: list[float] = []

    def sleep(seconds: float) -> None:
        sleeps.append(seconds)
        if len(sleeps) == 2:
            raise KeyboardInterrupt

    out = io.StringIO()
    args = parse_query_args(["--query-gpu=index,memory.used", "--format=csv", "-l", "2"])
    assert run_query(args, GpuCollector(pynvml), out, sleep) == 0
    assert out.getvalue().splitlines() == ["index, memory.used [MiB]"] + ["0, 45000 MiB"] * 2
    assert sleeps == [2.0, 2.0]


def test_no_devices_exit_6(fake_nvml) -> None:
    code, lines, _ = query(fake_nvml, "nogpu.txt", "--query-gpu=index", "--format=csv")
    assert (code, lines) == (6, ["No devices were found"])


def test_driver_not_loaded_exit_9(fake_nvml) -> None:
    fake_nvml.directive("error nvmlInitWithFlags 9")
    out, err = io.StringIO(), io.StringIO()
    args = parse_query_args(["--query-gpu=index", "--format=csv"])
    assert run_query(args, GpuCollector(pynvml), out, lambda s: None, err) == 9
    assert out.getvalue() == ""
    assert err.getvalue().startswith("NVIDIA-SMI has failed because it couldn't communicate")
    assert err.getvalue().count("\n") == 1


@pytest.mark.parametrize(
    ("argv", "expected"),
    [
        (["--query-gpu=index", "--format=csv"], QueryArgs(("index",))),
        (
            ["--query-gpu=gpu_name,clocks.current.sm", "--format=csv,nounits", "--loop=1.5"],
            QueryArgs(("name", "clocks.sm"), units=False, loop_s=1.5),
        ),
        (
            ["--format", "csv,noheader", "--query-gpu", "Index, memory.used", "-lms", "250"],
            QueryArgs(("index", "memory.used"), header=False, loop_s=0.25),
        ),
    ],
)
def test_parse_query_args(argv: list[str], expected: QueryArgs) -> None:
    assert parse_query_args(argv) == expected


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--query-gpu=index,xyz", "--format=csv"], 'Field "xyz" is not a valid field to query.'),
        (["--query-gpu=index"], "Missing --format=csv[,noheader][,nounits]."),
        (["--format=csv"], "Missing --query-gpu"),
        (["--query-gpu=index", "--format=json"], '"json" is not a valid format option.'),
        (["--query-gpu=index", "--format=noheader"], 'The format must include "csv"'),
        (["--query-gpu=index", "--format=csv", "-l", "soon"], 'Invalid loop interval "soon"'),
        (["--query-gpu=index", "--format=csv", "-l", "0"], "it must be positive"),
        (["--query-gpu=index", "--format=csv", "-l"], 'Argument "-l" needs a value.'),
        (["--query-gpu=index", "--format=csv", "--bogus"], 'Invalid argument "--bogus"'),
        (["--query-gpu=,", "--format=csv"], "--query-gpu needs at least one field."),
    ],
)
def test_bad_arguments(argv: list[str], message: str) -> None:
    with pytest.raises(QueryArgsError, match=re.escape(message)):
        parse_query_args(argv)


def test_main_query_unknown_field_exit_2(capsys) -> None:
    assert main_query(["--query-gpu=index,xyz", "--format=csv"]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == ("", 'Field "xyz" is not a valid field to query.\n')


def run_main(lib_dir: str, scenario: str | None, *argv: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "LD_LIBRARY_PATH": lib_dir, "FAKE_NVML_TIME": "0"}
    if scenario:
        env["FAKE_NVML_SCENARIO"] = str(SCENARIO_DIR / scenario)
    code = (
        "import sys; from traintop.collectors.nvsmi_query import main_query; sys.exit(main_query())"
    )
    return subprocess.run(
        [sys.executable, "-c", code, "query", *argv],
        env=env, cwd=REPO, capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_subprocess_through_ld_library_path(fake_nvml_lib: Path) -> None:
    result = run_main(
        str(fake_nvml_lib.parent), "h100x8_throttle.txt", f"--query-gpu=timestamp,{FIELDS}",
        "--format=csv",
    )  # fmt: skip
    lines = result.stdout.splitlines()
    assert (result.returncode, result.stderr, len(lines)) == (0, "", 9)
    assert lines[0] == "timestamp, " + HEADER
    assert re.fullmatch(r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d\.\d{3}, " + re.escape(GPU3), lines[4])


def test_subprocess_without_library(tmp_path: Path) -> None:
    result = run_main(str(tmp_path), None, "--query-gpu=index", "--format=csv")
    assert (result.returncode, result.stdout) == (12, "")
    assert result.stderr.startswith("NVIDIA-SMI couldn't find libnvidia-ml.so library")
    assert result.stderr.count("\n") == 1


def test_subprocess_unknown_field(fake_nvml_lib: Path) -> None:
    result = run_main(str(fake_nvml_lib.parent), "h100x1.txt", "--query-gpu=xyz", "--format=csv")
    assert (result.returncode, result.stdout) == (2, "")
    assert result.stderr == 'Field "xyz" is not a valid field to query.\n'
