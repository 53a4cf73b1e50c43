"""Where a stalled rank is, for the fleet: ``traintop_job_stuck_info``, one series per rank that
stopped stepping (past its stall limit), none for a rank that steps.

The ledger series (``traintop_job_collective_*``) say which rank the others wait for; this one
says where that rank is, as the monitor on its node sees it (``diagnosis/stuck_place.py``:
what the kernel says of it, the collective it is in, its innermost frames, the DataLoader worker
it waits on), so that `traintop fleet` names "rank 3 on node-b in log_metrics (train.py:88)",
not just "rank 3 on node-b".  Bounded: only stalled ranks have it, one series each, every
value cut short; its labels change only when the rank moves.
"""

from __future__ import annotations

from collections.abc import Sequence

from prometheus_client.core import InfoMetricFamily
from prometheus_client.metrics_core import Metric

from traintop.collectors.snapshot import JobSnapshot
from traintop.diagnosis.stuck_place import place, stalled

NAME = "traintop_job_stuck"
HELP = "Where a rank that stopped stepping is (stalled ranks only)."


def stuck_family(rows: Sequence[tuple[JobSnapshot, list[str]]], labels: Sequence[str]) -> Metric:
    family = InfoMetricFamily(NAME, HELP, labels=labels)
    for job, values in rows:
        if stalled(job):
            family.add_metric(values, place(job))
    return family
