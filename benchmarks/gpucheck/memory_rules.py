"""nvidia-smi's MiB rule per memory field, settled from the raw bytes: ``MIB_RULES`` on the card.

nvidia-smi prints NVML's bytes (``nvmlDeviceGetMemoryInfo_v2``) as whole MiB, and not with one
rule: rounding to the nearest, right for the H100's used memory, printed the H200's reserved
memory one MiB high (``collectors/nvsmi_query.py``).  Each reading here records the raw bytes
just before and just after nvidia-smi's figure, and which rules (truncate, nearest, round up)
give that figure from them.  A reading tells two rules apart only where they disagree on it (a
fraction of a MiB under one half parts "up" from "nearest"; one at or over it parts "truncate"
from both), so the report keeps, per field, the rules every reading allowed, and says which
readings decided.  The check passes when traintop's rule gives nvidia-smi's figure at every
reading (from the bytes before or after it, for a field that moved meanwhile).
"""

from __future__ import annotations

import time
from typing import Any

from gpucheck import nvsmi
from gpucheck.context import Context
from gpucheck.results import Result, judged
from traintop.collectors.nvsmi_query import MIB_RULES

MIB = 1 << 20
RULES = {
    "truncate": lambda b: b // MIB,
    "nearest": lambda b: (b + MIB // 2) // MIB,
    "up": lambda b: -(-b // MIB),
}
FIELDS = tuple(MIB_RULES)  # memory.total, .reserved, .used, .free
READINGS = 4
APART_S = 0.25


def traintop_rule(field: str) -> str:
    """The name of the rule ``MIB_RULES`` applies to ``field``, in this module's terms."""
    probe = MIB + MIB // 4, 2 * MIB - MIB // 4  # fractions 1/4 and 3/4 part all three rules
    got = tuple(MIB_RULES[field](b) for b in probe)
    return next(name for name, rule in RULES.items() if tuple(map(rule, probe)) == got)


def _raw(nv: Any, handles: list[Any]) -> list[dict[str, int]]:
    infos = [nv.nvmlDeviceGetMemoryInfo(h, version=nv.nvmlMemory_v2) for h in handles]
    return [{f: getattr(i, f.split(".")[1]) for f in FIELDS} for i in infos]


def readings(ctx: Context) -> list[dict[str, Any]]:
    """``READINGS`` times: the bytes, nvidia-smi, the bytes again; one row per GPU and field."""
    import pynvml as nv

    rows = []
    nv.nvmlInit()
    try:
        handles = [nv.nvmlDeviceGetHandleByIndex(i) for i in range(nv.nvmlDeviceGetCount())]
        for n in range(READINGS):
            before = _raw(nv, handles)
            smi = nvsmi.query(ctx, list(FIELDS))
            after = _raw(nv, handles)
            rows += [_row(n, i, f, before[i][f], after[i][f], smi.values(i)[f])
                     for i in range(len(smi.rows)) for f in FIELDS]  # fmt: skip
            time.sleep(APART_S)
    finally:
        nv.nvmlShutdown()
    return rows


def _row(n: int, gpu: int, field: str, before: int, after: int, smi: Any) -> dict[str, Any]:
    allowed = [name for name, rule in RULES.items() if smi in (rule(before), rule(after))]
    decides = before == after and len({rule(before) for rule in RULES.values()}) > 1
    return {"reading": n, "gpu": gpu, "field": field, "bytes_before": before,
            "bytes_after": after, "mib": round(before / MIB, 3), "nvidia_smi": smi,
            "rules_that_agree": allowed, "decides": decides,
            "ok": traintop_rule(field) in allowed}  # fmt: skip


def settled(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per field: the rules every reading allowed, and how many readings could tell any apart."""
    found = {}
    for field in FIELDS:
        mine = [r for r in rows if r["field"] == field]
        still = [n for n in RULES if all(n in r["rules_that_agree"] for r in mine)]
        found[field] = {"nvidia_smi_rule": still, "traintop_rule": traintop_rule(field),
                        "deciding_readings": sum(r["decides"] for r in mine)}  # fmt: skip
    return found


def memory_rules(ctx: Context) -> Result:
    """Every memory field traintop shows equals nvidia-smi's under ``MIB_RULES``; the raw bytes
    beside it say which rule nvidia-smi follows (see the module)."""
    rows = readings(ctx)
    rules = settled(rows)
    bad = [r for r in rows if not r["ok"]]
    wrong = sorted({f"GPU {r['gpu']} {r['field']}" for r in bad})
    said = ", ".join(
        f"{field.split('.')[1]} {'/'.join(s['nvidia_smi_rule']) or 'none'}"
        + ("" if s["deciding_readings"] else " (undecided)")
        for field, s in rules.items()
    )
    reason = f"{len(rows) - len(bad)} of {len(rows)} readings agree"
    reason += f"; differ: {', '.join(wrong)}" if wrong else ""
    return judged(
        bool(rows) and not wrong, f"{reason}; nvidia-smi's rules by the bytes: {said}",
        rules=rules, readings=rows,
    )  # fmt: skip
