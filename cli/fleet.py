"""`traintop fleet`: check the arguments and Prometheus once, then open the fleet view.

The first refresh runs before the screen opens, so a wrong URL, a refused token or an
unverifiable certificate is one line on stderr and exit 1, not a full screen with an error.
"""

from __future__ import annotations

import argparse
import os
import ssl
import sys
import urllib.parse

from traintop.fleet.query import PrometheusAuth, PrometheusClient
from traintop.fleet.source import FleetSource

EXIT_FAILED = 1
EXIT_USAGE = 2
URL_ENV = "TRAINTOP_PROMETHEUS_URL"
TOKEN_ENV = "TRAINTOP_PROMETHEUS_TOKEN"
PASSWORD_ENV = "TRAINTOP_PROMETHEUS_PASSWORD"


class FleetUsageError(Exception):
    """A bad option value: one line, exit 2."""


def _secret(path: str | None, env: str, what: str) -> str | None:
    """The secret in ``path`` (first line, stripped), else in ``$env``, else None."""
    if path is None:
        return os.environ.get(env) or None
    try:
        with open(path, encoding="utf-8") as f:
            return f.readline().strip()
    except OSError as exc:
        raise FleetUsageError(f"cannot read the {what} file {path}: {exc.strerror}") from None


def _url(args: argparse.Namespace) -> str:
    url = args.prometheus or os.environ.get(URL_ENV)
    if not url:
        raise FleetUsageError(f"give the Prometheus URL with --prometheus URL (or ${URL_ENV})")
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise FleetUsageError(f"--prometheus needs an http:// or https:// URL, got {url!r}")
    return url


def build_client(args: argparse.Namespace) -> PrometheusClient:
    """The client the options describe; unreadable files and bad TLS material fail here."""
    auth = PrometheusAuth(
        bearer_token=_secret(args.bearer_token_file, TOKEN_ENV, "token"),
        user=args.user,
        password=_secret(args.password_file, PASSWORD_ENV, "password") if args.user else None,
        ca_file=args.ca_file,
        cert_file=args.cert_file,
        key_file=args.key_file,
        insecure=args.insecure,
        extra_headers=tuple(args.header),
    )
    try:
        auth.ssl_context()
    except (OSError, ssl.SSLError) as exc:
        raise FleetUsageError(f"TLS settings: {getattr(exc, 'strerror', None) or exc}") from None
    return PrometheusClient(_url(args), auth, args.timeout)


def run_fleet(args: argparse.Namespace) -> int:
    """Probe Prometheus once, then run the fleet app until `q`."""
    from traintop.cli.terminal import require_terminal, sigterm_as_interrupt

    try:
        client = build_client(args)
    except FleetUsageError as exc:
        print(f"traintop: error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    source = FleetSource(
        client, wanted=args.job, stale_after_s=args.stale_after, interval_s=args.interval
    )
    first = source.fetch()
    if first.error is not None and (first.job is None or not first.nodes):
        print(f"traintop: {first.error}", file=sys.stderr)
        return EXIT_FAILED
    require_terminal()
    from traintop.tui.fleet_app import FleetApp

    app = FleetApp(source, first=first)
    with sigterm_as_interrupt():
        app.run()
    return app.return_code or 0
