"""The training-side writer of the shared-memory step ring (format v1, docs/ring-format.md).

The writer runs inside the training loop, so it is built around three promises: ``record()``
costs well under a microsecond and makes no syscall, nothing here ever raises into training
code (a segment that cannot be created turns the writer into a no-op after one stderr line),
and a crash or fork can never leave a reader with a torn or foreign record.  Stdlib only.
"""

from __future__ import annotations

import atexit
import fcntl
import math
import mmap
import operator
import os
import struct
import sys
import time
import weakref
from collections.abc import Sequence
from pathlib import Path

from traintop import ring_paths
from traintop.ring_format import (
    DROPPED_WORD,
    FLAG_CKPT,
    FLAG_CLAMPED,
    FLAG_CRC,
    FLAG_EVAL,
    FLAG_GPU_VALID,
    FLAG_MEM_VALID,
    HEAD_WORD,
    HEADER_SIZE,
    HEARTBEAT_WORD,
    LIVE_START_MASK,
    LIVE_STEP_WORD,
    LIVE_WORD,
    MAX_PHASES,
    MEM_CUDA_ALLOCATED,
    MEM_CUDA_RESERVED,
    MEM_NONE,
    MEM_RSS,
    RECORD,
    RECORD_CRC_OFFSET,
    RECORD_SIZE,
    STATE_CLOSED,
    STATE_WORD,
    default_crc,
    header_fields,
    record_crc,
    segment_size,
    stat_ino,
    write_header,
)

__all__ = [
    "FLAG_CKPT",
    "FLAG_CLAMPED",
    "FLAG_CRC",
    "FLAG_EVAL",
    "FLAG_GPU_VALID",
    "FLAG_MEM_VALID",
    "MEM_CUDA_ALLOCATED",
    "MEM_CUDA_RESERVED",
    "MEM_NONE",
    "MEM_RSS",
    "RingWriter",
]

_U16, _U32, _U64 = (0, 0xFFFF), (0, 0xFFFFFFFF), (0, (1 << 64) - 1)
_I64 = (-(1 << 63), (1 << 63) - 1)
_RECORD_RANGES = (_I64, _U64, *([_U64] * 8), _U32, _U16, _U16, _U64, _U64, _U32)
_FLAGS_INDEX = 11  # position of flags in the record values after seq


def _noop(*_args: object, **_kwargs: object) -> None:
    """Stands in for record()/set_live() when the writer is disabled, closed or forked."""


def _clamp(value: object, bounds: tuple[int, int]) -> tuple[int, bool]:
    """Integer value within ``bounds`` and whether it had to be changed; raises on non-numbers."""
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ValueError("not a finite number")
        value = int(value)
    number = operator.index(value)  # type: ignore[arg-type]
    low, high = bounds
    fitted = min(max(number, low), high)
    return fitted, fitted != number


class RingWriter:
    """Appends one 128-byte record per training step to this process's segment.

    One writer per process (and per thread): the write cursor lives in this object.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.record = _noop
        self.set_live = _noop
        self._owner_pid = os.getpid()
        self._n = 0
        self._dropped = 0
        self._mm: mmap.mmap | None = None
        self._q: memoryview | None = None
        self._lock_fd = -1
        self._ino = 0

    @classmethod
    def create(
        cls,
        *,
        name: str,
        phases: Sequence[str],
        rank: int = 0,
        local_rank: int = 0,
        world_size: int = 1,
        capacity: int = 4096,
        directory: str | None = None,
        mem_kind: int = MEM_CUDA_ALLOCATED,
        run_id: str | None = None,
        crc: bool | None = None,
    ) -> RingWriter:
        """Create and publish a segment; on any failure return a disabled writer (never raise).

        ``directory`` (or ``$TRAINTOP_RING_DIR``) may list fallbacks separated by ``os.pathsep``.
        """
        try:
            header = header_fields(name, phases, rank, local_rank, world_size, capacity, mem_kind)
            env_run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
            header["run_id"] = env_run_id if run_id is None else run_id
            header["crc"] = default_crc() if crc is None else bool(crc)
            return cls._create_first_fit(header, ring_paths.candidate_dirs(directory))
        except Exception as exc:  # training must go on without monitoring
            _warn(f"step monitoring disabled: {exc}")
            return cls()

    @classmethod
    def _create_first_fit(cls, header: dict, dirs: list[Path]) -> RingWriter:
        """Try each directory in turn; say so (one line) when a fallback had to be used."""
        reasons = []
        for directory in dirs:
            try:
                new = ring_paths.create_segment_file(
                    directory, os.getpid(), header["rank"], segment_size(header["capacity"])
                )
            except (OSError, ring_paths.RingDirError) as exc:
                reasons.append(str(exc))
                continue
            writer = cls._publish(new, header)
            if reasons:
                _warn(f"ring segment in fallback {directory} ({'; '.join(reasons)})")
            return writer
        raise OSError(f"no usable ring directory ({'; '.join(reasons) or 'none configured'})")

    @classmethod
    def _publish(cls, new: ring_paths.NewSegmentFile, header: dict) -> RingWriter:
        try:
            write_header(new.mm, header)
            new.publish()
        except BaseException:
            new.discard()
            raise
        writer = cls(new.final_path)
        writer._attach(new, header)
        return writer

    def _attach(self, new: ring_paths.NewSegmentFile, header: dict) -> None:
        self._mm, self._lock_fd, self._ino = new.mm, new.lock_fd, new.ino
        self._q = memoryview(new.mm).cast("Q")
        self._mask = header["capacity"] - 1
        self._pad = (0,) * (MAX_PHASES - len(header["phases"]))
        self._pack = RECORD.pack_into
        self._scratch = bytearray(RECORD_SIZE)
        self.record = self._record_crc if header["crc"] else self._record_plain
        self.set_live = self._set_live
        _WRITERS.add(self)
        _register_exit_hooks()

    @property
    def enabled(self) -> bool:
        """False when creation failed, after close() and in a forked child."""
        return self._q is not None

    @property
    def dropped(self) -> int:
        """Records refused because their values could not be stored at all."""
        return self._dropped

    def _record_plain(
        self,
        step: int,
        t_start_ns: int,
        phase_ns: Sequence[int],
        samples: int,
        gpu_ns: int = 0,
        gpu_lag: int = 0,
        mem_bytes: int = 0,
        flags: int = 0,
        tokens: int = 0,
    ) -> None:
        """Hot path (x86): one pack_into for the record, then one 8-byte store publishes it."""
        n = self._n
        try:
            self._pack(
                self._mm, HEADER_SIZE + (n & self._mask) * RECORD_SIZE, n + 1, step, t_start_ns,
                *phase_ns, *self._pad, samples, flags, gpu_lag, gpu_ns, mem_bytes, tokens, 0, n + 1,
            )  # fmt: skip
        except Exception:
            self._record_checked(step, t_start_ns, phase_ns, samples, flags, gpu_lag, gpu_ns,
                                 mem_bytes, tokens)  # fmt: skip
            return
        self._n = n + 1
        q = self._q
        q[HEAD_WORD] = n + 1
        q[HEARTBEAT_WORD] = t_start_ns

    def _record_crc(
        self,
        step: int,
        t_start_ns: int,
        phase_ns: Sequence[int],
        samples: int,
        gpu_ns: int = 0,
        gpu_lag: int = 0,
        mem_bytes: int = 0,
        flags: int = 0,
        tokens: int = 0,
    ) -> None:
        """Hot path (weak memory): readers accept the record only if its crc matches."""
        try:
            values = (step, t_start_ns, *phase_ns, *self._pad, samples, flags, gpu_lag, gpu_ns,
                      mem_bytes, tokens)  # fmt: skip
            self._store(values)
        except Exception:
            self._record_checked(step, t_start_ns, phase_ns, samples, flags, gpu_lag, gpu_ns,
                                 mem_bytes, tokens)  # fmt: skip

    def _record_checked(self, step, t_start_ns, phase_ns, samples, flags, gpu_lag, gpu_ns,
                        mem_bytes, tokens) -> None:  # fmt: skip
        """Slow path for values the fast pack refused: clamp what is numeric, drop the rest."""
        try:
            phases = tuple(phase_ns)
            if len(phases) + len(self._pad) != MAX_PHASES:
                raise ValueError("wrong number of phases")
            raw = (step, t_start_ns, *phases, *self._pad, samples, flags, gpu_lag, gpu_ns,
                   mem_bytes, tokens)  # fmt: skip
            fitted = [_clamp(v, bounds) for v, bounds in zip(raw, _RECORD_RANGES, strict=True)]
            values = [value for value, _ in fitted]
            if any(changed for _, changed in fitted):
                values[_FLAGS_INDEX] |= FLAG_CLAMPED
            self._store(tuple(values))
        except Exception:
            self._dropped += 1
            if self._q is not None:
                self._q[DROPPED_WORD] = self._dropped

    def _store(self, values: tuple) -> None:
        """Write and publish one record from already validated values (crc'd when enabled)."""
        n = self._n
        offset = HEADER_SIZE + (n & self._mask) * RECORD_SIZE
        if self.record == self._record_crc:
            scratch = self._scratch
            RECORD.pack_into(scratch, 0, n + 1, *values, 0, n + 1)
            struct.pack_into("<I", scratch, RECORD_CRC_OFFSET, record_crc(scratch))
            self._mm[offset : offset + RECORD_SIZE] = scratch
        else:
            RECORD.pack_into(self._mm, offset, n + 1, *values, 0, n + 1)
        self._n = n + 1
        self._q[HEAD_WORD] = n + 1
        self._q[HEARTBEAT_WORD] = values[1]

    def _set_live(self, phase_index: int, start_ns: int, step: int) -> None:
        """Publish "now in phase X since T" so the monitor can name a phase that hangs."""
        try:
            self._q[LIVE_WORD] = (phase_index << 56) | ((start_ns // 1000) & LIVE_START_MASK)
            self._q[LIVE_STEP_WORD] = step & _U64[1]
        except Exception:
            return

    def close(self, unlink: bool = False) -> None:
        """Mark the segment CLOSED and release it; only the creating process may do this.

        The file is kept by default so a monitor can still show the finished job's last numbers;
        readers remove finished and crashed segments after a grace period.
        """
        if self._q is None or os.getpid() != self._owner_pid:
            return
        self._q[HEARTBEAT_WORD] = time.monotonic_ns()
        self._q[STATE_WORD] = STATE_CLOSED
        if unlink and self.path is not None and stat_ino(str(self.path)) == self._ino:
            os.unlink(self.path)
        self._release(unlock=True)

    def _release(self, unlock: bool) -> None:
        """Drop the mapping and lock fd; a forked child must only close its copy (no LOCK_UN)."""
        self.record = self.set_live = _noop
        if self._q is not None:
            self._q.release()
            self._q = None
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._lock_fd >= 0:
            if unlock:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1
        _WRITERS.discard(self)

    def __reduce__(self) -> object:
        raise TypeError("RingWriter cannot be pickled: create one in each process that records")


def _warn(message: str) -> None:
    print(f"traintop: {message}", file=sys.stderr, flush=True)


_WRITERS: weakref.WeakSet[RingWriter] = weakref.WeakSet()
_HOOKS_PID = 0


def _after_fork_in_child() -> None:
    """A forked child shares the parent's pages: its inherited writers must go silent."""
    global _HOOKS_PID
    _HOOKS_PID = 0
    for writer in list(_WRITERS):
        writer._release(unlock=False)


def _close_all() -> None:
    for writer in list(_WRITERS):
        writer.close()


def _register_exit_hooks() -> None:
    """atexit for normal exits; multiprocessing workers leave via os._exit, so Finalize too."""
    global _HOOKS_PID
    if os.getpid() == _HOOKS_PID:
        return
    _HOOKS_PID = os.getpid()
    atexit.register(_close_all)
    import multiprocessing.util

    multiprocessing.util.Finalize(None, _close_all, exitpriority=0)


os.register_at_fork(after_in_child=_after_fork_in_child)
