"""What each `traintop` subcommand does, once the command line is parsed.

Each handler takes the argparse namespace and returns an exit status.  Heavy imports stay
inside the handlers so that a subcommand only loads what it needs.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys

from traintop.cli.terminal import package_version, require_terminal, sigterm_as_interrupt

EXIT_NO_JOB = 1


def _run_monitor(interval_s: float, focus_job: int | None = None, on_exit=None) -> int:
    require_terminal()
    # No cyclic collection until the first frame is up (the app's _settle_gc turns it back
    # on): the start-up makes only objects that live on, which full passes walked in vain.
    gc.disable()
    from traintop.pipeline.live import live_pipeline
    from traintop.tui.app import build_app

    pipeline = live_pipeline(interval_s, job_pid=focus_job)
    app = build_app(pipeline, focus_job=focus_job)
    try:
        with sigterm_as_interrupt():
            app.run()
    finally:
        pipeline.close()
        if on_exit is not None:
            on_exit()
    return app.return_code or 0


def monitor(args: argparse.Namespace) -> int:
    """`traintop`: the live monitor of the whole machine and every job of this user."""
    return _run_monitor(args.interval)


def snapshot(args: argparse.Namespace) -> int:
    """`traintop snapshot --json`: one sample of everything, no TTY needed."""
    from traintop.collectors.export import snapshot_to_dict
    from traintop.pipeline.live import SETTLE_S, live_pipeline

    with live_pipeline(SETTLE_S) as pipeline:
        snap = pipeline.settled()
    json.dump(snapshot_to_dict(snap), sys.stdout, indent=2)
    sys.stdout.write("\n")
    return 0


def jobs(args: argparse.Namespace) -> int:
    """`traintop jobs [--ranks] [--json]`: the training jobs this user can attach to."""
    from traintop.cli.jobs import print_jobs
    from traintop.pipeline.one_shot import current_jobs

    print_jobs(current_jobs(stacks=True), args.json, args.ranks, sys.stdout)
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
    from traintop.cli.jobs import no_job_message, select_job
    from traintop.pipeline.one_shot import current_jobs

    found = current_jobs()
    focus = select_job(found, args.job, pid)
    if focus is None:
        print(no_job_message(found, args.job), file=sys.stderr)
        return EXIT_NO_JOB
    return _run_monitor(args.interval or 1.0, focus_job=focus)


def demo(args: argparse.Namespace) -> int:
    """`traintop demo`: start a real CPU training job with a built-in bottleneck and watch it."""
    from traintop.cli.demo import start_demo_job

    require_terminal()  # before the job starts, so a refusal leaves nothing running
    job = start_demo_job(args.bottleneck, args.seconds)
    if job is None:
        return 1
    return _run_monitor(args.interval, focus_job=job.pid, on_exit=job.stop)


def diagnose(args: argparse.Namespace) -> int:
    """`traintop diagnose`: observe for a while and print the verdict."""
    from traintop.cli.diagnose import run_diagnose

    return run_diagnose(
        for_s=args.for_s, job_pid=args.job, as_json=args.json, interval_s=min(args.interval, 1.0)
    )


def exporter(args: argparse.Namespace) -> int:
    """`traintop exporter`: headless; serves the latest sample to Prometheus until stopped."""
    from traintop.exporter.run import ExporterConfig, ListenError, serve
    from traintop.pipeline.live import live_pipeline

    if (args.tls_cert_file is None) != (args.tls_key_file is None):
        print("traintop: error: --tls-cert-file and --tls-key-file go together", file=sys.stderr)
        return 2
    tls = (args.tls_cert_file, args.tls_key_file) if args.tls_cert_file else None
    config = ExporterConfig(
        args.listen, args.interval, args.host_metrics, package_version(), tls, args.keep_ended
    )
    # the verdicts' wishes for stack samples are the monitor's: a scrape serves no stacks
    pipeline = live_pipeline(args.interval, ask_stacks=False)
    try:
        with sigterm_as_interrupt():
            serve(config, pipeline)
    except ListenError as exc:
        print(f"traintop: {exc}", file=sys.stderr)
        return EXIT_NO_JOB
    except KeyboardInterrupt:
        return 0
    finally:
        pipeline.close()
    return 0


def fleet(args: argparse.Namespace) -> int:
    """`traintop fleet --prometheus URL`: the fleet view, fed from Prometheus's query API."""
    from traintop.cli.fleet import run_fleet

    return run_fleet(args)


def record(args: argparse.Namespace) -> int:
    """`traintop record -o FILE`: headless recording until --for S, the job's end, or Ctrl+C."""
    from pathlib import Path

    from traintop.cli.record import JobMatch, run_record

    pid = _as_pid(args.job)
    if args.watch_pid is not None:
        match, focus = JobMatch(pid=args.watch_pid), None
    elif pid is not None:
        match, focus = JobMatch(pid=pid), pid
    elif args.job is not None:
        from traintop.cli.jobs import select_job
        from traintop.pipeline.one_shot import current_jobs

        match, focus = JobMatch(name=args.job), select_job(current_jobs(), args.job, None)
    else:
        match, focus = JobMatch(), None
    interval = args.interval if args.interval is not None else 1.0
    return run_record(Path(args.output), interval_s=interval, for_s=args.for_s, match=match,
                      focus_pid=focus, watch_pid=args.watch_pid)  # fmt: skip


def replay(args: argparse.Namespace) -> int:
    """`traintop replay FILE`: the monitor's UI on a recording, with a timeline."""
    from traintop.tui.replay_app import run_replay

    return run_replay(args.file, before_ui=require_terminal)


def compare(args: argparse.Namespace) -> int:
    """`traintop compare A B`: which differences between two runs are beyond noise."""
    from traintop.cli.compare import run_compare

    return run_compare(args.a, args.b, job=args.job, as_json=args.json, for_s=args.for_s)


def export(args: argparse.Namespace) -> int:
    """`traintop export FILE --csv DIR | --trace OUT.json`."""
    from traintop.cli.export import run_export

    return run_export(args.file, csv_dir=args.csv, trace=args.trace)
