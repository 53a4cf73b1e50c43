"""`traintop diagnose`: sample for a while, then print the stabilised verdict."""

from __future__ import annotations

import json
import sys
import threading

EXIT_NO_VERDICT = 1


def _observe(for_s: float, interval_s: float) -> list:
    """Run the real sampler for `for_s` seconds and return every snapshot it produced."""
    from collectors.sampler import Sampler
    from tui.commands import monitor_collectors

    window: list = []
    lock = threading.Lock()

    def keep(snap) -> None:
        with lock:
            window.append(snap)

    sampler = Sampler(monitor_collectors(), interval_s=interval_s)
    sampler.start(keep)
    try:
        threading.Event().wait(for_s)
    finally:
        sampler.stop()
    with lock:
        return list(window)


def _stabilised(window: list, job_pid: int | None):
    from diagnosis import VerdictStabilizer

    stabilizer = VerdictStabilizer()
    verdict = None
    for end in range(1, len(window) + 1):
        verdict = stabilizer.update(window[:end], job_pid=job_pid)
    return verdict


def _print_text(verdict) -> None:
    p = verdict.primary
    print(f"{p.bottleneck}: {p.summary} (confidence {p.confidence:.0%}, {verdict.mode} mode)")
    for ev in p.evidence:
        print(f"  evidence: {ev.text}")
    for i, remedy in enumerate(p.remedies, 1):
        print(f"  fix {i}: {remedy}")
    for other in verdict.also:
        print(f"  also: {other.bottleneck}: {other.summary}")


def run_diagnose(*, for_s: float, job_pid: int | None, as_json: bool, interval_s: float) -> int:
    """Observe, diagnose, print; exit 0 when a verdict other than `unknown` was reached."""
    from diagnosis import verdict_to_dict

    window = _observe(for_s, interval_s)
    if job_pid is not None and not any(j.pid == job_pid for s in window for j in s.jobs):
        print(
            f"traintop: no training job with pid {job_pid} (see `traintop jobs`)", file=sys.stderr
        )
        return EXIT_NO_VERDICT
    verdict = _stabilised(window, job_pid)
    if verdict is None:
        print("traintop: no sample was taken", file=sys.stderr)
        return EXIT_NO_VERDICT
    if as_json:
        json.dump(verdict_to_dict(verdict), sys.stdout, indent=2)
        sys.stdout.write("\n")
    else:
        _print_text(verdict)
    return 0 if verdict.primary.bottleneck != "unknown" else EXIT_NO_VERDICT
