"""The JSON shape of a verdict (``traintop diagnose --json``): plain types, stable keys."""

from __future__ import annotations

from typing import Any

from diagnosis.model import Verdict


def verdict_to_dict(v: Verdict) -> dict[str, Any]:
    """Flatten a verdict for ``json.dumps``; evidence becomes its human-readable sentences."""
    p = v.primary
    return {
        "bottleneck": p.bottleneck,
        "confidence": p.confidence,
        "severity": p.severity,
        "summary": p.summary,
        "evidence": [e.text for e in p.evidence],
        "remedies": list(p.remedies),
        "also": [
            {"bottleneck": f.bottleneck, "confidence": f.confidence, "summary": f.summary}
            for f in v.also
        ],
        "jobs": [
            {
                "pid": j.pid,
                "name": j.name,
                "steps_per_s": j.steps_per_s,
                "samples_per_s": j.samples_per_s,
                "data_wait_share": j.data_wait_share,
            }
            for j in v.jobs
        ],
        "mode": v.mode,
        "window_s": round(v.window_s, 3),
        "since_s": None if v.since_s is None else round(v.since_s, 3),
    }
