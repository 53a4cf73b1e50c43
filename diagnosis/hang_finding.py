"""The ``hang`` finding: a stopped job's case, as the banner, `d` and `diagnose` show it.

Its summary is the case's one line (``Hang.line``: who, where, for how long), its first
evidence the case's sentence, then the rest of its evidence.  A hang silences its consequences:
the findings the window still holds (the GPU idle, sync stalls, periodic long steps, the data
wait, a straggler...) are that same stop seen from another side, and are dropped; only causes
the hang does not explain (the host swapping, oversubscribed CPUs, a throttled GPU) stay.
"""

from __future__ import annotations

from collections.abc import Sequence

from traintop.diagnosis.model import Evidence, Finding, Hang
from traintop.diagnosis.text import duration

CONFIDENCE = 0.95  # the ledgers say it; the stacks say where
REMEDIES = {
    "not_entered": (
        "look at where the late rank is (its stack): a rank on another code path, or blocked on "
        "I/O, a lock or a subprocess; every rank must call the same collectives in one order",
        "TORCH_DISTRIBUTED_DEBUG=DETAIL makes PyTorch check the collectives across ranks",
        "a shorter timeout fails fast: init_process_group(timeout=timedelta(minutes=5))",
    ),
    "desync": (
        "make every rank call the same collectives, in one order, with the same shapes: look "
        "for a branch on the rank or on the data around the differing calls",
        "TORCH_DISTRIBUTED_DEBUG=DETAIL checks the collectives' order and shapes across ranks",
    ),
    "not_finished": (
        "check the link and the peers' devices: NCCL_DEBUG=INFO, Xid errors in dmesg",
        "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 aborts the job instead of letting it hang",
    ),
    "dead_rank": (
        "find why that rank ended: its log, its exit code, the OOM killer (dmesg)",
        "torchrun --max-restarts N restarts the job when a rank dies",
    ),
    "no_collective": (
        "a DataLoader worker that never returns: DataLoader(timeout=60) raises instead of "
        "hanging; look at what its __getitem__ waits on",
        "a deadlock or a blocking call in the loop: the stack shows where it waits",
    ),
    "stopped": (
        "resume it: `kill -CONT <pid>` (or `fg` in the shell that stopped it with Ctrl+Z); a "
        "debugger holding it: continue or detach",
        "a scheduler that suspends jobs (SLURM's scontrol suspend) resumes them with its own "
        "command (scontrol resume)",
    ),
}
BUSY_REMEDIES = (
    "the rank works (on its CPU): let it finish, or look at its stack for a loop that should "
    "not run this long (an evaluation or a checkpoint on one rank while the others wait)",
)
# Findings that are causes of their own, not the stop seen from another side.
KEPT_BESIDE = frozenset({"memory", "host_memory", "oversubscribed", "throttle_thermal",
                         "throttle_power"})  # fmt: skip
KIND_WORDS = {
    "not_entered": "not entered",
    "desync": "desync",
    "not_finished": "not finished",
    "dead_rank": "dead rank",
    "no_collective": "no collective",
    "stopped": "stopped",
    "unknown": "no ledger",
}


SEVERITIES = {"stalled": "warning", "busy": "info"}  # else (hung, crashed) an error


def finding(hang: Hang) -> Finding:
    """The verdict's finding: an error once hung (or crashed), a warning while stalled, and
    only information while the ranks the others wait for are busy working."""
    if hang.level == "crashed":  # put in the past tense with its end (diagnosis/tense.py)
        summary, lines = hang.summary, hang.evidence
    else:
        summary, lines = hang.line, (f"Job {hang.level} {duration(hang.for_s)}: "
                                     f"{hang.summary}", *hang.evidence)  # fmt: skip
    remedies = BUSY_REMEDIES if hang.level == "busy" else REMEDIES.get(hang.kind, ())
    return Finding(
        bottleneck="hang",
        confidence=CONFIDENCE,
        severity=SEVERITIES.get(hang.level, "error"),
        summary=summary,
        evidence=tuple(Evidence(line, "hang_s", hang.for_s, "training") for line in lines),
        remedies=remedies,
    )


def beside(findings: Sequence[Finding]) -> tuple[Finding, ...]:
    """What a hang leaves of the window's other findings: the causes it does not explain."""
    return tuple(f for f in findings if f.bottleneck in KEPT_BESIDE)
