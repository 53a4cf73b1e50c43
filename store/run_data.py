"""One side of a comparison: a job's per-step and per-sample values over a span of a recording."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from traintop.collectors.gpu_reasons import throttling_reasons
from traintop.collectors.snapshot import CpuLimit, JobFacts, JobSnapshot, Snapshot
from traintop.diagnosis.model import Finding, Verdict
from traintop.store.ranges import Span
from traintop.store.reader import RecordedSegment, Recording
from traintop.store.schema import StoreError


@dataclass(slots=True)
class RunData:
    """Everything compare needs from one span; lists are in time order."""

    label: str
    job: str | None = None
    ranks: int = 0
    start: float = 0.0
    end: float = 0.0
    steps_per_s: float | None = None
    samples_per_s: float | None = None
    step_s: list[float] = field(default_factory=list)
    sample_s: list[float] = field(default_factory=list)  # seconds per sample, per step: the
    # mean of these is the inverse of the rate, as the mean step time is for steps/s
    data_wait: list[float] = field(default_factory=list)
    phase_shares: dict[str, list[float]] = field(default_factory=dict)
    gpu_util: list[float] = field(default_factory=list)
    gpu_power: list[float] = field(default_factory=list)
    gpu_clock: list[float] = field(default_factory=list)
    throttled: list[float] = field(default_factory=list)
    verdicts: list[str] = field(default_factory=list)
    # What the job's probe saw last in the span, the quota it ran under, and the findings of
    # the last verdict on it (their predictions are what compare holds B against)
    facts: JobFacts | None = None
    facts_of: str = ""  # the job_id of the live run the settings were read from
    cpu_limit: CpuLimit | None = None
    findings: tuple[Finding, ...] = ()


def load_run(rec: Recording, span: Span, job: str | None) -> RunData:
    if not rec.samples:
        raise StoreError(f"{rec.path.name}: the recording holds no samples")
    first = rec.samples[0].t
    start = first + (span.start_s or 0.0)
    end = first + span.end_s if span.end_s is not None else rec.samples[-1].t
    run = RunData(span.label(), start=start, end=end)
    segments = _job_segments(rec, job)
    if segments:
        run.job, run.ranks = segments[0].name, len(segments)
    _load_samples(rec, run)
    if segments:
        _load_steps(rec, segments, run)
    return run


def _job_segments(rec: Recording, job: str | None) -> list[RecordedSegment]:
    """The ranks of the job asked for, else of the job with the most recorded steps."""
    segments = rec.segments()
    names = Counter()
    for seg_id, count in rec.step_counts().items():
        names.update({s.name: count for s in segments if s.id == seg_id})
    if job is None:
        job = names.most_common(1)[0][0] if names else None
    elif job not in names:
        known = ", ".join(sorted(names)) or "none"
        raise StoreError(f"{rec.path.name}: no job {job!r} recorded (jobs: {known})")
    return [s for s in segments if s.name == job]


def _load_samples(rec: Recording, run: RunData) -> None:
    ids = {row.id for row in rec.samples if run.start <= row.t <= run.end}
    run.verdicts = [b for sample_id, b in rec.verdict_timeline() if sample_id in ids]
    for index, row in enumerate(rec.samples):
        if row.id in ids:
            snapshot, verdict = rec.sample(index)
            _add_gpus(snapshot, run)
            _add_job(snapshot, verdict, run)


def _add_job(snapshot: Snapshot, verdict: Verdict | None, run: RunData) -> None:
    """The job's settings and its verdict's findings, the newest in the span winning.  The
    settings of its live run, then of that run ended: the copy its probe writes as it closes
    holds all it saw, where a live tick of a run of a few seconds may have read the file
    before the DataLoader was first iterated (no loader settings, so nothing to compare).  An
    ended run's settings otherwise only fill a gap: another run of the name is not this one."""
    named = [j for j in snapshot.jobs if j.name == run.job]
    live = [j for j in named if j.state == "live"]
    ending = [j for j in named if run.facts_of and j.job_id == run.facts_of]
    if live:
        first = _first(live)
        run.facts, run.facts_of = first.facts or run.facts, first.job_id
        run.cpu_limit = first.cpu_limit or run.cpu_limit
    elif ending:  # that run, stalled or ended: its newest copy (once ended, its close-time one)
        run.facts = _first(ending).facts or run.facts
    elif named and run.facts is None:  # only an ended run seen: its settings fill the gap
        run.facts = _first(named).facts
    judged = [v for v in (verdict.per_job if verdict else ()) if v.name == run.job and v.live]
    if judged:
        run.findings = (judged[0].primary, *judged[0].also)


def _first(jobs: list[JobSnapshot]) -> JobSnapshot:
    return min(jobs, key=lambda j: j.rank)


def _add_gpus(snapshot: Snapshot, run: RunData) -> None:
    """Per sample: the mean over GPUs, and whether any GPU was throttled."""
    gpus = [g for g in snapshot.gpus if not g.lost]
    for values, read in ((run.gpu_util, "util_gpu_pct"), (run.gpu_power, "power_w"),
                         (run.gpu_clock, "sm_clock_mhz")):  # fmt: skip
        known = [getattr(g, read) for g in gpus if getattr(g, read) is not None]
        if known:
            values.append(sum(known) / len(known))
    if gpus:
        run.throttled.append(float(any(throttling_reasons(g.clocks_event_reasons) for g in gpus)))


def _load_steps(rec: Recording, segments: list[RecordedSegment], run: RunData) -> None:
    """Per-rank rates, averaged; per-step values of all ranks merged in time order (the noise
    tests read them as a time series)."""
    rows, rates, samples_total, duration_total = [], [], 0, 0.0
    for seg in segments:
        steps = _segment_steps(rec, seg, run)
        if len(steps) > 1:
            first, last = steps[0][0], max(s[0] + s[1] / 1e9 for s in steps)
            rates.append(len(steps) / (last - first))
            samples_total += sum(s[2] for s in steps)
            duration_total += last - first
        rows += [(s, seg) for s in steps]
    for (_, step_ns, samples, phases), seg in sorted(rows, key=lambda r: r[0][0]):
        _add_step(run, seg, phases, step_ns, samples)
    if rates:
        run.steps_per_s = sum(rates) / len(rates)
        run.samples_per_s = samples_total / (duration_total / len(rates))


def _segment_steps(rec: Recording, seg: RecordedSegment, run: RunData) -> list[tuple]:
    """One rank's steps in the span: (start s, step ns, samples, phase ns list), in order."""
    out = []
    for block in rec.steps(seg, run.start, run.end):
        phases = list(zip(*(block.phase_ns(i) for i in range(len(seg.phases))), strict=True))
        for t0, samples, ph in zip(block.t_start_ns(), block.samples(), phases, strict=True):
            start, step_ns = (t0 + seg.clock_offset_ns) / 1e9, sum(ph)
            if run.start <= start <= run.end and step_ns > 0:
                out.append((start, step_ns, samples, ph))
    return out


def _add_step(run: RunData, seg: RecordedSegment, phases: tuple[int, ...], step_ns: int,
              samples: int) -> None:  # fmt: skip
    step_s = step_ns / 1e9
    run.step_s.append(step_s)
    if samples:
        run.sample_s.append(step_s / samples)
    for index, (name, value) in enumerate(zip(seg.phases, phases, strict=True)):
        if index == seg.data_phase:
            run.data_wait.append(value / step_ns)
        else:
            run.phase_shares.setdefault(name, []).append(value / step_ns)
