"""Prometheus's HTTP query API over stdlib urllib: instant queries, auth, TLS, one-line errors.

The fleet view needs a handful of instant queries per refresh, nothing a client library would
add to.  Every failure becomes a :class:`QueryError` whose message is one line a person can act
on (which flag to use for a 401, a CA error, a refused connection), never a traceback.
"""

from __future__ import annotations

import base64
import json
import socket
import ssl
import urllib.error
import urllib.parse
import urllib.request
from dataclasses import dataclass, field

Sample = tuple[dict[str, str], float]


class QueryError(Exception):
    """A query that gave no data; ``str()`` is one line."""


@dataclass(frozen=True, slots=True)
class PrometheusAuth:
    """How to reach Prometheus: credentials and TLS settings (all optional)."""

    bearer_token: str | None = None
    user: str | None = None
    password: str | None = None
    ca_file: str | None = None
    cert_file: str | None = None
    key_file: str | None = None
    insecure: bool = False
    extra_headers: tuple[tuple[str, str], ...] = ()  # e.g. X-Scope-OrgID for Mimir/Cortex

    def headers(self) -> dict[str, str]:
        """Extra headers, then Authorization: bearer token first (as Prometheus' clients do)."""
        headers = dict(self.extra_headers)
        if self.bearer_token:
            headers["Authorization"] = f"Bearer {self.bearer_token}"
        elif self.user is not None:
            pair = f"{self.user}:{self.password or ''}".encode()
            headers["Authorization"] = "Basic " + base64.b64encode(pair).decode()
        return headers

    def ssl_context(self) -> ssl.SSLContext:
        """Default verification, a private CA, a client certificate, or none (--insecure)."""
        context = ssl.create_default_context(cafile=self.ca_file)
        if self.cert_file:
            context.load_cert_chain(self.cert_file, self.key_file)
        if self.insecure:
            context.check_hostname = False
            context.verify_mode = ssl.CERT_NONE
        return context


@dataclass(frozen=True, slots=True)
class PrometheusClient:
    """Instant queries against ``base_url`` (``http(s)://host:port[/prefix]``)."""

    base_url: str
    auth: PrometheusAuth = field(default_factory=PrometheusAuth)
    timeout_s: float = 10.0

    def query(self, promql: str, at: float | None = None) -> list[Sample]:
        """``/api/v1/query``: the instant vector as (labels, value) pairs."""
        params = {"query": promql, **({"time": f"{at:.3f}"} if at is not None else {})}
        body = self._get("/api/v1/query?" + urllib.parse.urlencode(params))
        return parse_vector(body)

    def _get(self, path: str) -> bytes:
        request = urllib.request.Request(self.base_url.rstrip("/") + path, headers=self._headers())
        context = self.auth.ssl_context() if self.base_url.startswith("https:") else None
        try:
            with urllib.request.urlopen(request, timeout=self.timeout_s, context=context) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            raise QueryError(http_error_text(exc.code, exc.read())) from None
        except (urllib.error.URLError, OSError) as exc:
            raise QueryError(connection_error_text(self.base_url, exc)) from None

    def _headers(self) -> dict[str, str]:
        return {"Accept": "application/json", **self.auth.headers()}


def _api_error(body: bytes) -> str | None:
    """Prometheus's own error text from an error response, when it sent one."""
    try:
        return " ".join(str(json.loads(body).get("error", "")).split()) or None
    except (ValueError, AttributeError):
        return None


def http_error_text(status: int, body: bytes) -> str:
    """One line for an HTTP error status, saying which option fixes it."""
    if status == 401:
        return "Prometheus refused the credentials (HTTP 401): check --bearer-token-file or --user"
    if status == 403:
        return "Prometheus denied access (HTTP 403): these credentials may not query"
    detail = _api_error(body) or body[:120].decode("utf-8", "replace").strip()
    return f"Prometheus answered HTTP {status}: {' '.join(detail.split())}"


def connection_error_text(url: str, exc: BaseException) -> str:
    """One line for a failure before any HTTP answer: TLS, DNS, refused, timeout."""
    reason = getattr(exc, "reason", exc)
    if isinstance(reason, ssl.SSLCertVerificationError):
        why = reason.verify_message or "certificate verify failed"
        return f"TLS: cannot verify {url}: {why} (use --ca-file, or --insecure)"
    if isinstance(reason, ssl.SSLError):
        return f"TLS error talking to {url}: {reason.reason or reason}"
    if isinstance(reason, (TimeoutError, socket.timeout)):
        return f"no answer from {url} within the timeout (--timeout)"
    text = getattr(reason, "strerror", None) or str(reason)
    return f"cannot reach Prometheus at {url}: {' '.join(text.split())}"


def parse_vector(body: bytes) -> list[Sample]:
    """The samples of a ``resultType: vector`` answer; anything else is a QueryError."""
    try:
        answer = json.loads(body)
    except ValueError:
        raise QueryError("Prometheus sent something that is not JSON (is the URL right?)") from None
    if not isinstance(answer, dict) or answer.get("status") != "success":
        raise QueryError(f"Prometheus query failed: {_api_error(body) or 'no error text'}")
    data = answer.get("data") or {}
    if data.get("resultType") != "vector":
        raise QueryError(f"expected an instant vector, got {data.get('resultType')!r}")
    return [(item["metric"], float(item["value"][1])) for item in data.get("result", [])]
