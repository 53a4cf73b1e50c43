"""The ready-made pieces in docs/prometheus: the scrape config passes promtool, and every metric
the Grafana dashboard queries is one the exporter serves (the e2e test runs the queries)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.fleet_fixtures import beside_ended, scrape
from tests.snapshot_fixtures import ddp_job, series

DOCS = Path(__file__).resolve().parents[1] / "docs" / "prometheus"
METRIC = re.compile(r"\b((?:DCGM_FI|traintop)_[A-Za-z0-9_]+)")


def dashboard_queries(job: str, hostname: str) -> list[str]:
    """Every PromQL expression of the dashboard, its variables filled in."""
    board = json.loads((DOCS / "grafana-dashboard.json").read_text())
    exprs = [t["expr"] for p in board["panels"] for t in p.get("targets", [])]
    return [e.replace("$job", job).replace("$hostname", hostname) for e in exprs]


def _served() -> set[str]:
    """Every metric name the exporter serves: for a running job, and beside an ended one."""
    served = set(scrape(series(6, gpus=8, jobs=ddp_job(world=8))))
    served |= set(scrape(next(iter(beside_ended().values()))))
    return served | {name.removesuffix("_total") for name in served}


def test_dashboard_queries_only_metrics_the_exporter_serves():
    served = _served()
    used = {m for e in dashboard_queries("j", "h") for m in METRIC.findall(e)}
    assert used and used <= served, used - served


def test_dashboard_has_a_gpu_row_per_node_and_the_job_panels():
    board = json.loads((DOCS / "grafana-dashboard.json").read_text())
    rows = [p for p in board["panels"] if p["type"] == "row"]
    assert any(r.get("repeat") == "hostname" for r in rows)
    titles = " ".join(p["title"] for p in board["panels"])
    for part in ("Verdict", "Steps/s", "Phase breakdown", "GPU utilization"):
        assert part in titles


def test_scrape_config_passes_promtool(tmp_path: Path):
    if shutil.which("promtool") is None:
        pytest.skip("promtool (Debian package prometheus) is not installed")
    done = subprocess.run(
        ["promtool", "check", "config", str(DOCS / "prometheus.yml")],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_pass_promtool_unit_tests():
    """The alerts fire on what they should (promtool evaluates them over scripted series)."""
    if shutil.which("promtool") is None:
        pytest.skip("promtool (Debian package prometheus) is not installed")
    fixtures = Path(__file__).parent / "exporter_fixtures"
    for argv in (
        ["check", "rules", str(DOCS / "alerts.yml")],
        ["test", "rules", "alerts_test.yml"],
    ):
        done = subprocess.run(
            ["promtool", *argv], capture_output=True, text=True, timeout=60, cwd=fixtures
        )
        assert done.returncode == 0, done.stdout + done.stderr


def test_alert_rules_use_only_served_metrics():
    rules = (DOCS / "alerts.yml").read_text()
    served = _served()
    used = set(METRIC.findall(rules)) - {"traintop_exporter"}  # the scrape job's name
    assert used and used <= served, used - served
