"""Words and colours for verdicts: what the banner and the details screen print.

The engine writes finished evidence sentences; this module only names each bottleneck the way
a user thinks of it ("DATA LOADING (CPU)", not ``data_cpu``), picks the theme colour for its
severity and fits the one-line banner into whatever width the terminal has.
"""

from __future__ import annotations

from diagnosis.api import Finding, Verdict
from tui.format import truncate

LABELS: dict[str, str] = {
    "data_cpu": "DATA LOADING (CPU)",
    "data_io": "DATA LOADING (I/O)",
    "data_starved": "INPUT STARVED",
    "compute": "COMPUTE-BOUND",
    "host_overhead": "HOST OVERHEAD",
    "sync_stall": "GPU SYNC STALLS",
    "network": "COMMUNICATION",
    "throttle_thermal": "THERMAL THROTTLING",
    "throttle_power": "POWER THROTTLING",
    "memory": "MEMORY PRESSURE",
    "periodic_stall": "PERIODIC STALLS",
    "oversubscribed": "CPU OVERSUBSCRIBED",
    "idle": "GPU IDLE",
    "unknown": "NO VERDICT YET",
}
# Theme variables only, so every Textual theme and NO_COLOR stay legible.
SEVERITY_STYLES: dict[str, str] = {
    "ok": "$success",
    "info": "$accent",
    "warning": "$warning",
    "error": "$error",
}
MUTED = "$text-muted"


def label(bottleneck: str) -> str:
    """The banner name of a bottleneck id; unknown ids are shown as they are, upper-cased."""
    return LABELS.get(bottleneck, bottleneck.replace("_", " ").upper())


def tone(finding: Finding) -> str:
    """``ok``/``info``/``warning``/``error``, or ``unknown`` (muted) when nothing is known."""
    if finding.bottleneck == "unknown":
        return "unknown"
    return finding.severity if finding.severity in SEVERITY_STYLES else "info"


def tone_style(finding: Finding) -> str:
    return SEVERITY_STYLES.get(tone(finding), MUTED)


def marker(finding: Finding) -> str:
    """A filled diamond for a verdict, a hollow one while there is none."""
    return "◇" if finding.bottleneck == "unknown" else "◆"


def fmt_since(seconds: float | None) -> str:
    """How long a verdict has held, coarser as it ages so the banner repaints less often."""
    if seconds is None:
        return "just now"
    whole = int(max(seconds, 0.0))
    if whole < 60:
        return f"{whole} s"
    if whole < 3600:
        return f"{whole // 60} min"
    return f"{whole // 3600} h {whole % 3600 // 60:02d} min"


def evidence_line(finding: Finding, width: int | None = None) -> str:
    """The evidence sentences joined for one line (the summary when there is none), keeping
    only whole sentences that fit in ``width`` cells; the first is cut if it alone is too long."""
    texts = [item.text for item in finding.evidence] or [finding.summary]
    if width is None:
        return "; ".join(texts)
    line = truncate(texts[0], width)
    for text in texts[1:]:
        if len(line) + 2 + len(text) > width:
            break
        line += "; " + text
    return line


def verdict_facts(verdict: Verdict) -> list[str]:
    """The trailing banner facts, most important first: confidence, then age."""
    primary = verdict.primary
    if primary.bottleneck == "unknown":
        return []
    return [f"conf {primary.confidence * 100:.0f} %", f"for {fmt_since(verdict.since_s)}"]
