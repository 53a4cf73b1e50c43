"""What a diagnosis may keep from one tick to the next, so that a tick costs what changed.

The monitor judges its 30 s window again on every tick, yet the window only gains its newest
snapshot and loses its oldest.  So each snapshot's rows are indexed by key once, when it arrives
(:class:`Digest`), and each process, GPU or job summary the diagnosis asks about keeps its
values across the window as columns (:class:`Track`): the next window drops the rows of the
snapshots that left and reads only those of the snapshots that came.  The columns hold the same
values in the same order as a fresh pass would read, so every mean sums the same floats the
same way.  An ended run's final numbers never change again (the collector only ages its last
step), so its verdict is kept while the same numbers come back (:meth:`Memo.verdicts`).

A :class:`Memo` belongs to one thread-confined
:class:`~traintop.diagnosis.stabilizer.VerdictStabilizer`;
:func:`~traintop.diagnosis.engine.diagnose` without one starts empty on every call.  Both give the
same verdicts: tests/test_diagnosis_memo.py holds them to it.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any, TypeVar

from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.model import JobVerdict

T = TypeVar("T")
Read = Callable[[Any, Any], tuple[Any, ...]]


class Index:
    """One snapshot's rows of one kind by key.  A key appears once in a snapshot (one /proc
    scan, one ring per process, one row per GPU), so each maps to its row, in one pass of C;
    the keys a snapshot repeats (pid namespaces, hand-made snapshots) also map to all their
    rows, so that none is lost."""

    __slots__ = ("one", "repeated")

    def __init__(self, rows: Sequence[Any], key: Callable[[Any], Hashable]) -> None:
        self.one: dict[Hashable, Any] = dict(zip(map(key, rows), rows, strict=True))
        self.repeated = {} if len(self.one) == len(rows) else _repeated(rows, key)

    def rows(self, key: Hashable) -> tuple[Any, ...]:
        """``key``'s rows, in order."""
        if self.repeated and key in self.repeated:
            return self.repeated[key]
        row = self.one.get(key)
        return () if row is None else (row,)


def _repeated(rows: Sequence[Any], key: Callable[[Any], Hashable]) -> dict[Hashable, tuple]:
    grouped: dict[Hashable, list[Any]] = {}
    for row in rows:
        grouped.setdefault(key(row), []).append(row)
    return {k: tuple(found) for k, found in grouped.items() if len(found) > 1}


@dataclass(frozen=True, slots=True, eq=False)
class Kind:
    """One kind of row a snapshot holds (processes by pid, GPUs by index...) and what a window
    summary reads of each: ``read(previous row of the key or None, row)``, ``width`` values."""

    rows: Callable[[Snapshot], Sequence[Any]]
    key: Callable[[Any], Hashable]
    read: Read
    width: int


class Digest:
    """One snapshot and what was made of it, each made once while the snapshot is in the
    window (about 30 ticks)."""

    __slots__ = ("_made", "snap")

    def __init__(self, snap: Snapshot) -> None:
        self.snap = snap
        self._made: dict[object, Any] = {}  # by the function (or Kind) that made it

    def of(self, make: Callable[[Snapshot], T]) -> T:
        """``make(snapshot)``, made on the first call."""
        if make not in self._made:
            self._made[make] = make(self.snap)
        return self._made[make]

    def index(self, kind: Kind) -> Index:
        """The snapshot's rows of ``kind`` by key."""
        got = self._made.get(kind)
        if got is None:
            got = self._made[kind] = Index(kind.rows(self.snap), kind.key)
        return got


class Track:
    """One key's rows across a window, oldest first, what ``Kind.read`` read of each as columns
    (one list per value), and how many rows each snapshot of the window gave.

    It moves with the window in place: lists made anew on every tick would outlive the tick,
    reach the garbage collector's older generations and make its sweeps cost more than the
    diagnosis saved.  What a diagnosis keeps beyond its tick (none of it does) must copy them.
    """

    __slots__ = ("columns", "counts", "rows")

    def __init__(self, width: int) -> None:
        self.rows: list[Any] = []
        self.columns: list[list[Any]] = [[] for _ in range(width)]
        self.counts: list[int] = []

    @classmethod
    def of(cls, kind: Kind, key: Hashable, indexes: Sequence[Index]) -> Track:
        """Read from every snapshot of a window (its ``kind`` indexes), in bulk: a window's
        first diagnosis, and every one without a memo, reads every row."""
        track = cls(kind.width)
        found = [index.rows(key) for index in indexes]
        track.counts = list(map(len, found))
        track.rows = list(chain.from_iterable(found))
        values = list(map(kind.read, [None, *track.rows[:-1]], track.rows))
        if values:
            track.columns = [list(column) for column in zip(*values, strict=True)]
        return track

    def move(self, kind: Kind, key: Hashable, left: int, came: Sequence[Digest]) -> None:
        """Drop the rows of the ``left`` oldest snapshots; read and append those of the
        snapshots that ``came`` (one of each, on a tick)."""
        drop = sum(self.counts[:left])
        del self.counts[:left]
        if drop:
            del self.rows[:drop]
            for column in self.columns:
                del column[:drop]
        for digest in came:
            found = digest.index(kind).rows(key)
            self.counts.append(len(found))
            for row in found:
                self._append(row, kind.read(self.rows[-1] if self.rows else None, row))

    def _append(self, row: Any, values: tuple[Any, ...]) -> None:
        self.rows.append(row)
        for column, value in zip(self.columns, values, strict=True):
            column.append(value)


def _slide(last: Sequence[Digest], now: Sequence[Digest]) -> tuple[int, Sequence[Digest]] | None:
    """``now`` as ``last`` moved forward: how many of the oldest snapshots left and which came
    after the ones kept; ``None`` when it is not (a first window, a clock reset)."""
    left = next((i for i, d in enumerate(last) if d is now[0]), None) if now else None
    if left is None:
        return None
    kept = len(last) - left
    if kept > len(now) or any(a is not b for a, b in zip(last[left:], now, strict=False)):
        return None
    return left, now[kept:]


class Window:
    """One diagnosis' window: its snapshots' digests and the tracks asked of it, moved on
    from the memo's last window where this one is that one moved forward."""

    __slots__ = ("_indexes", "_last", "_slide", "digests", "tracks")

    def __init__(
        self,
        digests: list[Digest],
        last: dict[tuple[Kind, Hashable], Track],
        slide: tuple[int, Sequence[Digest]] | None,
    ) -> None:
        self.digests = digests
        self.tracks: dict[tuple[Kind, Hashable], Track] = {}
        self._last = last if slide is not None else {}
        self._slide = slide
        self._indexes: dict[Kind, list[Index]] = {}

    @property
    def snaps(self) -> list[Snapshot]:
        return [d.snap for d in self.digests]

    @property
    def latest(self) -> Digest:
        return self.digests[-1]

    def keys(self, kind: Kind) -> list[Hashable]:
        """Every key of ``kind`` in the window, in the order first seen."""
        return list(dict.fromkeys(chain.from_iterable(ix.one for ix in self._indexes_of(kind))))

    def _indexes_of(self, kind: Kind) -> list[Index]:
        got = self._indexes.get(kind)
        if got is None:
            got = self._indexes[kind] = [d.index(kind) for d in self.digests]
        return got

    def track(self, kind: Kind, key: Hashable) -> Track:
        """``key``'s rows of ``kind`` across the window (none when it is not in it)."""
        got = self.tracks.get((kind, key))
        if got is None:
            got = self.tracks[kind, key] = self._track(kind, key)
        return got

    def _track(self, kind: Kind, key: Hashable) -> Track:
        last = self._last.get((kind, key))
        if last is None or self._slide is None:
            return Track.of(kind, key, self._indexes_of(kind))
        last.move(kind, key, *self._slide)
        return last


class Memo:
    """The last window's digests and tracks, and the verdicts on its ended runs."""

    def __init__(self) -> None:
        self._last: Window = Window([], {}, None)
        self._verdicts: dict[Hashable, tuple[object, JobVerdict]] = {}

    def window(self, snaps: Sequence[Snapshot]) -> Window:
        """``snaps`` (chronological) as a window; what was asked of the last one carries over
        where it still holds.  What this one is not asked is forgotten."""
        last = self._last
        known = {id(d.snap): d for d in last.digests}
        digests = [_known(known, snap) or Digest(snap) for snap in snaps]
        self._last = Window(digests, last.tracks, _slide(last.digests, digests))
        return self._last

    def verdicts(
        self, keys: Sequence[tuple[Hashable, object] | None], judge: Callable[[int], JobVerdict]
    ) -> list[JobVerdict]:
        """The verdict for each ``(slot, key)``: the one kept in ``slot`` from the last call
        if it was made of an equal ``key``, else ``judge(i)``.  The slot (which run) is cheap
        to hash; the key (what its verdict is made of) is only compared, and shares the objects
        of the last one when nothing changed.  ``None`` is judged every time; slots not asked
        are forgotten."""
        kept = self._verdicts
        got = [_kept(kept, k) or judge(i) for i, k in enumerate(keys)]
        self._verdicts = {k[0]: (k[1], v) for k, v in zip(keys, got, strict=True) if k}
        return got


def _kept(
    kept: dict[Hashable, tuple[object, JobVerdict]], key: tuple[Hashable, object] | None
) -> JobVerdict | None:
    if key is None:
        return None
    slot, made_of = key
    old = kept.get(slot)
    return old[1] if old is not None and old[0] == made_of else None


def _known(known: dict[int, Digest], snap: Snapshot) -> Digest | None:
    """The digest made for this very snapshot (an id is only unique while its object lives)."""
    digest = known.get(id(snap))
    return digest if digest is not None and digest.snap is snap else None
