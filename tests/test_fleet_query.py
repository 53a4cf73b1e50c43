"""Talking to Prometheus: auth headers, TLS verification, and one-line errors for each failure,
against a real local HTTP(S) server; and the `traintop fleet` / `exporter` command lines."""

from __future__ import annotations

import json
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from tests.isolation import no_gpu_env
from traintop.fleet.query import PrometheusAuth, PrometheusClient, QueryError

TRAINTOP = str(Path(sys.executable).with_name("traintop"))
REFUSED = "Prometheus refused the credentials (HTTP 401): check --bearer-token-file or --user"
NO_URL = "give the Prometheus URL with --prometheus URL (or $TRAINTOP_PROMETHEUS_URL)"
NOT_JSON = "Prometheus sent something that is not JSON (is the URL right?)"
VECTOR = {
    "status": "success",
    "data": {
        "resultType": "vector",
        "result": [{"metric": {"instance": "a:1"}, "value": [1, "2.5"]}],
    },
}


class Server:
    """A one-route Prometheus stand-in: answers every GET with ``status`` and ``body``."""

    def __init__(self, status: int = 200, body: object = VECTOR) -> None:
        self.status, self.body, self.headers = status, body, []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                outer.headers.append({k.lower(): v for k, v in self.headers.items()})
                data = (
                    json.dumps(outer.body).encode()
                    if not isinstance(outer.body, bytes)
                    else outer.body
                )
                self.send_response(outer.status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                return

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)

    @property
    def url(self) -> str:
        scheme = "https" if isinstance(self.httpd.socket, ssl.SSLSocket) else "http"
        return f"{scheme}://127.0.0.1:{self.httpd.server_address[1]}"


@pytest.fixture
def server() -> Iterator[Server]:
    srv = Server()
    thread = threading.Thread(target=srv.httpd.serve_forever, daemon=True)
    thread.start()
    yield srv
    srv.httpd.shutdown()
    srv.httpd.server_close()


def self_signed(tmp_path: Path) -> tuple[Path, Path]:
    """A certificate for 127.0.0.1 and its key, made by openssl (skip without it)."""
    if shutil.which("openssl") is None:
        pytest.skip("openssl is not installed")
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(
        ["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1",
         "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
         "-keyout", str(key), "-out", str(cert)],
        check=True, capture_output=True, timeout=60,
    )  # fmt: skip
    return cert, key


@pytest.fixture
def tls_server(server: Server, tmp_path: Path) -> tuple[Server, Path]:
    """``server`` behind TLS with a self-signed certificate for 127.0.0.1; returns the CA."""
    cert, key = self_signed(tmp_path)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.httpd.socket = context.wrap_socket(server.httpd.socket, server_side=True)
    return server, cert


def test_query_returns_the_vector_and_sends_the_token(server: Server):
    client = PrometheusClient(server.url, PrometheusAuth(bearer_token="s3cret"))
    assert client.query("up", at=100.0) == [({"instance": "a:1"}, 2.5)]
    assert server.headers[0]["authorization"] == "Bearer s3cret"


def test_basic_auth_and_extra_headers(server: Server):
    auth = PrometheusAuth(user="ann", password="pw", extra_headers=(("X-Scope-OrgID", "team-a"),))
    PrometheusClient(server.url, auth).query("up")
    assert server.headers[0]["authorization"] == "Basic YW5uOnB3"
    assert server.headers[0]["x-scope-orgid"] == "team-a"


@pytest.mark.parametrize(
    ("status", "body", "message"),
    [
        (401, b"Unauthorized", REFUSED),
        (403, b"", "Prometheus denied access (HTTP 403): these credentials may not query"),
        (400, {"status": "error", "error": "parse error at char 3:\n bad"},
         "Prometheus answered HTTP 400: parse error at char 3: bad"),
        (200, b"<html>grafana</html>", NOT_JSON),
    ],
)  # fmt: skip
def test_http_failures_are_one_line(server: Server, status, body, message):
    server.status, server.body = status, body
    with pytest.raises(QueryError) as caught:
        PrometheusClient(server.url).query("up")
    assert str(caught.value) == message


def test_refused_connection_is_one_line():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # bound, never listening: connections are refused
        with pytest.raises(
            QueryError,
            match=r"^cannot reach Prometheus at http://127.0.0.1:\d+: Connection refused$",
        ):
            PrometheusClient(f"http://127.0.0.1:{port}").query("up")


def test_tls_unverified_certificate_then_ca_file_then_insecure(tls_server):
    server, ca = tls_server
    with pytest.raises(
        QueryError,
        match=r"^TLS: cannot verify https://127.0.0.1:\d+: .*\(use --ca-file, or --insecure\)$",
    ):
        PrometheusClient(server.url).query("up")
    assert PrometheusClient(server.url, PrometheusAuth(ca_file=str(ca))).query("up")
    assert PrometheusClient(server.url, PrometheusAuth(insecure=True)).query("up")


def _traintop(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [TRAINTOP, *args],
        capture_output=True,
        text=True,
        timeout=60,
        env=env,
        stdin=subprocess.DEVNULL,
    )


def test_fleet_command_line_errors_are_one_line(server: Server, tmp_path: Path):
    env = {"PATH": "/usr/bin:/bin"}
    done = _traintop("fleet", env=env)
    assert done.returncode == 2
    assert done.stderr == f"traintop: error: {NO_URL}\n"
    done = _traintop("fleet", "--prometheus", "prom:9090", env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "http:// or https://" in done.stderr
    done = _traintop("fleet", "--prometheus", server.url, "--header", "no colon")
    assert done.returncode == 2 and "a header is 'NAME: VALUE'" in done.stderr
    done = _traintop(
        "fleet", "--prometheus", server.url, "--bearer-token-file", str(tmp_path / "nope")
    )
    assert done.returncode == 2 and "cannot read the token file" in done.stderr
    server.status, server.body = 401, b""
    done = _traintop("fleet", "--prometheus", server.url)
    assert done.returncode == 1
    assert done.stderr == f"traintop: {REFUSED}\n"


def test_token_from_the_environment(server: Server):
    server.body = {"status": "success", "data": {"resultType": "vector", "result": []}}
    env = {"TRAINTOP_PROMETHEUS_TOKEN": "envtok", "PATH": "/usr/bin:/bin"}
    done = _traintop("fleet", "--prometheus", server.url, "--job", "x", env=env)
    assert done.returncode == 1 and "no training job 'x'" in done.stderr
    assert server.headers[0]["authorization"] == "Bearer envtok"


def test_exporter_command_line_errors_are_one_line(tmp_path: Path):
    env = {**no_gpu_env(tmp_path), "PATH": "/usr/bin:/bin"}
    done = _traintop("exporter", "--listen", "127.0.0.1:http", env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "port must be" in done.stderr
    done = _traintop("exporter", "--keep-ended", "-5", env=env)
    assert done.returncode == 2 and done.stderr.count("\n") == 1
    assert "--keep-ended: seconds must be a positive number, got -5" in done.stderr
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        done = _traintop("exporter", "--listen", f"127.0.0.1:{port}", env=env)
    assert done.returncode == 1
    assert (
        done.stderr == f"traintop: cannot serve http://127.0.0.1:{port}: Address already in use\n"
    )


def test_exporter_serves_https(tmp_path: Path):
    cert, key = self_signed(tmp_path)
    env = {**no_gpu_env(tmp_path), "PATH": "/usr/bin:/bin"}
    done = _traintop("exporter", "--tls-cert-file", str(cert), env=env)
    assert (done.returncode, done.stderr) == (
        2, "traintop: error: --tls-cert-file and --tls-key-file go together\n"
    )  # fmt: skip
    done = _traintop("exporter", "--tls-cert-file", str(key), "--tls-key-file", str(key), env=env)
    assert done.returncode == 1 and done.stderr.startswith("traintop: cannot serve https://")
    argv = [TRAINTOP, "exporter", "--listen", "127.0.0.1:0", "--tls-cert-file", str(cert),
            "--tls-key-file", str(key)]  # fmt: skip
    proc = subprocess.Popen(argv, env=env, stderr=subprocess.PIPE, text=True)
    try:
        url = proc.stderr.readline().split()[3].rstrip(",")
        assert url.startswith("https://127.0.0.1:")
        context = ssl.create_default_context(cafile=str(cert))
        with urllib.request.urlopen(url, context=context, timeout=10) as answer:
            assert b"traintop_exporter_info" in answer.read()
        with pytest.raises(OSError):  # plain HTTP to the TLS port: refused, and the server goes on
            urllib.request.urlopen(url.replace("https", "http"), timeout=10)
        with urllib.request.urlopen(url, context=context, timeout=10) as answer:
            assert answer.status == 200
    finally:
        proc.terminate()
        proc.wait(10)
