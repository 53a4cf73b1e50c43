"""The report: ``report.json`` (everything) and ``summary.md`` (what a person reads first).

The summary leads with the machine and one line per check, then each check's figures as small
tables, so the first real card's answer can be read without the script open beside it.
"""

from __future__ import annotations

import json
import tarfile
from dataclasses import asdict
from pathlib import Path
from typing import Any

from gpucheck.results import FAIL, PASS, SKIP, Check

MARK = {PASS: "PASS", FAIL: "**FAIL**", SKIP: "skip"}


def counts(checks: list[Check]) -> dict[str, int]:
    return {status: sum(c.status == status for c in checks) for status in (PASS, FAIL, SKIP)}


def save(out: Path, meta: dict[str, Any], checks: list[Check]) -> None:
    """report.json and summary.md, as far as the run has got."""
    body = {"version": 1, **meta, "counts": counts(checks), "checks": [asdict(c) for c in checks]}
    (out / "report.json").write_text(
        json.dumps(body, indent=1, default=str, ensure_ascii=False) + "\n"
    )
    (out / "summary.md").write_text(summary_markdown(meta, checks))


def archive_logs(work: Path, path: Path) -> None:
    """The jobs' own output, one file (the device returns few files)."""
    with tarfile.open(path, "w:gz") as tar:
        for log in sorted(work.glob("*.log")):
            tar.add(log, arcname=log.name)


def _cell(value: Any) -> str:
    text = (json.dumps(value, default=str, ensure_ascii=False)
            if isinstance(value, (dict, list)) else str(value))  # fmt: skip
    return text.replace("|", "\\|").replace("\n", " ")


def _table(rows: list[dict[str, Any]]) -> list[str]:
    keys = list(dict.fromkeys(k for row in rows for k in row))
    lines = ["| " + " | ".join(keys) + " |", "|" + " --- |" * len(keys)]
    return lines + ["| " + " | ".join(_cell(row.get(k, "")) for k in keys) + " |" for row in rows]


def _details(data: dict[str, Any]) -> list[str]:
    """Scalars as a list, lists of records as tables, anything deeper as one JSON line."""
    lines: list[str] = []
    for key, value in data.items():
        if key == "traceback":
            lines += ["", "```", str(value).rstrip(), "```"]
        elif isinstance(value, list) and value and all(isinstance(v, dict) for v in value):
            lines += ["", f"{key}:", "", *_table(value)]
        elif isinstance(value, list) and value and all(isinstance(v, list) for v in value):
            lines += [
                line
                for i, rows in enumerate(value)
                for line in ("", f"{key} (GPU {i}):", "", *_table(rows))
            ]
        else:
            lines.append(f"- {key}: {_cell(value)}")
    return lines


def summary_markdown(meta: dict[str, Any], checks: list[Check]) -> str:
    """The machine, a table of every check's answer, then each check's figures."""
    n = counts(checks)
    machine = meta.get("machine", {})
    lines = [
        f"# traintop GPU check: {n[PASS]} passed, {n[FAIL]} failed, {n[SKIP]} skipped",
        "",
        f"Mode: {meta['mode']}. Started {meta['started']}, took {meta['seconds']:.0f} s.",
        "",
        *(f"- {k}: {_cell(v)}" for k, v in machine.items()),
        "",
        "| status | check | what | answer | s |",
        "| --- | --- | --- | --- | --- |",
        *(
            f"| {MARK[c.status]} | `{c.id}` | {c.title} | {_cell(c.reason)} | {c.seconds:g} |"
            for c in checks
        ),
    ]
    for c in checks:
        lines += ["", f"## {MARK[c.status]} `{c.id}`: {c.title}", "", _cell(c.reason)]
        lines += _details(c.data)
    return "\n".join(lines) + "\n"
