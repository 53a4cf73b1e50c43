"""What every check needs: where to write, how to start traintop and nvidia-smi, the time left.

traintop is always started as a separate process the way a user starts it (``python -c`` on the
installed package, from a working directory that is not the repository, whose ``traintop/``
folder would otherwise shadow the installed package), with a private ring directory so that only
the check's own jobs are seen.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from traintop.ring_paths import ENV_DIR, ensure_private_dir

HERE = Path(__file__).resolve().parent
TRAINTOP = "import sys; from traintop.cli.main import main; sys.exit(main())"


@dataclass
class Context:
    """One run of the check: folders, mode, the commands it compares against, its deadline."""

    out: Path
    work: Path
    fake: bool  # NVML is tests/fakenvml; nvidia-smi is its stand-in
    nvidia_smi: list[str]
    env: dict[str, str]  # for every process started: the private ring directory
    ring_dir: Path
    deadline: float  # time.monotonic() by which the last check must have ended
    no_cuda: str | None = None  # why the CUDA parts are skipped; None: they run

    def remaining(self) -> float:
        return self.deadline - time.monotonic()

    @property
    def device(self) -> str:
        """Where the training job runs: the card, or the CPU (tiny model) without CUDA."""
        return "cpu" if self.no_cuda else "cuda"

    def traintop(self, *args: str) -> list[str]:
        """argv of ``traintop ARGS...`` run by this interpreter."""
        return [sys.executable, "-c", TRAINTOP, *args]

    def run(self, argv: list[str], timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run a command to completion in the work folder, output captured as text."""
        return subprocess.run(
            argv,
            cwd=self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )

    def start(
        self, argv: list[str], env: dict[str, str] | None = None, **streams
    ) -> subprocess.Popen:
        """Start a command in the work folder, no stdin; ``env`` added to the check's
        environment (a job's own settings); ``streams`` as for Popen."""
        return subprocess.Popen(argv, cwd=self.work, env={**self.env, **(env or {})},
                                stdin=subprocess.DEVNULL, **streams)  # fmt: skip


def make_context(out: Path, work: Path, fake: bool, nvidia_smi: list[str], budget_s: float):
    """The context of one run; the ring directory sits in /dev/shm like a user's."""
    out.mkdir(parents=True, exist_ok=True)
    work.mkdir(parents=True, exist_ok=True)
    shm = Path("/dev/shm")
    ring_dir = ensure_private_dir((shm if shm.is_dir() else work) / f"traintop-check-{os.getpid()}")
    env = dict(os.environ, PYTHONUNBUFFERED="1", **{ENV_DIR: str(ring_dir)})
    deadline = time.monotonic() + budget_s
    return Context(out, work, fake, nvidia_smi, env, ring_dir, deadline)
