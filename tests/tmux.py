"""Drive a real terminal: tmux runs the installed `traintop`, we type and read the screen.

This is what a person over SSH sees, down to the escape sequences Textual emits, which
Pilot tests cannot show.
"""

from __future__ import annotations

import contextlib
import os
import re
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

import psutil
import pytest

# The shell prints this once the command ends; an app that did not restore the terminal
# leaves its last frame around it, so only the digits right after the marker count.
EXIT_MARK = re.compile(r"__EXIT=(\d+)")


def require_tmux() -> str:
    """Path of tmux, or skip the test where it is missing."""
    path = shutil.which("tmux")
    if path is None:
        pytest.skip("tmux is not installed")
    return path


def kill_all(processes: Sequence[psutil.Process], grace_s: float = 3.0) -> None:
    """SIGTERM, then SIGKILL what is still there: no test leaves a process behind."""
    for proc in processes:
        with contextlib.suppress(psutil.Error):
            proc.terminate()
    _, alive = psutil.wait_procs(processes, timeout=grace_s)
    for proc in alive:
        with contextlib.suppress(psutil.Error):
            proc.kill()


class TmuxSession:
    """One detached tmux session of a fixed size running one command."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        width: int = 200,
        height: int = 50,
        env: Mapping[str, str] | None = None,
        cwd: str | None = None,
    ) -> None:
        self.tmux = require_tmux()
        self.name = f"tt-{uuid.uuid4().hex[:8]}"
        self.socket = f"tt-{uuid.uuid4().hex[:8]}"
        merged = {**os.environ, "TERM": "xterm-256color", **(env or {})}
        merged.pop("TMUX", None)
        exports = " ".join(f"{k}={shlex.quote(v)}" for k, v in (env or {}).items())
        command = f"env {exports} {shlex.join(argv)}; echo __EXIT=$?; sleep 600"
        self._tmux(
            "new-session",
            "-d",
            "-s",
            self.name,
            "-x",
            str(width),
            "-y",
            str(height),
            command,
            env=merged,
            cwd=cwd,
        )

    def _tmux(
        self, *args: str, env: Mapping[str, str] | None = None, cwd: str | None = None
    ) -> str:
        done = subprocess.run(
            [self.tmux, "-L", self.socket, *args],
            capture_output=True,
            text=True,
            env=env,
            cwd=cwd,
            timeout=20,
            check=True,
        )
        return done.stdout

    def screen(self) -> str:
        """The visible pane as plain text."""
        return self._tmux("capture-pane", "-p", "-t", self.name)

    def send(self, *keys: str) -> None:
        """Keys in tmux's names ("q", "Escape", "C-c"); "--" keeps a "-" key from being a flag."""
        self._tmux("send-keys", "-t", self.name, "--", *keys)

    def pane_pid(self) -> int:
        """The pane's shell, which runs the command and then prints the ``__EXIT=`` marker."""
        return int(self._format("#{pane_pid}"))

    def app_pid(self, timeout: float = 20.0) -> int:
        """The command itself (the shell's child): signals go here, not to the shell."""
        shell = psutil.Process(self.pane_pid())
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            children = shell.children()
            if children:
                return children[0].pid
            time.sleep(0.05)
        raise AssertionError(f"no command started under the pane shell {shell.pid}")

    def alternate_screen(self) -> bool:
        """Whether the pane is still in the alternate screen (a full-screen app not restored)."""
        return self._format("#{alternate_on}") == "1"

    def _format(self, fmt: str) -> str:
        """One of tmux's format variables for the pane."""
        return self._tmux("display-message", "-p", "-t", self.name, fmt).strip()

    def resize(self, width: int, height: int) -> None:
        """Resize the window as a user dragging the terminal would; the app gets SIGWINCH."""
        self._tmux("resize-window", "-t", self.name, "-x", str(width), "-y", str(height))

    def wait_for(self, predicate: Callable[[str], bool] | str, timeout: float = 20.0) -> str:
        """Poll the screen until `predicate` holds (or the text appears); fail with the screen."""
        check = predicate if callable(predicate) else (lambda s, t=predicate: t in s)
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            try:
                text = self.screen()
            except subprocess.CalledProcessError:
                raise AssertionError(f"tmux session gone; last screen:\n{text}") from None
            if check(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting; screen was:\n{text}")

    def exit_code(self, timeout: float = 10.0) -> int:
        """The exit status of the command, once it has exited."""
        text = self.wait_for(lambda s: EXIT_MARK.search(s) is not None, timeout)
        return int(EXIT_MARK.search(text).group(1))

    def kill(self) -> None:
        """Stop the tmux server and every process the pane started, detached ones included."""
        try:
            leftovers = psutil.Process(self.pane_pid()).children(recursive=True)
        except (subprocess.SubprocessError, psutil.Error, ValueError):
            leftovers = []
        subprocess.run(
            [self.tmux, "-L", self.socket, "kill-server"],
            capture_output=True,
            timeout=20,
            check=False,
        )
        kill_all(leftovers)

    def __enter__(self) -> TmuxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
