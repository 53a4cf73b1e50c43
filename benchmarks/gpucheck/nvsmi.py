"""nvidia-smi, the reference: ``--query-gpu`` as CSV, and the ``-q`` lines no CSV field has.

Fields an older nvidia-smi does not know are dropped (it refuses the whole query, naming the
first unknown field) and listed, so one missing field never costs the comparison of the rest.
Cells become Python values the way a reader of the CSV would take them: numbers, ``0x`` masks
as integers, ``[N/A]``-style markers as None.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass, field
from typing import Any

from gpucheck.context import Context

UNKNOWN_FIELD = re.compile(r'Field "([^"]+)" is not a valid field to query')
NUMBER = re.compile(r"^-?\d+(\.\d+)?$")
GPU_BLOCK = re.compile(r"^GPU ([0-9A-Fa-f]+:[0-9A-Fa-f]+:[0-9A-Fa-f]+\.[0-9A-Fa-f])\s*$", re.M)
Q_LINE = re.compile(r"^[ \t]+(\S[^:\n]*?)[ \t]+:[ \t](.*)$", re.M)


@dataclass(frozen=True, slots=True)
class Query:
    """One ``--query-gpu`` answer: a row of raw cells per GPU, and the fields it refused."""

    fields: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    refused: tuple[str, ...] = ()
    header: str = ""

    def values(self, gpu: int = 0) -> dict[str, Any]:
        """GPU ``gpu``'s cells as values (see :func:`cell_value`)."""
        return {
            name: cell_value(cell) for name, cell in zip(self.fields, self.rows[gpu], strict=True)
        }

    def cells(self, gpu: int = 0) -> dict[str, str]:
        return dict(zip(self.fields, self.rows[gpu], strict=True))


@dataclass(frozen=True, slots=True)
class QReport:
    """The ``nvidia-smi -q`` lines the check reads, per GPU (first occurrence of each key)."""

    gpus: tuple[dict[str, str], ...] = field(default=())


def cell_value(cell: str) -> Any:
    """``"81559"`` -> 81559.0, ``"0x00000000000001FF"`` -> 511, ``"[N/A]"`` -> None, else text."""
    text = cell.strip()
    if text.startswith("[") or text in ("N/A", ""):
        return None
    if text.lower().startswith("0x"):
        return int(text, 16)
    return float(text) if NUMBER.match(text) else text


def query(ctx: Context, fields: list[str], fmt: str = "csv,noheader,nounits") -> Query:
    """``nvidia-smi --query-gpu=FIELDS --format=FMT``, retried without each refused field."""
    wanted, refused = list(fields), []
    while wanted:
        done = ctx.run([*ctx.nvidia_smi, f"--query-gpu={','.join(wanted)}", f"--format={fmt}"])
        unknown = UNKNOWN_FIELD.search(done.stdout + done.stderr)
        if unknown and unknown.group(1) in wanted:
            wanted.remove(unknown.group(1))
            refused.append(unknown.group(1))
            continue
        if done.returncode != 0:
            raise RuntimeError(f"nvidia-smi exited {done.returncode}: {done.stdout}{done.stderr}")
        return parse_csv(wanted, done.stdout, "noheader" not in fmt, refused)
    raise RuntimeError(f"nvidia-smi refused every field: {refused}")


def parse_csv(fields: list[str], text: str, header: bool, refused: list[str] = ()) -> Query:
    """CSV as nvidia-smi (and ``traintop query``) print it: ", "-separated, header first."""
    lines = [line for line in text.splitlines() if line.strip()]
    head = lines.pop(0) if header else ""
    rows = tuple(tuple(row) for row in csv.reader(lines, skipinitialspace=True))
    return Query(tuple(fields), rows, tuple(refused), head)


def q_report(ctx: Context) -> QReport:
    """``nvidia-smi -q`` split per GPU into its ``key : value`` lines."""
    done = ctx.run([*ctx.nvidia_smi, "-q"])
    if done.returncode != 0:
        raise RuntimeError(f"nvidia-smi -q exited {done.returncode}: {done.stderr.strip()}")
    blocks = GPU_BLOCK.split(done.stdout)[2::2]  # [preamble, bus id, block, bus id, block...]
    return QReport(tuple(_first_values(block) for block in blocks))


def _first_values(block: str) -> dict[str, str]:
    found: dict[str, str] = {}
    for key, value in Q_LINE.findall(block):
        found.setdefault(key, value.strip())
    return found


def q_number(text: str | None) -> float | None:
    """``"3092 KB/s"`` -> 3092.0, ``"89 C"`` -> 89.0, ``"N/A"`` -> None."""
    match = re.match(r"^\s*(-?\d+(?:\.\d+)?)", text or "")
    return float(match.group(1)) if match else None
