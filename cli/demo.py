"""`traintop demo`: a real, small PyTorch job on the CPU, started beside the monitor.

The job runs as a child process (its output goes to a log file so it cannot draw over the
screen) and is stopped when the monitor quits.
"""

from __future__ import annotations

import importlib.util
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass


@dataclass
class DemoJob:
    """The demo training process and where its output goes."""

    process: subprocess.Popen
    log_path: str

    @property
    def pid(self) -> int:
        return self.process.pid

    def stop(self, timeout_s: float = 5.0) -> None:
        """SIGTERM, then SIGKILL if the job does not finish in time."""
        if self.process.poll() is not None:
            return
        self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def start_demo_job(bottleneck: str, seconds: float | None) -> DemoJob | None:
    """Start the demo job, or print one line and return None when PyTorch is missing."""
    if importlib.util.find_spec("torch") is None:
        print(
            "traintop: demo needs PyTorch: pip install 'traintop[torch]' "
            "(on a CPU machine: pip install torch==2.13.0)",
            file=sys.stderr,
        )
        return None
    argv = [sys.executable, "-m", "traintop.demo_job", "--bottleneck", bottleneck]
    if seconds is not None:
        argv += ["--seconds", str(seconds)]
    with tempfile.NamedTemporaryFile(prefix="traintop-demo-", suffix=".log", delete=False) as log:
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return DemoJob(proc, log.name)
