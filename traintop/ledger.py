"""The collective ledger: every collective the probe times, in the segment, as it happens.

When a job hangs, the question is which rank holds the others and where: the ranks that wait
are inside collective #S of a group, the one that holds them never reached it.  So each rank
writes, for every collective it enters (blocking ``torch.distributed`` calls, the wait at the end
of backward for DDP's and FSDP's reductions), one entry into a small ring in its segment's
header page (format 1.2, docs/ring-format.md): group, the group's sequence number (every rank
of a group calls its collectives in one order, so the numbers agree across ranks), op, dtype
and the first dims, the call site (file and function that called it, and the line), enter time,
and the exit time when it returns.  The call site says where a rank waits even when no stack
can be had (a rank that crashed, an older monitor).  A monitor reads the ledgers of every rank
it sees; nothing is asked of the training process.

Cost, on the training thread: one ``pack_into`` at entry, one 8-byte store at exit, about 2 µs a
collective in all (``benchmarks/bench_ledger.py``): what is fixed per group (its size, timeout
and name) is packed once, a call site's text is made once per function, and the whole entry
takes one Python call.  Before the segment exists (collectives before the first step) the
entries go to a scratch page that is copied into the segment when it is made, so the sequence
numbers stay whole.  Nothing here raises: a write that fails (a segment released at exit or in
a forked child) sends the ledger back to its scratch page.
"""

from __future__ import annotations

import os
import struct
import time
from collections.abc import Callable
from types import FrameType
from typing import Any

from traintop.ring_format import (
    GROUP_NAME_SIZE,
    HEADER_SIZE,
    LEDGER_ENTRIES,
    LEDGER_ENTRY,
    LEDGER_EXIT_FIELD,
    LEDGER_GROUP,
    LEDGER_HEAD_WORD,
    LEDGER_OFFSET,
    LEDGER_RAISED,
    NO_TENSOR,
    SITE_SIZE,
    fixed_text,
)

_U32 = 0xFFFF_FFFF
_SIZE = LEDGER_ENTRY.size
NOT_WRITTEN = -1  # what ``collective`` returns when nothing was written (``exit`` does nothing)
# A group as entries store it: its LEDGER_GROUP bytes (size, timeout, name), packed once, and
# its sequence counter ([the last number given]): a list item costs less than a dict's.
GroupInfo = tuple[bytes, list[int]]
Site = tuple[Any, bytes, dict[int, int]]  # a calling function: its code, its text, its lines


def group_info(name: str, size: int, timeout_ms: int) -> GroupInfo:
    """What the ledger keeps of a group (values out of range clamped)."""
    packed = LEDGER_GROUP.pack(min(max(size, 0), _U32), min(max(timeout_ms, 0), _U32),
                               fixed_text(name, GROUP_NAME_SIZE + 1))  # fmt: skip
    return packed, [0]


# ``pack_into`` of an entry with the group's fields as one ``32s``.  The dims are passed as
# four names, a shape padded with zeros (``_PADS``): a ``*shape`` call costs ~1,000
# instructions more than the pack itself.
_PACK = struct.Struct("<QQQQBBBBI4I32s32sQ").pack_into
_PADS = ((0, 0, 0, 0), (0, 0, 0), (0, 0), (0,), ())  # zeros to add to a shape of 0..4 dims
_OFFSETS = tuple(LEDGER_OFFSET + slot * _SIZE for slot in range(LEDGER_ENTRIES))


class Ledger:
    """One process's ledger.  Single writer: the training thread (``traintop.comm_hooks``)."""

    __slots__ = ("_clock", "_n", "_page", "_q", "_sites", "describe", "dtypes", "groups")

    def __init__(self, clock: Callable[[], int] = time.monotonic_ns) -> None:
        self._clock = clock
        self._n = 0
        # Per process group object (None: the default group): what an entry says of it,
        # resolved once (``describe``); emptied when a new default group is made.
        self.groups: dict[Any, GroupInfo] = {}
        # Set by traintop.comm_hooks: what a group object is (``group_info``), and torch
        # dtype -> code; without a describer nothing is recorded.
        self.describe: Callable[[Any], GroupInfo] | None = None
        self.dtypes: dict[Any, int] = {}
        # id(code object) -> (the code object, b"train.py:step", {f_lasti: line}): a code object
        # hashes its whole body (1.4 µs); its id costs nothing, and the object kept beside it
        # rules out reuse.
        self._sites: dict[int, Site] = {}
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

    def collective(self, group: Any, op: int, tensor: Any, caller: FrameType, now: int = 0) -> int:
        """Publish "inside ``op`` of ``group`` since ``now`` (0: read the clock)", called from
        ``caller``; the word to hand to ``exit``.  ``group`` is a process group (None: the
        default one) or a key the caller put in ``groups``; ``tensor`` a tensor, or anything
        else (no shape).  The hot path, in one Python call (a call costs 70 ns here)."""
        describe = self.describe
        if describe is None:
            return NOT_WRITTEN
        try:
            info = self.groups.get(group) or describe(group)
        except Exception:  # no such group (yet): the call will say so itself
            return NOT_WRITTEN
        code = caller.f_code
        site = self._sites.get(id(code))
        if site is None or site[0] is not code:
            site = self._site(code)
        line = site[2].get(caller.f_lasti)  # f_lineno decodes the line table: 4x the lookup
        if line is None:
            line = site[2][caller.f_lasti] = caller.f_lineno
        try:  # tuple(): a torch.Size's dims cost 10x a tuple's
            shape, dtype = tuple(tensor.shape), self.dtypes.get(tensor.dtype, 0)
        except AttributeError:  # not a tensor (objects, None): the call carries no shape
            shape, dtype, ndim = _PADS[0], 0, NO_TENSOR
        else:
            ndim = len(shape)
            shape = shape + _PADS[ndim] if ndim < 4 else shape[:4]
        d0, d1, d2, d3 = shape
        n, counter = self._n, info[1]
        offset, seq = _OFFSETS[n % LEDGER_ENTRIES], counter[0] + 1
        try:
            _PACK(self._page, offset, n + 1, seq, now or self._clock(), 0, op, dtype, ndim, 0,
                  line, d0, d1, d2, d3, info[0], site[1], n + 1)  # fmt: skip
        except Exception:  # a dim past u32: clamped once more, else nothing written
            if not self._clamped(offset, n, seq, op, dtype, ndim, shape, info[0], site[1],
                                 caller):  # fmt: skip
                return NOT_WRITTEN
        counter[0], self._n = seq, n + 1
        try:
            self._q[LEDGER_HEAD_WORD] = n + 1
        except Exception:  # the segment was released under us: back to the scratch page
            self._scratch()
        return (offset + LEDGER_EXIT_FIELD) >> 3

    def _site(self, code: Any) -> Site:
        text = f"{os.path.basename(code.co_filename)}:{code.co_name}"
        site = self._sites[id(code)] = (code, fixed_text(text, SITE_SIZE + 1), {})
        return site

    def _clamped(self, offset: int, n: int, seq: int, op: int, dtype: int, ndim: int,
                 shape: tuple, group: bytes, site: bytes, caller: FrameType) -> bool:  # fmt: skip
        """The entry with each dim clamped into u32 (``shape`` padded to four); its ndim says
        how many of them it holds."""
        try:
            dims = [min(max(int(d), 0), _U32) for d in shape]
            _PACK(self._page, offset, n + 1, seq, self._clock(), 0, op, dtype, min(ndim, 4), 0,
                  min(caller.f_lineno, _U32), *dims, group, site, n + 1)  # fmt: skip
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
