"""The traintop monitor: one App fed by a SnapshotSource, panels toggled by number keys.

The sampler thread calls ``on_snapshot`` from its own thread; the app diagnoses the snapshot
there and turns both into one ``SnapshotReady`` message (thread-safe, and replaceable so a slow
UI skips stale frames), lets every panel record history, and, unless paused, updates panels,
header and verdict banner inside one ``batch_update()`` so each tick paints a single frame.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable
from pathlib import Path
from typing import ClassVar

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.containers import Center, Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.reactive import reactive
from textual.widgets import Footer, Static

from collectors.snapshot import Snapshot
from tui.driver import QuietLinuxDriver
from tui.screens.help import HelpScreen
from tui.source import SnapshotSource, next_interval
from tui.verdict_runner import VerdictUpdate
from tui.verdict_view import VerdictView
from tui.widgets.cpu import CpuPanel
from tui.widgets.dataloader import DataLoaderPanel
from tui.widgets.disk import DiskPanel
from tui.widgets.gpu import GpuPanel
from tui.widgets.header import HeaderBar
from tui.widgets.memory import MemoryPanel
from tui.widgets.network import NetworkPanel
from tui.widgets.panel import Panel
from tui.widgets.process_table import ProcessTable
from tui.widgets.status import StatusLine
from tui.widgets.training import TrainingPanel
from tui.widgets.verdict import VerdictBanner

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

    def __init__(self, snapshot: Snapshot, verdict: VerdictUpdate) -> None:
        super().__init__()
        self.snapshot = snapshot
        self.verdict = verdict

    def can_replace(self, message: Message) -> bool:
        return isinstance(message, SnapshotReady)


class TraintopApp(App[None]):
    """htop for training: GPUs, CPU, memory, disks, network, processes and attached jobs."""

    TITLE = "traintop"
    CSS_PATH: ClassVar[list[Path]] = [
        _STYLES / "app.tcss",
        _STYLES / "training.tcss",
        _STYLES / "verdict.tcss",
    ]
    # Focus is given in on_mount instead: the process table, so its keys (s, K, arrows,
    # PgUp/PgDn) work at once as in htop, without scrolling the GPU panel off-screen.
    AUTO_FOCUS = None
    HORIZONTAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [
        (0, "-tiny"),
        (MIN_SIZE[0], "-narrow"),
        (120, "-medium"),
        (180, "-wide"),
    ]
    VERTICAL_BREAKPOINTS: ClassVar[list[tuple[int, str]]] = [
        (0, "-tiny"),
        (MIN_SIZE[1], "-short"),
        (36, "-tall"),
    ]
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("q", "quit", "Quit"),
        Binding("p", "toggle_pause", "Pause"),
        Binding("plus", "change_interval(1)", "Slower", key_display="+"),
        Binding("minus", "change_interval(-1)", "Faster", key_display="-"),
        Binding("question_mark", "help", "Help", key_display="?"),
        Binding("d", "details", "Details"),
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
        source: SnapshotSource,
        *,
        clock: Callable[[], float] = time.time,
        hostname: str | None = None,
        focus_job: int | None = None,
        first: Snapshot | None = None,
    ) -> None:
        super().__init__(driver_class=QuietLinuxDriver if QuietLinuxDriver.suits() else None)
        self.source = source
        self._first = first
        self._clock = clock
        self._hostname = hostname
        self._focus_job = focus_job
        self._latest: Snapshot | None = None
        self._panels: list[Panel] = []
        self.verdicts = VerdictView(self, job_pid=focus_job)

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
                yield DataLoaderPanel(focus_pid=self._focus_job, id="dataloader")
            yield CpuPanel(id="cpu")
            with Horizontal(id="io-row"):
                yield MemoryPanel(id="memory")
                yield DiskPanel(id="disk")
                yield NetworkPanel(id="network")
            with Vertical(id="process-box"):
                yield ProcessTable(id="processes")
        yield StatusLine(id="status")
        yield Footer(compact=True)

    def on_mount(self) -> None:
        # Looked up once: two DOM queries per tick cost as much as drawing a panel.
        self._panels = list(self.query(Panel))
        self.query_one(ProcessTable).focus(scroll_visible=False)
        self._show_header()
        self.verdicts.start()
        if self._first is not None:
            # Shown before the first paint, so the first frame is a full one: no "waiting"
            # frame, no relayout when the panels fill, no sampling while that frame is drawn.
            # The runner is still this thread's alone: the sampler thread starts below.
            self.on_snapshot_ready(SnapshotReady(self._first, self.verdicts.judge(self._first)))
        self.source.start(self._deliver)
        # Startup objects (modules, CSS, widgets) live forever: freezing them keeps the
        # collector's full passes from walking them again every few ticks (~20 % of UI time).
        self.call_after_refresh(gc.freeze)

    def on_unmount(self) -> None:
        self.source.stop()

    def _deliver(self, snapshot: Snapshot) -> None:
        """Runs on the sampler thread: diagnose (~1 ms), then hand both to the UI thread."""
        self.post_message(SnapshotReady(snapshot, self.verdicts.judge(snapshot)))

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        self._latest = message.snapshot
        for panel in self._panels:
            panel.record(message.snapshot)
        with self.batch_update():
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
            self.query_one(TrainingPanel).update_jobs(snapshot.jobs)
            self.query_one(DataLoaderPanel).update_jobs(snapshot.jobs)
        self.query_one(StatusLine).show(snapshot)

    def watch_paused(self, paused: bool) -> None:
        with self.batch_update():
            if not paused:
                self.verdicts.resume()
            if not paused and self._latest is not None:
                self.snapshot = self._latest
            self._show_header()

    def _show_header(self) -> None:
        header = self.query_one(HeaderBar)
        header.show(self.snapshot or self._latest, self.source.interval_s, self.paused)

    def action_toggle_pause(self) -> None:
        """Freeze the display; the sampler and every panel's history keep going."""
        self.paused = not self.paused

    def action_change_interval(self, step: int) -> None:
        """Move the sampler one preset step slower (+1) or faster (-1)."""
        self.source.interval_s = next_interval(self.source.interval_s, step)
        self._show_header()

    def action_toggle_panel(self, panel_id: str) -> None:
        self.query_one(f"#{panel_id}").toggle_class("-hidden")

    def action_help(self) -> None:
        self.push_screen(HelpScreen([*self.BINDINGS, *ProcessTable.help_bindings()]))

    def action_details(self) -> None:
        """Open the verdict details: evidence, ranked remedies, other findings, history."""
        self.verdicts.open_details()


def build_app(
    source: SnapshotSource,
    *,
    clock: Callable[[], float] = time.time,
    hostname: str | None = None,
    focus_job: int | None = None,
    first: Snapshot | None = None,
) -> TraintopApp:
    """The one factory the CLI, the tests and the screenshot script all use; ``first`` is a
    snapshot the source took just before, shown in the very first frame."""
    return TraintopApp(source, clock=clock, hostname=hostname, focus_job=focus_job, first=first)
