"""Who killed a rank that went without a word: the OOM killer, or someone's SIGKILL.

A process the kernel kills with SIGKILL runs no code, so its probe leaves nothing and the rank
reads "gone".  The kernel does leave a word elsewhere, and it is read here on the tick the rank
is found gone (never on a live one):

* the **kernel log** (``/dev/kmsg``, readable by root or where ``kernel.dmesg_restrict`` is 0)
  names the victim: ``oom-kill:constraint=CONSTRAINT_MEMCG,...,task_memcg=/job,task=python,
  pid=4321`` then ``Memory cgroup out of memory: Killed process 4321 (python) ...``
  (``Out of memory:`` and ``CONSTRAINT_NONE`` when the host ran out);
* the **counters**: the rank's memory cgroup counts the OOM kills of its own processes (v1
  ``memory.oom_control``'s ``oom_kill``, v2 ``memory.events``'s ``oom_kill``) and the host
  counts every one (``/proc/vmstat``'s ``oom_kill``).  The monitor keeps their values from the
  last tick the rank was alive; a count that rose by the tick it was found gone says the OOM
  killer struck in between.  Whether the group's limit or the host's RAM ran out: the log's
  constraint, else v2's ``oom`` event or v1's ``failcnt`` risen, or the anonymous memory
  within 10 % of the limit at the last reading.

A rank the monitor watched, whose counters did not move and whose pid the log does not name,
was killed by something else (a person's ``kill -9``, a scheduler's escalation): "killed
(SIGKILL), not by the OOM killer".  A rank the monitor never saw alive, with no log to read,
stays "gone without a word": nothing here can tell.
"""

from __future__ import annotations

import os
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace

from traintop.collectors import procfs
from traintop.collectors.memcg import CgroupMemory, MemcgReader
from traintop.collectors.snapshot import Ending, Kill

KMSG = "/dev/kmsg"
PROC_VMSTAT = "/proc/vmstat"
MAX_RECORDS = 100_000  # the kernel's ring holds a few thousand; never read without end
NEAR_LIMIT = 0.9  # anonymous memory this close to its limit met it when the OOM killer came
_CONSTRAINT = re.compile(rb"oom-kill:constraint=(\w+),.*?task_memcg=([^,]*),.*?pid=(\d+)")
_KILLED = re.compile(rb"(Memory cgroup out of memory|Out of memory[^:]*): Killed process (\d+)")


@dataclass(frozen=True, slots=True)
class _Seen:
    """What the monitor knew of a live rank at its last reading."""

    at: float
    host_kills: int | None
    memory: CgroupMemory | None
    host_used: tuple[int, int] | None  # (used, total) bytes of the host's RAM


def oom_kills(vmstat: bytes) -> int | None:
    """The host's OOM kill count in a ``/proc/vmstat`` text (Linux 4.13); None without it."""
    start = vmstat.find(b"\noom_kill ")
    if start < 0:
        return None
    return int(vmstat[start + 10 : vmstat.find(b"\n", start + 1)].split()[0])


@dataclass(frozen=True, slots=True)
class KernelLog:
    """What the kernel log holds: each pid the OOM killer killed, with its scope ("cgroup",
    "host") and the victim's memory cgroup, and how far back the log reaches (CLOCK_MONOTONIC
    seconds of its oldest record; None: empty)."""

    kills: dict[int, tuple[str, str]]
    oldest_s: float | None

    def covers(self, at_s: float | None) -> bool:
        """Whether an OOM kill at ``at_s`` would still be in the log (its ring has not turned
        over since)."""
        return at_s is not None and self.oldest_s is not None and self.oldest_s <= at_s


def kernel_log_kills(records: Iterable[bytes]) -> KernelLog:
    """The OOM kills a kernel log's records tell (``/dev/kmsg``: ``prio,seq,usec,flags;text``)."""
    kills: dict[int, tuple[str, str]] = {}
    oldest = None
    for record in records:
        head, _, message = record.partition(b";")
        if oldest is None:
            oldest = _usec(head)
        found = _CONSTRAINT.search(message)
        if found is not None:
            memcg = found.group(1) == b"CONSTRAINT_MEMCG"
            kills[int(found.group(3))] = ("cgroup" if memcg else "host", found.group(2).decode())
            continue
        killed = _KILLED.search(message)
        if killed is not None:
            scope = "cgroup" if killed.group(1).startswith(b"Memory") else "host"
            kills.setdefault(int(killed.group(2)), (scope, ""))
    return KernelLog(kills, oldest)


def _usec(head: bytes) -> float | None:
    fields = head.split(b",")
    try:
        return int(fields[2]) / 1e6
    except (IndexError, ValueError):
        return None


def read_kmsg(path: str = KMSG) -> list[bytes] | None:
    """Every record the kernel log still holds; None where it cannot be read (no root, or
    ``dmesg_restrict``)."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    records: list[bytes] = []
    try:
        while len(records) < MAX_RECORDS:
            try:
                records.append(os.read(fd, 8192))
            except BrokenPipeError:  # records overwritten while reading: go on from the next
                continue
            except BlockingIOError:
                break
    except OSError:
        return None
    finally:
        os.close(fd)
    return records


class OomWitness:
    """Keeps each live rank's last counters; asked once when a rank ends without a word."""

    def __init__(self, memcg: MemcgReader, clock: Callable[[], float],
                 vmstat: str = PROC_VMSTAT, kmsg: str = KMSG,
                 meminfo: Callable[[], tuple[int, int] | None] | None = None) -> None:  # fmt: skip
        self._memcg = memcg
        self._clock = clock
        self._vmstat = procfs.KeptFile(vmstat, size=8192)
        self._kmsg = kmsg
        self._meminfo = meminfo
        self._seen: dict[int, _Seen] = {}
        self._host_kills: tuple[float, int | None] | None = None

    def alive(self, pid: int, memory: CgroupMemory | None) -> None:
        """``pid`` is alive at this tick with this cgroup reading (its last one is kept)."""
        now = self._clock()
        used = self._meminfo() if self._meminfo is not None else None
        self._seen[pid] = _Seen(now, self._host_count(now), memory, used)

    def forget(self, alive: set[int]) -> None:
        for pid in [p for p in self._seen if p not in alive]:
            del self._seen[pid]

    def word(self, pid: int, ending: Ending, workers: Iterable[int] = (),
             end_s: float | None = None) -> Ending:  # fmt: skip
        """``ending`` with the kernel's word added where it has one: a rank gone without a
        word, or one that raised after its DataLoader worker was killed (``end_s``: when it
        ended, CLOCK_MONOTONIC seconds, for whether the log still reaches back to then)."""
        if ending.kind not in ("gone", "raised") or (ending.kind == "gone" and ending.detail):
            return ending
        seen = self._seen.pop(pid, None)
        kill = self._judge(pid, tuple(workers), seen, end_s)
        if kill is None or (ending.kind == "raised" and kill.by != "oom"):
            return ending
        code = -9 if ending.kind == "gone" else ending.exit_code
        return replace(ending, kill=kill, exit_code=code)

    def _judge(self, pid: int, workers: tuple[int, ...], seen: _Seen | None,
               end_s: float | None) -> Kill | None:  # fmt: skip
        """The log first: it names every victim, so one that reaches back to the end and does
        not name the rank says a SIGKILL, whatever the counters (the host's counts every OOM kill
        on the box: another process's, meanwhile, is not the rank's); else the counters kept
        since the last tick the rank was seen alive; None where neither can tell."""
        records = read_kmsg(self._kmsg)
        log = kernel_log_kills(records) if records is not None else None
        victim = next((p for p in (pid, *workers) if log and p in log.kills), None)
        if log is not None and victim is not None:
            scope, memcg = log.kills[victim]
            return self._kill(seen, scope, victim, "kernel log", memcg)
        if log is not None and log.covers(end_s if end_s is not None else seen and seen.at):
            return Kill("sigkill", pid=pid, source="kernel log")
        return self._counted(pid, seen) if seen is not None else None

    def _counted(self, pid: int, seen: _Seen) -> Kill | None:
        """The counters' word: an OOM kill counted in the rank's cgroup (or, outside any, on
        the host) since it was last seen alive; none counted: a SIGKILL; None: no counter."""
        memory = seen.memory
        after = self._memcg.again(memory) if memory is not None else None
        if _rose(memory, after, "oom_kills"):
            scope = "cgroup" if _at_limit(memory, after) else "host"
            return self._kill(seen, scope, pid, "cgroup counters")
        host = self._host_count(self._clock(), fresh=True)
        before = seen.host_kills
        if memory is None and host is not None and before is not None and host > before:
            return self._kill(seen, "host", pid, "host counters")
        if (memory is None or after is None) and (before is None or host is None):
            return None  # nothing to compare: it cannot be told
        return Kill("sigkill", pid=pid, source="counters unchanged")

    def _kill(self, seen: _Seen | None, scope: str, victim: int, source: str,
              memcg: str = "") -> Kill:  # fmt: skip
        before = None if seen is None else max(0.0, self._clock() - seen.at)
        memory = seen.memory if seen is not None else None
        if scope == "cgroup" and memory is not None:
            return Kill("oom", scope, victim, memory.limit_bytes, memory.anon_bytes,
                        before, source)  # fmt: skip
        used = seen.host_used if seen is not None else None
        if scope == "host" and used is not None:
            return Kill("oom", scope, victim, used[1], used[0], before, source)
        limit = self._memcg.limit_of(memcg) if scope == "cgroup" and memcg else None
        return Kill("oom", scope, victim, limit, None, None, source)

    def _host_count(self, now: float, fresh: bool = False) -> int | None:
        """The host's OOM kill count, read at most once a second (and afresh when asked)."""
        last = self._host_kills
        if fresh or last is None or now - last[0] >= 1.0:
            try:
                count = oom_kills(b"\n" + self._vmstat.read())
            except (OSError, ValueError):
                count = None
            self._host_kills = last = (now, count)
        return last[1]


def _rose(before: CgroupMemory | None, after: CgroupMemory | None, field: str) -> bool:
    if before is None or after is None:
        return False
    old, new = getattr(before, field), getattr(after, field)
    return old is not None and new is not None and new > old


def _at_limit(before: CgroupMemory | None, after: CgroupMemory | None) -> bool:
    """The group's own limit ran out: v2 counted an OOM of the group, v1 a charge refused at
    the limit, or the anonymous memory was within ``NEAR_LIMIT`` of it at the last reading."""
    if _rose(before, after, "oom_events") or _rose(before, after, "limit_hits"):
        return True
    if before is None or before.limit_bytes is None or before.anon_bytes is None:
        return False
    return before.anon_bytes >= NEAR_LIMIT * before.limit_bytes
