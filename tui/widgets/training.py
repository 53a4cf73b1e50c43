"""The Training panel: one card per training run, with a per-rank table for multi-rank runs.

A multi-rank run (several ranks sharing a name) is one card because the question it answers
is "which rank holds the others back"; its numbers come from a lead rank (the focused pid, else
the lowest rank) while the table compares every rank.  The card machinery (redraw only on
change, layout for the given width) comes from the DataLoader module, which both panels share.
"""

from __future__ import annotations

import statistics
from collections import deque
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, fields, replace
from typing import ClassVar

from textual.content import Content

from collectors.snapshot import JobSnapshot
from tui.format import fmt_bytes, split_bar
from tui.widgets.job_cards import (
    JobCard,
    JobPanel,
    flow,
    fmt_age,
    fmt_number,
    fmt_seconds,
    fmt_share,
    long_live_phase,
)

HISTORY_LEN = 300  # ticks of step-time p50 kept per job for the sparkline
STRAGGLER_RATIO = 1.10  # a rank this much slower than the median rank is called out
TERMINAL_STATES = frozenset({"crashed", "finished"})
MIN_SPARK_SPAN = 0.10  # the sparkline spans at least 10 % of the peak, so noise stays flat
SPARK_LEVELS = "▁▂▃▄▅▆▇█"
SPARK_SUFFIX_CELLS = 20  # room kept for the " 300 ms–390 ms" range after the sparkline
SYNC_PHASES = frozenset({"comm", "allreduce", "sync", "barrier", "nccl"})
BADGES = {
    "live": "● live",
    "stalled": "◐ stalled",
    "finished": "✓ finished",
    "crashed": "✗ crashed",
    "restarted": "↻ restarted",
}
PHASE_CLASSES = {
    "data": "data",
    "data_wait": "data",
    "fwd": "fwd",
    "forward": "fwd",
    "bwd": "bwd",
    "backward": "bwd",
    "opt": "opt",
    "optim": "opt",
    "optimizer": "opt",
    "other": "other",
}


def relative_sparkline(values: Sequence[float], width: int) -> str:
    """The last ``width`` values scaled between their minimum and maximum.

    Step times sit far from zero, so a zero-based scale (tui.format.sparkline) draws a flat
    bar; users look for spikes and drift, which this scale shows.
    """
    tail = values[-width:]
    low, high = min(tail), max(tail)
    span = max(high - low, abs(high) * MIN_SPARK_SPAN) or 1.0
    top = len(SPARK_LEVELS) - 1
    chars = (SPARK_LEVELS[min(round((v - low) / span * top), top)] for v in tail)
    return "".join(chars).rjust(width)


@dataclass(frozen=True, slots=True)
class TrainingView:
    """What one card draws; equal views mean the card is already up to date."""

    ranks: tuple[JobSnapshot, ...]  # sorted by rank
    lead: JobSnapshot
    history: tuple[float, ...]


def rank_work_s(job: JobSnapshot) -> float | None:
    """Step time minus waiting for other ranks: in DDP every rank's step time converges on the
    slowest one, so only the time a rank spends on its own work points at the straggler."""
    if job.step_time_p50_s is None:
        return None
    waiting = sum(p.share for p in job.phases if p.name.lower() in SYNC_PHASES)
    return job.step_time_p50_s * (1.0 - min(waiting, 1.0))


def find_straggler(ranks: Sequence[JobSnapshot]) -> tuple[int, float] | None:
    """(rank, fraction slower than the median) of the slowest rank, if it stands out."""
    work = [(job.rank, t) for job in ranks if (t := rank_work_s(job)) is not None]
    if len(work) < 3:
        return None
    median = statistics.median(t for _, t in work)
    rank, slowest = max(work, key=lambda item: item[1])
    if median <= 0 or slowest <= median * STRAGGLER_RATIO:
        return None
    return rank, slowest / median - 1.0


def keep_last_numbers(job: JobSnapshot, previous: JobSnapshot | None) -> JobSnapshot:
    """A crashed or finished job keeps the numbers it last had, so the user sees where it died."""
    if previous is None or job.state not in TERMINAL_STATES:
        return job
    kept = {
        f.name: getattr(previous, f.name)
        for f in fields(job)
        if getattr(job, f.name) is None and getattr(previous, f.name) is not None
    }
    return replace(job, **kept) if kept else job


def segments(job: JobSnapshot) -> list[tuple[str, float, float | None, str]]:
    """(label, share, mean seconds, component class) for each part of the step."""
    if not job.phases:
        if job.data_wait_share is None:
            return []
        share = min(max(job.data_wait_share, 0.0), 1.0)
        return [("data", share, None, "data"), ("compute", 1.0 - share, None, "other")]
    parts: list[tuple[str, float, float | None, str]] = []
    for index, phase in enumerate(job.phases):
        custom = "custom" if index % 2 else "custom-alt"
        parts.append((phase.name, phase.share, phase.mean_s, PHASE_CLASSES.get(phase.name, custom)))
    rest = 1.0 - sum(p.share for p in job.phases)
    if rest > 0.005 and not any(p.name == "other" for p in job.phases):
        parts.append(("other", rest, None, "other"))
    return parts


class TrainingCard(JobCard):
    """One run: identity and state, rates, step-time history, step breakdown, rank table."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {
        *(f"training--{state}" for state in BADGES),
        *(f"training--{part}" for part in ("data", "fwd", "bwd", "opt", "other")),
        "training--custom",
        "training--custom-alt",
        "training--spark",
        "training--straggler",
    }

    def build(self, view: object, width: int) -> list[Content]:
        assert isinstance(view, TrainingView)
        lead = view.lead
        lines = flow(self._identity(view), width)
        lines += flow(self._rates(view), width)
        lines += self._history(view.history, width)
        lines += self._breakdown(lead, width)
        if len(view.ranks) > 1:
            lines += self._rank_table(view.ranks, lead.world_size, width)
        return lines

    def _identity(self, view: TrainingView) -> list[Content]:
        lead = view.lead
        chips = [Content.styled(lead.name, self.style("job--name")), self.chip("pid", lead.pid)]
        if lead.world_size > 1:
            chips.append(self.chip("rank", f"{lead.rank}/{lead.world_size}"))
        chips.append(self._badge(lead))
        chips.append(self.chip("step", f"{lead.steps_total:,}"))
        return chips

    def _badge(self, job: JobSnapshot) -> Content:
        text = BADGES.get(job.state, job.state)
        phase = long_live_phase(job)
        if job.state == "stalled" and phase is not None:
            text += f": {phase}"
        elif job.state == "stalled":
            age = fmt_age(job.last_step_age_s)
            text += " · no recent step" if age is None else f" · no step for {age}"
        elif phase is not None:  # live, but one phase is taking many steps' worth of time
            text += f" · {phase}"
        style = f"training--{job.state}" if job.state in BADGES else "job--label"
        if job.state == "live" and phase is not None:
            style = "job--warning"
        return Content.styled(text, self.style(style))

    def _rates(self, view: TrainingView) -> list[Content]:
        lead = view.lead
        chips = [
            self.chip("steps/s", fmt_number(lead.steps_per_s)),
            self._samples_chip(view),
            self.chip("step p50", fmt_seconds(lead.step_time_p50_s)),
            self.chip("p95", fmt_seconds(lead.step_time_p95_s)),
        ]
        if lead.gpu_busy_share is not None:
            chips.append(self.chip("GPU busy", fmt_share(lead.gpu_busy_share)))
        if lead.cuda_mem_allocated_bytes is not None:
            chips.append(self._cuda_chip(lead))
        if lead.lost_records > 0:
            lost = f"lost {lead.lost_records:,} records"
            chips.append(Content.styled(lost, self.style("job--warning")))
        return chips

    def _samples_chip(self, view: TrainingView) -> Content:
        """Summed over ranks when all report it: the run's throughput is what users tune."""
        rates = [job.samples_per_s for job in view.ranks]
        if len(rates) == 1 or None in rates:
            return self.chip("samples/s", fmt_number(view.lead.samples_per_s))
        total = sum(rate for rate in rates if rate is not None)
        return self.chip("samples/s (all ranks)", fmt_number(total))

    def _cuda_chip(self, job: JobSnapshot) -> Content:
        value = fmt_bytes(job.cuda_mem_allocated_bytes)
        if job.cuda_mem_reserved_bytes is not None:
            value += f" ({fmt_bytes(job.cuda_mem_reserved_bytes)} reserved)"
        return self.chip("CUDA mem", value)

    def _history(self, history: tuple[float, ...], width: int) -> list[Content]:
        if not history:
            return []
        label = "step p50 "
        tail = history[-max(width - len(label) - SPARK_SUFFIX_CELLS, 1) :]
        low, high = fmt_seconds(min(tail)), fmt_seconds(max(tail))
        suffix = f" {low}" if low == high else f" {low}–{high}"
        spark = relative_sparkline(tail, max(width - len(label) - len(suffix), 1))
        return [
            Content.assemble(
                (label, self.style("job--label")),
                (spark, self.style("training--spark")),
                (suffix, self.style("job--label")),
            )
        ]

    def _breakdown(self, job: JobSnapshot, width: int) -> list[Content]:
        parts = segments(job)
        if not parts:
            return [Content.styled("no step breakdown reported", self.style("job--label"))]
        counts = split_bar((share * 100 for _, share, _, _ in parts), width)
        bar = Content.assemble(
            *(
                ("█" * n, self.style(f"training--{cls}"))
                for n, (*_, cls) in zip(counts, parts, strict=True)
            )
        )
        return [bar, *flow(self._legend(parts), width)]

    def _legend(self, parts: Iterable[tuple[str, float, float | None, str]]) -> list[Content]:
        chips = []
        for name, share, mean_s, cls in parts:
            mean = "" if mean_s is None else f" {fmt_seconds(mean_s)}"
            chips.append(
                Content.assemble(
                    ("■ ", self.style(f"training--{cls}")),
                    (f"{name} ", self.style("job--label")),
                    (f"{fmt_share(share)}{mean}", self.style("job--value")),
                )
            )
        return chips

    def _rank_table(
        self, ranks: Sequence[JobSnapshot], world_size: int, width: int
    ) -> list[Content]:
        straggler = find_straggler(ranks)
        header = f"{'rank':>4} {'steps/s':>7} {'step p50':>8} {'wait':>5}  state"
        lines = [Content.styled(header, self.style("job--header"))]
        for job in ranks:
            row = (
                f"{job.rank:>4} {fmt_number(job.steps_per_s):>7} "
                f"{fmt_seconds(job.step_time_p50_s):>8} {fmt_share(job.data_wait_share):>5}  "
                f"{job.state}"
            )
            if straggler is not None and job.rank == straggler[0]:
                marker = f"  ◀ slowest, +{straggler[1]:.0%} vs median"
                if len(row) + len(marker) > width:
                    marker = f" ◀+{straggler[1]:.0%}"
                row += marker
                lines.append(Content.styled(row, self.style("training--straggler")))
            else:
                lines.append(Content(row))
        notes = []
        if straggler is not None:
            notes.append(
                f"rank {straggler[0]} holds the run back: {straggler[1]:.0%} more own work per "
                "step (step time minus waiting for other ranks) than the median rank."
            )
        if len(ranks) < world_size:
            notes.append(f"{len(ranks)} of {world_size} ranks attached.")
        words = (Content.styled(word, self.style("job--label")) for word in " ".join(notes).split())
        return lines + flow(words, width, gap=1)
        return lines


class TrainingPanel(JobPanel):
    """Border title "7 Training".  Keeps a bounded step-time history per job pid."""

    TITLE = "7 Training"
    card_type = TrainingCard

    def __init__(self, *, focus_pid: int | None = None, id: str | None = None) -> None:
        super().__init__(focus_pid=focus_pid, id=id)
        self._history: dict[int, deque[float]] = {}
        self._previous: dict[int, JobSnapshot] = {}

    def views(self, jobs: Sequence[JobSnapshot]) -> dict[object, object]:
        jobs = [keep_last_numbers(job, self._previous.get(job.pid)) for job in jobs]
        self._remember(jobs)
        groups: dict[object, list[JobSnapshot]] = {}
        for job in jobs:
            key = (job.name, job.world_size) if job.world_size > 1 else job.pid
            groups.setdefault(key, []).append(job)
        return {key: self._view(group) for key, group in groups.items()}

    def _view(self, group: list[JobSnapshot]) -> TrainingView:
        ranks = tuple(sorted(group, key=lambda job: job.rank))
        lead = group[0] if group[0].pid == self.focus_pid else ranks[0]
        return TrainingView(ranks, lead, tuple(self._history.get(lead.pid, ())))

    def _remember(self, jobs: Sequence[JobSnapshot]) -> None:
        """Append the step-time p50 of each live job that changed this tick; forget gone pids.

        A job whose snapshot did not change adds nothing, so its card is not repainted."""
        previous, self._previous = self._previous, {job.pid: job for job in jobs}
        self._history = {pid: h for pid, h in self._history.items() if pid in self._previous}
        for job in jobs:
            history = self._history.setdefault(job.pid, deque(maxlen=HISTORY_LEN))
            changed = previous.get(job.pid) != job
            if changed and job.step_time_p50_s is not None and job.state == "live":
                history.append(job.step_time_p50_s)
