"""``--listen HOST:PORT``: where the exporter serves, loopback unless told otherwise.

The default port, 19400, sits outside 9100-9999 (the Prometheus wiki's exporter range, fully
allocated: 9100 is node-exporter, 9400 dcgm-exporter), below Linux's ephemeral range
(32768-60999) so an outgoing connection cannot hold it, is not in /etc/services, and stays clear
of torch's rendezvous ports (29400, 29500).  ``:PORT`` means every interface, as in the Go
exporters' ``--web.listen-address``.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 19400


@dataclass(frozen=True, slots=True)
class ListenAddress:
    """A host (name, IPv4 or bare IPv6 address; "" = all interfaces) and a TCP port."""

    host: str
    port: int

    @property
    def is_ipv6(self) -> bool:
        try:
            return ipaddress.ip_address(self.host).version == 6
        except ValueError:
            return False

    def url(self, port: int | None = None, *, tls: bool = False) -> str:
        """The address a person can paste into a browser or a scrape config."""
        host = self.host or "0.0.0.0"
        shown = f"[{host}]" if self.is_ipv6 else host
        scheme = "https" if tls else "http"
        return f"{scheme}://{shown}:{self.port if port is None else port}"


def parse_listen(text: str) -> ListenAddress:
    """``HOST:PORT``, ``[V6]:PORT``, ``:PORT`` or ``HOST``; ValueError with a one-line reason."""
    host, sep, port_text = text.rpartition(":")
    if not sep or (host.count(":") and not host.startswith("[")):
        host, port_text = text, str(DEFAULT_PORT)
    host = host.removeprefix("[").removesuffix("]")
    if not port_text.isascii() or not port_text.isdigit() or not 0 <= int(port_text) <= 65535:
        raise ValueError(f"port must be a number from 0 to 65535, got {port_text!r} in {text!r}")
    return ListenAddress(host, int(port_text))
