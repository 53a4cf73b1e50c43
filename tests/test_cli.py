"""The installed `traintop` console script: bad input, `--version`, `snapshot --json`, `query`.

Every case runs the real entry point in a subprocess, because what a user sees on a bad
command line (one line, no traceback, the exit status) only shows end to end.
"""

from __future__ import annotations

import csv
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.isolation import no_gpu_env
from tests.ring_helpers import make_segment, write

SCENARIOS = Path(__file__).parent / "fakenvml" / "scenarios"
THROTTLE = SCENARIOS / "h100x8_throttle.txt"
H100 = "NVIDIA H100 80GB HBM3"


@pytest.fixture
def cli_env(tmp_path: Path) -> dict[str, str]:
    """No NVML, a private empty ring directory: nothing from other runs leaks in."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINTOP", "FAKE_NVML"))}
    return {**environ, **no_gpu_env(tmp_path)}


@pytest.fixture
def fake_env(cli_env: dict[str, str], fake_nvml_lib: Path) -> dict[str, str]:
    """The 8-GPU throttling box with the fake clock frozen at 0 s: exact scripted values."""
    return {
        **cli_env,
        "LD_LIBRARY_PATH": str(fake_nvml_lib.parent),
        "FAKE_NVML_SCENARIO": str(THROTTLE),
        "FAKE_NVML_TIME": "0",
    }


def traintop(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    exe = shutil.which("traintop")
    if exe is None:
        pytest.skip("the traintop console script is not installed")
    return subprocess.run(
        [exe, *args], env=env, capture_output=True, text=True, timeout=120, stdin=subprocess.DEVNULL
    )


def assert_one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    """Non-zero exit, exactly one line on stderr, no traceback anywhere; returns that line."""
    assert "Traceback" not in done.stdout + done.stderr, done.stderr
    assert done.returncode != 0
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1, done.stderr
    return lines[0]


BAD_INPUT = {
    "unknown-subcommand": (["frobnicate"], "frobnicate"),
    "interval-letters": (["--interval", "abc"], "interval"),
    "interval-zero": (["--interval", "0"], "interval"),
    "interval-negative": (["--interval", "-1"], "interval"),
    "interval-nan": (["--interval", "nan"], "interval"),
    "interval-huge": (["--interval", "1e9"], "interval"),
    "interval-inf": (["-i", "inf"], "interval"),
    "interval-missing": (["--interval"], "interval"),
    "snapshot-without-json": (["snapshot"], "--json"),
    "snapshot-extra-arg": (["snapshot", "--json", "--yaml"], "--yaml"),
    "jobs-extra-arg": (["jobs", "extra"], "extra"),
    "query-unknown-field": (["query", "--query-gpu=index,bogus", "--format=csv"], "bogus"),
    "query-bad-format": (["query", "--query-gpu=index", "--format=xml"], "xml"),
    "query-bad-format-option": (["query", "--query-gpu=index", "--format=csv,shiny"], "shiny"),
    "query-missing-fields": (["query", "--format=csv"], "--query-gpu"),
    "query-empty-fields": (["query", "--query-gpu=", "--format=csv"], "query-gpu"),
    "query-missing-format": (["query", "--query-gpu=index"], "--format"),
    "query-unknown-option": (["query", "--bogus"], "--bogus"),
    "run-no-command": (["run"], "no command"),
    "run-only-dashes": (["run", "--"], "no command"),
    "attach-junk": (["attach", "no/such job!"], "no/such job!"),
    "attach-empty": (["attach", ""], "''"),
    "attach-superscript-digit": (["attach", "²"], "²"),
    "attach-huge-pid": (["attach", "9" * 30], "9" * 30),
    "attach-no-such-pid": (["attach", "12345"], "attachable jobs: none"),
    "diagnose-negative-for": (["diagnose", "--for", "-3"], "-3"),
    "diagnose-nan-for": (["diagnose", "--for", "nan"], "nan"),
    "diagnose-job-not-int": (["diagnose", "--job", "notanint"], "notanint"),
    "demo-bad-bottleneck": (["demo", "--bottleneck", "nope"], "nope"),
    "demo-bad-seconds": (["demo", "--seconds", "soon"], "soon"),
}


@pytest.mark.parametrize(("argv", "mentions"), BAD_INPUT.values(), ids=BAD_INPUT.keys())
def test_bad_input_is_one_line(cli_env: dict[str, str], argv: list[str], mentions: str) -> None:
    line = assert_one_line_error(traintop(cli_env, *argv))
    assert mentions in line


@pytest.mark.parametrize("argv", [["run", "--bogus", "--", "true"], ["run", "--name"]])
def test_run_option_errors_are_one_line(cli_env: dict[str, str], argv: list[str]) -> None:
    assert_one_line_error(traintop(cli_env, *argv))


def test_run_missing_command_exits_127(cli_env: dict[str, str], tmp_path: Path) -> None:
    missing = str(tmp_path / "no-such-trainer")
    done = traintop(cli_env, "run", "--", missing)
    assert "not found" in assert_one_line_error(done)
    assert done.returncode == 127


def test_run_not_executable_exits_126(cli_env: dict[str, str], tmp_path: Path) -> None:
    script = tmp_path / "train.sh"
    script.write_text("echo hi\n")
    done = traintop(cli_env, "run", "--", str(script))
    assert "permission denied" in assert_one_line_error(done)
    assert done.returncode == 126


def test_version(cli_env: dict[str, str]) -> None:
    done = traintop(cli_env, "--version")
    assert done.returncode == 0
    assert done.stdout.split() == ["traintop", "0.1.0"]


def test_jobs_with_none_running(cli_env: dict[str, str]) -> None:
    assert json.loads(traintop(cli_env, "jobs", "--json").stdout) == []
    done = traintop(cli_env, "jobs")
    assert done.returncode == 0
    assert "no training jobs found" in done.stdout


def test_jobs_ignores_garbage_segments(cli_env: dict[str, str]) -> None:
    """Truncated or random files named like segments must not break the listing."""
    ring = Path(cli_env["TRAINTOP_RING_DIR"])
    (ring / "4242-r0-deadbeef.ring").write_bytes(os.urandom(5000))
    (ring / "4243-r0-00000000.ring").write_bytes(b"junk")
    done = traintop(cli_env, "jobs", "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == []
    assert_one_line_error(traintop(cli_env, "attach", "4242"))


def test_jobs_sort_naturally_and_errors_cap_their_list(cli_env: dict[str, str]) -> None:
    """Ten finished runs of a sweep: listed sweep1, sweep2, ..., sweep10, and an unknown name
    names four of them and counts the rest instead of printing all ten."""
    ring = Path(cli_env["TRAINTOP_RING_DIR"])
    for index in (10, 2, 1, 9, 3, 8, 4, 7, 5, 6):
        writer = make_segment(ring, name=f"sweep{index}")
        write(writer, 0)
        writer.close()
    done = traintop(cli_env, "jobs")
    assert done.returncode == 0, done.stderr
    names = [line.split()[1] for line in done.stdout.splitlines()[1:]]
    assert names == [f"sweep{i}" for i in range(1, 11)]
    ranks = json.loads(traintop(cli_env, "jobs", "--json").stdout)
    assert len({job["job"] for job in ranks}) == 10
    line = assert_one_line_error(traintop(cli_env, "attach", "nosuch"))
    assert line.startswith("traintop: no training job 'nosuch'; attachable jobs: ")
    assert line.count("(sweep") == 4 and line.endswith("… and 6 more")


def test_snapshot_json_without_nvml(cli_env: dict[str, str]) -> None:
    done = traintop(cli_env, "snapshot", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert data["gpus"] == []
    assert data["gpu_status"]["available"] is False
    assert "not found" in data["gpu_status"]["message"]
    assert data["cpu"]["cores"]


def test_snapshot_json_reports_scripted_gpus(fake_env: dict[str, str]) -> None:
    done = traintop(fake_env, "snapshot", "--json")
    assert done.returncode == 0, done.stderr
    data = json.loads(done.stdout)
    assert {"gpus", "cpu", "memory", "disks", "nics", "processes"} <= data.keys()
    assert data["gpu_status"]["driver_version"] == "590.48.01"
    gpus = data["gpus"]
    assert [g["index"] for g in gpus] == list(range(8))
    assert {g["name"] for g in gpus} == {H100}
    hot, capped, plain = gpus[3], gpus[5], gpus[0]
    assert set(hot["clocks_event_reasons_active"]) == {"hw_slowdown", "sw_thermal_slowdown"}
    assert hot["clocks_event_reasons"] == 0x28
    assert (hot["temp_c"], hot["power_w"], hot["sm_clock_mhz"]) == (84.0, 512.0, 1410)
    assert capped["clocks_event_reasons_active"] == ["sw_power_cap"]
    assert (capped["power_w"], capped["sm_clock_mhz"]) == (699.0, 1755)
    assert plain["clocks_event_reasons_active"] == []
    assert (plain["util_gpu_pct"], plain["temp_c"], plain["power_w"]) == (95.0, 63.0, 631.95)
    assert plain["mem_used_bytes"] == 73400320000
    assert plain["power_limit_w"] == 700.0
    assert [p["pid"] for p in hot["processes"]] == [41203, 41303]


def _expected_query_row(index: int) -> list[str]:
    temp, power, reasons = "63", "631.95 W", 0
    if index == 3:
        temp, power, reasons = "84", "512.00 W", 0x28
    if index == 5:
        power, reasons = "699.00 W", 0x4
    return [str(index), H100, temp, power, f"0x{reasons:016x}"]


def test_query_csv_matches_scenario(fake_env: dict[str, str]) -> None:
    fields = "index,name,temperature.gpu,power.draw,clocks_event_reasons.active"
    done = traintop(fake_env, "query", f"--query-gpu={fields}", "--format=csv")
    assert done.returncode == 0, done.stderr
    rows = list(csv.reader(io.StringIO(done.stdout), skipinitialspace=True))
    assert rows[0] == [
        "index",
        "name",
        "temperature.gpu",
        "power.draw [W]",
        "clocks_event_reasons.active",
    ]
    assert rows[1:] == [_expected_query_row(i) for i in range(8)]


def test_query_without_nvml_fails_cleanly(cli_env: dict[str, str]) -> None:
    done = traintop(cli_env, "query", "--query-gpu=index,name", "--format=csv")
    assert done.returncode != 0
    assert "Traceback" not in done.stdout + done.stderr
    assert "libnvidia-ml.so" in done.stdout + done.stderr


@pytest.mark.parametrize("argv", [["traintop"], ["traintop", "demo"], ["traintop", "attach"]])
def test_monitor_without_a_terminal_is_one_line_and_starts_nothing(argv, tmp_path):
    """A pipe or cron job gets a pointer to `snapshot --json`, not escape codes or a hang."""
    env = {**os.environ, "TRAINTOP_RING_DIR": str(tmp_path)}
    done = subprocess.run(
        argv, stdin=subprocess.DEVNULL, capture_output=True, text=True, env=env, timeout=60
    )
    assert done.returncode != 0
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in done.stderr, done.stderr
    if argv[1:] != ["attach"]:
        assert "needs a terminal" in lines[0]
    assert not _processes_with_env(f"TRAINTOP_RING_DIR={tmp_path}")


def _processes_with_env(entry: str) -> list[int]:
    """Pids whose environment holds `entry`: what a refused command may have left running."""
    found = []
    for environ in Path("/proc").glob("[0-9]*/environ"):
        try:
            if entry.encode() in environ.read_bytes().split(b"\0"):
                found.append(int(environ.parent.name))
        except OSError:
            continue
    return found
