"""`traintop diagnose` judges at least one snapshot, however short ``--for`` is: on a loaded
box the first sample can take longer than the observation (``--for 2`` answered "no sample was
taken" while four test workers shared two cores)."""

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
    """A pipeline whose first snapshot comes 0.3 s after it starts, as on a loaded box."""

    jobs = _NoStacks()

    def start(self, keep) -> None:
        threading.Timer(0.3, keep, args=("first snapshot", None)).start()


def test_an_observation_shorter_than_the_first_sample_waits_for_it(monkeypatch) -> None:
    @contextmanager
    def late(*_args, **_kwargs):
        yield _LatePipeline()

    monkeypatch.setattr(live, "live_pipeline", late)
    assert _observe(0.05, 1.0, None) == ["first snapshot"]


def test_a_real_pipeline_gives_one_however_short_the_observation() -> None:
    assert len(_observe(0.0, 1.0, None)) >= 1


@pytest.fixture(autouse=True)
def _no_leftover_timers():
    yield
    for t in threading.enumerate():
        if isinstance(t, threading.Timer):
            t.join(timeout=2)
