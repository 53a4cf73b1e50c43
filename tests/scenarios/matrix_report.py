"""The matrix runner's arithmetic and Markdown: runs -> confusion matrix and per-scenario rows.

Pure functions over the run records ``tests/scenarios/matrix.py`` writes, so a report can be
re-rendered from a saved state file and the counting is tested without running a scenario.
"""

from __future__ import annotations

import os
import time
from collections import Counter
from itertools import pairwise
from statistics import median

START = "<!-- matrix:start -->"
END = "<!-- matrix:end -->"
HEADING = "## Confusion matrix: every scenario, several runs"
DEADLINE_S = 15.0


def _scenario_of(test: str) -> str:
    """``tests/test_scenarios.py::test_data_cpu[x]`` -> ``data_cpu[x]``."""
    return test.split("::")[-1].removeprefix("test_")


def _flips(row: dict) -> int:
    """Changes of the shown verdict after its first commit (see harness.DiagnoseRun.flips)."""
    if "flips" in row:
        return int(row["flips"])
    timeline = (row.get("verdict") or {}).get("timeline") or []
    shown = [b for _, b in timeline]
    while shown and shown[0] == "unknown":
        shown.pop(0)
    return max(0, len(shown) - 1)


def cases(runs: list[dict]) -> list[dict]:
    """One case per recorded answer; a run that recorded nothing is one ``error`` (or
    ``skipped``) case under its test's name."""
    wanted_of = {r["test"]: row.get("wanted") or row["scenario"] for r in runs for row in r["rows"]}
    out = []
    for run in (r for r in runs if r["test"] in wanted_of):
        for row in run["rows"]:
            got = row.get("got") or (row.get("verdict") or {}).get("bottleneck") or "error"
            out.append(_case(run, row["scenario"], row.get("wanted") or row["scenario"], got, row))
        if not run["rows"]:
            name = _scenario_of(run["test"])
            got = "skipped" if run["outcome"] == "skipped" else "error"
            out.append(_case(run, name, wanted_of.get(run["test"], name), got, {}))
    return out


def checks(runs: list[dict]) -> dict[str, dict[str, int]]:
    """Outcome counts of the tests that assert without recording an answer (the monitor's
    banner in tmux, for example)."""
    answering = {r["test"] for r in runs if r["rows"]}
    out: dict[str, Counter] = {}
    for run in runs:
        if run["test"] not in answering:
            out.setdefault(run["test"], Counter())[run["outcome"]] += 1
    return {test: dict(c) for test, c in sorted(out.items())}


def _late(row: dict) -> bool:
    """Right but after the time allowed (the scenario's ``deadline_s``, else 15 s)."""
    ttv = row.get("time_to_verdict_s")
    return ttv is not None and ttv > row.get("deadline_s", DEADLINE_S)


def _case(run: dict, scenario: str, wanted: str, got: str, row: dict) -> dict:
    flips = _flips(row) if row else 0
    late = bool(row) and got == wanted and _late(row)
    return {
        "scenario": scenario,
        "test": run["test"],
        "repeat": run["repeat"],
        "wanted": wanted,
        "got": got,
        "flips": flips,
        "late": late,
        "hit": got == wanted and flips == 0 and not late,
        "ttv_s": row.get("time_to_verdict_s"),
        "load1": run.get("load1"),
    }


def aggregate(runs: list[dict]) -> dict:
    """Confusion counts, per-scenario figures and the conditions the runs had."""
    counted = [c for c in cases(runs) if c["got"] != "skipped"]
    confusion: dict[str, Counter] = {}
    for c in counted:
        confusion.setdefault(c["wanted"], Counter())[_column(c)] += 1
    return {
        "confusion": {w: dict(g) for w, g in sorted(confusion.items())},
        "scenarios": [_scenario_row(name, cs) for name, cs in _by_scenario(cases(runs)).items()],
        "checks": checks(runs),
        "runs": len(runs),
        "hits": sum(c["hit"] for c in counted),
        "answers": len(counted),
        "load1": [c["load1"] for c in counted if c["load1"] is not None],
        "cpus": os.cpu_count(),
        "generated": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
    }


def _column(c: dict) -> str:
    """Where a case counts: what it answered, or ``flipped`` / ``late`` when right otherwise."""
    if c["flips"]:
        return "flipped"
    return "late" if c["late"] else c["got"]


def _by_scenario(all_cases: list[dict]) -> dict[str, list[dict]]:
    grouped: dict[str, list[dict]] = {}
    for c in all_cases:
        grouped.setdefault(c["scenario"], []).append(c)
    return dict(sorted(grouped.items()))


def _scenario_row(name: str, cs: list[dict]) -> dict:
    counted = [c for c in cs if c["got"] != "skipped"]
    times = [c["ttv_s"] for c in counted if c["got"] == c["wanted"] and c["ttv_s"] is not None]
    return {
        "scenario": name,
        "wanted": cs[0]["wanted"],
        "runs": len(counted),
        "skipped": len(cs) - len(counted),
        "hits": sum(c["hit"] for c in counted),
        "answers": dict(Counter(c["got"] for c in counted)),
        "headline_flips": headline_flips(counted),
        "flips": sum(c["flips"] > 0 for c in counted),
        "late": sum(c["late"] for c in counted),
        "ttv_median_s": round(median(times), 1) if times else None,
        "ttv_max_s": round(max(times), 1) if times else None,
    }


def headline_flips(cs: list[dict]) -> int:
    """How often the answer changed from one run of a scenario to the next (in repeat order):
    the same job must get the same headline every time.  A run that crashed (``error``) or was
    skipped gave no headline and is passed over."""
    answers = [c["got"] for c in sorted(cs, key=lambda c: c["repeat"])]
    answers = [a for a in answers if a not in ("error", "skipped")]
    return sum(a != b for a, b in pairwise(answers))


def _seconds(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f} s"


def _confusion_table(confusion: dict[str, dict[str, int]]) -> list[str]:
    """Rows wanted, columns got (wanted labels first, in the same order, so hits are the
    diagonal); a flipped run has its own column."""
    wanted = list(confusion)
    extra = sorted({g for row in confusion.values() for g in row} - set(wanted))
    cols = wanted + extra
    lines = ["| wanted \\ got | " + " | ".join(f"`{c}`" for c in cols) + " |"]
    lines.append("| --- |" + " --- |" * len(cols))
    for w in wanted:
        cells = [_cell(confusion[w].get(c, 0), c == w) for c in cols]
        lines.append(f"| `{w}` | " + " | ".join(cells) + " |")
    return lines


def _cell(count: int, diagonal: bool) -> str:
    if not count:
        return "·"
    return f"**{count}**" if diagonal else str(count)


def _scenario_table(rows: list[dict]) -> list[str]:
    lines = [
        "| scenario | wanted | right | answers | flips | flipped | late "
        "| time-to-verdict median | max |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for r in rows:
        answers = ", ".join(f"`{g}` {n}" for g, n in sorted(r["answers"].items()))
        skipped = f" ({r['skipped']} skipped)" if r["skipped"] else ""
        lines.append(
            f"| `{r['scenario']}` | `{r['wanted']}` | {r['hits']}/{r['runs']}{skipped} | "
            f"{answers or '-'} | {r.get('headline_flips', 0)} | {r['flips']} | {r['late']} | "
            f"{_seconds(r['ttv_median_s'])} | "
            f"{_seconds(r['ttv_max_s'])} |"
        )
    return lines


def _checks_table(found: dict[str, dict[str, int]]) -> list[str]:
    if not found:
        return []
    lines = ["", "| check (no verdict recorded) | outcomes |", "| --- | --- |"]
    for test, outcomes in found.items():
        text = ", ".join(f"{k} {n}" for k, n in sorted(outcomes.items()))
        lines.append(f"| `{test}` | {text} |")
    return lines


def render(summary: dict) -> str:
    """The Markdown section, between the markers docs/scenarios.md keeps it in."""
    load = summary["load1"]
    load_text = f"{min(load):.1f}-{max(load):.1f}" if load else "unknown"
    head = (
        f"{summary['hits']} of {summary['answers']} runs right ({summary['runs']} runs), "
        f"generated {summary['generated']} on {summary['cpus']} CPUs, 1-minute load average "
        f"{load_text} at the start of the runs."
    )
    body = [
        START,
        head,
        "",
        *_confusion_table(summary["confusion"]),
        "",
        *_scenario_table(summary["scenarios"]),
        *_checks_table(summary["checks"]),
        END,
    ]
    return "\n".join(body)


def replace_section(document: str, section: str) -> str:
    """``document`` with its marked section replaced (appended under a heading if absent)."""
    if START in document and END in document:
        before, rest = document.split(START, 1)
        return before + section + rest.split(END, 1)[1]
    return document.rstrip("\n") + f"\n\n{HEADING}\n\n{section}\n"
