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
from collections.abc import Iterable, Sequence
from pathlib import Path

from traintop import cuda_timing
from traintop.probe import Probe, Writer, WriterFactory

__all__ = ["Probe", "attach"]

_probe: Probe | None = None


def attach(name: str | None = None, *, phases: Iterable[str] = ()) -> Probe:
    """The probe of this process, created on first call (later calls return the same one).

    ``name`` defaults to ``$TRAINTOP_RUN_NAME`` (set by ``traintop run``) or the script name;
    ``phases`` declares custom phase names up front.  Rank, local rank and world size come from
    torchrun's RANK / LOCAL_RANK / WORLD_SIZE.
    """
    global _probe
    if _probe is None:
        _probe = _new_probe(name or default_name(), tuple(phases))
        os.register_at_fork(after_in_child=_probe._forget_in_child)
    return _probe


def default_name() -> str:
    """What the monitor shows for a job nobody named: the script or module that runs."""
    env = os.environ.get("TRAINTOP_RUN_NAME")
    if env:
        return env
    argv0 = sys.argv[0] if sys.argv and sys.argv[0] not in ("", "-c", "-m") else ""
    return Path(argv0).stem or "python"


def _new_probe(name: str, phases: tuple[str, ...]) -> Probe:
    try:
        return Probe(name, writer_factory=_ring_factory(name), phases=phases,
                     extras_factory=cuda_timing.detect)  # fmt: skip
    except Exception as exc:  # bad phase names and the like: an inert probe, one warning
        probe = Probe(name, writer_factory=_ring_factory(name))
        probe._fail(exc)
        return probe


def _ring_factory(name: str) -> WriterFactory:
    rank, local_rank, world = (_env_int(v, d) for v, d in _RANK_ENV)

    def create(phases: Sequence[str]) -> Writer:
        from traintop.ring import RingWriter

        return RingWriter.create(name=name, phases=phases, rank=rank, local_rank=local_rank,
                                 world_size=world)  # fmt: skip

    return create


_RANK_ENV = (("RANK", 0), ("LOCAL_RANK", 0), ("WORLD_SIZE", 1))


def _env_int(variable: str, default: int) -> int:
    try:
        return int(os.environ.get(variable, default))
    except ValueError:
        return default
