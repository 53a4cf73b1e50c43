"""The whole suite, in the two parts its tests need (the README's test command, so ``.ci/run``):

1. every test but the ``solo`` ones, side by side on ``WORKERS`` pytest-xdist workers: the
   quick tests, and the slow ones that mostly wait (a hung job, a tmux pane, Prometheus), whose
   assertions hold on a loaded box;
2. then the ``solo`` tests, one at a time in one process, with the CPUs to themselves: they
   assert what real jobs do with the CPU time they get (a verdict, a step's timing).

Both parts cache bytecode, whatever the machine asks (``PYTHONDONTWRITEBYTECODE``, set on the
development VM's image): the README's install skips pip's compiling of every module it installs
(``--no-compile``: 27 s of torch's 4,000 files on 2 cores), and each module is compiled once, as
it is first imported; without the cache every process the suite starts (some thousand, a few
hundred of them importing torch) would compile what it imports again.

The second part runs even when the first failed, and the exit status is the first non-zero of
the two (5, "no tests collected", counts as a pass: a ``-k`` or a path may leave a part empty).
Arguments are passed to both parts: ``python3 -m tests.suite -x tests/test_run_life.py``.  Each
part lists its skipped tests with their reasons, so a test that stopped running shows.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

# Waiting tests overlap well beyond the core count; more workers than this start more torch
# imports at once than 2 cores finish before the hang tests' deadlines.
WORKERS = 4
NO_TESTS = 5


def parts(args: list[str]) -> list[tuple[str, list[str]]]:
    """The two pytest command lines: (name, argv)."""
    workers = os.environ.get("TRAINTOP_TEST_WORKERS", str(WORKERS))
    pytest = [sys.executable, "-m", "pytest", "-rs"]  # each skip with its reason
    return [
        ("parallel", [*pytest, "-m", "not solo", "-n", workers, "--dist", "loadgroup", *args]),
        ("solo", [*pytest, "-m", "solo", "-n", "0", *args]),
    ]


def run(name: str, argv: list[str]) -> int:
    """Run one part; its exit status, with "no tests collected" read as a pass."""
    print(f"== {name} part: {' '.join(argv[1:])}", flush=True)
    started = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    status = subprocess.run(argv, env=env, check=False).returncode
    minutes = (time.monotonic() - started) / 60
    print(f"== {name} part: exit {status} after {minutes:.1f} min", flush=True)
    return 0 if status == NO_TESTS else status


def main(args: list[str]) -> int:
    statuses = [run(name, argv) for name, argv in parts(args)]
    return next((status for status in statuses if status), 0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
