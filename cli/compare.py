"""`traintop compare A B [--job NAME] [--json]`: print which differences are beyond noise."""

from __future__ import annotations

import json
import math
import sys
import tempfile
from pathlib import Path

from traintop.diagnosis.export import expected
from traintop.diagnosis.knob_diff import change_line
from traintop.store.compare import Metric, compare, knob_changes, measured
from traintop.store.ranges import Span, parse_span
from traintop.store.run_data import RunData
from traintop.store.schema import StoreError
from traintop.store.stats import ALPHA, NOISE_FLOOR_PCT

EXIT_BAD_FILE = 1
NOT_SEEN = "the job's settings were not recorded on both sides"
LIVE = "live"  # compare's B: the running job


def run_compare(a: str, b: str, *, job: str | None, as_json: bool, for_s: float = 30.0) -> int:
    """Compare two spans; B ``live`` (or ``live:NAME``) is the running job of A's name (or
    NAME), observed for ``for_s`` seconds into a recording of its own first."""
    with tempfile.TemporaryDirectory(prefix="traintop-compare-") as work:
        try:
            span_a = parse_span(a)
            span_b = _live(span_a, b, job, for_s, Path(work)) if _is_live(b) else parse_span(b)
            run_a, run_b, rows = compare(span_a, span_b, job)
        except StoreError as exc:
            print(f"traintop: {exc}", file=sys.stderr)
            return EXIT_BAD_FILE
        _print(run_a, run_b, rows, as_json)
    return 0


def _is_live(b: str) -> bool:
    return b == LIVE or b.startswith(LIVE + ":")


def _live(a: Span, b: str, job: str | None, for_s: float, work: Path) -> Span:
    """The running job of A's name (``live:NAME``: of NAME) recorded for ``for_s`` seconds."""
    from traintop.cli.record import run_record
    from traintop.store.reader import Recording
    from traintop.store.run_data import load_run
    from traintop.store.tap import JobMatch

    name = b.partition(":")[2] or job
    if not name:
        with Recording(a.path) as rec:
            name = load_run(rec, a, None).job
    if not name:
        raise StoreError(f"{a.path}: no job recorded to find running (give live:NAME)")
    path = work / "live.ttrec"
    print(f"traintop: observing the running job {name} for {for_s:g} s", file=sys.stderr)
    if run_record(path, interval_s=1.0, for_s=for_s, match=JobMatch(name=name), focus_pid=None,
                  watch_pid=None) != 0:  # fmt: skip
        raise StoreError(f"could not record the running job {name}")
    return Span(str(path), None, None)


def _print(run_a: RunData, run_b: RunData, rows: list[Metric], as_json: bool) -> None:
    if as_json:
        doc = {"a": _side(run_a), "b": _side(run_b), "metrics": [_row(m) for m in rows],
               "changes": _changes(run_a, run_b)}  # fmt: skip
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_table(run_a, run_b, rows)
        _print_changes(run_a, run_b)


def _changes(a: RunData, b: RunData) -> list[dict]:
    """Each setting that changed, the gain measured and what A's verdict predicted for it."""
    steps, samples = measured(a, b)
    return [
        {"knob": c.knob, "a": c.before, "b": c.after, "measured_speedup": _finite(steps),
         "measured_samples_speedup": _finite(samples), "predicted": expected(c.predicted),
         "line": change_line(c, steps, samples)}
        for c in knob_changes(a, b)
    ]  # fmt: skip


def _print_changes(a: RunData, b: RunData) -> None:
    """``num_workers 2 → 4: 1.71× steps/s measured, 1.80× predicted (...)``, per knob."""
    found = knob_changes(a, b)
    if not found:
        both = a.facts is not None and b.facts is not None
        seen = "the probe saw no setting of the job change" if both else NOT_SEEN
        print(f"changed: nothing ({seen})")
        return
    steps, samples = measured(a, b)
    together = f" ({len(found)} knobs changed together)" if len(found) > 1 else ""
    print(f"changed{together}:")
    for change in found:
        print(f"  {change_line(change, steps, samples)}")


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
