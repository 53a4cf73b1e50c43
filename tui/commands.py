"""What each `traintop` subcommand does, once the command line is parsed.

Each handler takes the argparse namespace and returns an exit status.  Heavy imports stay
inside the handlers so that a subcommand only loads what it needs.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import sys
from collections.abc import Iterator

EXIT_NO_JOB = 1


def monitor_collectors():
    """Every collector the monitor, `snapshot` and `diagnose` sample, jobs included."""
    from collectors.factory import build_collectors
    from collectors.jobs import JobCollector

    return build_collectors(jobs=JobCollector())


@contextlib.contextmanager
def _sigterm_as_interrupt() -> Iterator[None]:
    """Let SIGTERM (`kill`, systemd, a job scheduler) take the Ctrl+C path.

    Its default action kills Python mid-frame: the terminal stays in the alternate screen and
    raw mode, and a demo job outlives the monitor.  As a KeyboardInterrupt, Textual restores
    the terminal, our `finally` stops the sampler and the job, and `main` exits 0.
    """
    previous = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)


def _require_terminal() -> None:
    """The live monitor draws full-screen and reads keys: without a terminal it cannot."""
    if not (sys.stdin.isatty() and sys.stdout.isatty()):
        raise NoTerminal(
            "the live monitor needs a terminal; for one sample use `traintop snapshot --json`"
        )


class NoTerminal(Exception):
    """Standard input or output is not a terminal (a pipe, a file, cron, `ssh -T`)."""


def _run_monitor(interval_s: float, focus_job: int | None = None, on_exit=None) -> int:
    from collectors.sampler import Sampler
    from tui.app import build_app

    _require_terminal()

    collectors = monitor_collectors()
    sampler = Sampler(collectors, interval_s=interval_s)
    app = build_app(sampler, focus_job=focus_job, first=sampler.sample_once())
    try:
        with _sigterm_as_interrupt():
            app.run()
    finally:
        sampler.stop()
        collectors.close()
        if on_exit is not None:
            on_exit()
    return app.return_code or 0


def monitor(args: argparse.Namespace) -> int:
    """`traintop`: the live monitor of the whole machine and every job of this user."""
    return _run_monitor(args.interval)


def snapshot(args: argparse.Namespace) -> int:
    """`traintop snapshot --json`: one sample of everything, no TTY needed."""
    from collectors.export import snapshot_to_dict, take_snapshot

    snap = take_snapshot(monitor_collectors())
    json.dump(snapshot_to_dict(snap), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def _job_row(job) -> dict:
    return {
        "pid": job.pid,
        "name": job.name,
        "rank": job.rank,
        "world_size": job.world_size,
        "state": job.state,
        "steps_total": job.steps_total,
        "steps_per_s": job.steps_per_s,
        "samples_per_s": job.samples_per_s,
        "data_wait_share": job.data_wait_share,
    }


def _current_jobs():
    from collectors.jobs import JobCollector

    collector = JobCollector()
    try:
        return collector.collect()
    finally:
        collector.close()


def _fmt(value, pattern: str) -> str:
    return "-" if value is None else pattern.format(value)


def jobs(args: argparse.Namespace) -> int:
    """`traintop jobs [--json]`: the training jobs this user can attach to."""
    found = _current_jobs()
    if args.json:
        json.dump([_job_row(j) for j in found], sys.stdout, indent=2)
        sys.stdout.write("\n")
        return 0
    if not found:
        print("no training jobs found (start one with `traintop run -- python train.py`)")
        return 0
    print(
        f"{'PID':>8}  {'NAME':<24} {'RANK':>5}  {'STATE':<9} {'STEPS/S':>8} "
        f"{'SAMPLES/S':>10} {'DATA WAIT':>9}"
    )
    for j in found:
        print(
            f"{j.pid:>8}  {j.name[:24]:<24} {j.rank:>5}  {j.state:<9} "
            f"{_fmt(j.steps_per_s, '{:.2f}'):>8} {_fmt(j.samples_per_s, '{:.1f}'):>10} "
            f"{_fmt(j.data_wait_share, '{:.0%}'):>9}"
        )
    return 0


def _other_users_process(pid: int) -> str | None:
    """The owner's name when `pid` is a live process of another user, else None."""
    try:
        uid = os.stat(f"/proc/{pid}").st_uid
    except OSError:
        return None
    if uid == os.getuid():
        return None
    import pwd

    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _as_pid(text: str | None) -> int | None:
    """`text` as a PID when it is plain ASCII digits: "²".isdigit() holds but int() refuses it."""
    if text and text.isascii() and text.isdigit():
        return int(text)
    return None


def _select_job(found, wanted: str | None):
    """The job `wanted` names (PID or name), or None; several ranks pick rank 0."""
    candidates = [j for j in found if j.state in ("live", "stalled")] or list(found)
    if wanted is None:
        names = {j.name for j in candidates}
        return min(candidates, key=lambda j: j.rank) if len(names) == 1 else None
    pid = _as_pid(wanted)
    if pid is not None:
        return next((j for j in found if j.pid == pid), None)
    named = [j for j in candidates if j.name == wanted]
    return min(named, key=lambda j: j.rank) if named else None


def _no_job_message(found, wanted: str | None) -> str:
    listing = ", ".join(f"{j.pid} ({j.name}, {j.state})" for j in found) or "none"
    what = f"no training job {wanted!r}" if wanted is not None else "several jobs, name one"
    if not found:
        what = "no training job found" if wanted is None else what
    return f"traintop: {what}; attachable jobs: {listing}"


def attach(args: argparse.Namespace) -> int:
    """`traintop attach [PID|NAME]`: the monitor focused on one training job."""
    pid = _as_pid(args.job)
    if pid is not None:
        owner = _other_users_process(pid)
        if owner is not None:
            print(
                f"traintop: process {args.job} belongs to user {owner}; "
                "traintop attaches only to your own jobs",
                file=sys.stderr,
            )
            return EXIT_NO_JOB
    found = _current_jobs()
    job = _select_job(found, args.job)
    if job is None:
        print(_no_job_message(found, args.job), file=sys.stderr)
        return EXIT_NO_JOB
    return _run_monitor(args.interval or 1.0, focus_job=job.pid)


def demo(args: argparse.Namespace) -> int:
    """`traintop demo`: start a real CPU training job with a built-in bottleneck and watch it."""
    from tui.demo import start_demo_job

    _require_terminal()  # before the job starts, so a refusal leaves nothing running
    job = start_demo_job(args.bottleneck, args.seconds)
    if job is None:
        return 1
    return _run_monitor(args.interval, focus_job=job.pid, on_exit=job.stop)


def diagnose(args: argparse.Namespace) -> int:
    """`traintop diagnose`: observe for a while and print the verdict."""
    from tui.diagnose_cmd import run_diagnose

    return run_diagnose(
        for_s=args.for_s, job_pid=args.job, as_json=args.json, interval_s=min(args.interval, 1.0)
    )
