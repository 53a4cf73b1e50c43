"""A slow disk on demand: an ext4 loop device whose reads are capped by a cgroup v1 blkio group.

Only processes placed in the group are throttled, so the test itself writes the dataset at full
speed and only the workload (and its DataLoader workers, which inherit the group) reads slowly.
Everything is undone on exit, in reverse order, even when the scenario failed.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

from tests.scenarios.harness import ScenarioUnavailable

BLKIO_ROOT = Path("/sys/fs/cgroup/blkio")
TOOLS = ("losetup", "mkfs.ext4", "mount", "umount")


@dataclass(frozen=True)
class ThrottledDisk:
    """A mounted filesystem whose reads are throttled for members of ``cgroup``."""

    mountpoint: Path
    device: str
    cgroup: Path
    read_bps: int

    def join_prefix(self) -> list[str]:
        """A command prefix that moves itself into the throttled group, then execs the rest."""
        procs = self.cgroup / "cgroup.procs"
        return ["sh", "-c", f'echo $$ > {procs} && exec "$@"', "sh"]


def _run(*argv: str) -> str:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        raise ScenarioUnavailable(f"{' '.join(argv)} failed: {done.stderr.strip()}")
    return done.stdout.strip()


def _check_tools() -> None:
    missing = [tool for tool in TOOLS if shutil.which(tool) is None]
    if missing:
        raise ScenarioUnavailable(f"missing tools: {', '.join(missing)}")
    if not (BLKIO_ROOT / "blkio.throttle.read_bps_device").exists():
        raise ScenarioUnavailable(f"no cgroup v1 blkio throttling at {BLKIO_ROOT}")
    if os.geteuid() != 0:
        raise ScenarioUnavailable("loop devices, mounts and cgroups need root")


@contextmanager
def _loop_device(image: Path, size_bytes: int) -> Iterator[str]:
    with open(image, "wb") as out:
        out.truncate(size_bytes)
    try:
        device = _run("losetup", "--find", "--show", str(image))
        try:
            yield device
        finally:
            subprocess.run(["losetup", "-d", device], capture_output=True, timeout=30)
    finally:
        image.unlink(missing_ok=True)


@contextmanager
def _mounted(device: str, mountpoint: Path) -> Iterator[Path]:
    _run("mkfs.ext4", "-q", "-F", device)
    mountpoint.mkdir(parents=True, exist_ok=True)
    _run("mount", device, str(mountpoint))
    try:
        yield mountpoint
    finally:
        if subprocess.run(["umount", str(mountpoint)], capture_output=True).returncode:
            subprocess.run(["umount", "-l", str(mountpoint)], capture_output=True)


@contextmanager
def _blkio_group(name: str, device: str, read_bps: int) -> Iterator[Path]:
    major_minor = Path(f"/sys/class/block/{Path(device).name}/dev").read_text().strip()
    group = BLKIO_ROOT / name
    try:
        group.mkdir()
    except OSError as exc:
        raise ScenarioUnavailable(f"cannot create blkio cgroup {group}: {exc}") from None
    try:
        (group / "blkio.throttle.read_bps_device").write_text(f"{major_minor} {read_bps}\n")
        yield group
    finally:
        _empty_group(group)
        group.rmdir()


def _empty_group(group: Path) -> None:
    """Hand any process still in the group back to the root group so it can be removed."""
    for pid in (group / "cgroup.procs").read_text().split():
        with suppress(OSError):  # it exited meanwhile
            (BLKIO_ROOT / "cgroup.procs").write_text(pid)


@contextmanager
def throttled_disk(workdir: Path, size_bytes: int, read_bps: int) -> Iterator[ThrottledDisk]:
    """Build the loop device, filesystem, mount and blkio group under ``workdir``."""
    _check_tools()
    with ExitStack() as stack:
        device = stack.enter_context(_loop_device(workdir / "disk.img", size_bytes))
        mountpoint = stack.enter_context(_mounted(device, workdir / "mnt"))
        name = f"traintop-scenario-{os.getpid()}"
        cgroup = stack.enter_context(_blkio_group(name, device, read_bps))
        yield ThrottledDisk(mountpoint, device, cgroup, read_bps)


def write_dataset(root: Path, files: int, size_bytes: int) -> None:
    """``files`` random files, synced and dropped from the page cache before the run."""
    root.mkdir(parents=True, exist_ok=True)
    for index in range(files):
        path = root / f"sample-{index:04d}.bin"
        with open(path, "wb") as out:
            out.write(os.urandom(size_bytes))
            out.flush()
            os.fsync(out.fileno())
            os.posix_fadvise(out.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
