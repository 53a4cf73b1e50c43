"""Drive a real terminal: tmux runs the installed `traintop`, we type and read the screen.

This is what a person over SSH sees, down to the escape sequences Textual emits, which
Pilot tests cannot show.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import time
import uuid
from collections.abc import Callable, Mapping, Sequence

import pytest


def require_tmux() -> str:
    """Path of tmux, or skip the test where it is missing."""
    path = shutil.which("tmux")
    if path is None:
        pytest.skip("tmux is not installed")
    return path


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
        command = f"env {exports} {shlex.join(argv)}; echo __EXIT=$?; sleep 30"
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
        """Keys in tmux's names ("q", "Escape", "C-c")."""
        self._tmux("send-keys", "-t", self.name, *keys)

    def pane_pid(self) -> int:
        return int(self._tmux("display-message", "-p", "-t", self.name, "#{pane_pid}").strip())

    def wait_for(self, predicate: Callable[[str], bool] | str, timeout: float = 20.0) -> str:
        """Poll the screen until `predicate` holds (or the text appears); fail with the screen."""
        check = predicate if callable(predicate) else (lambda s, t=predicate: t in s)
        deadline = time.monotonic() + timeout
        text = ""
        while time.monotonic() < deadline:
            text = self.screen()
            if check(text):
                return text
            time.sleep(0.1)
        raise AssertionError(f"timed out after {timeout}s waiting; screen was:\n{text}")

    def exit_code(self, timeout: float = 10.0) -> int:
        """The exit status of the command, once it has exited."""
        text = self.wait_for("__EXIT=", timeout)
        tail = text.split("__EXIT=", 1)[1]
        return int(tail.split()[0])

    def kill(self) -> None:
        subprocess.run(
            [self.tmux, "-L", self.socket, "kill-server"],
            capture_output=True,
            timeout=20,
            check=False,
        )

    def __enter__(self) -> TmuxSession:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
