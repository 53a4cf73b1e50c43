"""The keys at the bottom of the monitor, one line drawn from the bindings in force.

It shows what Textual's compact ``Footer`` shows, as that draws it (the focused widget's keys,
then the app's, the command palette's at the right), but as one widget whose line is drawn at
the first paint.  The ``Footer`` composes nothing until its bindings are announced, after the
first paint, then mounts a widget per key and recomposes at each focus change: the keys came
two repaints and a fifth of a second after the rest of the first frame.  Here a change of
bindings repaints the cells that changed, and a click on a key presses it, as there.
"""

from __future__ import annotations

from textual.binding import Binding
from textual.content import Content
from textual.events import MouseDown
from textual.geometry import Size
from textual.strip import Strip

from traintop.tui.widgets.panel import LineWidget

KEY = "bold $footer-key-foreground on $footer-key-background"
DESCRIPTION = "$footer-description-foreground on $footer-description-background"
PALETTE_EDGE = ("▏", "$foreground 20%")  # Footer's vkey border beside the palette key


class KeyBar(LineWidget):
    """The key bindings in force, each shown once ("q Quit"); click one to press it."""

    ALLOW_SELECT = False
    DEFAULT_CSS = """
    KeyBar {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
    }
    """

    def __init__(self, *, id: str | None = None) -> None:
        super().__init__(id=id)
        self._spots: list[tuple[int, int, Binding, bool]] = []  # cells, binding, enabled
        self._built = Size(0, 0)

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, lambda _screen: self._rebuild())

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def on_resize(self) -> None:
        if self.content_size != self._built:  # not at the size painted (see Panel)
            self._rebuild()

    def render_line(self, y: int) -> Strip:
        size = self.content_size
        if size != self._built and size.width > 0:
            # The first paint comes before the Resize event (see Panel): draw the keys now.
            self._lines, self._strips, self._built = [self._line(size.width)], {}, size
        return super().render_line(y)

    def on_mouse_down(self, event: MouseDown) -> None:
        for start, end, binding, enabled in self._spots:
            if start <= event.x < end:
                if enabled:
                    self.app.simulate_key(binding.key)
                else:
                    self.app.bell()
                return

    def _rebuild(self) -> None:
        width = self.content_size.width
        if width > 0:
            self._built = self.content_size
            self.set_lines([self._line(width)])

    def _line(self, width: int) -> Content:
        """The keys in force laid out in ``width`` cells; remembers where each one is."""
        keys, palette = self._in_force()
        parts: list[tuple[str, str] | str] = []
        self._spots, x = [], 0
        for binding, enabled in keys:
            key, label = self.app.get_key_display(binding), f" {binding.description}"
            parts += [*_key(key, label, enabled), " "]
            self._spots.append((x, x + len(key) + len(label), binding, enabled))
            x += len(key) + len(label) + 1
        if palette is not None:
            binding, enabled = palette
            key, label = self.app.get_key_display(binding), f" {binding.description}"
            tail = len(key) + len(label) + 2  # the edge before, a blank after (its padding)
            parts += [" " * max(0, width - x - tail), PALETTE_EDGE, *_key(key, label, enabled), " "]
            self._spots.append((width - tail + 1, width, binding, enabled))
        return Content.assemble(*parts).truncate(width)

    def _in_force(self) -> tuple[list[tuple[Binding, bool]], tuple[Binding, bool] | None]:
        """The shown bindings in force, the first of each action, and the palette's apart."""
        active = self.screen.active_bindings
        palette_key = self.app.COMMAND_PALETTE_BINDING if self.app.ENABLE_COMMAND_PALETTE else None
        palette, keys, actions = None, [], set()
        for key, (_node, binding, enabled, _tooltip) in active.items():
            if key == palette_key:
                palette = (binding, enabled)
            elif binding.show and binding.action not in actions:
                actions.add(binding.action)
                keys.append((binding, enabled))
        return keys, palette


def _key(key: str, label: str, enabled: bool) -> list[tuple[str, str] | str]:
    """One key and what it does, dim when the binding is disabled."""
    dim = "" if enabled else " dim"
    return [(key, KEY + dim), (label, DESCRIPTION + dim)]
