"""What the kernel-file readers' tests share (cgroups, /proc, the OOM witness): a clock they
set by hand, and files written under a fake root (a cgroup tree, a /proc) from a name-to-text
table."""

from __future__ import annotations

from pathlib import Path


class Clock:
    """A monotonic clock a test moves by setting ``now``."""

    def __init__(self, now: float = 100.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def write_files(root: Path, files: dict[str, str]) -> None:
    """Each of ``files`` (a path under ``root``: its text), with the folders it needs."""
    for name, text in files.items():
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
