"""The `traintop` command line: one parser, subcommands dispatched to their layers.

Imports are lazy so that `traintop run`, `query` and `snapshot` start fast and never load
Textual; only the monitor subcommands (`traintop`, `attach`, `demo`) pay for the UI.
Every user error is one line on stderr and a non-zero exit; no traceback reaches the user.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

from traintop.cli.arg_types import interval, seconds
from traintop.cli.fleet_args import add_exporter_parser, add_fleet_parser
from traintop.cli.replay_args import add_store_parsers
from traintop.cli.terminal import NoTerminal, package_version

EXIT_USAGE = 2


class UsageError(Exception):
    """A bad command line: printed as one line, exit 2."""


class OneLineParser(argparse.ArgumentParser):
    """argparse prints usage plus the error on two lines; we promise one line."""

    def error(self, message: str) -> None:  # type: ignore[override]
        raise UsageError(message)


class VersionAction(argparse.Action):
    """``--version``, its number looked up only when asked (``package_version``)."""

    def __call__(self, parser: argparse.ArgumentParser, *_args: object) -> None:
        print(f"traintop {package_version()}")  # stdout, as argparse's own version action
        parser.exit()


def build_parser() -> OneLineParser:
    """The whole CLI contract in one place; `run` and `query` parse their own tails."""
    parser = OneLineParser(
        prog="traintop", description="htop for training: why is my training slow?"
    )
    parser.add_argument("--version", action=VersionAction, nargs=0,
                        help="show program's version number and exit")  # fmt: skip
    parser.add_argument(
        "--interval", "-i", type=interval, default=1.0, help="seconds between samples (1)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    snap = sub.add_parser("snapshot", help="print one sample of everything")
    snap.add_argument("--json", action="store_true", required=True, help="JSON output")
    jobs = sub.add_parser("jobs", help="list attachable training jobs of this user")
    jobs.add_argument("--json", action="store_true", help="JSON output (one object per rank)")
    jobs.add_argument("--ranks", action="store_true", help="a row for every rank of each job")
    attach = sub.add_parser("attach", help="open the monitor focused on one training job")
    attach.add_argument("job", nargs="?", help="PID or name of the job (default: the only one)")
    attach.add_argument("--interval", "-i", type=interval, default=None)
    demo = sub.add_parser("demo", help="run a small CPU training job and monitor it")
    demo.add_argument("--bottleneck", choices=("data", "io", "compute", "none"), default="data")
    demo.add_argument("--seconds", type=seconds, default=None, help="stop the job after N s")
    diag = sub.add_parser(
        "diagnose",
        help="observe for a while and name the bottleneck",
        description="Observe for a while, then name the bottleneck of every training job "
        "(one verdict per job, all its ranks together; ended jobs in the past tense).",
        epilog="exit status: 0 a verdict; 1 no verdict (no rule held: the explanation is "
        "printed) or no such pid; 2 usage error; 3 no live training job (or --job names one "
        "that has ended)",
    )
    diag.add_argument("--for", dest="for_s", type=seconds, default=10.0, metavar="SECONDS")
    diag.add_argument("--job", type=int, default=None, metavar="PID")
    diag.add_argument("--json", action="store_true", help="JSON output")
    sub.add_parser("query", help="nvidia-smi --query-gpu compatible output", add_help=False)
    sub.add_parser("run", help="run a command with zero-code instrumentation", add_help=False)
    add_exporter_parser(sub)
    add_fleet_parser(sub)
    add_store_parsers(sub)
    return parser


def _dispatch_raw(argv: Sequence[str]) -> int | None:
    """`query` and `run` own their argument syntax (nvidia-smi's, and `-- COMMAND...`)."""
    if argv and argv[0] == "query":
        from traintop.collectors.nvsmi_query import main_query

        return main_query(list(argv[1:]))
    if argv and argv[0] == "run":
        from traintop.launcher import main as run_main

        return run_main(list(argv[1:]))
    return None


def _dispatch(args: argparse.Namespace) -> int:
    from traintop.cli import commands
    from traintop.collectors import stall

    try:  # the monitors' stall and hang limits: a bad setting is the user's, said in one line
        stall.from_env()
    except ValueError as exc:
        raise UsageError(str(exc)) from None

    handlers = {
        None: commands.monitor,
        "snapshot": commands.snapshot,
        "jobs": commands.jobs,
        "attach": commands.attach,
        "demo": commands.demo,
        "diagnose": commands.diagnose,
        "exporter": commands.exporter,
        "fleet": commands.fleet,
        "record": commands.record,
        "replay": commands.replay,
        "compare": commands.compare,
        "export": commands.export,
    }
    return handlers[args.command](args)


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the console script; returns the exit status."""
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        raw = _dispatch_raw(argv)
        if raw is not None:
            return raw
        return _dispatch(build_parser().parse_args(argv))
    except UsageError as exc:
        print(f"traintop: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NoTerminal as exc:
        print(f"traintop: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:
        return 0
    except BrokenPipeError:
        return 0
    except Exception as exc:  # the last line of defence: one line, never a traceback
        if os.environ.get("TRAINTOP_DEBUG"):
            raise
        print(f"traintop: error: {type(exc).__name__}: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
