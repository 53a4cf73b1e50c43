"""The training-side writer of the shared-memory step ring (format v1, docs/ring-format.md).

The writer runs inside the training loop, so it is built around three promises: ``record()``
costs well under a microsecond and makes no syscall, nothing here ever raises into training
code (a segment that cannot be created turns the writer into a no-op after one stderr line),
and a crash or fork can never leave a reader with a torn or foreign record.  Stdlib only.
"""

from __future__ import annotations

import atexit
import contextlib
import fcntl
import mmap
import os
import struct
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import NoReturn

from traintop import ring_paths
from traintop.ring_format import (
    FIRST_STEP_WORD,
    FLAG_CKPT,
    FLAG_CLAMPED,
    FLAG_CRC,
    FLAG_EVAL,
    FLAG_GPU_VALID,
    FLAG_MEM_VALID,
    HANDOFF_CPU_WORD,
    HANDOFF_NS_WORD,
    HEAD_WORD,
    HEADER_GEN_WORD,
    HEARTBEAT_WORD,
    LIVE_WORD,
    MEM_CUDA_ALLOCATED,
    MEM_CUDA_RESERVED,
    MEM_NONE,
    MEM_RSS,
    STATE_CLOSED,
    STATE_WORD,
    default_crc,
    header_fields,
    rewrite_identity,
    rewrite_layout,
    segment_size,
    stat_ino,
    write_header,
)
from traintop.ring_record import make_recorder
from traintop.ring_shrink import shrink

# A signed word as the ring stores it: C long, 8 bytes where it is (a store through it costs
# less than through "Q"), else long long
SIGNED_WORD = "l" if struct.calcsize("l") == 8 else "q"

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


def _noop(*_args: object, **_kwargs: object) -> None:
    """Stands in for record()/set_live() when the writer is disabled, closed or forked."""


class RingWriter:
    """Appends one 128-byte record per training step to this process's segment.

    One writer per process (and per thread): the write cursor lives in its ``record`` closure
    (traintop.ring_record), which is what the training loop calls.
    """

    def __init__(self, path: Path | None = None) -> None:
        self.path = path
        self.record = self._record = _noop
        self.set_live = _noop
        self._owner_pid = os.getpid()
        self._dropped: Callable[[], int] = lambda: 0
        self._mm: mmap.mmap | None = None
        self._q: memoryview | None = None
        # The same words signed: storing an int below 2**63 through 'l' skips the byte-array
        # conversion 'Q' makes (~150 instructions a store, six live words and three record
        # words a step); the bytes are the same.
        self._l: memoryview | None = None
        self.live_word: memoryview | None = None  # [0] = the live word, for the probe's stores
        # [0] ns, [1] batches, [2] CPU ns (traintop/handoff.py)
        self.handoff_words: memoryview | None = None
        self._lock_fd = -1
        self._ino = 0
        self._geometry: tuple[int, bool] = (0, False)  # capacity, crc: to re-make ``record``
        self._on_close: list[Callable[[], None]] = []  # run by close() in the creating process

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
            header["run_id"] = env_run_id() if run_id is None else run_id
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
        self._l = memoryview(new.mm).cast(SIGNED_WORD)
        self.live_word = self._l[LIVE_WORD : LIVE_WORD + 1]
        self.handoff_words = self._l[HANDOFF_NS_WORD : HANDOFF_CPU_WORD + 1]
        self._geometry = (header["capacity"], header["crc"])
        self._make_recorder(len(header["phases"]))
        _WRITERS.add(self)
        _register_exit_hooks()

    def _make_recorder(self, n_phases: int) -> None:
        """``record`` for ``n_phases`` phases; until the first record, one that also stores the
        first step's length (``_first_record``), then the bare closure: nothing per step."""
        capacity, crc = self._geometry
        recorder = make_recorder(self._mm, self._q, self._l, capacity, n_phases, crc)  # type: ignore[arg-type]
        self.set_live, self._dropped = recorder.set_live, recorder.dropped
        self._record = recorder.record
        self.record = self._first_record

    def _first_record(self, step: int, t_start_ns: int, phase_ns: Sequence[int], *rest: int,
                      **named: int) -> None:  # fmt: skip
        """The first record, and its length into the first-step word (the warm-up's cost)."""
        record = self.record = self._record
        record(step, t_start_ns, phase_ns, *rest, **named)
        with contextlib.suppress(Exception):  # released meanwhile (fork): nothing to keep
            self._q[FIRST_STEP_WORD] = max(1, int(sum(phase_ns)))  # type: ignore[index]

    def rewrite_layout(self, name: str, phases: Sequence[str]) -> bool:
        """Put a job name and phase names learnt after creation into the header, while it holds
        no record (a segment made at start-up, ``traintop.run_start``); False once it does."""
        if self._mm is None or self._q is None or os.getpid() != self._owner_pid:
            return False
        if self._q[HEAD_WORD] or self.record != self._first_record:
            return False
        try:
            rewrite_layout(self._mm, name, tuple(phases))
        except Exception as exc:
            _warn(f"phase names not written to the ring header: {exc}")
            return False
        self._make_recorder(len(phases))
        self._q[HEADER_GEN_WORD] = self._q[HEADER_GEN_WORD] + 1
        return True

    @property
    def enabled(self) -> bool:
        """False when creation failed, after close() and in a forked child."""
        return self._q is not None

    @property
    def dropped(self) -> int:
        """Records refused because their values could not be stored at all."""
        return self._dropped()

    def ledger_views(self) -> tuple[mmap.mmap, memoryview] | None:
        """The mapping and its ``cast('Q')`` view, for the collective ledger
        (``traintop.ledger``) that lives in the header page; None when disabled."""
        if self._mm is None or self._q is None:
            return None
        return self._mm, self._q

    def on_close(self, hook: Callable[[], None]) -> None:
        """Run ``hook`` when this process closes the segment (the stack helper's cleanup);
        never in a forked child, which only drops its copy."""
        self._on_close.append(hook)

    def rewrite_identity(self, identity: object) -> None:
        """Put a rank identity learnt after creation (``init_process_group``) into the header.

        ``identity`` has ``rank``, ``local_rank``, ``world_size`` and ``run_id``
        (``traintop.dist_identity.Identity``); the header generation word tells readers to
        parse the header again.  Only the creating process may do this; failures only warn.
        """
        if self._mm is None or self._q is None or os.getpid() != self._owner_pid:
            return
        try:
            rewrite_identity(self._mm, identity.rank, identity.local_rank,  # type: ignore[attr-defined]
                             identity.world_size, identity.run_id)  # type: ignore[attr-defined]  # fmt: skip
            self._q[HEADER_GEN_WORD] = self._q[HEADER_GEN_WORD] + 1
        except Exception as exc:
            _warn(f"rank identity not written to the ring header: {exc}")

    def close(self, unlink: bool = False) -> None:
        """Mark the segment CLOSED and release it; only the creating process may do this.

        The file is kept by default so a monitor can still show the finished job's last numbers,
        shrunk to the header and the newest records (traintop/ring_shrink.py); readers remove
        finished and crashed segments after a grace period, new writers beyond a budget.
        """
        if self._q is None or os.getpid() != self._owner_pid:
            return
        for hook in self._on_close:
            try:
                hook()
            except Exception as exc:  # its cleanup only: the segment still closes
                _warn(f"cleanup at close failed: {exc}")
        self._q[HEARTBEAT_WORD] = time.monotonic_ns()
        self._q[STATE_WORD] = STATE_CLOSED
        if unlink and self.path is not None and stat_ino(str(self.path)) == self._ino:
            os.unlink(self.path)
        elif self.path is not None and self._mm is not None:
            shrink(self._mm, self.path, self._ino)
        self._release(unlock=True)

    def _release(self, unlock: bool) -> None:
        """Drop the mapping and lock fd; a forked child must only close its copy (no LOCK_UN)."""
        self.record = self._record = self.set_live = _noop
        for word in (self.live_word, self.handoff_words):  # a probe may still hold them:
            if word is not None:  # released, they refuse stores
                word.release()
        self.live_word = self.handoff_words = None
        for view in (self._q, self._l):
            if view is not None:
                view.release()
        self._q = self._l = None
        if self._mm is not None:
            self._mm.close()
            self._mm = None
        if self._lock_fd >= 0:
            if unlock:
                fcntl.flock(self._lock_fd, fcntl.LOCK_UN)
            os.close(self._lock_fd)
            self._lock_fd = -1
        _WRITERS.discard(self)

    def __reduce__(self) -> NoReturn:
        raise TypeError("RingWriter cannot be pickled: create one in each process that records")


def _warn(message: str) -> None:
    print(f"traintop: {message}", file=sys.stderr, flush=True)


# Strong references: a writer the program dropped without close() must still be closed at exit
# (a weak set would lose it, and its segment would read "crashed" after a clean exit).
_WRITERS: set[RingWriter] = set()
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
    """atexit for normal exits; multiprocessing workers leave via os._exit, so Finalize too
    (in a process multiprocessing started: one made otherwise does not pay for its import)."""
    global _HOOKS_PID
    if os.getpid() == _HOOKS_PID:
        return
    _HOOKS_PID = os.getpid()
    atexit.register(_close_all)
    if "multiprocessing" in sys.modules:
        import multiprocessing.util

        multiprocessing.util.Finalize(None, _close_all, exitpriority=0)


os.register_at_fork(after_in_child=_after_fork_in_child)


def env_run_id() -> str:
    """The launcher's run id, else the rendezvous store address (see collectors/job_key.py).

    torchrun's default run id is the literal ``none``, shared by every job started without
    ``--rdzv-id``; the store address torchrun (and most launchers) export is unique per live job.
    """
    run_id = os.environ.get("TORCHELASTIC_RUN_ID", "")
    if run_id not in ("", "none"):
        return run_id
    addr, port = os.environ.get("MASTER_ADDR"), os.environ.get("MASTER_PORT")
    return f"tcp://{addr}:{port}" if addr and port else ""


def segment_words(writer: object) -> tuple[Path, memoryview] | None:
    """``writer``'s segment file and its words (``cast('Q')``), for the helpers that live beside
    a segment (the stack helper, the end watch); None for a writer with no real segment (a
    DataLoader worker's silent one) or no mapping."""
    path, views = getattr(writer, "path", None), getattr(writer, "ledger_views", None)
    found = views() if views is not None else None
    return None if path is None or found is None else (Path(path), found[1])
