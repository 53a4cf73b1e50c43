"""One reading of every job, for `traintop jobs` and for `attach` choosing its job.

No sampler and no verdict: the job collector once, and again while what was asked of a rank
that stopped stepping is still coming.
"""

from __future__ import annotations

import time

from traintop.collectors.snapshot import JobSnapshot

STACK_WAIT_S = 2.0


def current_jobs(stacks: bool = False) -> tuple[JobSnapshot, ...]:
    """One reading of every job; with ``stacks``, what a rank that stopped stepping is doing is
    waited for, ``STACK_WAIT_S`` at most: its stack (its helper answers at once, else its
    faulthandler dump follows ``ONE_SHOT_REPLY_WAIT_S`` later), its worker's, and a second
    reading of its CPU time (working or stuck)."""
    from traintop.collectors.jobs import JobCollector
    from traintop.collectors.stacks import ONE_SHOT_REPLY_WAIT_S

    collector = JobCollector(reply_wait_s=ONE_SHOT_REPLY_WAIT_S)
    try:
        jobs = collector.collect()
        deadline = time.monotonic() + STACK_WAIT_S
        while stacks and collector.stacks_pending() and time.monotonic() < deadline:
            time.sleep(0.2)
            jobs = collector.collect()
        return jobs
    finally:
        collector.close()
