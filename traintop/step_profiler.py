"""A profile of one training step every so often, cheap enough to leave on.

Only a kernel timeline tells launch gaps and sync drains from kernels (``traintop.hta_split``),
and only CUPTI has one, through torch's profiler.  A profiled step runs slower (about a quarter
on an H100), so one step is profiled, after one warm-up step (CUPTI's start-up costs stay out
of it), no more often than every ``TRAINTOP_PROFILE_EVERY_S`` (300 s) and only while the total
cost stays under ``TRAINTOP_PROFILE_SHARE`` (0.1 %) of the training time so far; the first one
comes after ``TRAINTOP_PROFILE_FIRST_S`` (60 s) of training, on credit.

The cost is measured, not assumed: the training thread's extra time over the two steps (their
length minus two ordinary steps, or at least the profiler calls' own time) plus the helper
thread's time to read and summarise the events (it holds the GIL meanwhile).

Threads.  The profiler's state is per thread, so the training thread drives it at step
boundaries (``at_boundary``, called through the probe's tick only while a profile is under way):
prepare, enable one step later, then drain the GPU and disable one step after that.  The
helper thread decides when (``due``), and reads and summarises the result (``collect``): the
training thread never parses an event.  No trace file is written.  torch's Python profiler
wrapper is not used (it imports inductor, seconds, on first use); its C calls are.  Kineto's
own log lines are silenced for the first profile (``KINETO_LOG_LEVEL``, unless the user set
it), as they would go to the user's stderr.  A profiler the user starts takes precedence: ours
is not started while one runs, and one of theirs starting cancels ours.

``TRAINTOP_PROFILE=0`` turns it off; ``cpu`` profiles CPU jobs too (the tests, the benchmark).
"""

from __future__ import annotations

import contextlib
import functools
import os
import sys
import time
from collections.abc import Callable
from types import ModuleType
from typing import Any, NamedTuple

from traintop.hta_split import StepSplit, TraceEvent, split_step

ENV, ENV_EVERY, ENV_FIRST, ENV_SHARE = (
    "TRAINTOP_PROFILE",
    "TRAINTOP_PROFILE_EVERY_S",
    "TRAINTOP_PROFILE_FIRST_S",
    "TRAINTOP_PROFILE_SHARE",
)
IDLE, WANTED, WARMING, RECORDING, DONE = range(5)
GPU_ACTIVITIES = {"kernel": "kernel", "gpu_memcpy": "memcpy", "gpu_memset": "memset"}
RUNTIME_ACTIVITIES = frozenset({"cuda_runtime", "cuda_driver"})
KEPT_OPS = ("attention", "softmax")  # the CPU ops the summary needs (attention's backend)
SILENT_KINETO = "6"  # above every kineto log level, USDT and STAGE included


class ProfileConfig(NamedTuple):
    mode: str  # "off", "cuda" (CUDA jobs only), "cpu" (any job)
    every_s: float
    first_s: float
    share: float

    @classmethod
    def from_env(cls) -> ProfileConfig:
        text = os.environ.get(ENV, "1").strip().lower()
        mode = "off" if text in ("0", "off", "no", "false") else "cpu" if text == "cpu" else "cuda"
        return cls(
            mode, _seconds(ENV_EVERY, 300.0), _seconds(ENV_FIRST, 60.0), _seconds(ENV_SHARE, 0.001)
        )


def _seconds(name: str, default: float) -> float:
    try:
        return max(0.0, float(os.environ[name]))
    except (KeyError, ValueError):
        return default


class Kineto:
    """torch's profiler C calls, resolved up front (AttributeError on a torch without them)."""

    def __init__(self, torch: ModuleType, cuda: bool) -> None:
        autograd, profiler = torch._C._autograd, torch._C._profiler
        self.prepare, self.enable = autograd._prepare_profiler, autograd._enable_profiler
        self.disable, self.running = autograd._disable_profiler, autograd._profiler_enabled
        supported = autograd._supported_activities()
        wanted = {profiler.ProfilerActivity.CPU}
        if cuda and profiler.ProfilerActivity.CUDA in supported:
            wanted.add(profiler.ProfilerActivity.CUDA)
        self.activities = wanted & supported
        self.config = _profiler_config(profiler)
        self._quiet = "KINETO_LOG_LEVEL" not in os.environ  # until kineto read it once

    def prepare_quietly(self) -> None:
        if not self._quiet:
            self.prepare(self.config, self.activities)
            return
        os.environ["KINETO_LOG_LEVEL"] = SILENT_KINETO
        try:
            self.prepare(self.config, self.activities)
        finally:
            os.environ.pop("KINETO_LOG_LEVEL", None)
            self._quiet = False


def _profiler_config(profiler: ModuleType) -> Any:
    """No shapes, memory, stacks, flops or modules: the cheapest profile there is."""
    args = (profiler.ProfilerState.KINETO, False, False, False, False, False)
    try:
        return profiler.ProfilerConfig(*args, profiler._ExperimentalConfig(), "")
    except TypeError:  # before the trace id (torch < 2.5)
        return profiler.ProfilerConfig(*args, profiler._ExperimentalConfig())


class StepProfiler:
    """One profile at a time; see the module docstring for who calls what."""

    def __init__(
        self,
        torch: ModuleType,
        config: ProfileConfig,
        cuda: bool,
        pause: Callable[[bool], None] = lambda on: None,
    ) -> None:
        self.config = config
        self.state = IDLE
        self._torch = torch
        self._cuda = cuda
        self._kineto = Kineto(torch, cuda)
        self._pause = pause  # silences the sync hook for our own drain of the GPU
        self._typical_s = 0.0
        self._step = 0
        self._times: list[float] = []  # perf_counter at prepare, time_ns window, perf at end
        self._result: Any = None
        self.spent_s = 0.0
        self.taken = 0
        self._next_s: float | None = None
        self.every_s: float | None = None

    def due(self, now_s: float, start_s: float) -> bool:
        """Helper thread: is it time for the next profile (training started at ``start_s``)?"""
        if self.state != IDLE or self.config.mode == "off":
            return False
        if self._next_s is None:
            self._next_s = start_s + self.config.first_s
        return now_s >= self._next_s

    def want(self, typical_step_s: float) -> None:
        """Helper thread: start at the next step boundary (``typical_step_s``: an ordinary
        step's length now, to tell the profiled steps' extra time)."""
        self._typical_s = typical_step_s
        self.state = WANTED

    def at_boundary(self, step: int) -> bool:
        """Training thread, at the end of step ``step``: advance; True when the next boundary
        is needed too.  Never raises: a failure turns profiling off with one stderr line."""
        try:
            return self._advance(step)
        except Exception as exc:
            self._give_up(exc)
            return False

    def _advance(self, step: int) -> bool:
        kineto = self._kineto
        if self.state == WANTED:
            if kineto.running():  # the user is profiling: theirs first, ours later
                self.state = IDLE
                self._next_s = time.monotonic() + self.config.every_s
                return False
            self._times = [time.perf_counter()]
            kineto.prepare_quietly()
            self.state = WARMING
            return True
        if self.state == WARMING:
            kineto.enable(kineto.config, kineto.activities)
            self._times.append(time.time_ns())
            self._step, self.state = step + 1, RECORDING
            return True
        if self.state == RECORDING:
            self._times.append(time.time_ns())
            self._drain()
            self._result = kineto.disable()
            self._times.append(time.perf_counter())
            self.state = DONE
        return False

    def _drain(self) -> None:
        """Wait for the step's kernels, so the trace holds them all (not a user's sync)."""
        if not self._cuda:
            return
        self._pause(True)
        try:
            self._torch.cuda.synchronize()
        finally:
            self._pause(False)

    def collect(self, now_s: float, start_s: float) -> tuple[dict[str, Any], StepSplit] | None:
        """Helper thread: summarise a finished profile into the ``profile`` entry of the facts
        file (and the split, for the facts it shows); None when none is ready."""
        if self.state != DONE:
            return None
        began = time.perf_counter()
        result, self._result = self._result, None
        t_begin, t0, t1, t_end = self._times
        try:
            split = split_step(trace_events(result), int(t0), int(t1))
        except Exception as exc:
            self._give_up(exc)
            return None
        del result
        training_s = max(t_end - t_begin - 2 * self._typical_s, 0.0)
        self.spent_s += training_s + (time.perf_counter() - began)
        self.taken += 1
        self._schedule(now_s, start_s)
        self.state = IDLE
        return self._entry(split, now_s, start_s), split

    def _schedule(self, now_s: float, start_s: float) -> None:
        """The next one: ``every_s`` from now, later if the budget says so."""
        budget_at = start_s + self.spent_s / max(self.config.share, 1e-9)
        self._next_s = max(now_s + self.config.every_s, budget_at)
        self.every_s = self._next_s - now_s

    def _entry(self, split: StepSplit, now_s: float, start_s: float) -> dict[str, Any]:
        fields = split._asdict()
        fields.pop("pinned_copies")  # kept as the fact ``pinned_copies`` (facts_agent)
        step_ns = fields.pop("step_ns")
        return {
            "step": self._step,
            "taken_ns": time.monotonic_ns(),
            "step_s": step_ns / 1e9,
            **fields,
            "every_s": self.every_s,
            "cost_share": self.spent_s / max(now_s - start_s, 1e-9),
        }

    def abort(self) -> None:
        """Cancel a profile under way (a user's profiler starts, the segment closes)."""
        if self.state not in (WARMING, RECORDING):
            return
        with contextlib.suppress(Exception):
            if self.state == WARMING:
                self._kineto.enable(self._kineto.config, self._kineto.activities)
            self._kineto.disable()
        self.state = IDLE

    def yield_to_user(self, autograd_profiler: ModuleType) -> None:
        """Wrap the user's profiler start so that it cancels ours first."""
        profile = autograd_profiler.profile
        original = profile._prepare_trace

        @functools.wraps(original)
        def _prepare_trace(prof: Any) -> Any:
            self.abort()
            return original(prof)

        profile._prepare_trace = _prepare_trace

    def _give_up(self, exc: BaseException) -> None:
        self.abort()
        self.state = IDLE
        self.config = self.config._replace(mode="off")
        print(f"traintop: step profile disabled ({type(exc).__name__}: {exc})", file=sys.stderr)


def trace_events(result: Any) -> list[TraceEvent]:
    """The events of a ``_ProfilerResult`` the split needs, as plain tuples."""
    events = []
    for e in result.events():
        activity = e.activity_type()
        kind = GPU_ACTIVITIES.get(activity)
        if kind is None and activity in RUNTIME_ACTIVITIES:
            kind = "runtime"
        elif kind is None and activity == "cpu_op" and any(k in e.name() for k in KEPT_OPS):
            kind = "op"
        if kind is not None:
            stream = e.device_resource_id() if kind in ("kernel", "memcpy", "memset") else 0
            events.append(
                TraceEvent(kind, e.name(), e.start_ns(), e.end_ns(), stream, e.correlation_id())
            )
    return events
