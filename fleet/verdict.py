"""The job-level verdict of a multi-node job, from every node's GPUs, ranks and verdicts.

In a synchronous job (DDP, FSDP, any all-reduce per step) every rank waits in the collective
for the slowest one, so one slow node sets the pace of all ranks.  Two signals find it: the
straggler rank, whose own work per step (its step minus its wait in collectives) exceeds the
others'; and a node whose busy GPUs are held down by a throttle reason.  The throttle rules use
the same reason bits, busy floor and hot margin as the single-host diagnosis.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from statistics import median

from traintop.diagnosis.reasons import HW_BITS, HW_SLOWDOWN, POWER_BITS, THERMAL_BITS, label
from traintop.diagnosis.rules_gpu import HOT_MARGIN_C, THROTTLE_MIN_UTIL_PCT
from traintop.fleet.model import FleetGpu, FleetNode, FleetRank, FleetVerdict

# The straggler must cost every other rank at least this share of a step in waiting, the same
# floor as the single-host rules' "communication dominates" (traintop.diagnosis.signals.COMM_SHARE /
# 2).
STRAGGLER_SHARE = 0.1
# A throttled node seen only in its GPU reasons, not yet in its own (windowed) verdict.
REASONS_ONLY_CONFIDENCE = 0.6
# A throttled node that also hosts the straggler: two independent signals agree.
CONFIRMED_CONFIDENCE = 0.9


def mark_straggler(ranks: tuple[FleetRank, ...]) -> tuple[FleetRank, ...]:
    """``ranks`` with the straggler flagged, when one holds the others back enough."""
    timed = [r for r in ranks if r.work_s is not None and r.state != "stale"]
    if len(timed) < 2:
        return ranks
    slow = max(timed, key=lambda r: r.work_s or 0.0)
    excess = (slow.work_s or 0.0) - median(r.work_s or 0.0 for r in timed)
    if not slow.step_p50_s or excess / slow.step_p50_s < STRAGGLER_SHARE:
        return ranks
    return tuple(r if r is not slow else _flag(r) for r in ranks)


def _flag(rank: FleetRank) -> FleetRank:
    return replace(rank, straggler=True)


def _hot(gpu: FleetGpu) -> bool:
    temp, slowdown = gpu.temp_c, gpu.slowdown_c
    return temp is not None and slowdown is not None and temp >= slowdown - HOT_MARGIN_C


def gpu_throttle(gpu: FleetGpu) -> str | None:
    """``throttle_thermal`` / ``throttle_power`` for a busy GPU held down, else None."""
    if not gpu.reasons or (gpu.util_pct or 0.0) < THROTTLE_MIN_UTIL_PCT:
        return None
    hw = gpu.reasons & HW_SLOWDOWN
    if any(gpu.reasons & b for b in THERMAL_BITS) or (hw and _hot(gpu)):
        return "throttle_thermal"
    if any(gpu.reasons & b for b in POWER_BITS) or hw:
        return "throttle_power"
    return None


def gpu_fact(gpu: FleetGpu) -> str:
    """``node-b GPU 0: SW Thermal Slowdown + HW Slowdown; 84 °C (slowdown 89 °C); SM 1410 of
    1980 MHz``: the reasons, and the numbers that show what they cost."""
    bits = [b for b in (1 << i for i in range(16)) if (gpu.reasons or 0) & b and b != 1]
    text = f"{gpu.hostname} GPU {gpu.gpu}: {' + '.join(label(b) for b in bits)}"
    if gpu.temp_c is not None:
        limit = f" (slowdown {gpu.slowdown_c:.0f} °C)" if gpu.slowdown_c is not None else ""
        text += f"; {gpu.temp_c:.0f} °C{limit}"
    if gpu.power_w is not None and gpu.power_limit_w:
        text += f"; {gpu.power_w:.0f} of {gpu.power_limit_w:.0f} W"
    if gpu.sm_clock_mhz is not None and gpu.sm_clock_max_mhz:
        text += f"; SM {gpu.sm_clock_mhz:.0f} of {gpu.sm_clock_max_mhz:.0f} MHz"
    return text


def node_throttle(node: FleetNode) -> tuple[str, tuple[FleetGpu, ...]] | None:
    """The node's throttle kind (thermal first) and the GPUs it holds down, or None."""
    kinds = {g: gpu_throttle(g) for g in node.gpus}
    for kind in ("throttle_thermal", "throttle_power"):
        gpus = tuple(g for g, k in kinds.items() if k == kind)
        if gpus:
            return kind, gpus
    return None


def _straggler_fact(rank: FleetRank, ranks: tuple[FleetRank, ...]) -> str:
    others = [r.work_s for r in ranks if r is not rank and r.work_s is not None]
    extra = (rank.work_s or 0.0) - (median(others) if others else 0.0)
    return (
        f"rank {rank.rank} on {rank.hostname} is the straggler: "
        f"{extra * 1e3:.0f} ms more work per step than the median rank"
    )


Throttled = tuple[FleetNode, tuple[str, tuple[FleetGpu, ...]]]


def _culprit(throttled: list[Throttled], straggler: FleetRank | None) -> Throttled:
    """The throttled node that runs the straggler, else the first by name."""

    def rank(item: Throttled) -> tuple[bool, str]:
        host = item[0].hostname
        return (straggler is None or host != straggler.hostname, host)

    return min(throttled, key=rank)


def _throttle_verdict(
    throttled: list[Throttled], ranks: tuple[FleetRank, ...], straggler: FleetRank | None
) -> FleetVerdict:
    """Name the throttled node; two signals agreeing (it runs the straggler) raise confidence."""
    hosts = {r.hostname for r in ranks}
    node, (kind, gpus) = _culprit(throttled, straggler)
    word = "thermally" if kind == "throttle_thermal" else "power"
    summary = f"{node.hostname}: GPU {', '.join(g.gpu for g in gpus)} {word} throttled"
    if len(hosts) > 1 and node.hostname in hosts:
        summary += f", holding back all {len(ranks)} ranks of the job"
    facts = [gpu_fact(g) for g in gpus]
    if straggler is not None:
        facts.append(_straggler_fact(straggler, ranks))
    own = node.verdict.confidence if node.verdict and node.verdict.bottleneck == kind else None
    confidence = own if own is not None else REASONS_ONLY_CONFIDENCE
    if straggler is not None and straggler.hostname == node.hostname:
        confidence = max(confidence, CONFIRMED_CONFIDENCE)
    severity = "error" if any((g.reasons or 0) & b for g in gpus for b in HW_BITS) else "warning"
    return FleetVerdict(kind, severity, confidence, summary, tuple(facts))


def _straggler_verdict(
    straggler: FleetRank, nodes: tuple[FleetNode, ...], ranks: tuple[FleetRank, ...]
) -> FleetVerdict:
    node = next((n for n in nodes if n.hostname == straggler.hostname), None)
    local = node.verdict if node is not None and node.verdict is not None else None
    bottleneck = local.bottleneck if local is not None else "unknown"
    summary = f"rank {straggler.rank} on {straggler.hostname} holds back all {len(ranks)} ranks"
    if local is not None:
        summary += f"; {straggler.hostname} says {bottleneck}"
    return FleetVerdict(
        bottleneck,
        "warning",
        local.confidence if local else 0.0,
        summary,
        (_straggler_fact(straggler, ranks),),
    )


def _consensus(live: list[FleetNode], ranks: tuple[FleetRank, ...]) -> FleetVerdict:
    """No node stands out: the bottleneck most of the job's nodes name."""
    hosts = {r.hostname for r in ranks}
    judged = [n for n in live if n.verdict is not None and (not hosts or n.hostname in hosts)]
    if not judged:
        return FleetVerdict("unknown", "info", 0.0, "no node has a verdict yet")
    votes = Counter(n.verdict.bottleneck for n in judged if n.verdict)
    top, count = max(votes.items(), key=lambda kv: (kv[1], kv[0] != "unknown"))
    picked = [n.verdict for n in judged if n.verdict and n.verdict.bottleneck == top]
    summary = f"{count} of {len(judged)} nodes: {top}"
    return FleetVerdict(top, picked[0].severity, median(v.confidence for v in picked), summary)


def _with_stale(verdict: FleetVerdict, nodes: tuple[FleetNode, ...]) -> FleetVerdict:
    stale = [f"{n.hostname} is stale: no sample for {n.age_s or 0:.0f} s" for n in nodes if n.stale]
    return replace(verdict, evidence=verdict.evidence + tuple(stale))


def job_verdict(nodes: tuple[FleetNode, ...], ranks: tuple[FleetRank, ...]) -> FleetVerdict:
    """The one verdict for the whole job (or, with no job, for the fleet's GPUs)."""
    live = [n for n in nodes if not n.stale]
    if not live:
        return _with_stale(FleetVerdict("unknown", "warning", 0.0, "every node is stale"), nodes)
    hosts = {r.hostname for r in ranks}
    # A throttled node matters to the job only if it runs some of its ranks.
    throttled = [
        (n, t) for n in live if (not hosts or n.hostname in hosts) and (t := node_throttle(n))
    ]
    straggler = next((r for r in ranks if r.straggler), None)
    if throttled:
        verdict = _throttle_verdict(throttled, ranks, straggler)
    elif straggler is not None:
        verdict = _straggler_verdict(straggler, nodes, ranks)
    else:
        verdict = _consensus(live, ranks)
    return _with_stale(verdict, nodes)


def ended_verdict(nodes: tuple[FleetNode, ...], ranks: tuple[FleetRank, ...]) -> FleetVerdict:
    """An ended job's last verdict: the one most of its nodes gave it last (their verdicts are
    its ``traintop_final_bottleneck``); what its nodes' GPUs do now is no longer about it."""
    if not any(n.verdict for n in nodes):
        return FleetVerdict("unknown", "info", 0.0, "no node kept its last verdict")
    return _consensus(list(nodes), ranks)
