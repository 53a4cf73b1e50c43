"""Shrinking a finished segment to what a monitor shows of an ended job.

A 4096-record segment is 516 KiB of RAM in /dev/shm for as long as its file exists, and a
finished job needs only its header, its hot block and its last records for the summary a
monitor draws (the recent step times and the final window).  So a writer that closes cleanly
replaces its file with a copy of capacity ``KEEP_RECORDS``: same header (with the new capacity,
size and checksum), same hot block, the newest records in the slots the format gives their
indices.  The copy is written under a ``.tmp-`` name and renamed over the segment, so a reader
sees either the old file or the whole new one; a reader that still has the old one open keeps
reading it unchanged.  A writer that crashes cannot shrink: the next writer's budget
(``ring_paths.trim_ended``) removes it.  Stdlib only: this runs in the training process at exit.
"""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
from pathlib import Path

from traintop import ring_paths
from traintop.ring_format import (
    HEAD_WORD,
    HEADER_CRC_OFFSET,
    HEADER_SIZE,
    RECORD_SIZE,
    header_crc,
    segment_size,
)

KEEP_RECORDS = 256  # a power of two above the 120 recent step times a monitor shows
_CAPACITY = struct.Struct("<I")  # at offset 20
_FILE_SIZE = struct.Struct("<Q")  # at offset 32
_HEAD = struct.Struct("<Q")


def shrunk_image(mm: bytes | memoryview | mmap.mmap, keep: int = KEEP_RECORDS) -> bytes | None:
    """The bytes of the smaller segment, or None when the segment is not larger than that."""
    capacity = _CAPACITY.unpack_from(mm, 20)[0]
    if capacity <= keep:
        return None
    image = bytearray(segment_size(keep))
    image[:HEADER_SIZE] = mm[:HEADER_SIZE]
    _CAPACITY.pack_into(image, 20, keep)
    _FILE_SIZE.pack_into(image, 32, len(image))
    struct.pack_into("<I", image, HEADER_CRC_OFFSET, header_crc(image))
    head = _HEAD.unpack_from(mm, HEAD_WORD * 8)[0]
    for i in range(max(0, head - keep + 1), head):
        src = HEADER_SIZE + (i & (capacity - 1)) * RECORD_SIZE
        dst = HEADER_SIZE + (i & (keep - 1)) * RECORD_SIZE
        image[dst : dst + RECORD_SIZE] = mm[src : src + RECORD_SIZE]
    return bytes(image)


def shrink(mm: bytes | memoryview | mmap.mmap, path: Path, ino: int) -> bool:
    """Replace the (closed) segment at ``path`` by its shrunk copy; False if it stays as it is.

    Never raises: a full filesystem or a file someone replaced just leaves the big segment,
    which the next writer's budget removes in time.
    """
    tmp = path.with_name(ring_paths.TMP_PREFIX + path.name)
    with contextlib.suppress(OSError):
        if not _still_whole(path, ino, len(mm)):
            return False
        image = shrunk_image(mm)
        if image is None:
            return False
        _write_new(tmp, image)
        os.rename(tmp, path)
        return True
    with contextlib.suppress(OSError):
        os.unlink(tmp)
    return False


def _still_whole(path: Path, ino: int, mapped: int) -> bool:
    """The file is still ours and as long as our mapping: reading a mapped page past the end of
    a file someone truncated raises SIGBUS, which would kill the training process at exit."""
    st = os.stat(path, follow_symlinks=False)
    return st.st_ino == ino and st.st_size >= mapped


def _write_new(tmp: Path, image: bytes) -> None:
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    fd = os.open(tmp, flags, 0o600)
    try:
        os.posix_fallocate(fd, 0, len(image))  # ENOSPC here rather than a short file
        if os.write(fd, image) != len(image):
            raise OSError("short write")
    finally:
        os.close(fd)
