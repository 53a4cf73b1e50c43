"""`traintop compare A B [--job NAME] [--json]`: print which differences are beyond noise."""

from __future__ import annotations

import json
import math
import sys

from traintop.store.compare import Metric, compare
from traintop.store.ranges import parse_span
from traintop.store.run_data import RunData
from traintop.store.schema import StoreError
from traintop.store.stats import ALPHA, NOISE_FLOOR_PCT

EXIT_BAD_FILE = 1


def run_compare(a: str, b: str, *, job: str | None, as_json: bool) -> int:
    try:
        run_a, run_b, rows = compare(parse_span(a), parse_span(b), job)
    except StoreError as exc:
        print(f"traintop: {exc}", file=sys.stderr)
        return EXIT_BAD_FILE
    if as_json:
        doc = {"a": _side(run_a), "b": _side(run_b), "metrics": [_row(m) for m in rows]}
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_table(run_a, run_b, rows)
    return 0


def _side(run: RunData) -> dict:
    return {
        "label": run.label,
        "job": run.job,
        "ranks": run.ranks,
        "start": run.start,
        "end": run.end,
        "steps": len(run.step_s),
        "samples": len(run.verdicts),
    }


def _row(m: Metric) -> dict:
    return {
        "name": m.name,
        "a": _finite(m.a),
        "b": _finite(m.b),
        "change_pct": _finite(m.change_pct),
        "significant": m.significant,
        "unit": m.unit,
    }


def _finite(value):
    return None if isinstance(value, float) and not math.isfinite(value) else value


def _print_table(a: RunData, b: RunData, rows: list[Metric]) -> None:
    print(f"A: {a.label}  job {a.job or '-'} ({a.ranks} ranks, {len(a.step_s)} steps, "
          f"{a.end - a.start:.0f} s)")  # fmt: skip
    print(f"B: {b.label}  job {b.job or '-'} ({b.ranks} ranks, {len(b.step_s)} steps, "
          f"{b.end - b.start:.0f} s)")  # fmt: skip
    print(f"{'metric':<28}{'A':>12}{'B':>12}{'change':>10}  beyond noise")
    for m in rows:
        print(f"{m.name:<28}{_fmt(m.a):>12}{_fmt(m.b):>12}{_pct(m.change_pct):>10}  "
              f"{_verdict(m.significant)}")  # fmt: skip
    print(
        f"beyond noise: Mann-Whitney U on per-step (per-sample) values, p < {ALPHA}, with the "
        f"change above {NOISE_FLOOR_PCT:g} % and above each run's own half-to-half drift"
    )


def _fmt(value) -> str:
    if value is None:
        return "-"
    if isinstance(value, str):
        return value
    return f"{value:.4g}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:+.1f}%"


def _verdict(significant: bool | None) -> str:
    return {True: "YES", False: "no", None: "-"}[significant]
