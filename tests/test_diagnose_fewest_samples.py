"""`traintop diagnose` judges at least the engine's fewest snapshots (two), however short
``--for`` is: on a loaded box they can take longer than the observation (``--for 2`` answered
"no sample was taken" while four test workers shared two cores, and with one snapshot
"collecting data", without the runs that had ended)."""

from __future__ import annotations

import threading
from contextlib import contextmanager

import pytest

from traintop.cli.diagnose import _observe
from traintop.pipeline import live


class _NoStacks:
    def stacks_pending(self) -> bool:
        return False


class _LatePipeline:
    """A pipeline whose snapshots come 0.3 s and 0.6 s after it starts, as on a loaded box."""

    jobs = _NoStacks()

    def start(self, keep) -> None:
        threading.Timer(0.3, keep, args=("first snapshot", None)).start()
        threading.Timer(0.6, keep, args=("second snapshot", None)).start()


def test_an_observation_shorter_than_two_samples_waits_for_them(monkeypatch) -> None:
    @contextmanager
    def late(*_args, **_kwargs):
        yield _LatePipeline()

    monkeypatch.setattr(live, "live_pipeline", late)
    assert _observe(0.05, 1.0, None) == ["first snapshot", "second snapshot"]


def test_a_real_pipeline_gives_two_however_short_the_observation() -> None:
    assert len(_observe(0.0, 0.2, None)) >= 2


@pytest.fixture(autouse=True)
def _no_leftover_timers():
    yield
    for t in threading.enumerate():
        if isinstance(t, threading.Timer):
            t.join(timeout=2)
