"""How many bytes a rank's TCP connections hold unsent: the witness that the link is the limit.

A rank that waits in a collective waits for its peers' data.  When the link is what is slow,
the data is there and cannot get out: it sits in the senders' socket buffers (``tx_queue`` in
``/proc/PID/net/tcp``: written, not yet acknowledged by the peer), and stays there for as long
as the collective runs.  When a peer is late instead (busy with a checkpoint, throttled by its
quota), nothing is queued: the waiting rank has sent its share and the late one has not
written yet.  So the rank's queued bytes, read once a tick, say which: a wait with its queues
full is the link's; one with them empty is a peer's.

The kernel lists every socket of the rank's network namespace (its own, where it runs in a
container or ``ip netns``, read through the rank's ``/proc/PID/net``); the rank's own are those
its file descriptors name (``socket:[inode]``), found again every ``FDS_EVERY_S`` (a process
group's connections are made at its start and kept).  Read only for ranks that wait on their
peers (``wanted``): a job that does not communicate costs nothing.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable

FDS_EVERY_S = 10.0
ESTABLISHED = "01"
TABLES = ("tcp", "tcp6")


def socket_inodes(pid: int, proc: str = "/proc") -> set[int]:
    """The inodes of the sockets ``pid`` holds open (``/proc/PID/fd`` links)."""
    found: set[int] = set()
    folder = f"{proc}/{pid}/fd"
    try:
        names = os.listdir(folder)
    except OSError:
        return found
    for name in names:
        try:
            target = os.readlink(f"{folder}/{name}")
        except OSError:
            continue
        if target.startswith("socket:["):
            found.add(int(target[8:-1]))
    return found


def queued(table: str, inodes: set[int]) -> int:
    """Bytes the established connections among ``inodes`` hold unsent or unacknowledged, in
    one ``/proc/net/tcp`` text."""
    total = 0
    for line in table.splitlines()[1:]:
        fields = line.split()
        if len(fields) < 10 or fields[3] != ESTABLISHED or int(fields[9]) not in inodes:
            continue
        total += int(fields[4].split(":")[0], 16)
    return total


class SocketQueues:
    """Each asked rank's queued bytes, one reading of its namespace's tables a tick."""

    def __init__(self, proc: str = "/proc", clock: Callable[[], float] = time.monotonic) -> None:
        self._proc = proc
        self._clock = clock
        self._inodes: dict[int, tuple[float, set[int]]] = {}  # pid: when found, its sockets
        self._tables: dict[int, tuple[float, str]] = {}  # netns inode: when read, the text

    def read(self, pid: int) -> int | None:
        """The bytes ``pid``'s TCP connections hold unsent (None: it has none, or is gone)."""
        now = self._clock()
        inodes = self._sockets(pid, now)
        if not inodes:
            return None
        text = self._table(pid, now)
        return queued(text, inodes) if text is not None else None

    def forget(self, alive: set[int]) -> None:
        self._inodes = {p: v for p, v in self._inodes.items() if p in alive}
        now = self._clock()
        self._tables = {k: v for k, v in self._tables.items() if now - v[0] < 1.0}

    def _sockets(self, pid: int, now: float) -> set[int]:
        known = self._inodes.get(pid)
        if known is None or now - known[0] >= FDS_EVERY_S:
            known = (now, socket_inodes(pid, self._proc))
            self._inodes[pid] = known
        return known[1]

    def _table(self, pid: int, now: float) -> str | None:
        """The rank's namespace's TCP tables, read once a tick for all its ranks."""
        try:
            netns = os.stat(f"{self._proc}/{pid}/ns/net").st_ino
        except OSError:
            netns = -pid  # no namespace to share: read for this rank alone
        kept = self._tables.get(netns)
        if kept is not None and now - kept[0] < 0.5:
            return kept[1]
        parts = []
        for name in TABLES:
            try:
                with open(f"{self._proc}/{pid}/net/{name}", encoding="ascii") as f:
                    parts.append(f.read())
            except OSError:
                continue
        if not parts:
            return None
        text = "\n".join(parts)
        self._tables[netns] = (now, text)
        return text
