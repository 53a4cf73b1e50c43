"""`traintop replay FILE`: the monitor's own UI, fed by a recording instead of the sampler.

Everything the live monitor shows comes from snapshots, so the app is reused as it is; this
subclass only swaps the keys (playback instead of pause, interval and record), adds the
timeline under the header, and hands the samples before a jump to the panels' history.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from typing import ClassVar

from textual.app import App
from textual.binding import Binding
from textual.message import Message

from traintop.collectors.snapshot import Snapshot
from traintop.pipeline.live import Pipeline
from traintop.store.ranges import parse_goto
from traintop.store.reader import Recording
from traintop.store.replay_source import ReplaySource
from traintop.store.schema import StoreError
from traintop.tui.app import SnapshotReady, TraintopApp
from traintop.tui.replay_goto import GotoScreen
from traintop.tui.widgets.timeline import Timeline

EXIT_BAD_FILE = 1
_LIVE_ONLY = ("toggle_pause", "toggle_record", "change_interval(1)", "change_interval(-1)")


class ReplayHistory(Message):
    """The samples before a jump, for the panels' sparklines (never coalesced away)."""

    def __init__(self, snapshots: Sequence[Snapshot]) -> None:
        super().__init__()
        self.snapshots = snapshots


class ReplayApp(TraintopApp, inherit_bindings=False):
    """The monitor on a recording, with playback keys and a timeline."""

    # Playback keys first, so a narrow footer shows them before the monitor's own.
    BINDINGS: ClassVar[list[Binding]] = [
        Binding("space", "play", "Play/pause", key_display="space"),
        Binding("p", "play", "Play/pause", show=False),
        Binding("comma", "step(-1)", "Back", key_display=","),
        Binding("full_stop", "step(1)", "Fwd", key_display="."),
        Binding("left_square_bracket", "jump(-60)", "-1m", key_display="["),
        Binding("right_square_bracket", "jump(60)", "+1m", key_display="]"),
        Binding("x", "speed", "Speed"),
        Binding("g", "goto", "Go to"),
        Binding("n", "verdict_change(1)", "Next verdict change", show=False),
        Binding("N", "verdict_change(-1)", "Previous verdict change", show=False, key_display="N"),
        *(b for b in TraintopApp.BINDINGS if b.action not in _LIVE_ONLY),
        *(b for b in App.BINDINGS if isinstance(b, Binding)),  # all are: its type allows tuples
    ]

    def __init__(self, source: ReplaySource) -> None:
        super().__init__(Pipeline(source), clock=lambda: source.position().t)
        self.replay = source
        changes = _change_indexes(source.recording)
        self._changes = changes
        times = [source.recording.samples[i].t for i in changes]
        self._timeline = Timeline(times, id="timeline")
        source.on_history = lambda snaps: self.post_message(ReplayHistory(snaps))

    def on_mount(self) -> None:
        self.mount(self._timeline, after="#header")
        super().on_mount()

    def on_snapshot_ready(self, message: SnapshotReady) -> None:
        super().on_snapshot_ready(message)
        self._timeline.show(self.replay.position())

    def on_replay_history(self, message: ReplayHistory) -> None:
        for snapshot in message.snapshots:
            for panel in self._panels:
                panel.record(snapshot)

    def action_play(self) -> None:
        self.replay.toggle_play()
        self._timeline.show(self.replay.position())

    def action_step(self, count: int) -> None:
        self.replay.step(count)
        self._timeline.show(self.replay.position())  # paused now, even where nothing moves

    def action_jump(self, seconds: float) -> None:
        self.replay.jump(seconds)

    def action_speed(self) -> None:
        self.replay.cycle_speed()
        self._timeline.show(self.replay.position())

    def action_verdict_change(self, direction: int) -> None:
        """Jump to the next (or previous) sample where the recorded verdict changed."""
        here = self.replay.position().index
        ahead = [i for i in self._changes if (i - here) * direction > 0]
        if not ahead:
            self.notify("no further verdict change", timeout=3)
            return
        self.replay.seek_index(min(ahead) if direction > 0 else max(ahead))

    def action_goto(self) -> None:
        self.push_screen(GotoScreen(), self._goto)

    def _goto(self, text: str | None) -> None:
        if not text:
            return
        p = self.replay.position()
        try:
            self.replay.seek(parse_goto(text, p.start, p.end))
        except ValueError:
            self.notify(f"not a time: {text!r} (try 13:05, +10m, -5m)", severity="error")


def _change_indexes(recording: Recording) -> list[int]:
    """Sample positions where the primary bottleneck differs from the sample before."""
    position = {row.id: i for i, row in enumerate(recording.samples)}
    out, last = [], None
    for sample_id, bottleneck in recording.verdict_timeline():
        if last is not None and bottleneck != last and sample_id in position:
            out.append(position[sample_id])
        last = bottleneck
    return out


def run_replay(path: str, before_ui: Callable[[], None] = lambda: None) -> int:
    """Open ``path`` and run the replay UI; a bad file is one line and exit 1.  ``before_ui``
    runs once the file proved good (the terminal check: a bad file is named first)."""
    try:
        recording = Recording(path)
    except StoreError as exc:
        print(f"traintop: {exc}", file=sys.stderr)
        return EXIT_BAD_FILE
    if not recording.samples:
        print(f"traintop: {path}: the recording holds no samples", file=sys.stderr)
        return EXIT_BAD_FILE
    source = ReplaySource(recording)
    try:
        before_ui()
        ReplayApp(source).run()
    finally:
        recording.close()
    return 0
