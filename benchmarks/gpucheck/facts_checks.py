"""What the probe learns of a job without a code change, read back; and what learning it costs.

``facts_match``: traintop's ``JobFacts`` of the launch-bound GPT (what its remedies are gated by:
autocast, the optimizer's fused flag, compiled or not, the DataLoader's settings, the attention
kernel) against what the job itself says it does (``train_job.py``'s ``knobs``) and, for the
attention kernel, against the names in the job's own profile (kernels on a card, operators on
the CPU), read by a different route than the probe's (``traintop.hta_split.attention_backend``
on names alone).

``facts_cost``: ``benchmarks/bench_facts.py`` run on this machine (``--device cuda`` on a card):
the sync hook per sync and per step without one, the sampled profile per cycle and over the
first hour of training, the facts file and the helper's wake.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from gpucheck.context import HERE, Context
from gpucheck.observed import Observed
from gpucheck.results import Result, failed, judged
from traintop.collectors.snapshot import JobFacts
from traintop.hta_split import TraceEvent, attention_backend

BENCH_FACTS = HERE.parent / "bench_facts.py"
SYNC_HOOK_MAX_US = 20.0  # ≤ the cheapest sync's own round trip; 4 a 70 ms step: 0.1 %
STEP_MAX_NS = 100.0  # a step with no sync: one comparison
PROFILE_SHARE_MAX = 0.001  # TRAINTOP_PROFILE_SHARE: the first hour, start-up cycle included
LOADER_KEYS = ("num_workers", "pin_memory", "persistent_workers", "prefetch_factor", "batch_size")


def _attention_truth(obs: Observed, cuda: bool) -> str | None:
    names = (obs.result.get("profile") or {}).get("attention_names") or []
    kind = "kernel" if cuda else "op"
    return attention_backend([TraceEvent(kind, name, 0, 0) for name in names])


def _loaders(facts: JobFacts) -> list[dict[str, Any]]:
    return [{k: getattr(lo, k) for k in LOADER_KEYS} for lo in facts.loaders]


def fact_rows(facts: JobFacts, knobs: dict[str, Any], attention: str | None) -> list[dict]:
    """Each knob: traintop's reading and the job's own word."""
    pairs = {
        "device": (facts.device, knobs["device"]),
        "autocast": (facts.autocast, knobs["autocast"]),
        "compiled": (facts.compiled, knobs["compiled"]),
        "optimizers": ([{"name": o.name, "fused": o.fused} for o in facts.optimizers],
                       knobs["optimizers"]),
        "loaders": (_loaders(facts), knobs["loaders"]),
        "attention": (facts.attention, attention),
    }  # fmt: skip
    return [{"knob": k, "traintop": a, "job": b, "ok": a == b and b is not None}
            for k, (a, b) in pairs.items()]  # fmt: skip


def facts_match(obs: Observed, cuda: bool) -> Result:
    """traintop's facts of the job against the job's own word (see the module)."""
    job = obs.job
    if job is None or job.facts is None:
        return failed("no facts of the job reached the monitor", facts_file=obs.facts)
    rows = fact_rows(job.facts, obs.result["knobs"], _attention_truth(obs, cuda))
    off = [r["knob"] for r in rows if not r["ok"]]
    seen = ", ".join(f"{r['knob']} {r['traintop']}" for r in rows if r["knob"] in
                     ("autocast", "compiled", "attention"))  # fmt: skip
    reason = f"{len(rows) - len(off)} of {len(rows)} facts as the job says ({seen})"
    return judged(not off, reason + (f"; differ: {', '.join(off)}" if off else ""), facts=rows,
                  syncs_watched=job.facts.syncs_watched)  # fmt: skip


def _cost_problems(figures: dict[str, Any]) -> list[str]:
    sync, profile = figures["sync_hook"], figures["profile"]
    problems = []
    if sync["per_sync_us"] > SYNC_HOOK_MAX_US:
        problems.append(f"the sync hook {sync['per_sync_us']:.1f} µs a sync")
    if sync["step_without_sync_ns"] > STEP_MAX_NS:
        problems.append(f"a step without a sync {sync['step_without_sync_ns']:.0f} ns")
    if profile["first_hour_share"] > PROFILE_SHARE_MAX:
        problems.append(f"profiling {profile['first_hour_share']:.3%} of the first hour")
    return problems


def facts_cost(ctx: Context) -> Result:
    """``bench_facts.py`` here, its figures into the report, judged on the issue's bounds."""
    out = ctx.work / "bench-facts.json"
    out.unlink(missing_ok=True)
    small = ["--steps", "20", "--profiles", "3"] if ctx.no_cuda else []
    argv = [sys.executable, str(BENCH_FACTS), "--device", ctx.device, "--json", str(out), *small]
    done = ctx.run(argv, timeout=240)
    (ctx.work / "bench-facts.log").write_text(done.stdout + done.stderr)
    if done.returncode != 0 or not out.exists():
        return failed(f"bench_facts.py exited {done.returncode}: {done.stderr[-400:]}")
    figures = json.loads(out.read_text())
    sync, profile = figures["sync_hook"], figures["profile"]
    problems = _cost_problems(figures)
    reason = (f"sync hook {sync['per_sync_us']:.1f} µs a sync, {sync['step_without_sync_ns']:.0f}"
              f" ns a step without one; a profile cycle {profile['cycle_ms']:.1f} ms (first "
              f"{profile['first_cycle_ms']:.0f} ms), {profile['first_hour_share']:.4%} of the "
              f"first hour; on {figures['device']}")  # fmt: skip
    return judged(not problems, reason + (f"; {'; '.join(problems)}" if problems else ""),
                  **figures, rule=f"sync <= {SYNC_HOOK_MAX_US:g} µs, step <= {STEP_MAX_NS:g} ns, "
                  f"profiling <= {PROFILE_SHARE_MAX:.1%} of the first hour")  # fmt: skip
