"""The facts side file, ``<segment>.facts``: what the probe knows of the job beyond its steps.

Beside each ``<name>.ring`` (docs/ring-format.md, "Side files: the job's facts"), mode 0600,
JSON, rewritten whole (``.tmp-`` then ``rename``, so a reader never sees half of it) by the
probe's helper thread when something changed, at most every 2 s, and once more when the segment
closes; removed with the segment::

    {"v": 1, "taken_ns": CLOCK_MONOTONIC ns, "steps": steps ended so far,
     "facts": {JobFacts fields}, "sync": [{"file", "line", "function", "kind", "count",
     "code"}], "alloc_retries": int or null, "profile": {GpuStepProfile fields but age, and
     "taken_ns"} or null}
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path
from typing import Any

from traintop import ring_paths

VERSION = 1
SUFFIX = ".facts"
MAX_BYTES = 1 << 20  # a reader refuses more: a document this size is not ours


def facts_path(segment: Path) -> Path:
    return ring_paths.side_path(segment, SUFFIX)


def document(
    taken_ns: int,
    steps: int,
    facts: dict[str, Any],
    sync: list[dict[str, Any]],
    alloc_retries: int | None,
    profile: dict[str, Any] | None,
) -> dict[str, Any]:
    return {
        "v": VERSION,
        "taken_ns": taken_ns,
        "steps": steps,
        "facts": facts,
        "sync": sync,
        "alloc_retries": alloc_retries,
        "profile": profile,
    }


def write(path: Path, doc: dict[str, Any]) -> None:
    """Replace ``path`` with ``doc`` at once; OSError if the directory refuses."""
    tmp = path.with_name(ring_paths.TMP_PREFIX + path.name)
    with contextlib.suppress(FileNotFoundError):
        os.unlink(tmp)
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    with os.fdopen(os.open(tmp, flags, 0o600), "w") as f:
        json.dump(doc, f, separators=(",", ":"))
    os.rename(tmp, path)
