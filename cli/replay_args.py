"""Command-line syntax of the recording commands: `record`, `replay`, `compare`, `export`.

Kept apart from ``cli/main.py`` so the shared parser only gains one call; the handlers live in
``cli/commands.py``.  A time range of a recording is written ``FILE@START..END`` (see
:mod:`traintop.store.ranges`).
"""

from __future__ import annotations

import argparse

from traintop.cli.arg_types import interval, seconds

LIVE_FOR_S = 30.0


def add_store_parsers(sub: argparse._SubParsersAction) -> None:
    """Add the four subcommands to the main parser's subparsers."""
    rec = sub.add_parser("record", help="record samples, verdicts and step records to a file")
    rec.add_argument("-o", "--output", required=True, metavar="FILE", help="new .ttrec file")
    rec.add_argument("--interval", "-i", type=interval, default=None, metavar="S")
    rec.add_argument("--for", dest="for_s", type=seconds, default=None, metavar="S")
    rec.add_argument("--job", default=None, metavar="PID|NAME", help="record only this job")
    rec.add_argument("--watch-pid", type=int, default=None, help=argparse.SUPPRESS)
    rep = sub.add_parser("replay", help="open the monitor on a recording")
    rep.add_argument("file", metavar="FILE")
    cmp_ = sub.add_parser("compare", help="compare two recordings or two time ranges")
    cmp_.add_argument("a", metavar="A", help="FILE or FILE@START..END (e.g. run.ttrec@10m..20m)")
    cmp_.add_argument("b", metavar="B", help="FILE, FILE@START..END, or live: the running job")
    cmp_.add_argument("--job", default=None, metavar="NAME", help="the job to compare")
    cmp_.add_argument("--json", action="store_true", help="JSON output")
    cmp_.add_argument("--for", dest="for_s", type=seconds, default=LIVE_FOR_S, metavar="S",
                      help="with B live: how long to observe the running job (30)")  # fmt: skip
    exp = sub.add_parser("export", help="write a recording as CSV tables or a Perfetto trace")
    exp.add_argument("file", metavar="FILE")
    exp.add_argument("--csv", metavar="DIR", default=None, help="one CSV file per table")
    exp.add_argument("--trace", metavar="OUT.json", default=None, help="Chrome trace-event JSON")
