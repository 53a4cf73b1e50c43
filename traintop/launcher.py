"""``traintop run [--name NAME] -- COMMAND [ARGS...]``: instrument a training job, unmodified.

The command replaces this process (``execvpe``), so it keeps our PID, terminal, stdout/stderr,
signals and exit status: ``traintop run -- python train.py`` behaves exactly like
``python train.py``.  The only change is the environment: the shim directory goes first on
PYTHONPATH, so every Python process of the command (torchrun's workers included, each with its
own ring segment) loads ``traintop/shim/sitecustomize.py``, which instruments torch on import.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from traintop.job_names import script_name
from traintop.run_start import ENV_STARTUP, LAUNCHER_MODULES

SHIM_DIR = Path(__file__).resolve().parent / "shim"
EXIT_NOT_FOUND = 127  # what a shell returns for an unknown command
EXIT_NOT_EXECUTABLE = 126
EXIT_USAGE = 2


def run_command(argv: list[str], name: str | None, record: str | None = None) -> NoReturn:
    """Exec ``argv`` with the shim on PYTHONPATH; exits 127/126 with one line if it cannot."""
    if not argv:
        _die("traintop run: no command given (usage: traintop run [--name NAME] -- CMD ...)",
             EXIT_USAGE)  # fmt: skip
    if record is not None:
        start_recorder(record, os.getpid())
    env = instrumented_env(os.environ, name or job_name(argv), explicit=name is not None)
    try:
        os.execvpe(argv[0], argv, env)
    except FileNotFoundError:
        _die(f"traintop run: {argv[0]}: command not found", EXIT_NOT_FOUND)
    except PermissionError:
        _die(f"traintop run: {argv[0]}: permission denied", EXIT_NOT_EXECUTABLE)
    except OSError as exc:
        _die(f"traintop run: {argv[0]}: {exc.strerror or exc}", EXIT_NOT_EXECUTABLE)


def instrumented_env(base: os._Environ[str] | dict[str, str], name: str, *,
                     explicit: bool = True) -> dict[str, str]:  # fmt: skip
    """A copy of ``base`` with the shim first on PYTHONPATH and the job name set.

    A name given with ``--name`` is final (TRAINTOP_RUN_NAME); one guessed from the command
    (TRAINTOP_SCRIPT_NAME) yields to a run name the launcher gives its workers.  This process's
    pid marks the command as the run whose segment is made at start-up (``traintop.run_start``).
    """
    env = dict(base)
    paths = [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p and p != str(SHIM_DIR)]
    env["PYTHONPATH"] = os.pathsep.join([str(SHIM_DIR), *paths])
    env["TRAINTOP_RUN_NAME" if explicit else "TRAINTOP_SCRIPT_NAME"] = name
    env[ENV_STARTUP] = str(os.getpid())  # exec keeps the pid: the command is the run
    return env


def job_name(argv: Sequence[str]) -> str:
    """``python train.py`` -> "train" (``main.py`` -> "folder/main"), ``python -m pkg.train`` ->
    "pkg.train" (``python -m torch.distributed.run ... train.py`` -> "train": a launcher's
    module is not the job), else the program."""
    for i, arg in enumerate(argv[1:], start=1):
        if arg.endswith(".py"):
            return script_name(arg)
        if arg == "-m" and i + 1 < len(argv) and argv[i + 1] not in LAUNCHER_MODULES:
            return argv[i + 1]
    return Path(argv[0]).name


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point for ``traintop run``: ``argv`` is what follows "run"."""
    parser = _OneLineParser(
        prog="traintop run", description="Run a training command with traintop instrumentation."
    )
    parser.add_argument(
        "--name",
        help="job name shown by the monitor (default: the launcher's "
        "run name, else the script, with its folder for main.py/train.py)",
    )
    parser.add_argument("--record", metavar="FILE", help="record the job's whole life to FILE")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND [ARGS...]")
    args = parser.parse_args(list(sys.argv[1:] if argv is None else argv))
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if args.name is not None and not args.name.strip():
        _die("traintop run: --name must not be empty", EXIT_USAGE)
    if args.record is not None and os.path.exists(args.record):
        _die(f"traintop run: {args.record}: already exists; choose another file name", EXIT_USAGE)
    run_command(command, args.name, args.record)


def start_recorder(path: str, pid: int) -> None:
    """`traintop record` for the life of ``pid`` (this process, soon the job: exec keeps it).

    A process of its own, detached by a double fork into its own session: the training process
    never runs recorder code and never has to reap it, and a Ctrl+C meant for the job does not
    cut the recording short (the recorder stops when the job exits, after reading its last
    steps).  Its one-line summary or error goes to this terminal's stderr.
    """
    argv = [
        sys.executable,
        "-m",
        "traintop.cli.main",
        "record",
        "-o",
        path,
        "--watch-pid",
        str(pid),
    ]
    child = os.fork()
    if child:
        os.waitpid(child, 0)
        return
    try:
        os.setsid()
        subprocess.Popen(argv, stdin=subprocess.DEVNULL, close_fds=True)
    finally:
        os._exit(0)


class _OneLineParser(argparse.ArgumentParser):
    """argparse that reports a bad option in one line (no usage dump) and exits 2."""

    def error(self, message: str) -> NoReturn:
        _die(f"{self.prog}: {message} (see traintop run --help)", EXIT_USAGE)


def _die(message: str, code: int) -> NoReturn:
    print(message, file=sys.stderr)
    sys.exit(code)


if __name__ == "__main__":
    sys.exit(main())
