"""A run seen from its first second: the segment ``traintop run`` makes at start-up.

A job whose first step takes minutes (``torch.compile``, a graph capture, an index build) used to
be invisible until that step ended, because the segment was made at the first step boundary.
Under ``traintop run`` the shim now makes it as the interpreter starts, so the monitor lists the
job as *starting*, asks its helper thread where the main thread is, and keeps how long the first
step took (``RingWriter`` stores it in the segment's first-step word).

Which processes are runs is decided here, from what each process can see at start-up, because
a ring for every Python process would list compile workers, tools and launchers as jobs:

* the command ``traintop run`` started (``execvpe`` keeps its pid: ``TRAINTOP_STARTUP_PID``),
  or a Python process that command started (a shell script's ``python train.py``);
* each worker of a launcher such as torchrun: the launcher is a Python process too, so the shim
  recognises it, makes no ring for it, and names it the parent whose children are runs.

A run's own children (inductor's compile workers, DataLoader workers, a ``subprocess``) are not:
the run clears the mark before anything of the script runs.  Multiprocessing children (spawn,
forkserver: ``mp.spawn`` ranks, DataLoader workers) never qualify; a rank among them gets its
segment at its first step, as before.  A run that exits cleanly without a single step was no
training job (a preprocessing script): its segment is removed at exit, not kept as a finished job.
Stdlib only.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

ENV_STARTUP = "TRAINTOP_STARTUP_PID"
NOT_A_RUN = "0"  # what a run leaves for its children: none of them is a run of its own
# Programs that start the runs (their workers are the ranks) and never train themselves.
LAUNCHER_PROGRAMS = frozenset({"torchrun", "accelerate", "deepspeed"})
LAUNCHER_MODULES = frozenset({
    "torch.distributed.run", "torch.distributed.launch", "accelerate.commands.launch",
    "accelerate.commands.accelerate_cli", "deepspeed.launcher.runner", "deepspeed.launcher.launch",
})  # fmt: skip


def role(environ: dict[str, str] | os._Environ[str], pid: int, ppid: int,
         argv: Sequence[str]) -> str:  # fmt: skip
    """ "run", "launcher" or "" (neither) for a process that ``argv`` (``sys.orig_argv``)
    started, with ``pid`` and parent ``ppid``."""
    mark = environ.get(ENV_STARTUP, "")
    if not mark.isdigit() or int(mark) <= 0 or int(mark) not in (pid, ppid):
        return ""  # "0": a run's child (and a ppid of 0, outside our pid namespace, is no mark)
    if _multiprocessing_child(argv):
        return ""
    return "launcher" if is_launcher(argv) else "run"


def is_launcher(argv: Sequence[str]) -> bool:
    """torchrun, ``python -m torch.distributed.run``, accelerate's and DeepSpeed's launchers."""
    words = list(argv)
    if words and Path(words[0]).name in LAUNCHER_PROGRAMS:
        return True
    program = next((Path(w).name for w in words[1:2] if not w.startswith("-")), "")
    if program in LAUNCHER_PROGRAMS:  # python /usr/bin/torchrun ...
        return True
    modules = (words[i + 1] for i, w in enumerate(words[:-1]) if w == "-m")
    return any(m in LAUNCHER_MODULES for m in modules)


def _multiprocessing_child(argv: Iterable[str]) -> bool:
    """A process multiprocessing started (spawn, forkserver, its resource tracker)."""
    return any(w.startswith("from multiprocessing") or w == "--multiprocessing-fork" for w in argv)


def begin(attach: Callable[[], Any]) -> None:
    """At interpreter start-up (the shim, which passes ``traintop.attach``): make this run's
    probe and segment now, or mark a launcher's children as runs."""
    kind = role(os.environ, os.getpid(), os.getppid(), getattr(sys, "orig_argv", sys.argv))
    if kind == "launcher":
        os.environ[ENV_STARTUP] = str(os.getpid())
    if kind != "run":
        return
    os.environ[ENV_STARTUP] = NOT_A_RUN
    probe = attach()
    if probe.enabled and probe._writer is None:
        probe._create_writer()


def relabel(probe: Any, name: str | None, phases: tuple[str, ...]) -> None:
    """``attach(name=..., phases=...)`` called by a script whose probe the shim made first: a
    segment made at start-up that holds no record yet takes the script's phases and name (its
    header is rewritten: ``RingWriter.rewrite_layout``); after the first step they come too late,
    as they always did."""
    for phase in phases:
        probe._slot(str(phase))
    relayout = getattr(probe._writer, "rewrite_layout", None)
    if relayout is None or not name or name == probe.name or probe._step:
        return
    if relayout(name, probe.phase_names):
        probe.name = name
