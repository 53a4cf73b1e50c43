"""GPU time per step and CUDA allocator memory, measured without ever stalling the trainer.

CUDA kernels run asynchronously, so the CPU-side step time says little about the GPU.  Events
recorded on the current stream at step boundaries do, but reading them must not block: an
``event.synchronize()`` or an ``elapsed_time()`` on an unfinished event would serialise the
training loop (recent PyTorch raises on the latter).  So only every k-th step is timed, pending
pairs wait in a short queue, and each later step polls the oldest one with ``event.query()``.
A finished pair is written into the *current* record as ``gpu_ns`` with ``gpu_lag`` = how many
steps ago it happened (the reader joins on ``step - gpu_lag``).

Nothing here imports torch: ``detect()`` looks at an already-imported torch, and the classes take
factories so the logic is tested with fake events on machines without a GPU.
"""

from __future__ import annotations

import sys
from collections import deque
from collections.abc import Callable
from typing import Protocol

FLAG_GPU_VALID = 1 << 0  # same values as traintop.ring (kept import-free for the hot path)
FLAG_MEM_VALID = 1 << 1
NS_PER_MS = 1_000_000


class Event(Protocol):
    """The subset of ``torch.cuda.Event`` used here."""

    def record(self) -> None: ...

    def query(self) -> bool: ...

    def elapsed_time(self, end_event: Event) -> float: ...


class StepGpuTimer:
    """Times every ``every``-th step with an event pair; results arrive a few steps later."""

    def __init__(
        self,
        new_event: Callable[[], Event],
        *,
        every: int = 16,
        max_pending: int = 4,
        capturing: Callable[[], bool] = lambda: False,
    ) -> None:
        self._new_event = new_event
        self._every = max(1, every)
        self._max_pending = max_pending
        self._capturing = capturing
        self._start: tuple[int, Event] | None = None
        self._pending: deque[tuple[int, Event, Event]] = deque()

    def at_boundary(self, ended_step: int) -> tuple[int, int] | None:
        """Call when ``ended_step`` ends; returns (gpu_ns, gpu_lag) of an earlier step, if ready."""
        if self._start is not None:
            self._finish_pending(ended_step)
        result = self._poll(ended_step)
        next_step = ended_step + 1
        if next_step % self._every == 0 and len(self._pending) < self._max_pending:
            self._begin(next_step)
        return result

    def _begin(self, step: int) -> None:
        if self._capturing():  # events cannot be recorded inside CUDA graph capture
            return
        event = self._new_event()
        event.record()
        self._start = (step, event)

    def _finish_pending(self, ended_step: int) -> None:
        step, start = self._start  # type: ignore[misc]
        self._start = None
        if step != ended_step or self._capturing():
            return
        end = self._new_event()
        end.record()
        self._pending.append((step, start, end))

    def _poll(self, ended_step: int) -> tuple[int, int] | None:
        """Resolve the oldest pair if its end event has completed; never waits."""
        if not self._pending or not self._pending[0][2].query():
            return None
        step, start, end = self._pending.popleft()
        gpu_ns = max(0, round(start.elapsed_time(end) * NS_PER_MS))
        return gpu_ns, ended_step - step


class MemorySampler:
    """Reads an allocator counter at most once per ``interval_ns``; it costs a driver call."""

    def __init__(self, read_bytes: Callable[[], int], *, interval_ns: int = 1_000_000_000) -> None:
        self._read = read_bytes
        self._interval = interval_ns
        self._last = None

    def sample(self, now_ns: int) -> int | None:
        if self._last is not None and now_ns - self._last < self._interval:
            return None
        self._last = now_ns
        return int(self._read())


class CudaStepStats:
    """The probe's per-step extras: (gpu_ns, gpu_lag, mem_bytes, flags) for each record."""

    def __init__(self, timer: StepGpuTimer, memory: MemorySampler) -> None:
        self._timer = timer
        self._memory = memory
        self._broken = False

    def at_step(self, step: int, now_ns: int) -> tuple[int, int, int, int]:
        if self._broken:
            return 0, 0, 0, 0
        try:
            return self._measure(step, now_ns)
        except Exception as exc:  # GPU stats are optional: keep the step timings going
            self._broken = True
            print(f"traintop: GPU timing disabled ({type(exc).__name__}: {exc})", file=sys.stderr)
            return 0, 0, 0, 0

    def _measure(self, step: int, now_ns: int) -> tuple[int, int, int, int]:
        gpu_ns = gpu_lag = mem = flags = 0
        timed = self._timer.at_boundary(step)
        if timed is not None:
            (gpu_ns, gpu_lag), flags = timed, FLAG_GPU_VALID
        sampled = self._memory.sample(now_ns)
        if sampled is not None:
            mem, flags = sampled, flags | FLAG_MEM_VALID
        return gpu_ns, gpu_lag, mem, flags


def detect() -> CudaStepStats | None:
    """GPU stats when the process has already initialised CUDA through torch, else None.

    Never imports torch and never initialises CUDA itself: on CPU-only torch, or before the
    model touches the GPU, this returns None and the probe asks again later.
    """
    torch = sys.modules.get("torch")
    cuda = getattr(torch, "cuda", None)
    if cuda is None or not cuda.is_initialized():
        return None
    timer = StepGpuTimer(
        lambda: cuda.Event(enable_timing=True), capturing=cuda.is_current_stream_capturing
    )
    return CudaStepStats(timer, MemorySampler(cuda.memory_allocated))
