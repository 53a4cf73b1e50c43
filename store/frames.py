"""Snapshot frames: each sample's snapshot and verdict as JSON, deflated against the previous one.

Consecutive snapshots repeat almost everything (names, uuids, command lines, capacities, most
numbers), so each part of a frame is compressed with the same part of the previous frame as
deflate's preset dictionary: only what changed costs bytes.  A frame is cut into parts (the
per-core CPU table, the processes, the jobs, the rest, the verdict) because deflate looks back
at most 32 KiB: a whole snapshot of a big box is longer than that, and its previous copy would
fall out of reach.  Like a video's key frames, every ``KEY_EVERY``-th frame stands alone, so
seeking decodes at most that many frames.
"""

from __future__ import annotations

import json
import struct
from typing import Any

from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.model import Verdict
from traintop.store import deflate
from traintop.store.codec import Decoder, encode, field_names

KEY_EVERY = 60
SPLIT = ("cpu", "processes", "jobs")  # each its own part; the other fields form the first part
Frame = tuple[bytes, ...]
_LENGTH = struct.Struct("<I")


def to_json(snapshot: Snapshot, verdict: Verdict | None) -> Frame:
    """One sample as compact JSON parts: rest of the snapshot, ``SPLIT`` fields, verdict."""
    row = encode(snapshot)
    at = [field_names(Snapshot).index(name) for name in SPLIT]
    parts = [row[i] for i in at]
    for i in at:
        row[i] = None
    verdict_row = None if verdict is None else encode(verdict)
    return tuple(_dump(part) for part in (row, *parts, verdict_row))


def _dump(value: Any) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


def compress(frame: Frame, previous: Frame | None) -> bytes:
    """Deflate each part, against the previous frame's part unless this is a key frame."""
    out = []
    for i, part in enumerate(frame):
        zdict = previous[i] if previous else None
        body = deflate.pack(part, zdict)
        out.append(_LENGTH.pack(len(body)) + body)
    return b"".join(out)


def decompress(blob: bytes, previous: Frame | None) -> Frame:
    parts, pos = [], 0
    while pos < len(blob):
        (size,) = _LENGTH.unpack_from(blob, pos)
        zdict = previous[len(parts)] if previous else None
        body = blob[pos + _LENGTH.size : pos + _LENGTH.size + size]
        parts.append(deflate.unpack(body, zdict))
        pos += _LENGTH.size + size
    return tuple(parts)


def from_json(frame: Frame, decoder: Decoder) -> tuple[Snapshot, Verdict | None]:
    row, *parts, verdict = (json.loads(part) for part in frame)
    written = decoder.names(Snapshot)
    for name, part in zip(SPLIT, parts, strict=True):
        row[written.index(name)] = part
    return decoder.decode(Snapshot, row), _verdict(verdict, decoder)


def _verdict(value: Any, decoder: Decoder) -> Verdict | None:
    return None if value is None else decoder.decode(Verdict, value)
