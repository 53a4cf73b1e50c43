"""Verdicts on the sampler thread: each snapshot is diagnosed before it is handed to the UI.

The verdict travels in the same message as its snapshot, so the UI thread applies panels,
banner and evidence marks in one ``batch_update()`` and paints one frame per tick; a verdict
arriving on its own, just after the snapshot's frame, cost a second full repaint every tick.
A diagnosis costs about a millisecond a tick with one 8-rank job and 5 with 64 ranks
(benchmarks/bench_diagnose.py), which the sampler thread can spare and the UI thread (keys,
repaints) should not.  The runner is thread-confined: only the thread that delivers snapshots
calls :meth:`VerdictRunner.update`, so its :class:`~traintop.diagnosis.verdict_window.VerdictWindow`
(whose stabilizer keeps what one tick's diagnosis shares with the next: ``traintop.diagnosis.memo``)
and the history need no locks.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.api import Verdict, VerdictStabilizer, VerdictWindow
from traintop.diagnosis.run_memory import RunMemory
from traintop.diagnosis.verdict_history import VerdictPoint, extend, point_from
from traintop.diagnosis.verdict_window import WINDOW_S

RESAMPLE_S = 10.0  # a rank whose samples have not come (or were not in its phase) is asked again


@dataclass(frozen=True, slots=True)
class VerdictUpdate:
    """A stabilised verdict and the history up to it, ready for the UI to display."""

    verdict: Verdict
    history: tuple[VerdictPoint, ...]
    # A job restarted under the same name, against the run before it: one line per changed
    # knob, the gain measured beside the gain predicted (traintop.diagnosis.run_memory)
    against: tuple[str, ...] = ()


class VerdictRunner:
    """Owns the verdict window and the history; one thread alone calls ``update``."""

    def __init__(
        self,
        *,
        job_pid: int | None = None,
        window_s: float = WINDOW_S,
        stabilizer: VerdictStabilizer | None = None,
        sample: Callable[[int, str], None] | None = None,
    ) -> None:
        """``sample(pid, phase)`` asks the collector to sample a rank's stack in a phase
        (``JobCollector.sample_phase``), for the verdicts that want to say where a rank's
        time goes (``JobVerdict.sample``); at most once per ``RESAMPLE_S`` a rank."""
        self._job_pid = job_pid
        self._sample = sample
        self._asked: dict[int, float] = {}
        self._verdicts = VerdictWindow(job_pid=job_pid, window_s=window_s, stabilizer=stabilizer)
        self._history: tuple[VerdictPoint, ...] = ()
        self._memory = RunMemory()
        self.runs = 0

    def update(self, snapshot: Snapshot) -> VerdictUpdate:
        """Add ``snapshot`` to the window and diagnose it; engine errors become the verdict."""
        verdict = self._verdicts.update(snapshot)
        self._ask_samples(verdict, snapshot.monotonic)
        self.runs += 1
        self._history = extend(self._history, point_from(snapshot, verdict, self._job_pid))
        return VerdictUpdate(verdict, self._history, self._memory.update(snapshot, verdict))

    def _ask_samples(self, verdict: Verdict, now: float) -> None:
        """Pass on the verdicts' wishes for stack samples, each rank once per ``RESAMPLE_S``."""
        if self._sample is None:
            return
        for job in verdict.per_job:
            pid, phase = job.sample or (None, None)
            if pid is None or phase is None:
                continue
            if now - self._asked.get(pid, -RESAMPLE_S) >= RESAMPLE_S:
                self._asked[pid] = now
                self._sample(pid, phase)
