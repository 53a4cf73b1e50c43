"""Words and colours for verdicts: what the banner and the details screen print.

The engine writes finished evidence sentences; this module only names each bottleneck the way
a user thinks of it ("DATA LOADING (CPU)", not ``data_cpu``), picks the theme colour for its
severity and fits the one-line banner into whatever width the terminal has.
"""

from __future__ import annotations

from collections import Counter

from traintop.diagnosis.gain_text import has_figure, remedy_line
from traintop.diagnosis.model import Finding, JobVerdict, Verdict
from traintop.views.format import truncate

LABELS: dict[str, str] = {
    "data_cpu": "DATA LOADING (CPU)",
    "data_io": "DATA LOADING (I/O)",
    "data_starved": "INPUT STARVED",
    "data_handoff": "DATA LOADING (HANDOFF)",
    "compute": "COMPUTE-BOUND",
    "host_overhead": "HOST OVERHEAD",
    "gil_contention": "GIL CONTENTION",
    "sync_stall": "GPU SYNC STALLS",
    "network": "COMMUNICATION",
    "throttle_thermal": "THERMAL THROTTLING",
    "throttle_power": "POWER THROTTLING",
    "memory": "GPU MEMORY",
    "host_memory": "HOST MEMORY",
    "periodic_stall": "PERIODIC STALLS",
    "oversubscribed": "CPU OVERSUBSCRIBED",
    "idle": "GPU IDLE",
    "straggler": "STRAGGLER RANK",
    "hang": "HANG",
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


def focus_job(verdict: Verdict) -> JobVerdict | None:
    """The job the verdict is about (None: the machine, or nothing runs)."""
    return next((j for j in verdict.per_job if j.job_id == verdict.job_id), None)


def headline(verdict: Verdict) -> str:
    """The banner's name for the verdict: the bottleneck, or why there is none."""
    primary, job = verdict.primary, focus_job(verdict)
    if job is not None and not job.live:
        return f"{job.state.upper()}: WAS {label(primary.bottleneck)}"
    if primary.bottleneck != "unknown":
        return label(primary.bottleneck)
    if verdict.idle_box and verdict.live_jobs == 0:
        return "NO LIVE JOB"
    if job is None:
        return label("unknown")
    if job.state == "starting":  # before its first step: nothing measured to judge yet
        return "STARTING"
    return "JOB STALLED" if job.state == "stalled" else "NO BOTTLENECK FOUND"


def live_hang(verdict: Verdict) -> bool:
    """The verdict is a running job's hang: its summary is the case's one line."""
    job = focus_job(verdict)
    return verdict.primary.bottleneck == "hang" and (job is None or job.live)


def other_jobs_fact(verdict: Verdict) -> str | None:
    """``+2 other jobs: compute, data_cpu``: the live jobs the banner is not about."""
    others = verdict.other_jobs
    if not others:
        return None
    counts = Counter(j.primary.bottleneck for j in others)  # worst first, as per_job is sorted
    ids = ", ".join(name if n == 1 else f"{name} ×{n}" for name, n in counts.items())
    return f"+{len(others)} other job{'s' if len(others) > 1 else ''}: {ids}"


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


SUMMARY_FIRST = frozenset({"hang"})  # the case itself says more than any one fact of it


CONTEXT_METRICS = frozenset({"job_facts"})  # what the job already does: why a remedy is left out


def lead(finding: Finding) -> list[str]:
    """The sentences a one-line view shows, in order: the evidence (the summary when there is
    none); for a hang its summary first, which names the ranks and where they are.  What the
    job already does explains the remedies, not the cause: the details show it."""
    texts = [item.text for item in finding.evidence if item.metric not in CONTEXT_METRICS]
    if finding.bottleneck in SUMMARY_FIRST or not texts:
        return [finding.summary, *texts]
    return texts


def evidence_line(finding: Finding, width: int | None = None) -> str:
    """The lead sentences joined for one line, keeping only whole sentences that fit in
    ``width`` cells; the first is cut if it alone is too long."""
    texts = lead(finding)
    if width is None:
        return "; ".join(texts)
    line = truncate(texts[0], width)
    for text in texts[1:]:
        if len(line) + 2 + len(text) > width:
            break
        line += "; " + text
    return line


def verdict_facts(verdict: Verdict) -> list[str]:
    """The trailing banner facts: confidence, age (neither for an ended job's final word),
    then the other live jobs."""
    primary, others = verdict.primary, other_jobs_fact(verdict)
    facts = [] if others is None else [others]
    if primary.bottleneck == "unknown" or verdict.since_s is None:
        return facts
    return [f"conf {primary.confidence * 100:.0f} %", f"for {fmt_since(verdict.since_s)}", *facts]


def try_line(finding: Finding) -> str | None:
    """The first remedy as the banner says it: the change and what it is predicted to buy
    (``num_workers 1 → 4: ≈ 2.9× steps/s (31 → 90), then compute bounds it``), its text
    where it has no prediction; None without remedies."""
    if not finding.remedies:
        return None
    first = finding.remedies[0]
    gain = finding.gain_of(first)
    return remedy_line(gain) if gain is not None and has_figure(gain) else first
