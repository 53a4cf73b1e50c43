"""The ``hang`` finding: a stopped job's case, as the banner, `d` and `diagnose` show it."""

from __future__ import annotations

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
}
KIND_WORDS = {
    "not_entered": "not entered",
    "desync": "desync",
    "not_finished": "not finished",
    "dead_rank": "dead rank",
    "no_collective": "no collective",
    "unknown": "no ledger",
}


def finding(hang: Hang) -> Finding:
    """The verdict's finding: an error once hung (or crashed), a warning while stalled."""
    severity = "warning" if hang.level == "stalled" else "error"
    # An ended job's post-mortem is put in the past tense with its end (diagnosis/tense.py).
    head = "" if hang.level == "crashed" else f"Job {hang.level} {duration(hang.for_s)}: "
    return Finding(
        bottleneck="hang",
        confidence=CONFIDENCE,
        severity=severity,
        summary=f"{head}{hang.summary}",
        evidence=tuple(Evidence(line, "hang_s", hang.for_s, "training") for line in hang.evidence),
        remedies=REMEDIES.get(hang.kind, ()),
    )
