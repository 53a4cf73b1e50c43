"""Two "nodes" for the fleet tests: network namespaces joined by a veth, each with its own
hostname (a UTS namespace per process), fake NVML GPUs and ring directory.

Nothing leaves the machine: the namespaces only see each other.  The test process itself stays
in the root namespace; :func:`in_netns` gives it threads that live in a node's namespace (a
network namespace is per thread on Linux), so it can query Prometheus or hammer an exporter
there without a route from the root namespace.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.isolation import private_dir

CLONE_NEWNET = 0x40000000
TRAINTOP = str(Path(sys.executable).with_name("traintop"))


@dataclass(frozen=True)
class Node:
    """One namespace standing for one machine: its name, address, hostname and ring dir."""

    netns: str
    address: str
    hostname: str
    ring_dir: Path

    def argv(self, *command: str, hostname: bool = False) -> list[str]:
        """``command`` inside this node; with ``hostname``, also under the node's hostname."""
        prefix = ["ip", "netns", "exec", self.netns]
        if not hostname:
            return [*prefix, *command]
        shell = f'hostname {self.hostname} && exec "$@"'
        return [*prefix, "unshare", "--uts", "sh", "-c", shell, "sh", *command]

    def start(self, *command: str, env: Mapping[str, str], log: Path, hostname: bool = False):
        """A process on this node, output to ``log``; ``TRAINTOP_RING_DIR`` is the node's."""
        full_env = {**os.environ, **env, "TRAINTOP_RING_DIR": str(self.ring_dir)}
        out = log.open("wb")
        return subprocess.Popen(
            self.argv(*command, hostname=hostname), env=full_env, stdout=out, stderr=out
        )


def _ip(*args: str) -> None:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30)
    if done.returncode != 0:
        pytest.skip(f"ip {' '.join(args)} failed: {done.stderr.strip()}")


def _wire(netns: str, veth: str, address: str) -> None:
    _ip("link", "set", veth, "netns", netns)
    for args in (
        ("link", "set", veth, "name", "eth0"),
        ("addr", "add", f"{address}/24", "dev", "eth0"),
        ("link", "set", "eth0", "up"),
        ("link", "set", "lo", "up"),
    ):
        _ip("netns", "exec", netns, "ip", *args)


@contextmanager
def two_nodes(tmp: Path) -> Iterator[tuple[Node, Node]]:
    """Namespaces ``ttf<pid>a``/``b`` joined by a veth; deleted again whatever happens."""
    if os.geteuid() != 0 or not all(shutil.which(t) for t in ("ip", "unshare")):
        pytest.skip("network namespaces need root, iproute2 and unshare")
    tag, net = f"ttf{os.getpid() % 100000}", f"10.233.{os.getpid() % 250}"
    nodes = tuple(
        Node(f"{tag}{s}", f"{net}.{i + 1}", f"node-{s}", private_dir(tmp / f"ring-{s}"))
        for i, s in enumerate("ab")
    )
    created: list[str] = []
    try:
        for node in nodes:
            _ip("netns", "add", node.netns)
            created.append(node.netns)
        _ip("link", "add", f"{tag}a", "type", "veth", "peer", "name", f"{tag}b")
        for node, side in zip(nodes, "ab", strict=True):
            _wire(node.netns, f"{tag}{side}", node.address)
        yield nodes
    finally:
        for netns in created:
            subprocess.run(["ip", "netns", "del", netns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", f"{tag}a"], capture_output=True, timeout=30)


def _enter(netns: str) -> None:
    """Move the calling thread into ``netns`` (thread initializer)."""
    fd = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        if ctypes.CDLL(None, use_errno=True).setns(fd, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {netns} failed")
    finally:
        os.close(fd)


@contextmanager
def in_netns(node: Node, workers: int = 1) -> Iterator[ThreadPoolExecutor]:
    """A thread pool whose threads all live in ``node``'s network namespace."""
    pool = ThreadPoolExecutor(workers, initializer=_enter, initargs=(node.netns,))
    try:
        yield pool
    finally:
        pool.shutdown(wait=True, cancel_futures=True)


def stop(processes: Sequence[subprocess.Popen]) -> None:
    """SIGTERM, then SIGKILL what is left: no test leaves a process behind."""
    for proc in processes:
        if proc.poll() is None:
            proc.terminate()
    for proc in processes:
        try:
            proc.wait(5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)
