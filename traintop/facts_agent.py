"""The probe's knowledge of the job beyond its steps, gathered off the training thread.

Zero-code (``traintop run``): ``install`` is called by ``traintop.torch_hooks`` once torch is
patched.  From then on two threads share the work:

* The helper thread (``traintop.stack_helper``, which wakes every 2 s) calls ``wake``: it notes
  the step rate, installs the sync hook once CUDA is initialised (``traintop.sync_hook``) and
  keeps its filter first, reads the caching allocator's retries, decides when a forward sample
  (``traintop.job_knobs``) or a step profile (``traintop.step_profiler``) is due, summarises a
  finished profile, and writes the facts side file when anything changed
  (``traintop.facts_file``).
* The training thread does only what must happen there, at a step boundary the helper asked
  for: the probe's ``step()`` compares its step with ``_tick_at`` (one comparison a step) and
  calls ``on_tick`` when it is reached, to hook one forward or to start, switch or stop the
  profiler.

Each part fails on its own: one stderr line, that part off, the rest (and training) going on.
With ``TRAINTOP_STACKS=0`` there is no helper thread, so no facts file: the monitor then reads
every fact as "could not tell".  ``TRAINTOP_FACTS=0`` turns all of this off.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import statistics
import sys
import time
from collections import deque
from pathlib import Path
from types import ModuleType
from typing import Any

from traintop import facts_file, sync_hook
from traintop.job_knobs import KnobWatch
from traintop.probe import NO_TICK
from traintop.step_profiler import RECORDING, WANTED, WARMING, ProfileConfig, StepProfiler

ENV = "TRAINTOP_FACTS"
WAKE_S = 1.9  # at most one wake per helper period (a stack request wakes it sooner)
SAMPLE_EVERY_S = 30.0  # how often autocast is sampled inside forward
NOT_SEEN = {"cuda_graphs": None, "attention": None, "pinned_copies": None}


class FactsAgent:
    """Everything the facts file holds, and who fills it (see the module docstring)."""

    def __init__(self, probe: Any, torch: ModuleType, knobs: KnobWatch | None) -> None:
        self._probe = probe
        self._torch = torch
        self._knobs = knobs
        self.sync: sync_hook.SyncHook | None = None
        self.profiler: StepProfiler | None = None
        self._config = ProfileConfig.from_env()
        self._cuda_done = False  # the CUDA-only parts were set up (or found off)
        self._retries_on = True
        self.alloc_retries: int | None = None
        self.profile: dict[str, Any] | None = None
        self._profiled = dict(NOT_SEEN)
        self._rate: deque[tuple[float, int]] = deque(maxlen=16)
        self._start_s: float | None = None  # when the first step was seen
        self._want_sample = False
        self._last_wake = -WAKE_S
        self._written: dict[str, Any] | None = None
        self._close_hooked = False
        self._off: set[str] = set()

    # ---- the training thread ---------------------------------------------------------------

    def on_tick(self, step: int, _now_ns: int) -> None:
        """At the end of ``step``, when the helper asked for this boundary.  Never raises."""
        again = False
        try:
            if self._want_sample and self._knobs is not None:
                self._want_sample = not self._knobs.arm_forward_sample()
            profiler = self.profiler
            if profiler is not None and profiler.state in (WANTED, WARMING, RECORDING):
                again = profiler.at_boundary(step)
        except Exception as exc:
            self._want_sample = False
            self._part_off("forward sample", exc)
        self._probe._tick_at = step + 1 if again else NO_TICK

    # ---- the helper thread -----------------------------------------------------------------

    def wake(self, segment: Path) -> None:
        """Called by the helper thread on each of its wakes.  Never raises."""
        now = time.monotonic()
        if now - self._last_wake < WAKE_S or "job facts" in self._off:
            return
        self._last_wake = now
        try:
            self._observe(now, segment)
            self._cuda_parts()
            self._plan(now)
            self._collect(now)
            self._write(segment)
        except Exception as exc:
            self._part_off("job facts", exc)

    def _observe(self, now: float, segment: Path) -> None:
        steps, writer = self._probe._step, self._probe._writer
        if self._start_s is not None and not self._close_hooked:
            # From the second wake: the helper's own cleanup (stack_helper.start registers it
            # just after starting the thread) must run first, as it removes our file.
            self._close_hooked = True
            writer.on_close(lambda: self._at_close(segment))
        if self._start_s is None and writer is not None:
            self._start_s = now  # the first step has ended: the segment exists from then on
        if not self._rate or self._rate[-1][1] != steps:
            self._rate.append((now, steps))

    def typical_step_s(self) -> float | None:
        """An ordinary step's length: the median over the recent wake-to-wake intervals of
        their mean step (a pause for evaluation falls in one interval, not in the median);
        None before two wakes saw steps."""
        pairs = itertools.pairwise(list(self._rate))
        means = [(t1 - t0) / (s1 - s0) for (t0, s0), (t1, s1) in pairs if s1 > s0]
        return statistics.median(means) if means else None

    def _cuda_parts(self) -> None:
        """Once CUDA is initialised: the sync hook and the profiler (the latter on CPU jobs
        too when asked); then, every wake, the filter's place and the allocator's retries."""
        cuda = self._cuda_ready()
        if not self._cuda_done and (cuda or self._config.mode == "cpu"):
            self._cuda_done = True
            self.sync = sync_hook.install(self._torch) if cuda else None
            self.profiler = self._new_profiler(self._config, cuda)
        if self.sync is not None:
            self.sync.keeper.keep_first()
        if cuda and self._retries_on:
            self.alloc_retries = self._read_retries()

    def _cuda_ready(self) -> bool:
        cuda = getattr(self._torch, "cuda", None)
        try:
            return bool(cuda is not None and cuda.is_initialized())
        except Exception:
            return False

    def _new_profiler(self, config: ProfileConfig, cuda: bool) -> StepProfiler | None:
        if config.mode == "off":
            return None
        try:
            profiler = StepProfiler(self._torch, config, cuda, self._pause_sync_hook)
            profiler.yield_to_user(self._torch.autograd.profiler)
        except Exception as exc:
            self._part_off("step profile", exc)
            return None
        return profiler

    def _pause_sync_hook(self, on: bool) -> None:
        if self.sync is not None:
            self.sync.ledger.paused = on

    def _read_retries(self) -> int | None:
        """``num_alloc_retries`` summed over the devices (a rank allocates on its own)."""
        cuda = self._torch.cuda
        try:
            stats = [cuda.memory_stats(d) for d in range(cuda.device_count())]
            return sum(int(s.get("num_alloc_retries", 0)) for s in stats)
        except Exception as exc:
            self._retries_on = False
            self._part_off("allocator retries", exc)
            return None

    def _plan(self, now: float) -> None:
        """Ask the training thread for a forward sample or a profile at its next boundary."""
        knobs, profiler = self._knobs, self.profiler
        if knobs is not None and not knobs.compiled_in_place and "forward sample" not in self._off:
            last = knobs.sampled_at
            self._want_sample = last is None or now - last >= SAMPLE_EVERY_S
        if profiler is not None:
            self._plan_profile(profiler, now)
        if self._want_sample or (profiler is not None and profiler.state == WANTED):
            self._probe._tick_at = self._probe._step

    def _plan_profile(self, profiler: StepProfiler, now: float) -> None:
        typical, start = self.typical_step_s(), self._start_s
        if start is not None and typical is not None and profiler.due(now, start):
            profiler.want(typical)

    def _collect(self, now: float) -> None:
        if self.profiler is None or self._start_s is None:
            return
        done = self.profiler.collect(now, self._start_s)
        if done is None:
            return
        self.profile, split = done
        cpu_only = not self._cuda_ready()
        pinned = _pinned(split)
        self._profiled = {
            "cuda_graphs": None if cpu_only else split.graph_launches > 0,
            "attention": split.attention or self._profiled["attention"],
            "pinned_copies": self._profiled["pinned_copies"] if pinned is None else pinned,
        }

    def _write(self, segment: Path) -> None:
        doc = self.document()
        same = dict(doc, taken_ns=0)
        if not doc["sync"]:  # steps matter to the reader only for the sync rates
            same["steps"] = 0
        if same == self._written:
            return
        facts_file.write(facts_file.facts_path(segment), doc)
        self._written = same

    def document(self) -> dict[str, Any]:
        facts = self._knobs.facts(self._profiled) if self._knobs is not None else {}
        facts["syncs_watched"] = self.sync is not None
        sites = self.sync.ledger.sites() if self.sync is not None else []
        return facts_file.document(time.monotonic_ns(), self._probe._step, facts, sites,
                                   self.alloc_retries, self.profile)  # fmt: skip

    def _at_close(self, segment: Path) -> None:
        """The segment closes (on the closing thread, the helper's cleanup done): no profile
        left running, and the facts as they end, written again (the cleanup removed them)."""
        self._probe._tick_at = NO_TICK
        try:
            if self.profiler is not None:
                self.profiler.abort()
            self._collect(time.monotonic())
            self._written = None
            self._write(segment)
        except Exception as exc:
            self._part_off("job facts", exc)

    def _part_off(self, part: str, exc: BaseException) -> None:
        if part in self._off:
            return
        self._off.add(part)
        with contextlib.suppress(Exception):
            print(f"traintop: {part} disabled ({type(exc).__name__}: {exc})", file=sys.stderr)


def _pinned(split: Any) -> bool | None:
    """Host-to-device copies from pinned memory (True), some pageable (False), none (None)."""
    if split.pageable_copies:
        return False
    return True if split.pinned_copies else None


def _env_off() -> bool:
    return os.environ.get(ENV, "1").strip().lower() in ("0", "off", "no", "false", "none")


def install(probe: Any, torch: ModuleType, finder: Any = None) -> FactsAgent | None:
    """Give ``probe`` its agent (zero-code only).  Never raises."""
    if _env_off():
        return None
    knobs: KnobWatch | None = KnobWatch(torch, finder)
    try:
        knobs.install(probe._patches)
    except Exception as exc:
        print(f"traintop: job facts from loaders and optimizers disabled ({exc})", file=sys.stderr)
        knobs = None
    agent = FactsAgent(probe, torch, knobs)
    probe._facts, probe._on_tick = agent, agent.on_tick
    return agent
