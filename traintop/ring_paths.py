"""Where ring segments live, and the checks that keep that place private.

Segments sit in a per-user directory so that neither another user nor an unrelated tool can
plant, read or replace them.  ``/dev/shm`` is preferred because it is RAM (no writeback can ever
stall the training loop); when it is missing, read-only, full or tiny (Docker's 64 MB default,
which the DataLoader needs far more than we do), the writer falls back to the next directory.
Stdlib only: this module is imported by the training process.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import mmap
import os
import re
import stat
import time
from pathlib import Path

ENV_DIR = "TRAINTOP_RING_DIR"
SEGMENT_NAME_RE = re.compile(r"^(\d+)-r(\d+)-([0-9a-f]{8})\.ring$")
# A segment's side files (traintop/stack_helper.py): the FIFO its helper thread reads requests
# from, the file its faulthandler dumps into, the replies (one per request id), the job's facts
# (traintop/facts_file.py); how the run ended (traintop/run_end.py): its end, and the dumps of
# the signals that stopped it.
SIDE_NAME_RE = re.compile(r"^(\d+-r\d+-[0-9a-f]{8})\.(ask|fault|facts|end|sig|\d+\.stack)$")
ASK_SUFFIX, FAULT_SUFFIX = ".ask", ".fault"
END_SUFFIX, SIG_SUFFIX = ".end", ".sig"
ENDING_KINDS = frozenset({"end", "sig"})  # kept when the helper cleans up: the run's last word
TMP_PREFIX = ".tmp-"
MIN_FREE_BYTES = 32 * 1024 * 1024
MIN_FREE_FRACTION = 0.10
_MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0)


class RingDirError(Exception):
    """A segment directory that must not be used (foreign owner, symlink, lax mode...)."""


def candidate_dirs(directory: str | os.PathLike[str] | None = None) -> list[Path]:
    """Directories to try, best first.

    An explicit ``directory`` or ``$TRAINTOP_RING_DIR`` replaces the defaults; either may list
    several directories separated by ``os.pathsep`` so a caller can choose its own fallbacks.
    """
    override = os.fspath(directory) if directory is not None else os.environ.get(ENV_DIR)
    if override:
        return [Path(part) for part in override.split(os.pathsep) if part]
    uid = os.getuid()
    dirs = [Path("/dev/shm") / f"traintop-{uid}"]
    runtime = os.environ.get("XDG_RUNTIME_DIR")
    if runtime:
        dirs.append(Path(runtime) / "traintop")
    import tempfile  # here: a segment made at start-up should not pay for its import

    dirs.append(Path(tempfile.gettempdir()) / f"traintop-{uid}")
    return dirs


def check_private_dir(path: Path) -> None:
    """Refuse a directory we do not own exclusively; never "repair" it with chmod/chown."""
    st = os.lstat(path)
    if stat.S_ISLNK(st.st_mode):
        raise RingDirError(f"{path}: is a symlink, refusing to use it")
    if not stat.S_ISDIR(st.st_mode):
        raise RingDirError(f"{path}: not a directory")
    problem = not_private(path, st)
    if problem:
        raise RingDirError(problem)


def not_private(path: Path, st: os.stat_result) -> str | None:
    """Why ``path`` (a segment or its directory) is not ours alone, or None if it is.

    One rule for the writer's directory and the reader's segments: another user must be able
    neither to plant the file nor to read it.
    """
    if st.st_uid != os.getuid():
        return f"{path}: owned by uid {st.st_uid}, not by us ({os.getuid()})"
    if st.st_mode & 0o077:
        return f"{path}: mode {stat.S_IMODE(st.st_mode):o} is open to others"
    return None


def ensure_private_dir(path: Path) -> Path:
    """Create ``path`` with mode 0700 if needed, then check it is really ours and private."""
    with contextlib.suppress(FileExistsError):
        os.mkdir(path, 0o700)
    check_private_dir(path)
    return path


def has_room(path: Path, size: int) -> bool:
    """True if ``size`` bytes still leave max(32 MiB, 10 %) of the filesystem free.

    The free-space floor protects the DataLoader, whose shared-memory tensors need it more.
    """
    st = os.statvfs(path)
    free = st.f_bavail * st.f_frsize
    total = st.f_blocks * st.f_frsize
    return free - size >= max(MIN_FREE_BYTES, int(total * MIN_FREE_FRACTION))


def segment_name(pid: int, rank: int) -> str:
    """A fresh name; the random part separates equal pids from containers sharing /dev/shm."""
    return f"{pid}-r{rank}-{os.urandom(4).hex()}.ring"


def side_path(segment: Path, suffix: str) -> Path:
    """``123-r0-0a1b2c3d.ring`` -> ``123-r0-0a1b2c3d<suffix>``, in the same directory."""
    return segment.with_name(segment.name.removesuffix(".ring") + suffix)


def reply_path(segment: Path, request: int) -> Path:
    """Where the helper thread answers request ``request``."""
    return side_path(segment, f".{request}.stack")


def remove_side_files(
    segment: Path, older_than_s: float = 0.0, keep: frozenset[str] = frozenset()
) -> list[Path]:
    """Unlink ``segment``'s side files (the replies only when older than ``older_than_s``),
    but for the kinds in ``keep`` (``ENDING_KINDS``: the helper leaves the run's end)."""
    stem = segment.name.removesuffix(".ring")
    removed = []
    with contextlib.suppress(OSError), os.scandir(segment.parent) as entries:
        for entry in entries:
            found = SIDE_NAME_RE.match(entry.name)
            if found is None or found.group(1) != stem or found.group(2) in keep:
                continue
            with contextlib.suppress(OSError):
                st = entry.stat(follow_symlinks=False)
                if found.group(2).endswith(".stack") and _age(st) < older_than_s:
                    continue
                if st.st_uid == os.getuid():
                    os.unlink(entry.path)
                    removed.append(Path(entry.path))
    return removed


def orphan_side_files(directory: Path) -> list[Path]:
    """Side files of ours whose segment is gone (a writer killed before its cleanup)."""
    found: list[Path] = []
    names: dict[str, os.DirEntry] = {}
    with contextlib.suppress(OSError), os.scandir(directory) as entries:
        names = {entry.name: entry for entry in entries}
    for name, entry in names.items():
        side = SIDE_NAME_RE.match(name)
        if side is not None and side.group(1) + ".ring" not in names:
            with contextlib.suppress(OSError):
                if entry.stat(follow_symlinks=False).st_uid == os.getuid():
                    found.append(Path(entry.path))
    return found


def _age(st: os.stat_result) -> float:
    return time.time() - st.st_mtime


def list_segments(directory: Path) -> list[Path]:
    """Published segment paths in ``directory`` (names only: contents are checked on open)."""
    return [Path(path) for path in segment_names(directory)]


def segment_names(directory: Path) -> list[str]:
    """``list_segments`` as strings, sorted, for a monitor that lists every tick: a Path per
    segment costs more than the rest of the listing."""
    try:
        with os.scandir(directory) as entries:
            return sorted(
                entry.path
                for entry in entries
                if SEGMENT_NAME_RE.match(entry.name) and entry.is_file(follow_symlinks=False)
            )
    except OSError:
        return []


class NewSegmentFile:
    """A freshly created, fully allocated, mapped and locked file not yet visible to readers."""

    def __init__(self, tmp_path: Path, final_path: Path, mm: mmap.mmap, lock_fd: int, ino: int):
        self.tmp_path = tmp_path
        self.final_path = final_path
        self.mm = mm
        self.lock_fd = lock_fd
        self.ino = ino

    def publish(self) -> None:
        """Make the (initialised) file discoverable; link() never replaces an existing name."""
        os.link(self.tmp_path, self.final_path)
        os.unlink(self.tmp_path)

    def discard(self) -> None:
        """Undo a failed initialisation so nothing half-made is left behind."""
        with contextlib.suppress(OSError):
            os.unlink(self.tmp_path)
        self.mm.close()
        os.close(self.lock_fd)


def create_segment_file(directory: Path, pid: int, rank: int, size: int) -> NewSegmentFile:
    """Create ``size`` bytes in ``directory`` the SIGBUS-proof way, or raise OSError/RingDirError.

    posix_fallocate makes a full tmpfs fail here instead of as SIGBUS in the training loop;
    MAP_POPULATE keeps page faults out of the hot path.  The liveness flock goes on a second,
    separate open file description because mmap keeps a dup of the first one, which forked
    children would inherit and so keep a dead trainer looking alive.  Ended segments beyond
    the budget go first (``trim_ended``): a run never finds its room taken by runs that are over.
    """
    ensure_private_dir(directory)
    trim_ended(directory)
    if not has_room(directory, size):
        raise OSError(errno.ENOSPC, f"{directory}: too little free space left for the ring")
    tmp_path, final_path, fd = _open_exclusive(directory, pid, rank)
    try:
        os.posix_fallocate(fd, 0, size)
        mm = mmap.mmap(fd, size, flags=mmap.MAP_SHARED | _MAP_POPULATE)
        ino = os.fstat(fd).st_ino
        lock_fd = os.open(tmp_path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        fcntl.flock(lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BaseException:
        os.unlink(tmp_path)
        raise
    finally:
        os.close(fd)
    return NewSegmentFile(tmp_path, final_path, mm, lock_fd, ino)


def _open_exclusive(directory: Path, pid: int, rank: int) -> tuple[Path, Path, int]:
    """O_EXCL create; a name clash (same pid in another container) retries with a new suffix."""
    flags = os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
    for _ in range(8):
        name = segment_name(pid, rank)
        tmp_path = directory / (TMP_PREFIX + name)
        try:
            return tmp_path, directory / name, os.open(tmp_path, flags, 0o600)
        except FileExistsError:
            continue
    raise OSError(errno.EEXIST, f"{directory}: could not find a free segment name")


ENDED_BUDGET_BYTES = 8 * 1024 * 1024


def trim_ended(directory: Path, budget: int = ENDED_BUDGET_BYTES) -> list[Path]:
    """Unlink the oldest ended segments in ``directory`` beyond ``budget`` bytes in all.

    Run by each new writer, so ended runs cannot fill /dev/shm while no monitor runs.  Ended
    means nobody holds the liveness flock (the kernel drops it when the writer exits, even on
    SIGKILL); a live segment is never touched.  Oldest by modification time: a finished segment
    was rewritten at its close, a crashed one was last modified at its creation.
    """
    ended = sorted(_ended_segments(directory), key=lambda e: e[0], reverse=True)
    removed, used = [], 0
    for _mtime, size, path in ended:
        used += size
        if used > budget:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(path)
                removed.append(path)
                remove_side_files(path)
    return removed


def _ended_segments(directory: Path) -> list[tuple[float, int, Path]]:
    """``(mtime, bytes held, path)`` of every segment in ``directory`` whose lock is free."""
    found = []
    for path in list_segments(directory):
        with contextlib.suppress(OSError):
            st = _if_ended(path)
            if st is not None:
                found.append((st.st_mtime, st.st_blocks * 512, path))
    return found


def _if_ended(path: Path) -> os.stat_result | None:
    """The segment's stat if no writer holds its lock (taken and released at once), else None."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except BlockingIOError:
        return None
    else:
        st = os.fstat(fd)
        return st if stat.S_ISREG(st.st_mode) and st.st_uid == os.getuid() else None
    finally:
        os.close(fd)
