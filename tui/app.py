"""The traintop monitor: one App fed by the pipeline, panels toggled by number keys.

The pipeline hands each snapshot and its verdict over on the sampler thread; the app turns both
into one ``SnapshotReady`` message (thread-safe, and replaceable so a slow UI skips stale
frames), lets every panel record history, and, unless paused, updates panels, header and
verdict banner inside one ``batch_update()`` so each tick paints a single frame.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Center, Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.screen import Screen
from textual.widgets import Static

from traintop.collectors.snapshot import Snapshot
from traintop.pipeline.live import Pipeline
from traintop.pipeline.source import SnapshotSource
from traintop.tui.driver import QuietLinuxDriver
from traintop.tui.verdict_view import VerdictView
from traintop.tui.widgets.cpu import CpuPanel
from traintop.tui.widgets.dataloader import DataLoaderPanel
from traintop.tui.widgets.disk import DiskPanel
from traintop.tui.widgets.gpu import GpuPanel
from traintop.tui.widgets.header import HeaderBar
from traintop.tui.widgets.key_bar import KeyBar
from traintop.tui.widgets.memory import MemoryPanel
from traintop.tui.widgets.network import NetworkPanel
from traintop.tui.widgets.panel import Panel
from traintop.tui.widgets.process_table import ProcessTable
from traintop.tui.widgets.status import StatusLine
from traintop.tui.widgets.table import help_bindings
from traintop.tui.widgets.training import TrainingPanel
from traintop.tui.widgets.verdict import VerdictBanner
from traintop.views.source import next_interval

if TYPE_CHECKING:
    from traintop.collectors.jobs import JobCollector
    from traintop.diagnosis.verdict_runner import VerdictUpdate
    from traintop.store.tap import RecordingTap

_STYLES = Path(__file__).parent / "styles"
MIN_SIZE = (60, 16)
TOO_SMALL = f"Terminal too small for traintop: needs at least {MIN_SIZE[0]}x{MIN_SIZE[1]}"
# Toggle key -> id of the panel it shows or hides.
PANEL_KEYS = {
    "1": ("gpu", "GPU"),
    "2": ("cpu", "CPU"),
    "3": ("memory", "Mem"),
    "4": ("disk", "Disk"),
    "5": ("network", "Net"),
    "6": ("processes", "Procs"),
    "7": ("training", "Training"),
    "8": ("dataloader", "DataLoader"),
}


class SnapshotReady(Message):
    """A new snapshot and its verdict from the sampler thread; a newer one replaces it if
    still queued (the verdict's history already covers the skipped ticks)."""

    def __init__(self, snapshot: Snapshot, verdict: VerdictUpdate | None) -> None:
        """``verdict``: None for the first frame's snapshot, shown before any verdict."""
        super().__init__()
        self.snapshot = snapshot
        self.verdict = verdict

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotReady)


GC_YOUNG_THRESHOLD = 20_000
"""Net allocations between two young-generation collections (Python's default is 700)."""


def _settle_gc() -> None:
    """Fit the cyclic garbage collector to a monitor, once the first frame is up.

    Startup objects (modules, CSS, widgets) live forever: freezing them keeps the collector's
    full passes from walking them again every few ticks (~20 % of UI time).  What a tick leaves
    behind is mostly snapshots, which hold no cycles and live as long as the 30 s window: at
    the default threshold every one of them was walked twice (young, then middle generation)
    before reaching the old one, 2 ms a second with 64 ranks for nothing found.  A higher
    threshold walks them about once per 15 s of ticks, and the little cyclic garbage a tick
    makes (about ten ctypes objects) waits that much longer.
    """
    gc.freeze()
    gc.set_threshold(GC_YOUNG_THRESHOLD, *gc.get_threshold()[1:])
    gc.enable()  # the CLI turns it off while the monitor starts


class TraintopApp(App[None]):
    """htop for training: GPUs, CPU, memory, disks, network, processes and attached jobs."""

    TITLE = "traintop"
    # narrower than Textual's own (mutable) type for these: CONTRIBUTING.md, Types
    CSS_PATH: ClassVar[list[Path]] = [  # pyright: ignore[reportIncompatibleVariableOverride]
        _STYLES / "app.tcss",
        _STYLES / "training.tcss",
        _STYLES / "verdict.tcss",
    ]
    # Focus is given in on_mount instead: the process table, so its keys (s, K, arrows,
    # PgUp/PgDn) work at once as in htop, without scrolling the GPU panel off-screen.
    AUTO_FOCUS = None
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [  # pyright: ignore[reportIncompatibleVariableOverride]
        (0, "-tiny"),
        (MIN_SIZE[0], "-narrow"),
        (120, "-medium"),
        (180, "-wide"),
    ]
    VERTICAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [  # pyright: ignore[reportIncompatibleVariableOverride]
        (0, "-tiny"),
        (MIN_SIZE[1], "-short"),
        (36, "-tall"),
    ]
    BINDINGS: ClassVar[list[Binding]] = [  # pyright: ignore[reportIncompatibleVariableOverride]
        Binding("q", "quit", "Quit"),
        Binding("p", "toggle_pause", "Pause"),
        Binding("plus", "change_interval(1)", "Slower", key_display="+"),
        Binding("minus", "change_interval(-1)", "Faster", key_display="-"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("d", "details", "Details"),
        Binding("j", "focus_jobs", "Jobs table", show=False),
        # Out of the footer, which must fit 80 columns; the help lists it, the header shows REC.
        Binding("R", "toggle_record", "Record to a file", key_display="R", show=False),
        # Panel toggles stay out of the footer (each panel title shows its key, as in btop),
        # so the footer fits 80 columns; the help screen lists them.
        *(
            Binding(key, f"toggle_panel('{panel}')", f"Toggle {label}", show=False)
            for key, (panel, label) in PANEL_KEYS.items()
        ),
    ]

    # repaint=False: the panels repaint what changed; a repaint here would redraw the whole
    # screen every tick (a full-screen compositor pass and terminal write).
    snapshot: reactive[Snapshot | None] = reactive(None, init=False, repaint=False)
    paused: reactive[bool] = reactive(False, init=False, repaint=False)

    def __init__(
        self,
        pipeline: Pipeline,
        *,
        clock: Callable[[], float] = time.time,
        hostname: str | None = None,
        focus_job: int | None = None,
    ) -> None:
        super().__init__(driver_class=QuietLinuxDriver if QuietLinuxDriver.suits() else None)
        # Snapshots and their verdicts; `R` records through it, and it is told which job is on
        # screen (summarised every tick; see collectors/turns.py).
        self.pipeline = pipeline
        self._recording: RecordingTap | None = None
        self._clock = clock
        self._hostname = hostname
        self._focus_job = focus_job
        self._latest: Snapshot | None = None
        self._rec_failure: tuple[str, bool] | None = None
        self._panels: list[Panel] = []
        self._first: Snapshot | None = None  # the pipeline's, taken as the screen is made
        self.verdicts = VerdictView(self)

    @property
    def recording(self) -> RecordingTap | None:
        """The recording `R` started, while it runs."""
        return self._recording

    @recording.setter
    def recording(self, tap: RecordingTap | None) -> None:
        """Handed to the pipeline too, which feeds it on the sampler thread every tick."""
        self._recording = self.pipeline.tap = tap

    def compose(self) -> ComposeResult:
        yield HeaderBar(self._clock, self._hostname, id="header")
        yield VerdictBanner(id="verdict")
        with Center(id="too-small"):
            yield Static(TOO_SMALL, id="too-small-message")
        with VerticalScroll(id="main"):
            yield GpuPanel(id="gpu")
            # Shown only in attach mode, and then right under the GPUs: the job is what the
            # user came for, so it must not be pushed below the fold by host panels.
            with Horizontal(id="jobs-row"):
                yield TrainingPanel(focus_pid=self._focus_job, id="training")
                yield DataLoaderPanel(id="dataloader")
            yield CpuPanel(id="cpu")
            with Horizontal(id="io-row"):
                yield MemoryPanel(id="memory")
                yield DiskPanel(id="disk")
                yield NetworkPanel(id="network")
            with Vertical(id="process-box"):
                yield ProcessTable(id="processes")
        yield StatusLine(id="status")
        yield KeyBar()

    def get_default_screen(self) -> Screen:
        """The main screen, born with the classes of the terminal's size and, when the first
        snapshot holds jobs, ``-jobs``: its widgets are styled once, as they mount.  Textual
        sets the size classes at the screen's first Resize, after the first paint; set in
        ``on_mount``, the two classes restyled every widget of the screen twice over."""
        self._first = self.pipeline.first()
        jobs = ["-jobs"] if self._first is not None and self._first.jobs else []
        return Screen(id="_default", classes=" ".join([*self._size_classes(), *jobs]))

    def on_mount(self) -> None:
        # Looked up once: two DOM queries per tick cost as much as drawing a panel.
        self._panels = list(self.query(Panel))
        # Attach mode came for the job: its table takes the keys; otherwise the processes.
        focus = TrainingPanel if self._focus_job is not None else ProcessTable
        self.query_one(focus).focus(scroll_visible=False)
        self._show_header()
        self.verdicts.start()
        first = self._first
        if first is not None:
            # Shown before the first paint, so the first frame is a full one: no "waiting"
            # frame, no relayout when the panels fill, no sampling while that frame is drawn.
            # Its verdict comes with the first tick (Pipeline.first).
            self.on_snapshot_ready(SnapshotReady(first, None))
        self.pipeline.start(self._deliver)
        self.call_after_refresh(_settle_gc)

    def _size_classes(self) -> list[str]:
        """The breakpoint classes of the terminal's size, as Textual picks them."""
        return [
            max(p for p in points if size >= p[0])[1]
            for size, points in zip(
                self.size, (self.HORIZONTAL_BREAKPOINTS, self.VERTICAL_BREAKPOINTS), strict=True
            )
        ]

    def on_unmount(self) -> None:
        self.pipeline.stop()
        tap, self.recording = self.recording, None
        if tap is not None:  # quitting ends a recording: the file is left whole
            tap.stop()

    def _deliver(self, snapshot: Snapshot, update: VerdictUpdate) -> None:
        """Runs on the sampler thread: hand the snapshot and its verdict to the UI thread."""
        self.post_message(SnapshotReady(snapshot, update))

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        self._latest = message.snapshot
        for panel in self._panels:
            panel.record(message.snapshot)
        with self.batch_update():
            if message.verdict is not None:
                self.verdicts.receive(message.verdict, paused=self.paused)
            if not self.paused:
                self.snapshot = message.snapshot
                self._show_header()

    def watch_snapshot(self, snapshot: Snapshot | None) -> None:
        if snapshot is None:
            return
        for panel in self._panels:
            panel.show(snapshot)
        self.query_one(ProcessTable).show_processes(snapshot.processes)
        self.screen.set_class(bool(snapshot.jobs), "-jobs")
        if snapshot.jobs:
            training = self.query_one(TrainingPanel)
            training.update_jobs(snapshot)
            loader = self.query_one(DataLoaderPanel)
            loader.show_group(training.focused, snapshot.processes, training.selected_rank)
        elif isinstance(self.focused, (TrainingPanel, DataLoaderPanel)):
            self.query_one(ProcessTable).focus(scroll_visible=False)  # their row is hidden now
        self.query_one(StatusLine).show(snapshot)

    def on_training_panel_job_focused(self) -> None:
        """The jobs cursor moved: the DataLoader panel shows the job under it, and the job
        collector summarises that job on every tick from now on."""
        snapshot = self.snapshot
        processes = snapshot.processes if snapshot is not None else ()
        training = self.query_one(TrainingPanel)
        group = training.focused
        self.pipeline.focus_job(group.ranks[0].job_id if group is not None else None)
        loader = self.query_one(DataLoaderPanel)
        loader.show_group(group, processes, training.selected_rank)

    def watch_paused(self, paused: bool) -> None:
        with self.batch_update():
            if not paused:
                self.verdicts.resume()
            if not paused and self._latest is not None:
                self.snapshot = self._latest
            self._show_header()

    def _show_header(self) -> None:
        header = self.query_one(HeaderBar)
        header.show(
            self.snapshot or self._latest, self.pipeline.interval_s, self.paused, self._rec_state()
        )

    def _rec_state(self) -> tuple[str, bool] | None:
        """What the header says about `R`; a recording that failed is stopped here, once."""
        tap = self.recording
        if tap is None:
            return self._rec_failure
        if tap.recorder.error is None:
            return (f"REC {tap.recorder.path}", False)
        self.recording, self._rec_failure = None, (tap.recorder.error, True)
        self.run_worker(tap.stop, thread=True, exit_on_error=False)
        self.notify(tap.recorder.error, severity="error", timeout=10)
        return self._rec_failure

    def action_toggle_record(self) -> None:
        """Start a recording to traintop-YYYYmmdd-HHMMSS.ttrec in the working directory, or
        stop the one in progress (closing the file runs off the UI thread)."""
        if self.recording is not None:
            tap, self.recording = self.recording, None
            self.run_worker(lambda: self._finish_recording(tap), thread=True, exit_on_error=False)
        else:
            self.recording, self._rec_failure = self._start_recording()
        self._show_header()

    def _start_recording(self) -> tuple[RecordingTap | None, tuple[str, bool] | None]:
        """A recording to a new time-stamped file, or the one-line reason not.  The recorder
        (and sqlite) is imported here, at the first `R`: no start-up pays for it."""
        from traintop.store.schema import StoreError
        from traintop.store.tap import RecordingTap, default_path
        from traintop.store.writer import Recorder

        path = default_path()
        try:
            recorder = Recorder(path, interval_s=self.pipeline.interval_s)
        except StoreError as exc:
            self.notify(str(exc), severity="error", timeout=10)
            return None, (str(exc), True)
        self.notify(f"recording to {path.resolve()} (R stops)")
        return RecordingTap(recorder, self.pipeline.jobs), None

    def _finish_recording(self, tap: RecordingTap) -> None:
        """Runs in a worker thread: finishing the file may take a second."""
        from traintop.store.tap import summary

        error = tap.stop()
        message, severity = (error, "error") if error else (summary(tap.recorder), "information")
        self.call_from_thread(self.notify, message, severity=severity, timeout=8)

    def action_toggle_pause(self) -> None:
        """Freeze the display; the sampler and every panel's history keep going."""
        self.paused = not self.paused

    def action_change_interval(self, step: int) -> None:
        """Move the sampler one preset step slower (+1) or faster (-1)."""
        self.pipeline.interval_s = next_interval(self.pipeline.interval_s, step)
        self._show_header()

    def action_toggle_panel(self, panel_id: str) -> None:
        self.query_one(f"#{panel_id}").toggle_class("-hidden")
        # With the Training panel hidden, the DataLoader panel takes the whole row.
        solo = self.query_one("#training").has_class("-hidden")
        self.query_one("#jobs-row").set_class(solo, "-solo")

    def action_focus_jobs(self) -> None:
        """Give the keys to the jobs table (arrows, Enter, e), or back to the processes."""
        training = self.query_one(TrainingPanel)
        if training.has_focus or not self.screen.has_class("-jobs"):
            self.query_one(ProcessTable).focus()
        else:
            training.focus()

    def action_help(self) -> None:
        from traintop.tui.screens.help import HelpScreen  # at the first `?`: none at start

        table_keys = [*help_bindings(TrainingPanel), *help_bindings(ProcessTable)]
        self.push_screen(HelpScreen([*self.BINDINGS, *table_keys]))

    def action_details(self) -> None:
        """Open the verdict details: evidence, ranked remedies, other findings, history."""
        self.verdicts.open_details()


def build_app(
    source: Pipeline | SnapshotSource,
    *,
    clock: Callable[[], float] = time.time,
    hostname: str | None = None,
    focus_job: int | None = None,
    first: Snapshot | None = None,
    job_collector: JobCollector | None = None,
) -> TraintopApp:
    """The one factory the CLI, the tests and the screenshot script all use: the CLI's live
    pipeline, or a pipeline made here over a scripted source (``first``: a snapshot shown in
    the very first frame, as the sampler's own first sample is; ``job_collector``: the one
    told the job on screen)."""
    if not isinstance(source, Pipeline):
        source = Pipeline(source, jobs=job_collector, job_pid=focus_job, first=first)
    return TraintopApp(source, clock=clock, hostname=hostname, focus_job=focus_job)
