"""Table rows and banner text of the fleet view: formatting only, from a FleetSnapshot."""

from __future__ import annotations

from rich.text import Text

from traintop.collectors.gpu_reasons import throttling_reasons
from traintop.collectors.processes import printable
from traintop.diagnosis.rules_gpu import HOT_MARGIN_C, THROTTLE_MIN_UTIL_PCT
from traintop.diagnosis.tense import clock
from traintop.fleet.hang import place_text
from traintop.fleet.model import FleetGpu, FleetNode, FleetRank, FleetSnapshot, FleetVerdict
from traintop.fleet.verdict import gpu_throttle
from traintop.views.format import fmt_age, fmt_number, fmt_seconds, fmt_share
from traintop.views.verdict_text import label

NODE_COLUMNS = (
    "NODE",
    "STATE",
    "GPUS",
    "BUSY",
    "HOT",
    "THROTTLED",
    "MAX °C",
    "RANKS",
    "STEPS/S",
    "VERDICT",
)
RANK_COLUMNS = (
    "RANK",
    "NODE",
    "LOCAL",
    "STATE",
    "STEPS/S",
    "STEP P50",
    "STEP P95",
    "DATA WAIT",
    "COMM",
    "WORK/STEP",
    "",
)
GPU_COLUMNS = ("GPU", "UTIL", "TEMP", "SLOWDOWN", "POWER", "LIMIT", "SM MHz", "MAX MHz",
               "CLOCKS HELD DOWN BY")  # fmt: skip
SEVERITY_STYLES = {"error": "bold red", "warning": "yellow", "info": "cyan", "ok": "green"}
STATE_STYLES = {"stale": "bold red", "crashed": "bold red", "gone": "bold red", "finished": "dim",
                "stopped": "dim", "restarted": "dim"}  # fmt: skip
ENDED_FIGURE = "—"


def plain(text: str, style: str = "") -> Text:
    """Text from Prometheus labels, never markup, with control characters shown as "?": any
    user names their own job and host, and an escape sequence must reach the terminal as text."""
    return Text(printable(text), style=style)


def _busy(gpu: FleetGpu) -> bool:
    return (gpu.util_pct or 0.0) >= THROTTLE_MIN_UTIL_PCT


def _hot(gpu: FleetGpu) -> bool:
    if gpu.temp_c is None or gpu.slowdown_c is None:
        return False
    return gpu.temp_c >= gpu.slowdown_c - HOT_MARGIN_C


def _gpus(n: int, style: str) -> Text:
    return Text(str(n), style=style if n else "dim")


def _verdict_cell(verdict: FleetVerdict | None) -> Text:
    if verdict is None:
        return Text("-", style="dim")
    text = f"{label(verdict.bottleneck).lower()} {verdict.confidence * 100:.0f}%"
    return plain(text, SEVERITY_STYLES.get(verdict.severity, ""))


def node_state(node: FleetNode) -> Text:
    age = fmt_age(node.age_s)
    if node.stale:
        return Text(f"STALE {age}" if age else "STALE", style="bold red")
    return Text("ok", style="green")


def node_row(node: FleetNode) -> tuple[Text | str, ...]:
    """NODE STATE GPUS BUSY HOT THROTTLED MAX°C RANKS STEPS/S VERDICT."""
    temps = [g.temp_c for g in node.gpus if g.temp_c is not None]
    throttled = sum(1 for g in node.gpus if gpu_throttle(g))
    return (
        plain(node.hostname, "dim" if node.stale else "bold"),
        node_state(node),
        str(len(node.gpus)),
        _gpus(sum(1 for g in node.gpus if _busy(g)), "green"),
        _gpus(sum(1 for g in node.gpus if _hot(g)), "yellow"),
        _gpus(throttled, "bold red"),
        f"{max(temps):.0f}" if temps else "-",
        ",".join(str(r) for r in node.ranks) or "-",
        fmt_number(node.steps_per_s) if node.steps_per_s is not None else "-",
        _verdict_cell(node.verdict),
    )


def _figures(rank: FleetRank) -> tuple[str, ...]:
    """STEPS/S P50 P95 DATA COMM WORK; an ended rank's all read "—": none of them is now."""
    if rank.ended:
        return (ENDED_FIGURE,) * 6
    return (
        fmt_number(rank.steps_per_s),
        fmt_seconds(rank.step_p50_s),
        fmt_seconds(rank.step_p95_s),
        fmt_share(rank.data_wait_share),
        fmt_share(rank.comm_share),
        fmt_seconds(rank.work_s),
    )


def rank_row(rank: FleetRank) -> tuple[Text | str, ...]:
    """RANK NODE LOCAL STATE STEPS/S P50 P95 DATA COMM WORK, and the straggler's or the stuck
    rank's mark (the rank a stopped job waits for)."""
    mark = "◀ stuck" if rank.stuck else "◀ straggler" if rank.straggler else ""
    return (
        # The mark again by the number: at 80 columns the last column is scrolled off.
        Text(f"{rank.rank} ◀", "bold red") if mark else Text(str(rank.rank)),
        plain(rank.hostname),
        "-" if rank.local_rank is None else str(rank.local_rank),
        plain(rank.state or "?", STATE_STYLES.get(rank.state or "", "")),
        *_figures(rank),
        Text(mark, style="bold red") if mark else "",
    )


def rank_rows(ranks: tuple[FleetRank, ...]) -> list[tuple[Text | str, ...]]:
    """Every rank's row; under a stuck rank (the one a stopped job waits for), where it is, as
    its node's monitor saw it: the collective, what the kernel says, its frame, its worker."""
    rows: list[tuple[Text | str, ...]] = []
    for rank in ranks:
        rows.append(rank_row(rank))
        where = place_text(rank) if rank.stuck else ""
        if where:
            rows.append(("", *([""] * (len(RANK_COLUMNS) - 2)), plain(f"↳ {where}", "red")))
    return rows


def _count(n: int, noun: str) -> str:
    return f"{n} {noun}{'' if n == 1 else 's'}"


def _num(value: float | None, unit: str = "") -> str:
    return "-" if value is None else f"{value:.0f}{unit}"


def gpu_row(gpu: FleetGpu) -> tuple[Text | str, ...]:
    """GPU UTIL TEMP SLOWDOWN POWER LIMIT SM MAX REASONS, as dcgm-exporter reported them."""
    reasons = " + ".join(r.name for r in throttling_reasons(gpu.reasons))
    return (
        plain(gpu.gpu),
        _num(gpu.util_pct, "%"),
        plain(_num(gpu.temp_c, " °C"), "yellow" if _hot(gpu) else ""),
        _num(gpu.slowdown_c, " °C"),
        _num(gpu.power_w, " W"),
        _num(gpu.power_limit_w, " W"),
        _num(gpu.sm_clock_mhz),
        _num(gpu.sm_clock_max_mhz),
        plain(reasons or "-", "bold red" if gpu_throttle(gpu) else "dim"),
    )


def header_text(snap: FleetSnapshot | None, interval_s: float, paused: bool) -> str:
    """``traintop fleet · job NAME (id) · 2 nodes · 4 ranks · every 5 s · URL``: the source
    last, as it is the part a narrow terminal can best lose."""
    if snap is None:
        return "traintop fleet · waiting for Prometheus"
    parts = ["traintop fleet"]
    if snap.job is not None:
        parts.append(f"job {snap.job.name} ({snap.job.job_id})")
        if snap.job.ended:  # the banner says how and how long ago
            parts.append(f"ENDED {clock(snap.job.ended_at, snap.timestamp)}")
        if len(snap.jobs) > 1:
            ended = sum(1 for job in snap.jobs if job.ended)
            parts.append(f"{_count(len(snap.jobs) - ended, 'live job')}, {ended} ended (j: next)")
    parts += [_count(len(snap.nodes), "node"), _count(len(snap.ranks), "rank")]
    parts += [f"every {interval_s:g} s", *(["PAUSED"] if paused else []), snap.source]
    return " · ".join(parts)


def ended_when(ended_at: float | None, state: str | None, now: float) -> str:
    """``14:02 (crashed, 3 min ago)``: when an ended job ended and how."""
    if ended_at is None:
        return f"({state})"
    return f"{clock(ended_at, now)} ({state}, {fmt_age(max(0.0, now - ended_at))} ago)"


def _ended_lines(snap: FleetSnapshot, v: FleetVerdict) -> tuple[str, str, tuple[str, ...]]:
    """An ended job's banner: its end, then its last verdict; red only for a crash (or a rank
    gone without a word)."""
    state, ended_at = (snap.job.state, snap.job.ended_at) if snap.job else (None, None)
    head = f"◇ ENDED {ended_when(ended_at, state, snap.timestamp)}"
    tone = "error" if state in ("crashed", "gone") else "unknown"
    if v.bottleneck == "unknown":
        return tone, f"{head} — {v.summary}", v.evidence
    last = f"last verdict {label(v.bottleneck)}: {v.summary} · conf {v.confidence * 100:.0f}%"
    return tone, f"{head} — {last}", v.evidence


def verdict_lines(snap: FleetSnapshot | None) -> tuple[str, str, tuple[str, ...]]:
    """(tone, headline, evidence lines) for the job verdict banner."""
    if snap is None or snap.verdict is None:
        return "unknown", "◇ NO VERDICT YET · waiting for data", ()
    v = snap.verdict
    if snap.job is not None and snap.job.ended:
        return _ended_lines(snap, v)
    tone = "unknown" if v.bottleneck == "unknown" else v.severity
    mark = "◇" if v.bottleneck == "unknown" else "◆"
    if v.bottleneck == "hang":  # its summary is the one line: who, where, how long
        return tone, f"{mark} {v.summary}", v.evidence
    head = f"{mark} {label(v.bottleneck)} — {v.summary} · conf {v.confidence * 100:.0f}%"
    return tone, head, v.evidence
