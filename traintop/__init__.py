"""traintop's training-side probe: ``probe = traintop.attach()`` inside a training script.

::

    probe = traintop.attach()
    for batch in probe.loader(loader):
        probe.mark("forward")       # phase boundaries: the cheapest way to time phases
        loss = model(batch)
        probe.mark("backward")
        loss.backward()
        probe.mark("optimizer")
        opt.step()
        probe.step()                # closes "optimizer" and writes the step's record

``with probe.phase(name):`` blocks time the same phases and nest.

This package is imported by training processes, so it uses the standard library only (torch
solely when the user already imported it) and never raises into the training code.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable, Sequence

from traintop import checkout

__path__[:] = checkout.find_rooms(__path__, __file__)  # a checkout's rooms are beside it

from traintop import cuda_timing, job_names
from traintop.probe import Probe, Writer, WriterFactory

__all__ = ["Probe", "attach"]

_probe: Probe | None = None


def attach(name: str | None = None, *, phases: Iterable[str] = ()) -> Probe:
    """The probe of this process, created on first call (later calls return the same one).

    ``name`` defaults to ``traintop run --name``, the launcher's run name or the script name
    (``default_name``); ``phases`` declares custom phase names up front.  Rank, local rank and
    world size come from the process group when there is one, else from torchrun's RANK /
    LOCAL_RANK / WORLD_SIZE (``traintop.dist_identity``).
    """
    global _probe
    if _probe is None:
        _probe = _new_probe(name or default_name(), tuple(phases))
        os.register_at_fork(after_in_child=_probe._forget_in_child)
        _ledger_hooks(_probe)
    elif name or phases:  # the segment made at start-up takes them until the first step
        from traintop.run_start import relabel

        relabel(_probe, name, tuple(phases))
    return _probe


def _ledger_hooks(probe: Probe) -> None:
    """With torch imported, wrap its collectives for the ledger (``traintop.comm_hooks``): the
    zero-code shim does more, an explicit probe gets this much.  Its failure is its own."""
    torch = sys.modules.get("torch")
    if torch is None or not hasattr(torch, "distributed"):
        return
    try:
        from traintop import comm_hooks

        comm_hooks.install_collectives(probe, torch)
    except Exception as exc:
        print(f"traintop: collective ledger disabled ({exc})", file=sys.stderr)


def default_name() -> str:
    """The job's name when the code gives none: ``traintop run --name``, else the launcher's run
    name, else the script ``traintop run`` started (``traintop.job_names``), else this one."""
    named = os.environ.get("TRAINTOP_RUN_NAME") or job_names.launcher_run_name()
    if named:
        return named
    script = os.environ.get("TRAINTOP_SCRIPT_NAME")
    if script:
        return script
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
    return job_names.script_name(argv0) if argv0 else "python"


def _new_probe(name: str, phases: tuple[str, ...]) -> Probe:
    try:
        probe = Probe(name, writer_factory=_ring_factory(name), phases=phases,
                      extras_factory=cuda_timing.detect)  # fmt: skip
    except Exception as exc:  # bad phase names and the like: an inert probe, one warning
        probe = Probe(name, writer_factory=_ring_factory(name))
        probe._fail(exc)
        return probe
    probe._on_segment = _stack_helper(probe)
    return probe


def _stack_helper(probe: Probe) -> Callable[[Writer], None]:
    """Start the helper thread that answers a monitor's stack requests once the segment
    exists (``traintop.stack_helper``: zero-code and explicit probes alike), then watch how
    the run ends (``traintop.run_end``)."""

    def start(writer: Writer) -> None:
        from traintop import run_end, stack_helper

        stack_helper.start(probe, writer)
        run_end.start(probe, writer)

    return start


def _ring_factory(name: str) -> WriterFactory:
    """Segments are made at the first step, or at start-up under ``traintop run``
    (``traintop.run_start``): with the rank identity known by then (``traintop.dist_identity``),
    rewritten when a process group comes later."""

    def create(phases: Sequence[str]) -> Writer:
        from traintop.dist_identity import current
        from traintop.ring import RingWriter

        who = current()
        return RingWriter.create(name=name, phases=phases, rank=who.rank,
                                 local_rank=who.local_rank, world_size=who.world_size,
                                 run_id=who.run_id)  # fmt: skip

    return create
