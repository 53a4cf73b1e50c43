"""Reading a rank's collective ledger (format 1.2, docs/ring-format.md; traintop/ledger.py).

The ledger is a ring of the newest ``LEDGER_ENTRIES`` collectives in the segment's header page,
published like the records: an entry carries its index + 1 at both ends, and the ledger head
(in the hot block) is stored after the entry.  So a read copies the ring between two reads of
the head and keeps an entry only if its tags agree and the writer cannot have reused its slot
during the copy.  The exit word is written in place once, by one aligned store: an entry read
before it reads "inside", one read after reads "done".
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from traintop import ring_format as ring
from traintop.collectors.rates import measured
from traintop.collectors.snapshot import Collective

_SIZE = ring.LEDGER_ENTRY.size
_REGION = ring.LEDGER_ENTRIES * _SIZE
_NS = 1e9


class Entry(NamedTuple):
    """One ledger entry as written (CLOCK_MONOTONIC ns)."""

    # the entry's place in the ledger, which hides tuple.index(): nothing calls that on an Entry
    index: int  # pyright: ignore[reportIncompatibleMethodOverride]
    group: str
    seq: int
    op: str
    shape: str
    group_size: int
    timeout_ms: int
    enter_ns: int
    exit_ns: int  # 0 while inside; its lowest bit: the call raised
    site: str  # "train.py:step:120": where it was called (file, function, line)


def read_entries(read: Callable[[int, int], bytes], head: Callable[[], int]) -> list[Entry]:
    """The ledger's valid entries, oldest first.  ``read(size, offset)`` is a pread of the
    segment; ``head()`` reads the ledger head word (before and after the copy)."""
    h1 = head()
    if h1 <= 0:
        return []
    raw = read(_REGION, ring.LEDGER_OFFSET)
    h2 = head()
    if len(raw) != _REGION:
        return []
    oldest = max(0, h1 - ring.LEDGER_ENTRIES, h2 - ring.LEDGER_ENTRIES)
    entries = (_entry(raw, index) for index in range(oldest, h1))
    return [entry for entry in entries if entry is not None]


def _entry(raw: bytes, index: int) -> Entry | None:
    offset = (index % ring.LEDGER_ENTRIES) * _SIZE
    (tag, seq, enter, exit_, op, dtype, ndim, _flags, line, d0, d1, d2, d3, size, timeout,
     name, site, tag_end) = ring.LEDGER_ENTRY.unpack_from(raw, offset)  # fmt: skip
    if tag != index + 1 or tag_end != index + 1:
        return None
    try:
        group = name.split(b"\0", 1)[0].decode()
        where = site.split(b"\0", 1)[0].decode()
    except UnicodeDecodeError:
        return None
    shape = shape_text(dtype, ndim, (d0, d1, d2, d3))
    return Entry(index, group, seq, _name(ring.OPS, op), shape, size, timeout, enter, exit_,
                 f"{where}:{line}" if where else "")  # fmt: skip


def _name(names: tuple[str, ...], code: int) -> str:
    return names[code] if 0 <= code < len(names) else "?"


def shape_text(dtype: int, ndim: int, dims: tuple[int, ...]) -> str:
    """ "f32[1024,4]"; "" for a call with no tensor; more than four dims end in "…"."""
    if ndim == ring.NO_TENSOR:
        return ""
    shown = ",".join(str(d) for d in dims[: min(ndim, 4)]) + (",…" if ndim > 4 else "")
    return f"{_name(ring.DTYPES, dtype)}[{shown}]"


def newest_per_group(entries: list[Entry], now_ns: int) -> tuple[Collective, ...]:
    """The newest entry of each group, as of ``now_ns``, in the order they were entered."""
    newest: dict[str, Entry] = {}
    for entry in entries:
        newest[entry.group] = entry
    ordered = sorted(newest.values(), key=lambda e: e.index)
    return tuple(collective(e, now_ns) for e in ordered)


def collective(entry: Entry, now_ns: int) -> Collective:
    """An entry as the snapshot shows it: ages instead of clock readings."""
    done = entry.exit_ns != 0
    return Collective(
        group=entry.group,
        seq=entry.seq,
        op=entry.op,
        shape=entry.shape,
        group_size=entry.group_size,
        age_s=measured(max(0.0, (now_ns - entry.enter_ns) / _NS)),
        duration_s=measured(max(0.0, (entry.exit_ns - entry.enter_ns) / _NS)) if done else None,
        raised=done and bool(entry.exit_ns & ring.LEDGER_RAISED),
        timeout_s=entry.timeout_ms / 1000 if entry.timeout_ms else None,
        site=entry.site,
    )
