"""The HTTP side: ``/metrics`` in the format the scraper asks for, formatted once per sample.

Requests are served by a small fixed pool of threads, not a thread per connection: a hundred
parallel scrapers would otherwise be a hundred runnable Python threads taking turns on the GIL
with the sampler thread (measured: sampler ticks 3 s apart at a 1 s interval).  Connections
beyond the pool wait in the kernel's accept queue, which costs no CPU.  The formatted body is
cached per sample and format, so those scrapes cost one formatting; the lock they share is never
taken by the sampler thread, which only swaps the published reference.
"""

from __future__ import annotations

import gzip
import socket
import ssl
import threading
from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client.exposition import choose_encoder, gzip_accepted
from prometheus_client.registry import CollectorRegistry

from traintop.exporter.listen import ListenAddress
from traintop.exporter.published import Latest

LANDING = b"""<html><head><title>traintop exporter</title></head><body>
<h1>traintop exporter</h1><p><a href="/metrics">Metrics</a></p></body></html>
"""
CLIENT_TIMEOUT_S = 10.0  # Prometheus' default scrape timeout: a client slower than that gave up
SCRAPE_WORKERS = 4
ACCEPT_QUEUE = 128  # socketserver's default of 5 drops SYNs of parallel scrapers (1 s retries)

Headers = list[tuple[str, str]]


class QuietHandler(WSGIRequestHandler):
    """No access log on stderr (one line per scrape would fill the journal); idle clients
    are dropped after ``CLIENT_TIMEOUT_S``."""

    timeout = CLIENT_TIMEOUT_S

    def log_message(self, format: str, *args: object) -> None:
        return


class MetricsApp:
    """WSGI application: ``/metrics``, a landing page at ``/``, 404 elsewhere."""

    def __init__(self, registry: CollectorRegistry, latest: Latest) -> None:
        self._registry = registry
        self._latest = latest
        self._lock = threading.Lock()
        self._cache: dict[tuple[str, bool], tuple[int, bytes]] = {}
        self.formatted = 0  # bodies actually formatted, for tests and the benchmark

    def __call__(self, environ: dict, start_response: Callable) -> Iterable[bytes]:
        path = environ.get("PATH_INFO") or "/"
        if path == "/metrics":
            status, headers, body = self.metrics(
                environ.get("HTTP_ACCEPT", ""), environ.get("HTTP_ACCEPT_ENCODING", "")
            )
        elif path == "/":
            status, headers, body = "200 OK", [("Content-Type", "text/html")], LANDING
        else:
            status, headers, body = (
                "404 Not Found",
                [("Content-Type", "text/plain")],
                b"not found\n",
            )
        start_response(status, [*headers, ("Content-Length", str(len(body)))])
        return [body]

    def metrics(self, accept: str, accept_encoding: str) -> tuple[str, Headers, bytes]:
        """The body for this format, from the cache when the sample has not changed."""
        encoder, content_type = choose_encoder(accept)
        zipped = gzip_accepted(accept_encoding)
        headers = [("Content-Type", content_type)]
        if zipped:
            headers.append(("Content-Encoding", "gzip"))
        return "200 OK", headers, self._body(encoder, content_type, zipped)

    def _body(self, encoder: Callable, content_type: str, zipped: bool) -> bytes:
        published = self._latest.get()
        version = -1 if published is None else published.version
        key = (content_type, zipped)
        with self._lock:
            hit = self._cache.get(key)
            if hit is not None and hit[0] == version:
                return hit[1]
            body = encoder(self._registry)
            body = gzip.compress(body) if zipped else body
            self._cache[key] = (version, body)
            self.formatted += 1
            return body


class PooledWSGIServer(WSGIServer):
    """A WSGI server whose requests run on ``SCRAPE_WORKERS`` pooled threads."""

    request_queue_size = ACCEPT_QUEUE
    allow_reuse_address = True

    def __init__(self, *args, **kwargs) -> None:
        # Before the bind: a failed bind calls server_close(), which shuts the pool down.
        self._pool = ThreadPoolExecutor(SCRAPE_WORKERS, thread_name_prefix="traintop-scrape")
        super().__init__(*args, **kwargs)

    def process_request(self, request, client_address) -> None:
        self._pool.submit(self._serve, request, client_address)

    def _serve(self, request, client_address) -> None:
        try:
            self.finish_request(request, client_address)
        except OSError:
            pass  # the scraper hung up or timed out: nothing to answer
        finally:
            self.shutdown_request(request)

    def server_close(self) -> None:
        super().server_close()
        self._pool.shutdown(wait=False, cancel_futures=True)


def bind(
    address: ListenAddress, app: MetricsApp, tls: tuple[str, str] | None = None
) -> PooledWSGIServer:
    """A bound, not yet serving, server, over TLS with ``tls`` = (certificate, key) files;
    OSError (port in use, bad host, unreadable certificate) propagates."""

    class Server(PooledWSGIServer):
        address_family = socket.AF_INET6 if address.is_ipv6 else socket.AF_INET

    server = make_server(address.host, address.port, app, Server, handler_class=QuietHandler)
    if tls is not None:
        try:
            context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            context.load_cert_chain(*tls)
        except (OSError, ssl.SSLError):
            server.server_close()
            raise
        # The handshake runs on first read, in a pool thread: a client that never completes
        # it cannot stall accept().
        server.socket = context.wrap_socket(
            server.socket, server_side=True, do_handshake_on_connect=False
        )
    return server
