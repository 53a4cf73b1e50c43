"""The recent-steps window of one job and the statistics JobSnapshot shows.

Rows enter and leave a deque with running sums, so a tick costs O(new records) plus one sort
for the percentiles, whatever the step rate.  Finished or crashed jobs freeze their window at
their last step so the monitor keeps showing the last numbers.
"""

from __future__ import annotations

from collections import deque
from typing import NamedTuple

from collectors.job_key import job_key
from collectors.ring_header import SegmentHeader
from collectors.ring_reader import PollResult
from collectors.snapshot import JobSnapshot, PhaseShare, WorkerSnapshot
from traintop import ring_format

RECENT_STEPS = 120
_RATE_FIELDS = ("steps_per_s", "samples_per_s", "batches_per_s", "gpu_busy_share")
_NS = 1e9


class _Row(NamedTuple):
    t_start_ns: int
    t_end_ns: int
    step_ns: int
    samples: int
    phases: tuple[int, ...]
    gpu_ns: int | None


class JobWindow:
    """Step rows of the last ``window_s`` seconds plus lifetime counters."""

    def __init__(self, header: SegmentHeader, window_s: float) -> None:
        self._header = header
        self._window_ns = int(window_s * _NS)
        self._rows: deque[_Row] = deque()
        self._recent: deque[float] = deque(maxlen=RECENT_STEPS)
        self._sum_step = self._sum_samples = self._sum_gpu = self._n_gpu = self._batches = 0
        self._sum_phase = [0] * len(header.phases)
        self.lost = 0
        self.steps_total = 0
        self.last_end_ns: int | None = None  # end of the newest step ever read (kept past trims)
        self._mem: int | None = None

    def add(self, result: PollResult) -> None:
        """Append the rows of one poll; lost and rejected records both count as lost."""
        block = result.records
        self.lost += result.lost + result.rejected
        if not len(block):
            return
        phases = list(zip(*(block.phase_ns(i) for i in range(len(self._sum_phase))), strict=True))
        flags = block.flags()
        for t0, ph, samples, flag, gpu in zip(
            block.t_start_ns(), phases, block.samples(), flags, block.gpu_ns(), strict=True
        ):
            step_ns = sum(ph)
            self._push(_Row(t0, t0 + step_ns, step_ns, samples, ph,
                            gpu if flag & ring_format.FLAG_GPU_VALID else None))  # fmt: skip
        self.last_end_ns = self._rows[-1].t_end_ns
        mems = [m for m, f in zip(block.mem_bytes(), flags, strict=True) if f & _MEM]
        self._mem = mems[-1] if mems else self._mem

    def _push(self, row: _Row) -> None:
        self._rows.append(row)
        self._recent.append(row.step_ns / _NS)
        self._account(row, 1)

    def _account(self, row: _Row, sign: int) -> None:
        self._sum_step += sign * row.step_ns
        self._sum_samples += sign * row.samples
        self._batches += sign * (row.samples > 0)
        for i, value in enumerate(row.phases):
            self._sum_phase[i] += sign * value
        if row.gpu_ns is not None:
            self._sum_gpu += sign * row.gpu_ns
            self._n_gpu += sign

    def _trim(self, ref_ns: int) -> None:
        while self._rows and self._rows[0].t_end_ns < ref_ns - self._window_ns:
            self._account(self._rows.popleft(), -1)

    def step_time_p50_s(self) -> float | None:
        return _percentile(sorted(r.step_ns for r in self._rows), 0.5)

    def last_step_age_s(self, now_s: float) -> float | None:
        """Seconds since the last step ended; since the writer started if it never stepped."""
        last = self._rows[-1].t_end_ns if self._rows else self._header.created_monotonic_ns
        return max(0.0, now_s - last / _NS)

    def snapshot(
        self, now_s: float, state: str, workers: tuple[WorkerSnapshot, ...]
    ) -> JobSnapshot:
        """Summarise; a job that no longer runs is measured up to its last step, not to now."""
        running = state in ("live", "stalled")
        ref_ns = int(now_s * _NS) if running or not self._rows else self._rows[-1].t_end_ns
        self._trim(ref_ns)
        return JobSnapshot(
            pid=self._header.pid,
            name=self._header.name,
            rank=self._header.rank,
            local_rank=self._header.local_rank,
            world_size=self._header.world_size,
            job_id=job_key(self._header),
            started_at=self._header.created_realtime_ns / _NS,
            state=state,
            steps_total=self.steps_total,
            workers=workers,
            lost_records=self.lost,
            last_step_age_s=self.last_step_age_s(now_s) if self._rows else None,
            recent_step_times_s=tuple(self._recent),
            **self._rates(ref_ns),
            **self._times(),
            **self._memory(),
        )

    def _span_s(self, ref_ns: int) -> float | None:
        if not self._rows:
            return None
        start = max(ref_ns - self._window_ns, self._rows[0].t_start_ns)
        return (ref_ns - start) / _NS if ref_ns > start else None

    def _rates(self, ref_ns: int) -> dict:
        span = self._span_s(ref_ns)
        if span is None:
            return dict.fromkeys(
                ("steps_per_s", "samples_per_s", "batches_per_s", "gpu_busy_share")
            )
        gpu = self._sum_gpu / _NS / span if self._n_gpu else None
        return {
            "steps_per_s": len(self._rows) / span,
            "samples_per_s": self._sum_samples / span,
            "batches_per_s": self._batches / span,
            "gpu_busy_share": None if gpu is None else min(1.0, gpu),
        }

    def _times(self) -> dict:
        steps = sorted(r.step_ns for r in self._rows)
        data_i = self._header.data_phase_index
        data = sorted(r.phases[data_i] for r in self._rows) if data_i is not None else []
        total = self._sum_step
        return {
            "step_time_p50_s": _percentile(steps, 0.5),
            "step_time_p95_s": _percentile(steps, 0.95),
            "data_wait_p50_s": _percentile(data, 0.5),
            "data_wait_p95_s": _percentile(data, 0.95),
            "data_wait_share": self._sum_phase[data_i] / total if data and total else None,
            "phases": self._phase_shares(),
        }

    def _phase_shares(self) -> tuple[PhaseShare, ...]:
        if not self._rows or not self._sum_step:
            return ()
        n = len(self._rows)
        return tuple(
            PhaseShare(name, total / self._sum_step, total / n / _NS)
            for name, total in zip(self._header.phases, self._sum_phase, strict=True)
        )

    def _memory(self) -> dict:
        kind = self._header.mem_kind
        return {
            "cuda_mem_allocated_bytes": self._mem
            if kind == ring_format.MEM_CUDA_ALLOCATED
            else None,
            "cuda_mem_reserved_bytes": self._mem if kind == ring_format.MEM_CUDA_RESERVED else None,
        }


_MEM = ring_format.FLAG_MEM_VALID


def _percentile(sorted_ns: list[int], q: float) -> float | None:
    """Nearest-rank percentile in seconds of an already sorted list of nanoseconds."""
    if not sorted_ns:
        return None
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / _NS
