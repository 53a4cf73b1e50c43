"""Raw deflate with an optional preset dictionary, for frames and step blocks.

Raw, because a zlib header and checksum would cost 6 bytes per block, several blocks a second,
and SQLite already guards the page they sit in.  A dictionary (the previous block of the same
kind) lets deflate refer back to everything that did not change.
"""

from __future__ import annotations

import zlib

LEVEL = 9
_RAW = -15


def pack(data: bytes, zdict: bytes | None) -> bytes:
    defaults = (zlib.DEF_MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY)  # so that ** can only be zdict
    options = {"zdict": zdict} if zdict else {}
    packer = zlib.compressobj(LEVEL, zlib.DEFLATED, _RAW, *defaults, **options)
    return packer.compress(data) + packer.flush()


def unpack(blob: bytes, zdict: bytes | None) -> bytes:
    unpacker = zlib.decompressobj(_RAW, **({"zdict": zdict} if zdict else {}))
    return unpacker.decompress(blob) + unpacker.flush()
