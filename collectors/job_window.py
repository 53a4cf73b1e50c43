"""The recent-steps window of one job and the statistics JobSnapshot shows.

A trainer may publish thousands of steps a second, so a tick must not cost Python work per step.
Each poll's records become one ``_Chunk`` of column sums (C-level column copies and ``sum``, no
object per record), and the window is a deque of chunks with running totals: a tick costs
O(new records) in C plus O(1) in Python, whatever the step rate and however long the job ran.
Time shares and rates are exact over every step.  Percentiles come from the newest
``SAMPLE_PER_POLL`` steps of each poll (all of them below that many steps per tick, i.e. exact
up to 64 steps/s at a 1 s interval), sorted once per poll: the work is bounded, and a contiguous
run of steps keeps any pattern shorter than it (a stall every N steps) at its true frequency.
The window's samples are sorted again on every tick, the largest part of a fast rank's tick:
64 a poll (640 in a 10 s window, a p95 with 32 samples above it) cost half of what 128 did.  A
poll needs only its newest ``NEWEST`` steps, for these samples and the recent step times;
``collectors/ring_totals.py`` gives the totals of the rest.
Finished or crashed jobs freeze their window at their last step, so the monitor keeps showing
the last numbers, unless the rank had stopped stepping before it ended (a stall, then a kill):
then its final rates are 0, as a stalled rank's are while it runs.
"""

from __future__ import annotations

from collections import deque
from itertools import chain, repeat
from operator import add, attrgetter, sub, truediv
from typing import Any, NamedTuple

from traintop import ring_format
from traintop.collectors.job_key import job_key
from traintop.collectors.rates import measured
from traintop.collectors.ring_header import SegmentHeader
from traintop.collectors.ring_reader import PollResult, Span
from traintop.collectors.ring_records import RecordBlock
from traintop.collectors.snapshot import JobSnapshot, PhaseShare, WorkerSnapshot

RECENT_STEPS = 120
SAMPLE_PER_POLL = 64
NEWEST = max(RECENT_STEPS, SAMPLE_PER_POLL)  # the steps of a poll that are read one by one
_NS = 1e9


class _Chunk(NamedTuple):
    """Column sums of the steps one poll returned."""

    t_start_ns: int  # start of its first step
    t_end_ns: int  # end of its last step
    steps: int
    samples: int
    batches: int
    phase_ns: tuple[int, ...]
    gpu_ns: int
    gpu_steps: int
    step_sample: list[int]  # the newest steps' times, sorted (for the percentiles)
    data_sample: list[int]  # their data waits, sorted


_STEP_SAMPLE, _DATA_SAMPLE = attrgetter("step_sample"), attrgetter("data_sample")


class JobWindow:
    """Chunks of the last ``window_s`` seconds of steps, their totals, and lifetime counters."""

    def __init__(self, header: SegmentHeader, window_s: float) -> None:
        self._header = header
        self._window_ns = int(window_s * _NS)
        self._chunks: deque[_Chunk] = deque()
        self._sorted: tuple[list[int], list[int]] | None = None
        self._recent: deque[float] = deque(maxlen=RECENT_STEPS)
        self._recent_phases = [deque(maxlen=RECENT_STEPS) for _ in header.phases]
        self._totals = [0] * 5  # steps, samples, batches, gpu_ns, gpu_steps
        self._phase_totals = [0] * len(header.phases)
        self.lost = 0
        self.steps_total = 0
        self.last_end_ns: int | None = None  # end of the newest step ever read (kept past trims)
        self._mem: int | None = None
        self._counts_samples = self._times_gpu = False  # seen in any step so far
        self._p50: float | None = None  # the last median step (step_time_p50_s)
        self.job_id = job_key(header)

    def follow_header(self, header: SegmentHeader) -> None:
        """The writer rewrote its identity (rank, world size, run id); geometry is unchanged."""
        self._header = header
        self.job_id = job_key(header)

    def add(self, result: PollResult) -> None:
        """Account one poll; lost and rejected records both count as lost."""
        self.lost += result.lost + result.rejected
        block, span = result.records, result.span
        if not len(block):
            return
        if span is None:  # every new record is at hand (else only the newest: see Span)
            block = self._within_window(block)
        # Steps not read one by one start where the last poll's last step ended: the probe's
        # steps are back to back (and a gap between polls is time in the window either way).
        last_end = self.last_end_ns if span is not None else None
        start = last_end if last_end is not None else block.t_start_ns_at(0)
        newest = block.tail(min(len(block), NEWEST))
        phases = [newest.phase_ns(i) for i in range(len(self._phase_totals))]
        step_ns = _row_sums(phases)
        self.last_end_ns = block.t_start_ns_at(len(block) - 1) + step_ns[-1]
        data_i = self._header.data_phase_index
        data = phases[data_i][-SAMPLE_PER_POLL:] if data_i is not None else []
        sample = sorted(step_ns[-SAMPLE_PER_POLL:])
        self._push(_chunk(block, span, start, self.last_end_ns, sample, sorted(data)))
        self._recent.extend(map(truediv, step_ns[-RECENT_STEPS:], repeat(_NS)))
        for recent, column in zip(self._recent_phases, phases, strict=True):
            recent.extend(map(truediv, column[-RECENT_STEPS:], repeat(_NS)))
        mem = block.last_mem_bytes(None) if span is None else span.mem_bytes
        self._mem = self._mem if mem is None else mem

    def _within_window(self, block: RecordBlock) -> RecordBlock:
        """A backlog (the first poll of a long-running job) keeps only its last window of steps."""
        newest = block.t_start_ns_at(len(block) - 1)
        if newest - block.t_start_ns_at(0) <= self._window_ns:
            return block
        return block.tail_from(newest - self._window_ns)

    def _push(self, chunk: _Chunk) -> None:
        self._counts_samples = self._counts_samples or chunk.samples > 0
        self._times_gpu = self._times_gpu or chunk.gpu_steps > 0
        self._chunks.append(chunk)
        self._account(chunk, 1)
        self._sorted = None

    def _account(self, chunk: _Chunk, sign: int) -> None:
        values = (chunk.steps, chunk.samples, chunk.batches, chunk.gpu_ns, chunk.gpu_steps)
        op = add if sign > 0 else sub
        self._totals = list(map(op, self._totals, values))
        self._phase_totals = list(map(op, self._phase_totals, chunk.phase_ns))

    def _trim(self, ref_ns: int) -> None:
        """Drop the chunks whose last step ended before the window (whole chunks)."""
        edge = ref_ns - self._window_ns
        while self._chunks and self._chunks[0].t_end_ns < edge:
            self._account(self._chunks.popleft(), -1)
            self._sorted = None

    def _percentile_lists(self) -> tuple[list[int], list[int]]:
        """The window's sampled step times and data waits, sorted once per change.

        Each chunk's samples are already sorted, so this is a merge of sorted runs (timsort
        finds them), not a full sort.
        """
        if self._sorted is None:
            steps = sorted(chain.from_iterable(map(_STEP_SAMPLE, self._chunks)))
            data = sorted(chain.from_iterable(map(_DATA_SAMPLE, self._chunks)))
            self._sorted = steps, data
        return self._sorted

    def step_time_p50_s(self) -> float | None:
        """The median step of the window, else of the last window that held steps: a rank
        whose steps outlast the window is not stalled between two of them."""
        if self._chunks:
            self._p50 = _percentile(self._percentile_lists()[0], 0.5)
        return self._p50

    def last_step_age_s(self, now_s: float) -> float | None:
        """Seconds since the last step ended; since the writer started if it never stepped."""
        last = self.last_end_ns
        last = self._header.created_monotonic_ns if last is None else last
        return measured(max(0.0, now_s - last / _NS))

    def snapshot(
        self,
        now_s: float,
        state: str,
        workers: tuple[WorkerSnapshot, ...],
        live: tuple[str | None, float | None] = (None, None),
        *,
        ended_at: float | None = None,
        stopped: bool = False,
        **extras: Any,
    ) -> JobSnapshot:
        """Summarise; a job that no longer runs is measured up to its last step, not to now.

        ``live`` is the phase the trainer is in and for how long (``jobs.live_phase``);
        ``ended_at`` when an ended rank ended (wall clock); ``stopped``: it is stalled, or had
        stalled before it ended, so its rates are 0 (see ``jobs._Job.ending``).
        ``extras`` are more JobSnapshot fields (the ledger, the stack, the stall limits).
        """
        running = state in ("live", "stalled")
        ref_ns = int(now_s * _NS) if running or self.last_end_ns is None else self.last_end_ns
        self._trim(ref_ns)
        return JobSnapshot(
            pid=self._header.pid,
            name=self._header.name,
            rank=self._header.rank,
            local_rank=self._header.local_rank,
            world_size=self._header.world_size,
            job_id=self.job_id,
            started_at=self._header.created_realtime_ns / _NS,
            state=state,
            steps_total=self.steps_total,
            workers=workers,
            lost_records=self.lost,
            last_step_age_s=None if self.last_end_ns is None else self.last_step_age_s(now_s),
            recent_step_times_s=tuple(self._recent),
            recent_phase_times_s=tuple(map(tuple, self._recent_phases)),
            live_phase=live[0],
            live_phase_s=live[1],
            ended_at=ended_at,
            gpu_busy_share=None,  # the card's count, joined in the sampler (gpu_truth.py)
            **(self._stopped() if stopped else self._rates(ref_ns)),
            **self._times(),
            **self._memory(),
            **extras,
        )

    def _span_s(self, ref_ns: int) -> float | None:
        if not self._chunks:
            return None
        start = self._chunks[0].t_start_ns
        return (ref_ns - start) / _NS if ref_ns > start else None

    def _rates(self, ref_ns: int) -> dict:
        span = self._span_s(ref_ns)
        if span is None:  # no step in the window: slow steps, or none yet
            return dict.fromkeys(
                ("steps_per_s", "samples_per_s", "batches_per_s", "gpu_queued_share")
            )
        steps, samples, batches, gpu_ns, gpu_steps = self._totals
        # The probe times the GPU on one step in 16 (traintop/cuda_timing.py): the mean GPU time
        # of the steps that carry one, over the mean step.  It is the span between CUDA events at
        # the step's ends, time with work queued (launch and sync gaps included), never "busy":
        # collectors/gpu_truth.py reads busy from the card.  Divided by the whole window, the
        # timed steps' GPU time read 16 times too low, and a compute-bound job as GPU-starved.
        # The mean step is the steps' own time, not the window's span over the count: the span
        # runs to now, through the step in progress, and read a 99 % span as 97 % on slow steps.
        step_ns = sum(self._phase_totals) / steps if steps else 0
        gpu = gpu_ns / gpu_steps / step_ns if gpu_steps and step_ns else None
        return {
            "steps_per_s": measured(steps / span),
            # A loop that counts no samples (no DataLoader, no tensor input found) has no rate:
            # unknown ("—"), not 0, which would read as a dead loader in panels and evidence.
            "samples_per_s": measured(samples / span) if samples else None,
            "batches_per_s": measured(batches / span),
            "gpu_queued_share": None if gpu is None else min(1.0, measured(gpu)),
        }

    def _stopped(self) -> dict:
        """The rates of a rank that stopped stepping: 0 once it has stepped (its samples and
        GPU share too, where it counts them), not the rate from before it stopped; unknown
        before its first step."""
        stepped = self.last_end_ns is not None
        return {
            "steps_per_s": 0.0 if stepped else None,
            "samples_per_s": 0.0 if self._counts_samples else None,
            "batches_per_s": 0.0 if stepped else None,
            "gpu_queued_share": 0.0 if self._times_gpu else None,
        }

    def _times(self) -> dict:
        steps, data = self._percentile_lists() if self._chunks else ([], [])
        data_i = self._header.data_phase_index
        total = sum(self._phase_totals)
        data_total = self._phase_totals[data_i] if data_i is not None else 0
        share = measured(data_total / total) if data and total else None
        return {
            "step_time_p50_s": _percentile(steps, 0.5),
            "step_time_p95_s": _percentile(steps, 0.95),
            "data_wait_p50_s": _percentile(data, 0.5),
            "data_wait_p95_s": _percentile(data, 0.95),
            "data_wait_share": share,
            "phases": self._phase_shares(total),
        }

    def _phase_shares(self, total: int) -> tuple[PhaseShare, ...]:
        steps = self._totals[0]
        if not steps or not total:
            return ()
        return tuple(
            PhaseShare(name, measured(ns / total), measured(ns / steps / _NS))
            for name, ns in zip(self._header.phases, self._phase_totals, strict=True)
        )

    def _memory(self) -> dict:
        kind = self._header.mem_kind
        return {
            "cuda_mem_allocated_bytes": self._mem
            if kind == ring_format.MEM_CUDA_ALLOCATED
            else None,
            "cuda_mem_reserved_bytes": self._mem if kind == ring_format.MEM_CUDA_RESERVED else None,
        }


def _chunk(block: RecordBlock, span: Span | None, t_start_ns: int, t_end_ns: int,
           steps: list[int], data: list[int]) -> _Chunk:  # fmt: skip
    """One poll's column totals (``span``'s, when the block holds only the newest steps), with
    the newest steps' times sorted for the percentiles."""
    totals = block.totals() if span is None else span.totals
    return _Chunk(
        t_start_ns=t_start_ns,
        t_end_ns=t_end_ns,
        steps=len(block) if span is None else span.steps,
        samples=totals.samples,
        batches=totals.batches,
        phase_ns=totals.phase_ns,
        gpu_ns=totals.gpu_ns,
        gpu_steps=totals.gpu_steps,
        step_sample=steps,
        data_sample=data,
    )


def _row_sums(columns: list[list[int]]) -> list[int]:
    """Per-step totals of equally long phase columns (each step's time is its phases' sum)."""
    return list(map(sum, zip(*columns, strict=True)))


def _percentile(sorted_ns: list[int], q: float) -> float | None:
    """Nearest-rank percentile in seconds of an already sorted list of nanoseconds."""
    if not sorted_ns:
        return None
    return measured(sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / _NS)
