"""The matrix runner's counting: hits, misses, flips, errors, skips, and the docs section."""

from __future__ import annotations

from tests.scenarios.matrix import plan
from tests.scenarios.matrix_report import END, START, aggregate, render, replace_section


def _run(test: str, repeat: int, rows: list[dict], outcome: str = "passed") -> dict:
    return {"test": test, "repeat": repeat, "outcome": outcome, "load1": 1.5, "rows": rows}


def _row(scenario: str, got: str, ttv: float, wanted: str | None = None, flips: int = 0) -> dict:
    row = {"scenario": scenario, "time_to_verdict_s": ttv, "got": got, "flips": flips}
    return row | ({"wanted": wanted} if wanted else {})


RUNS = [
    _run("t::test_straggler", 0, [_row("straggler", "data_starved", 9.0, "data_starved")]),
    _run("t::test_straggler", 1, [_row("straggler", "network", 20.0, "data_starved")]),
    _run("t::test_straggler", 2, [], outcome="failed"),
    _run("t::test_compute", 0, [_row("compute", "compute", 7.0)]),
    _run("t::test_compute", 1, [_row("compute", "compute", 6.0, flips=1)]),
    _run("t::test_data_io", 0, [], outcome="skipped"),
    _run("t::test_data_io", 1, [_row("data_io", "data_io", 8.5)]),
    _run("t::test_data_io", 2, [_row("data_io", "data_io", 15.5)]),
    _run("t::test_banner", 0, []),
]


def test_confusion_counts_misses_flips_and_errors() -> None:
    summary = aggregate(RUNS)
    assert summary["confusion"] == {
        "compute": {"compute": 1, "flipped": 1},
        "data_io": {"data_io": 1, "late": 1},
        "data_starved": {"data_starved": 1, "network": 1, "error": 1},
    }
    assert (summary["hits"], summary["answers"]) == (3, 7)
    rows = {r["scenario"]: r for r in summary["scenarios"]}
    assert rows["straggler"]["hits"] == 1 and rows["straggler"]["runs"] == 3
    assert rows["straggler"]["late"] == 0  # wrong and slow is wrong, not late
    assert rows["compute"]["flips"] == 1 and rows["compute"]["ttv_max_s"] == 7.0
    # between runs: data_starved then network (the crash gave no headline); compute twice
    assert rows["straggler"]["headline_flips"] == 1 and rows["compute"]["headline_flips"] == 0
    assert rows["data_io"]["skipped"] == 1 and rows["data_io"]["runs"] == 2
    assert rows["data_io"]["late"] == 1 and rows["data_io"]["ttv_max_s"] == 15.5
    assert summary["checks"] == {"t::test_banner": {"passed": 1}}


def test_rendered_section_has_the_diagonal_in_bold_and_replaces_itself() -> None:
    section = render(aggregate(RUNS))
    assert section.startswith(START) and section.endswith(END)
    straggler = "| `straggler` | `data_starved` | 1/3 | `data_starved` 1, `error` 1, `network` 1"
    assert straggler + " | 1 | 0 | 0 | 9.0 s | 9.0 s |" in section
    assert "| `compute` | **1** | · | · |" in section
    doc = replace_section("# Scenarios\n\ntext\n", section)
    assert doc.count(START) == 1 and "## Confusion matrix" in doc
    assert replace_section(doc, "new") == doc.replace(section, "new")


def test_plan_interleaves_and_skips_recorded_runs() -> None:
    done = [{"test": "a", "repeat": 0}]
    assert plan(["a", "b"], 2, done) == [("b", 0), ("a", 1), ("b", 1)]
