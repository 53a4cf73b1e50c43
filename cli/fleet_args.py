"""Command-line options of ``traintop exporter`` and ``traintop fleet``.

Kept apart from ``cli/main.py`` so two commands with many options do not crowd the rest of the
contract; ``build_parser`` adds them like every other subcommand.  Secrets never have to be on
the command line (where ``ps`` shows them): a token or password comes from a file or the
environment.
"""

from __future__ import annotations

import argparse

from traintop.cli.arg_types import interval, seconds
from traintop.exporter.defaults import DEFAULT_KEEP_ENDED_S
from traintop.exporter.listen import DEFAULT_HOST, DEFAULT_PORT, parse_listen

EXPORTER_INTERVAL_S = 5.0
FLEET_INTERVAL_S = 5.0
STALE_AFTER_S = 60.0


def _listen(text: str):
    try:
        return parse_listen(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _header(text: str) -> tuple[str, str]:
    name, sep, value = text.partition(":")
    if not sep or not name.strip() or any(c.isspace() for c in name.strip()):
        raise argparse.ArgumentTypeError(f"a header is 'NAME: VALUE', got {text!r}")
    return name.strip(), value.strip()


def add_exporter_parser(sub: argparse._SubParsersAction) -> None:
    """``traintop exporter [--listen HOST:PORT] [--interval S] [--host-metrics]
    [--keep-ended S]``."""
    p = sub.add_parser("exporter", help="serve GPU, job and verdict metrics to Prometheus")
    p.add_argument(
        "--listen",
        type=_listen,
        default=parse_listen(f"{DEFAULT_HOST}:{DEFAULT_PORT}"),
        metavar="HOST:PORT",
        help=f"address to serve /metrics on ({DEFAULT_HOST}:{DEFAULT_PORT}; :PORT = all)",
    )
    p.add_argument(
        "--interval",
        "-i",
        type=interval,
        default=EXPORTER_INTERVAL_S,
        help=f"seconds between samples ({EXPORTER_INTERVAL_S:g})",
    )
    p.add_argument("--tls-cert-file", metavar="FILE", help="serve HTTPS with this certificate")
    p.add_argument("--tls-key-file", metavar="FILE", help="the certificate's private key")
    p.add_argument(
        "--host-metrics",
        action="store_true",
        help="also export host CPU, memory, disk and NIC rates (node-exporter covers them)",
    )
    p.add_argument(
        "--keep-ended",
        type=seconds,
        default=DEFAULT_KEEP_ENDED_S,
        metavar="S",
        help="serve an ended run's state, end time and last verdict this long after it ended "
        f"({DEFAULT_KEEP_ENDED_S:g}); its rates go at once",
    )


def add_fleet_parser(sub: argparse._SubParsersAction) -> None:
    """``traintop fleet --prometheus URL [--job NAME]`` plus auth and TLS options."""
    p = sub.add_parser("fleet", help="every node and rank of a job, read from Prometheus")
    p.add_argument(
        "--prometheus",
        metavar="URL",
        default=None,
        help="Prometheus base URL (env TRAINTOP_PROMETHEUS_URL)",
    )
    p.add_argument(
        "--job",
        metavar="NAME",
        default=None,
        help="the training job (name or job id; default: the running one with most ranks)",
    )
    p.add_argument(
        "--interval",
        "-i",
        type=seconds,
        default=FLEET_INTERVAL_S,
        help=f"seconds between queries ({FLEET_INTERVAL_S:g})",
    )
    p.add_argument(
        "--stale-after",
        type=seconds,
        default=STALE_AFTER_S,
        metavar="S",
        help=f"a node whose last sample is older is stale ({STALE_AFTER_S:g})",
    )
    _connection_options(p)


CONNECTION_OPTIONS = (
    ("authentication", (
        ("--bearer-token-file", "FILE", "send the token in FILE (env TRAINTOP_PROMETHEUS_TOKEN)"),
        ("--user", "USER", "HTTP basic auth user"),
        ("--password-file", "FILE", "basic auth password (env TRAINTOP_PROMETHEUS_PASSWORD)"),
    )),
    ("TLS", (
        ("--ca-file", "FILE", "CA bundle to verify the server with"),
        ("--cert-file", "FILE", "client certificate (mutual TLS)"),
        ("--key-file", "FILE", "client certificate's key"),
    )),
)  # fmt: skip


def _connection_options(p: argparse.ArgumentParser) -> None:
    """Timeout, credentials and TLS: what reaching a production Prometheus takes."""
    p.add_argument(
        "--timeout", type=seconds, default=10.0, metavar="S", help="HTTP timeout per query (10)"
    )
    groups = {}
    for title, options in CONNECTION_OPTIONS:
        group = groups[title] = p.add_argument_group(title)
        for flag, metavar, text in options:
            group.add_argument(flag, metavar=metavar, help=text)
    p.add_argument(
        "--header",
        action="append",
        type=_header,
        default=[],
        metavar="'NAME: VALUE'",
        help="send this HTTP header too (repeatable), e.g. 'X-Scope-OrgID: team-a'",
    )
    tls = groups["TLS"]
    tls.add_argument(
        "--insecure", action="store_true", help="do not verify the server's certificate"
    )
