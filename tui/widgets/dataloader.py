"""The DataLoader panel: how fast batches arrive, how long the step waits, what workers cost."""

from __future__ import annotations

from collections.abc import Sequence
from typing import ClassVar

from textual.content import Content

from collectors.snapshot import JobSnapshot, WorkerSnapshot
from tui.format import bar_cells, fmt_bytes, fmt_pct, fmt_rate
from tui.widgets.job_cards import (
    JobCard,
    JobPanel,
    flow,
    fmt_number,
    fmt_seconds,
    fmt_share,
)

WAIT_WARNING_SHARE = 0.30  # a step waiting this much on data is data-bound
WAIT_ERROR_SHARE = 0.60
HOT_WORKER_PCT = 90.0  # a worker near one full core cannot load faster
WORKER_FIXED_CELLS = 36  # pid, CPU %, RSS and read columns around the CPU bar


class DataLoaderCard(JobCard):
    """One training process: batch rate, time spent waiting for data, and its workers."""

    COMPONENT_CLASSES: ClassVar[set[str]] = {"dataloader--bar", "dataloader--bar-hot"}

    def build(self, view: object, width: int) -> list[Content]:
        assert isinstance(view, JobSnapshot)
        lines = flow(self._identity(view), width)
        lines += flow(self._rates(view), width)
        if not view.workers:
            note = "no worker processes: batches are loaded in the training process"
            return [*lines, Content.styled(note, self.style("job--label"))]
        bar_width = max(4, min(30, width - WORKER_FIXED_CELLS))
        lines.append(self._worker_header(bar_width))
        return lines + [self._worker_row(worker, bar_width) for worker in view.workers]

    def _identity(self, job: JobSnapshot) -> list[Content]:
        chips = [Content.styled(job.name, self.style("job--name")), self.chip("pid", job.pid)]
        if job.world_size > 1:
            chips.append(self.chip("rank", f"{job.rank}/{job.world_size}"))
        chips.append(self.chip("workers", len(job.workers)))
        if job.state != "live":
            chips.append(Content.styled(job.state, self.style("job--label")))
        return chips

    def _rates(self, job: JobSnapshot) -> list[Content]:
        return [
            self.chip("batches/s", fmt_number(job.batches_per_s)),
            self.chip("samples/s", fmt_number(job.samples_per_s)),
            self.chip("wait/batch p50", fmt_seconds(job.data_wait_p50_s)),
            self.chip("p95", fmt_seconds(job.data_wait_p95_s)),
            self._wait_share(job.data_wait_share),
        ]

    def _wait_share(self, share: float | None) -> Content:
        """Share of step time spent waiting for data, coloured by how data-bound the job is."""
        style = "job--value"
        if share is not None and share > WAIT_ERROR_SHARE:
            style = "job--error"
        elif share is not None and share > WAIT_WARNING_SHARE:
            style = "job--warning"
        return Content.assemble(
            ("data wait ", self.style("job--label")),
            (fmt_share(share), self.style(style)),
            (" of step", self.style("job--label")),
        )

    def _worker_header(self, bar_width: int) -> Content:
        text = f"{'pid':>8} {'CPU':<{bar_width}} {'':>5} {'RSS':>9} {'read':>10}"
        return Content.styled(text, self.style("job--header"))

    def _worker_row(self, worker: WorkerSnapshot, bar_width: int) -> Content:
        hot = worker.cpu_pct is not None and worker.cpu_pct >= HOT_WORKER_PCT
        return Content.assemble(
            f"{worker.pid:>8} ",
            (bar_cells(worker.cpu_pct, bar_width), self.style(f"dataloader--bar{'-hot' * hot}")),
            f" {fmt_pct(worker.cpu_pct):>5} {fmt_bytes(worker.rss_bytes):>9}",
            f" {fmt_rate(worker.read_bytes_per_s):>10}",
        )


class DataLoaderPanel(JobPanel):
    """Border title "8 DataLoader": one card per training process (each rank has its own)."""

    TITLE = "8 DataLoader"
    card_type = DataLoaderCard

    def views(self, jobs: Sequence[JobSnapshot]) -> dict[object, object]:
        return {job.pid: job for job in jobs}
