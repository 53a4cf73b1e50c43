"""The probe's cost on the card, by the on/off harness (``benchmarks/onoff.py``): a small GPT
under ``traintop run`` whose hooks are switched off and on in A B B A blocks in one warm process.

Whole runs with and without traintop (the check's old ``probe_cost``) differed by more than the
probe costs: +1.1 to +10.5 % on an H100 while two plain runs differed by up to 6 %.  Two shapes,
each its own plan step so that a device's per-command limit can run one at a time
(``gpu_check.py --checks probe_onoff_launch``): the launch-bound GPT (every µs on the launching
thread adds to the step; ≤ 1 %) and a GPU-bound one (≤ 0.5 %).  A shape passes when its A/A
control interval covers 0, at least ``MIN_QUARTETS`` quartets ran, and the upper end of the
cost's 95 % interval is within the target.
"""

from __future__ import annotations

import json
import sys
from typing import Any

from gpucheck.context import HERE, Context
from gpucheck.results import Result, failed, judged

ONOFF_JOB = HERE / "workloads" / "gpt_onoff.py"
TARGETS = {"launch": 0.01, "gpu": 0.005}
MIN_QUARTETS = 12
START_S = 90.0  # CUDA start, the model built, the warm-up steps: before the first block


def probe_onoff(shape: str):
    """The plan step's body for ``shape``."""

    def body(ctx: Context) -> Result:
        budget = max(0.0, ctx.remaining() - START_S)
        out = ctx.work / f"onoff-{shape}.json"
        out.unlink(missing_ok=True)
        argv = ctx.traintop("run", "--name", f"check-onoff-{shape}", "--", sys.executable,
                            str(ONOFF_JOB), "--out", str(out), "--shape", shape,
                            "--device", ctx.device, "--max-s", f"{budget:.0f}")  # fmt: skip
        done = ctx.run(argv, timeout=budget + START_S + 120)
        (ctx.work / f"onoff-{shape}.log").write_text(done.stdout + done.stderr)
        if done.returncode != 0 or not out.exists():
            return failed(f"the job failed (exit {done.returncode}): {done.stderr[-400:]}")
        return judge(shape, json.loads(out.read_text()))

    return body


def judge(shape: str, found: dict[str, Any]) -> Result:
    """Pass or fail one shape's harness output (``onoff.save``)."""
    summary, target = found["summary"], TARGETS[shape]
    cost, control = summary["cost"], summary["control"]
    ran = cost["n"] if cost else 0
    covers = control is not None and control["low"] <= 0 <= control["high"]
    within = cost is not None and cost["high"] <= target
    what = "n/a" if cost is None else (
        f"{cost['mean']:+.2%} [{cost['low']:+.2%}, {cost['high']:+.2%}]")  # fmt: skip
    control_text = "n/a" if control is None else (
        f"{control['mean']:+.2%} [{control['low']:+.2%}, {control['high']:+.2%}]")  # fmt: skip
    reason = (f"{shape}: cost {what} of a {summary['median_step_us'] / 1e3:.1f} ms step, "
              f"{ran} quartets; A/A control {control_text}; "
              f"{summary['throttled_blocks']} throttled blocks")  # fmt: skip
    return judged(covers and within and ran >= MIN_QUARTETS, reason, **found,
                  rule=f"control covers 0, >= {MIN_QUARTETS} quartets, upper end <= "
                  f"{target:.1%}")  # fmt: skip
