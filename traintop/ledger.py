"""The collective ledger: every collective the probe times, in the segment, as it happens.

When a job hangs, the question is which rank holds the others and where: the ranks that wait
are inside collective #S of a group, the one that holds them never reached it.  So each rank
writes, for every collective it enters (blocking ``torch.distributed`` calls, the wait at the end
of backward for DDP's and FSDP's reductions), one entry into a small ring in its segment's
header page (format 1.2, docs/ring-format.md): group, the group's sequence number (every rank
of a group calls its collectives in one order, so the numbers agree across ranks), op, dtype
and the first dims, the call site (file and function that called it, and the line), enter time,
and the exit time when it returns.  The call site says where a rank waits even when no stack
can be had (a rank that crashed, an older monitor).  A monitor reads the ledgers
of every rank it sees; nothing is asked of the training process.

Cost, on the training thread: one ``pack_into`` at entry, one 8-byte store at exit
(``benchmarks/bench_ledger.py``).  Before the segment exists (collectives before the first step)
the entries go to a scratch page that is copied into the segment when it is made, so the
sequence numbers stay whole.  Nothing here raises: a write that fails (a segment released at
exit or in a forked child) sends the ledger back to its scratch page.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from traintop.ring_format import (
    HEADER_SIZE,
    LEDGER_ENTRIES,
    LEDGER_ENTRY,
    LEDGER_EXIT_FIELD,
    LEDGER_HEAD_WORD,
    LEDGER_OFFSET,
    LEDGER_RAISED,
    SITE_SIZE,
    fixed_text,
)

_U32 = 0xFFFF_FFFF
_SIZE = LEDGER_ENTRY.size
NOT_WRITTEN = -1  # what ``enter`` returns when nothing was written (``exit`` then does nothing)
GroupInfo = tuple[bytes, int, int]  # name (UTF-8, as stored), size, timeout in ms (0: unknown)
NO_SITE = (b"", 0)


class Ledger:
    """One process's ledger.  Single writer: the training thread (``traintop.comm_hooks``)."""

    __slots__ = ("_clock", "_n", "_pack", "_page", "_q", "_seqs", "_sites", "groups")

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self._clock = clock
        self._n = 0
        self._seqs: dict[bytes, int] = {}
        self._pack = LEDGER_ENTRY.pack_into
        # Per process group object (None: the default group): what an entry says of it,
        # resolved once (``traintop.comm_hooks``); emptied when a new default group is made.
        self.groups: dict[Any, GroupInfo] = {}
        self._sites: dict[Any, bytes] = {}  # code object -> b"train.py:step"
        self._scratch()

    def _scratch(self) -> None:
        """Write to a private page: no segment yet, or it was released."""
        self._page: Any = bytearray(HEADER_SIZE)
        self._q: Any = memoryview(self._page).cast("Q")
        self._q[LEDGER_HEAD_WORD] = self._n

    @property
    def written(self) -> int:
        """Entries written so far."""
        return self._n

    def site(self, frame: FrameType) -> tuple[bytes, int]:
        """``frame``'s call site as an entry stores it, its text made once per function."""
        code = frame.f_code
        name = self._sites.get(code)
        if name is None:
            text = f"{os.path.basename(code.co_filename)}:{code.co_name}"
            name = self._sites[code] = fixed_text(text, SITE_SIZE + 1)
        return name, frame.f_lineno

    def enter(self, group: GroupInfo, op: int, dtype: int, ndim: int, dims: tuple,
              site: tuple[bytes, int] = NO_SITE) -> int:  # fmt: skip
        """Publish "inside ``op`` of ``group`` since now"; the word to hand to ``exit``.

        ``dims`` holds four ints (the first dims, padded with zeros); ``site`` is the caller's
        ``b"train.py:step"`` and line."""
        n = self._n
        name = group[0]
        seq = self._seqs.get(name, 0) + 1
        offset = LEDGER_OFFSET + n % LEDGER_ENTRIES * _SIZE
        try:
            self._pack(self._page, offset, n + 1, seq, self._clock(), 0, op, dtype, ndim, 0,
                       group[1], group[2], site[1], *dims, name, site[0], n + 1)  # fmt: skip
        except Exception:  # a value out of range: clamped once more, else nothing written
            if not self._clamped(offset, n, seq, group, op, dtype, ndim, dims, site):
                return NOT_WRITTEN
        self._seqs[name] = seq
        self._n = n + 1
        try:
            self._q[LEDGER_HEAD_WORD] = n + 1
        except Exception:  # the segment was released under us: back to the scratch page
            self._scratch()
        return (offset + LEDGER_EXIT_FIELD) >> 3

    def _clamped(self, offset: int, n: int, seq: int, group: GroupInfo, op: int, dtype: int,
                 ndim: int, dims: tuple, site: tuple[bytes, int]) -> bool:  # fmt: skip
        try:
            fitted = [min(max(int(d), 0), _U32) for d in dims]
            self._pack(self._page, offset, n + 1, seq, self._clock(), 0, op, dtype,
                       min(ndim, 254), 0, min(group[1], _U32), min(group[2], _U32),
                       min(site[1], _U32), *fitted, group[0], site[0], n + 1)  # fmt: skip
        except Exception:
            self._scratch()
            return False
        return True

    def exit(self, word: int, raised: bool = False) -> None:
        """The collective entered at ``word`` returned (or raised) now."""
        if word < 0:
            return
        try:
            self._q[word] = self._clock() | LEDGER_RAISED if raised else self._clock() & -2
        except Exception:
            self._scratch()

    def adopt(self, page: Any, words: memoryview) -> None:
        """Move into the segment (``page`` its mapping, ``words`` its ``cast('Q')`` view)."""
        try:
            page[LEDGER_OFFSET:HEADER_SIZE] = self._page[LEDGER_OFFSET:HEADER_SIZE]
            words[LEDGER_HEAD_WORD] = self._n
        except Exception:
            return
        self._page, self._q = page, words

    def forget(self) -> None:
        """A forked child or a closed probe: never write the parent's segment again."""
        self._scratch()
