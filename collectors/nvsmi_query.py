"""``traintop query``: nvidia-smi's ``--query-gpu=... --format=csv`` output, byte for byte.

Scripts around training clusters parse nvidia-smi's CSV; answering the same flags with the same
headers, units, ``[N/A]`` markers and exit codes lets them run on traintop's collector (and on
boxes where only the NVML library is present) without changes.  Exit codes follow nvidia-smi:
2 for bad arguments, 6 when no GPU is found, and the NVML error code when NVML is unusable
(9 driver not loaded, 12 library not found).
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TextIO

from traintop.collectors.gpu import GpuCollector
from traintop.collectors.gpu_reasons import ALL_REASONS
from traintop.collectors.snapshot import GpuSnapshot, GpuStatus

MIB = 1 << 20
NA = "[N/A]"
LOST = "[GPU is lost]"
DRIVER_FAILED = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
LIBRARY_MISSING = (
    "NVIDIA-SMI couldn't find libnvidia-ml.so library in your system. "
    "Please make sure that the NVIDIA Display Driver is properly installed and present "
    "in your system."
)


class QueryArgsError(ValueError):
    """Bad ``traintop query`` arguments; the message is one line, meant for stderr."""


@dataclass(frozen=True, slots=True)
class QueryArgs:
    """Parsed flags: field names (canonical), CSV options and the loop interval."""

    fields: tuple[str, ...]
    header: bool = True
    units: bool = True
    loop_s: float | None = None


@dataclass(frozen=True, slots=True)
class _Row:
    """What a field getter sees: one GPU plus the per-iteration system facts."""

    gpu: GpuSnapshot
    status: GpuStatus
    count: int
    timestamp: str


@dataclass(frozen=True, slots=True)
class Field:
    """One queryable column: nvidia-smi's header, its unit and how to read the value."""

    header: str
    unit: str
    get: Callable[[_Row], Any]
    system: bool = False  # answers even for a lost GPU (timestamp, count, identity)


def mib_floor(value: int | None) -> int | None:
    """Whole MiB, truncated: nvidia-smi's memory.total, .reserved and .free (see ``MIB_RULES``)."""
    return None if value is None else value // MIB


def mib_ceil(value: int | None) -> int | None:
    """Whole MiB, rounded up: nvidia-smi's memory.used (see ``MIB_RULES``)."""
    return None if value is None else -(-value // MIB)


MIB_RULES: dict[str, Callable[[int | None], int | None]] = {
    "memory.total": mib_floor,
    "memory.reserved": mib_floor,
    "memory.used": mib_ceil,
    "memory.free": mib_floor,
}
"""How nvidia-smi turns NVML's bytes (``nvmlDeviceGetMemoryInfo_v2``) into MiB, per field.

No single rule fits both cards: rounding to the nearest, tuned on the H100, printed 616 for the
H200's reserved memory where nvidia-smi printed 615, so reserved truncates (its bytes lay between
615.5 and 616 MiB); and the H100's used memory of 5196.8 MiB printed 5197, so used does not
truncate.  Used rounds up (any allocated byte shows, as "1MiB" on an idle card's summary does):
up and to the nearest agree on every reading seen so far, and a card check that records the raw
bytes beside nvidia-smi's figure is what would tell them apart.  Total is a whole number of MiB on
every board captured (81559 on the H100, 143771 on the H200, 46068 on the L40S), so every rule
agrees there; free truncates, like reserved.  The printed fields do not add up to total: on nine
public captures (nvidia_gpu_exporter's, drivers 580 to 610) reserved + used + free exceeds total
by 1 or 2 MiB, idle or loaded, so NVML's own fields overlap and nvidia-smi prints each as read,
never one derived from the others; this code does the same.
"""


def _whole(value: float | None) -> int | None:
    return None if value is None else round(value)


def _watts(value: float | None) -> str | None:
    return None if value is None else f"{value:.2f}"


def _mask(value: int | None) -> str | None:
    return None if value is None else f"0x{value:016X}"


def _reason(bit: int) -> Callable[[_Row], str | None]:
    def get(row: _Row) -> str | None:
        mask = row.gpu.clocks_event_reasons
        return None if mask is None else ("Active" if mask & bit else "Not Active")

    return get


FIELDS: dict[str, Field] = {
    "timestamp": Field("timestamp", "", lambda r: r.timestamp, system=True),
    "driver_version": Field("driver_version", "", lambda r: r.status.driver_version, True),
    "count": Field("count", "", lambda r: r.count, system=True),
    "index": Field("index", "", lambda r: r.gpu.index, system=True),
    "name": Field("name", "", lambda r: r.gpu.name, system=True),
    "uuid": Field("uuid", "", lambda r: r.gpu.uuid, system=True),
    "pci.bus_id": Field("pci.bus_id", "", lambda r: r.gpu.pci_bus_id, system=True),
    "utilization.gpu": Field("utilization.gpu [%]", "%", lambda r: _whole(r.gpu.util_gpu_pct)),
    "utilization.memory": Field(
        "utilization.memory [%]", "%", lambda r: _whole(r.gpu.util_mem_pct)
    ),
    "memory.total": Field("memory.total [MiB]", "MiB", lambda r: mib_floor(r.gpu.mem_total_bytes)),
    "memory.reserved": Field(
        "memory.reserved [MiB]", "MiB", lambda r: mib_floor(r.gpu.mem_reserved_bytes)
    ),
    "memory.used": Field("memory.used [MiB]", "MiB", lambda r: mib_ceil(r.gpu.mem_used_bytes)),
    "memory.free": Field("memory.free [MiB]", "MiB", lambda r: mib_floor(r.gpu.mem_free_bytes)),
    "temperature.gpu": Field("temperature.gpu", "", lambda r: _whole(r.gpu.temp_c)),
    "power.draw": Field("power.draw [W]", "W", lambda r: _watts(r.gpu.power_w)),
    "power.limit": Field("power.limit [W]", "W", lambda r: _watts(r.gpu.power_limit_w)),
    "clocks.sm": Field("clocks.current.sm [MHz]", "MHz", lambda r: r.gpu.sm_clock_mhz),
    "clocks.mem": Field("clocks.current.memory [MHz]", "MHz", lambda r: r.gpu.mem_clock_mhz),
    "clocks.max.sm": Field("clocks.max.sm [MHz]", "MHz", lambda r: r.gpu.sm_clock_max_mhz),
    "clocks.max.mem": Field("clocks.max.memory [MHz]", "MHz", lambda r: r.gpu.mem_clock_max_mhz),
    "pstate": Field("pstate", "", lambda r: None if r.gpu.pstate is None else f"P{r.gpu.pstate}"),
    "fan.speed": Field("fan.speed [%]", "%", lambda r: _whole(r.gpu.fan_pct)),
    "clocks_event_reasons.active": Field(
        "clocks_event_reasons.active", "", lambda r: _mask(r.gpu.clocks_event_reasons)
    ),
    "clocks_event_reasons.supported": Field(
        "clocks_event_reasons.supported", "", lambda r: _mask(r.gpu.clocks_event_reasons_supported)
    ),
} | {
    f"clocks_event_reasons.{reason.key}": Field(
        f"clocks_event_reasons.{reason.key}", "", _reason(reason.bit)
    )
    for reason in ALL_REASONS
    if reason.key != "display_clock_setting"  # nvidia-smi has no CSV field for this bit
}

# Other spellings nvidia-smi accepts for the same column (it prints the canonical header).
ALIASES: dict[str, str] = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_bus_id": "pci.bus_id",
    "clocks.current.sm": "clocks.sm",
    "clocks.current.memory": "clocks.mem",
    "clocks.max.memory": "clocks.max.mem",
} | {
    name.replace("clocks_event_reasons.", "clocks_throttle_reasons."): name
    for name in FIELDS
    if name.startswith("clocks_event_reasons.")
}


def _canonical(name: str) -> str:
    key = name.strip().lower()
    key = ALIASES.get(key, key)
    if key not in FIELDS:
        raise QueryArgsError(f'Field "{name.strip()}" is not a valid field to query.')
    return key


def _parse_format(text: str) -> tuple[bool, bool]:
    """(header, units) from ``csv[,noheader][,nounits]``."""
    options = [option.strip().lower() for option in text.split(",")]
    unknown = [option for option in options if option not in ("csv", "noheader", "nounits")]
    if unknown:
        raise QueryArgsError(f'"{unknown[0]}" is not a valid format option.')
    if "csv" not in options:
        raise QueryArgsError('The format must include "csv", e.g. --format=csv,noheader.')
    return "noheader" not in options, "nounits" not in options


def _parse_seconds(text: str, scale: float) -> float:
    try:
        seconds = float(text) * scale
    except ValueError:
        raise QueryArgsError(f'Invalid loop interval "{text}": expected a number.') from None
    if seconds <= 0:
        raise QueryArgsError(f'Invalid loop interval "{text}": it must be positive.')
    return seconds


def _options(argv: Sequence[str]) -> dict[str, str]:
    """Flag -> value for ``--flag=value`` and ``--flag value`` spellings."""
    names = {"--query-gpu": "query", "--format": "format", "-l": "loop", "--loop": "loop"}
    names |= {"-lms": "loop_ms", "--loop-ms": "loop_ms"}
    found: dict[str, str] = {}
    args = list(argv)
    while args:
        flag, eq, value = args.pop(0).partition("=")
        if flag not in names:
            raise QueryArgsError(f'Invalid argument "{flag}": see nvidia-smi --help-query-gpu.')
        if not eq:
            if not args:
                raise QueryArgsError(f'Argument "{flag}" needs a value.')
            value = args.pop(0)
        found[names[flag]] = value
    return found


def parse_query_args(argv: Sequence[str]) -> QueryArgs:
    """Parse nvidia-smi style flags; raises :class:`QueryArgsError` with a one-line message."""
    found = _options(argv)
    if "query" not in found:
        raise QueryArgsError(
            "Missing --query-gpu=FIELD[,FIELD...] (see nvidia-smi --help-query-gpu)."
        )
    if "format" not in found:
        raise QueryArgsError("Missing --format=csv[,noheader][,nounits].")
    names = [name for name in found["query"].split(",") if name.strip()]
    if not names:
        raise QueryArgsError("--query-gpu needs at least one field.")
    header, units = _parse_format(found["format"])
    loop = None
    if "loop" in found:
        loop = _parse_seconds(found["loop"], 1.0)
    if "loop_ms" in found:
        loop = _parse_seconds(found["loop_ms"], 0.001)
    fields = tuple(_canonical(name) for name in names)
    return QueryArgs(fields=fields, header=header, units=units, loop_s=loop)


def format_header(args: QueryArgs) -> str:
    """The CSV header line; units stay in the header even with ``nounits``, as nvidia-smi does."""
    return ", ".join(FIELDS[name].header for name in args.fields)


def format_row(args: QueryArgs, row: _Row) -> str:
    """One GPU's CSV line."""
    return ", ".join(_cell(FIELDS[name], row, args.units) for name in args.fields)


def _cell(field: Field, row: _Row, units: bool) -> str:
    if row.gpu.lost and not field.system:
        return LOST
    value = field.get(row)
    if value is None:
        return NA
    return f"{value} {field.unit}" if units and field.unit else str(value)


def nvsmi_timestamp(epoch_s: float) -> str:
    """nvidia-smi's local-time stamp, e.g. ``2026/11/21 05:20:00.123``."""
    millis = int(epoch_s * 1000) % 1000
    return time.strftime("%Y/%m/%d %H:%M:%S", time.localtime(epoch_s)) + f".{millis:03d}"


def _unavailable(status: GpuStatus, err: TextIO) -> int:
    if status.message == "NVML library not found":
        print(LIBRARY_MISSING, file=err)
        return 12
    print(DRIVER_FAILED, file=err)
    return 9


def _print_once(
    args: QueryArgs,
    collector: GpuCollector,
    out: TextIO,
    err: TextIO,
    wall_clock: Callable[[], float],
    first: bool,
) -> int | None:
    """One sample printed; an exit code when the query cannot go on, else ``None``."""
    gpus, status = collector.collect()
    if not status.available:
        return _unavailable(status, err)
    if not gpus:
        print("No devices were found", file=out)
        return 6
    if first and args.header:
        print(format_header(args), file=out)
    stamp = nvsmi_timestamp(wall_clock())
    for gpu in gpus:
        print(format_row(args, _Row(gpu, status, len(gpus), stamp)), file=out)
    out.flush()
    return None


def run_query(
    args: QueryArgs,
    collector: GpuCollector,
    out: TextIO,
    sleep: Callable[[float], None],
    err: TextIO | None = None,
    wall_clock: Callable[[], float] = time.time,
) -> int:
    """Print once, or every ``args.loop_s`` seconds until Ctrl-C; returns the exit code."""
    errors = sys.stderr if err is None else err
    first = True
    try:
        while True:
            code = _print_once(args, collector, out, errors, wall_clock, first)
            if code is not None:
                return code
            if args.loop_s is None:
                return 0
            first = False
            sleep(args.loop_s)
    except KeyboardInterrupt:
        return 0


def main_query(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``traintop query ...`` (argv excludes the program and "query")."""
    try:
        args = parse_query_args(sys.argv[2:] if argv is None else argv)
    except QueryArgsError as exc:
        print(exc, file=sys.stderr)
        return 2
    collector = GpuCollector()
    try:
        return run_query(args, collector, sys.stdout, time.sleep)
    except BrokenPipeError:  # `traintop query ... | head` closed the pipe: not an error
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # no flush error at exit
        return 0
    finally:
        collector.close()
