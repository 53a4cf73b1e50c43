"""Pure helpers of the verdict UI: banner fitting, durations, history runs, evidence marks."""

from __future__ import annotations

import pytest

from traintop.diagnosis.api import Evidence, Finding, Verdict
from traintop.diagnosis.verdict_history import VerdictPoint, extend, runs, stats
from traintop.tui.evidence import evidence_marks
from traintop.tui.widgets.verdict import banner_lines
from traintop.views.verdict_text import fmt_since

DATA = Finding(
    "data_cpu",
    0.8,
    "warning",
    "Input pipeline limited by CPU: 62 % of time lost",
    (
        Evidence("data wait 62 % of step", "data_wait_share", 0.62, "training"),
        Evidence("4/4 workers at 98 % CPU", "worker_cpu_pct", 98.0, "dataloader"),
    ),
    ("raise DataLoader num_workers from 4 to 7",),
)
VERDICT = Verdict(DATA, (), "attach", 10.0, 12.0)


@pytest.mark.parametrize(
    ("width", "expected"),
    [
        (
            120,
            "◆ DATA LOADING (CPU) — data wait 62 % of step; 4/4 workers at 98 % CPU"
            " · conf 80 % · for 12 s · d: details",
        ),
        (80, "◆ DATA LOADING (CPU) — data wait 62 % of step · conf 80 % · for 12 s"),
        (60, "◆ DATA LOADING (CPU) — data wait 62 % of step · conf 80 %"),
        (30, "◆ DATA LOADING (CPU) — data w…"),
    ],
)
def test_banner_fits_the_width(width, expected):
    (line,) = banner_lines(VERDICT, width)
    text = line.plain
    assert text == expected and len(text) <= width


def test_what_the_job_already_does_stays_off_the_banner():
    """It explains which remedies were left out, not the cause: the details show it."""
    seen = Evidence("seen in the job: DataLoader num_workers=4, pin_memory=True", "job_facts",
                    None, "training")  # fmt: skip
    finding = Finding(DATA.bottleneck, DATA.confidence, DATA.severity, DATA.summary,
                      (DATA.evidence[0], seen, DATA.evidence[1]), DATA.remedies)  # fmt: skip
    (line,) = banner_lines(Verdict(finding, (), "attach", 10.0, 12.0), 200)
    assert "seen in the job" not in line.plain
    assert "data wait 62 % of step; 4/4 workers at 98 % CPU" in line.plain


def test_second_line_has_summary_remedy_and_other_findings():
    other = Finding("memory", 0.5, "info", "GPU memory nearly full")
    lines = banner_lines(Verdict(DATA, (other,), "attach", 10.0, 12.0), 200, two_lines=True)
    assert lines[1].plain == (
        "  Input pipeline limited by CPU: 62 % of time lost"
        "  try: raise DataLoader num_workers from 4 to 7  also: gpu memory"
    )


def test_banner_before_any_verdict():
    assert banner_lines(None, 80)[0].plain == "◇ NO VERDICT YET — collecting data · d: details"


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(None, "just now"), (-1.0, "0 s"), (59.9, "59 s"), (61, "1 min"), (3725, "1 h 02 min")],
)
def test_fmt_since(seconds, text):
    assert fmt_since(seconds) == text


def _point(t: float, bottleneck: str, wait: float | None = None) -> VerdictPoint:
    return VerdictPoint(t, bottleneck, "warning", 0.8, wait, None, None, None)


def test_runs_newest_first_with_durations():
    history = [
        _point(0, "unknown"),
        _point(3, "data_cpu"),
        _point(4, "data_cpu"),
        _point(9, "idle"),
    ]
    assert [(r.bottleneck, r.duration_s) for r in runs(history)] == [
        ("idle", 0.0),
        ("data_cpu", 6.0),
        ("unknown", 3.0),
    ]


def test_history_is_bounded_and_restarts_on_a_clock_going_back():
    history: tuple[VerdictPoint, ...] = ()
    for t in range(10):
        history = extend(history, _point(t, "data_cpu"), limit=4)
    assert [p.monotonic for p in history] == [6, 7, 8, 9]
    assert extend(history, _point(2, "data_cpu")) == (_point(2, "data_cpu"),)


def test_stats_ignore_unmeasured_values():
    assert stats([None, 2.0, 4.0]) == (2.0, 3.0, 4.0)
    assert stats([None, None]) is None


@pytest.mark.parametrize(
    ("severity", "bottleneck", "marks"),
    [
        ("warning", "data_cpu", {"training": "-evidence", "dataloader": "-evidence"}),
        ("error", "data_cpu", {"training": "-evidence-error", "dataloader": "-evidence-error"}),
        ("info", "data_cpu", {"training": "-evidence-info", "dataloader": "-evidence-info"}),
        ("ok", "compute", {}),
        ("info", "unknown", {}),
    ],
)
def test_evidence_marks_follow_severity(severity, bottleneck, marks):
    finding = Finding(bottleneck, 0.8, severity, "s", DATA.evidence)
    assert evidence_marks(Verdict(finding, (), "attach", 10.0, 1.0)) == marks
