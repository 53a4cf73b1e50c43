"""The trial's figures: per case the prediction against the measured gain, then the totals.

Measured: the geometric mean of B/A over the repeats whose A and B were both accepted, with a
95 % t-interval of the log ratios (two repeats or more).  Predicted: the first accepted A's
prediction (written before any B ran).  Error: predicted / measured - 1.  Direction: gain
(>= +5 %), no gain, or loss (<= -5 %), the same bands for both.  A case with no prediction for
its knob, or no accepted pair, counts against every target.
"""

from __future__ import annotations

import math
import statistics
from collections.abc import Sequence

from gaintrial.cases import CASES, Case

T95 = {1: 12.71, 2: 4.30, 3: 3.18, 4: 2.78, 5: 2.57, 6: 2.45, 7: 2.36, 8: 2.31, 9: 2.26}
BAND = 0.05
WITHIN = 0.15
START = "<!-- gain-trial:start -->"
END = "<!-- gain-trial:end -->"


def direction(ratio: float) -> str:
    return "gain" if ratio >= 1 + BAND else "loss" if ratio <= 1 - BAND else "no gain"


def _pairs(rows: list[dict], case: str) -> list[tuple[float, float]]:
    ok = [r for r in rows if r["case"] == case and r["accepted"]]
    pairs = []
    for rep in sorted({r["rep"] for r in ok}):
        a = next((r for r in ok if r["rep"] == rep and r["role"] == "A"), None)
        b = next((r for r in ok if r["rep"] == rep and r["role"] == "B"), None)
        if a and b and a["run"]["steps_per_s"] and b["run"]["steps_per_s"]:
            pairs.append((a["run"]["steps_per_s"], b["run"]["steps_per_s"]))
    return pairs


def _measured(pairs: Sequence[tuple[float, float]]) -> tuple[float, float, float] | None:
    if not pairs:
        return None
    logs = [math.log(b / a) for a, b in pairs]
    mid = statistics.fmean(logs)
    if len(logs) < 2:
        return math.exp(mid), math.nan, math.nan
    half = T95.get(len(logs) - 1, 2.0) * statistics.stdev(logs) / math.sqrt(len(logs))
    return math.exp(mid), math.exp(mid - half), math.exp(mid + half)


def _prediction(rows: list[dict], case: str) -> dict | None:
    a = [r for r in rows if r["case"] == case and r["role"] == "A" and r["accepted"]]
    first = min(a, key=lambda r: r["rep"], default=None)
    return first.get("prediction") if first else None


def case_row(case: Case, rows: list[dict]) -> dict:
    """One case's line of the report (a dict: the JSON keeps it too)."""
    pred = _prediction(rows, case.name) or {}
    gain = pred.get("gain") or {}
    meas = _measured(_pairs(rows, case.name))
    speedup = gain.get("speedup")
    row = {
        "case": case.name,
        "class": case.klass,
        "held_out": case.held_out,
        "costs": case.costs,
        "bottleneck": pred.get("bottleneck"),
        "change": gain.get("change") or gain.get("remedy"),
        "predicted": speedup,
        "low": gain.get("low"),
        "high": gain.get("high"),
        "bound_by": gain.get("bound_by"),
        "words": gain.get("words"),
        "offered": pred.get("offered", True),
        "measured": meas[0] if meas else None,
        "interval": [meas[1], meas[2]] if meas else None,
        "pairs": len(_pairs(rows, case.name)),
        "rejected": sum(1 for r in rows if r["case"] == case.name and not r["accepted"]),
    }
    ok = speedup is not None and meas is not None
    row["error"] = speedup / meas[0] - 1 if ok else None
    row["within"] = ok and abs(row["error"]) <= WITHIN
    row["direction_right"] = ok and direction(speedup) == direction(meas[0])
    return row


def summary(rows: list[dict], cases: Sequence[Case] = CASES) -> dict:
    """Every case's row and the targets' figures, over all cases and over each part."""
    table = [case_row(c, rows) for c in cases if any(r["case"] == c.name for r in rows)]
    return {
        "cases": table,
        "all": _totals(table),
        "tuning": _totals([r for r in table if not r["held_out"]]),
        "held_out": _totals([r for r in table if r["held_out"]]),
    }


def _totals(table: list[dict]) -> dict:
    judged = [r for r in table if r["measured"] is not None]
    errors = [abs(r["error"]) for r in judged if r["error"] is not None]
    n = len(judged)
    return {
        "cases": len(table),
        "measured": n,
        "classes": len({r["class"] for r in judged}),
        "within_15": sum(r["within"] for r in judged) / n if n else None,
        "median_abs_error": statistics.median(errors + [math.inf] * (n - len(errors)))
        if n
        else None,
        "direction_right": sum(r["direction_right"] for r in judged) / n if n else None,
    }


def _x(value: float | None) -> str:
    return "-" if value is None or math.isnan(value) else f"{value:.2f}×"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:+.0f} %"


def _share(value: float | None) -> str:
    return "-" if value is None else f"{value * 100:.0f} %"


def markdown(s: dict) -> str:
    lines = [
        START,
        "",
        "| part | cases | measured | classes | within ±15 % | median abs error | direction right |",
        "|---|---|---|---|---|---|---|",
    ]
    for part in ("all", "tuning", "held_out"):
        t = s[part]
        med = t["median_abs_error"]
        lines.append(
            f"| {part.replace('_', '-')} | {t['cases']} | {t['measured']} | "
            f"{t['classes']} | {_share(t['within_15'])} | "
            f"{'-' if med is None else _share(med)} | {_share(t['direction_right'])} |"
        )
    lines += [
        "",
        "| case | class | costs | verdict | change | predicted (range) | measured "
        "(95 % interval) | error | pairs / rejected |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in s["cases"]:
        held = " (held out)" if r["held_out"] else ""
        pred = _predicted(r)
        interval = r["interval"] or [None, None]
        meas = f"{_x(r['measured'])} ({_x(interval[0])}–{_x(interval[1])})"
        lines.append(
            f"| {r['case']}{held} | {r['class']} | {r['costs']} | {r['bottleneck']} | "
            f"{r['change'] or '-'} | {pred} | {meas} | {_pct(r['error'])} | "
            f"{r['pairs']} / {r['rejected']} |"
        )
    return "\n".join([*lines, "", END])


def _predicted(r: dict) -> str:
    """``1.80× (1.60×–2.00×)``, ``up to 4.15× (no figure)`` or ``none``; a figure the
    verdict did not offer (the case asked the model for it) says so."""
    if r["predicted"] is not None:
        asked = "" if r.get("offered", True) else ", asked: no remedy offered"
        return f"{_x(r['predicted'])} ({_x(r['low'])}–{_x(r['high'])}{asked})"
    return f"up to {_x(r['high'])} (no figure)" if r["high"] is not None else "none"


def replace_section(text: str, section: str) -> str:
    """``text`` with the marked section replaced (appended where there is none)."""
    if START in text and END in text:
        head, rest = text.split(START, 1)
        return head + section + rest.split(END, 1)[1]
    return text.rstrip("\n") + "\n\n" + section + "\n"
