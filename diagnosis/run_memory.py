"""A job restarted under the same name, against the run before it: what changed, what it bought.

The monitor keeps, for each run it saw live, its settings (what its probe saw, its quota), its
rate and the findings of the last verdict on it while it ran (an ended run is judged again on its
ring alone, so its live predictions are kept here, not taken from its final word).  When a new
run of a name appears and an earlier run of that name is no longer live, the two are compared as
``traintop compare`` compares recordings (:mod:`traintop.diagnosis.knob_diff`): one line per
changed knob, the gain measured beside the gain the earlier run's verdict predicted.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from traintop.collectors.snapshot import Snapshot
from traintop.diagnosis.knob_diff import change_line, changes, settings
from traintop.diagnosis.model import Finding, Verdict

KEPT_RUNS = 32  # runs remembered (the oldest forgotten first)


@dataclass(frozen=True, slots=True)
class SeenRun:
    """One run as last seen live."""

    job_id: str
    name: str
    settings: dict[str, str]
    steps_per_s: float | None
    samples_per_s: float | None
    findings: tuple[Finding, ...]


class RunMemory:
    """The runs seen live, by job id; ``against`` compares each live run with its forerunner."""

    def __init__(self) -> None:
        self._runs: OrderedDict[str, SeenRun] = OrderedDict()
        self.lines: tuple[str, ...] = ()  # the newest update's

    def update(self, snapshot: Snapshot, verdict: Verdict) -> tuple[str, ...]:
        """Remember the live runs of this tick; the lines for those that restarted one."""
        ranks = {j.pid: j for j in snapshot.jobs if j.state == "live"}
        live: list[str] = []
        for judged in (v for v in verdict.per_job if v.live):
            first = min((ranks[r.pid] for r in judged.ranks if r.pid in ranks),
                        key=lambda j: j.rank, default=None)  # fmt: skip
            if first is None:
                continue
            live.append(judged.job_id)
            self._keep(SeenRun(judged.job_id, first.name, settings(first.facts, first.cpu_limit),
                               first.steps_per_s, first.samples_per_s,
                               (judged.primary, *judged.also)))  # fmt: skip
        self.lines = tuple(line for job_id in live for line in self._against(job_id, set(live)))
        return self.lines

    def _keep(self, run: SeenRun) -> None:
        self._runs[run.job_id] = run
        self._runs.move_to_end(run.job_id)
        while len(self._runs) > KEPT_RUNS:
            self._runs.popitem(last=False)

    def _against(self, job_id: str, live: set[str]) -> list[str]:
        """``train.py, restarted: num_workers 2 → 4: 1.71× steps/s measured, ...``."""
        now = self._runs[job_id]
        before = self._before(now, live)
        if before is None:
            return []
        steps = _ratio(before.steps_per_s, now.steps_per_s)
        samples = _ratio(before.samples_per_s, now.samples_per_s)
        found = changes(before.settings, now.settings, before.findings)
        head = f"{now.name}, against its run before"
        if not found:
            return [f"{head}: no setting the probe sees changed"]
        return [f"{head}: {change_line(c, steps, samples)}" for c in found]

    def _before(self, now: SeenRun, live: set[str]) -> SeenRun | None:
        """The newest earlier run of the same name that no longer runs."""
        earlier = [r for r in self._runs.values() if r.name == now.name and r.job_id not in live]
        return earlier[-1] if earlier else None


def _ratio(a: float | None, b: float | None) -> float | None:
    return b / a if a and b is not None else None
