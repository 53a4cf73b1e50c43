"""Unit tests of the in-process probe against a recording fake writer and a scripted clock."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence

import pytest

from traintop.loader import TimedLoader, infer_batch_size
from traintop.probe import BACKWARD, DATA, FORWARD, NO_PHASE, OTHER, Probe


class FakeWriter:
    """Same API as traintop.ring.RingWriter; keeps what it was given."""

    def __init__(self, phases: Sequence[str]) -> None:
        self.phases = tuple(phases)
        self.records: list[dict] = []
        self.live: list[tuple[int, int]] = []
        self.closed = False

    def record(self, step, t_start_ns, phase_ns, samples, gpu_ns=0, gpu_lag=0, mem_bytes=0,
               flags=0, tokens=0) -> None:  # fmt: skip
        self.records.append(dict(step=step, start=t_start_ns, phases=list(phase_ns),
                                 samples=samples, gpu_ns=gpu_ns, gpu_lag=gpu_lag,
                                 mem=mem_bytes, flags=flags, tokens=tokens))  # fmt: skip

    def set_live(self, phase_index: int, start_ns: int) -> None:
        self.live.append((phase_index, start_ns))

    def close(self) -> None:
        self.closed = True


def live(phase: int, start_ns: int) -> tuple[int, int]:
    """A live-word publication as a writer sees it: the start at the word's 16 ns resolution."""
    return phase, start_ns & -16


class Clock:
    """Advances by a fixed tick on every read, so every duration is known exactly."""

    def __init__(self, tick: int = 10) -> None:
        self.now, self.tick = 1000, tick

    def __call__(self) -> int:
        self.now += self.tick
        return self.now


def make_probe(**kwargs) -> tuple[Probe, list[FakeWriter], Clock]:
    writers: list[FakeWriter] = []

    def factory(phases: Sequence[str]) -> FakeWriter:
        writers.append(FakeWriter(phases))
        return writers[-1]

    clock = kwargs.pop("clock", Clock())
    return Probe("job", writer_factory=factory, clock=clock, **kwargs), writers, clock


def test_phases_partition_the_step_and_other_takes_the_gaps() -> None:
    probe, writers, _ = make_probe()
    for _batch in probe.loader([[1, 2]] * 3):
        with probe.phase("forward"):
            pass
        with probe.phase("backward"):
            pass
        probe.step()
    first, second, third = writers[0].records
    assert writers[0].phases == ("data", "forward", "backward", "optimizer", "other")
    assert first["phases"][DATA] == 20 and first["phases"][FORWARD] == 10  # iter() + next()
    assert second["phases"][:3] == [10, 10, 10]
    wall = third["start"] - second["start"]
    assert sum(second["phases"]) == wall  # phases plus "other" cover the whole step
    assert second["phases"][OTHER] == wall - 30
    assert [r["step"] for r in writers[0].records] == [0, 1, 2]


def test_samples_come_from_the_batches_or_the_argument() -> None:
    probe, writers, _ = make_probe()
    loader = [(FakeTensor(8), FakeTensor(8)), {"x": FakeTensor(3)}]
    for _batch in probe.loader(loader):
        probe.step()
    probe.step(samples=5, tokens=640)
    assert [r["samples"] for r in writers[0].records] == [8, 3, 5]
    assert writers[0].records[-1]["tokens"] == 640


class FakeTensor:
    def __init__(self, *shape: int) -> None:
        self.shape = shape


class ListLoader(list):
    batch_size = 4


@pytest.mark.parametrize(
    ("batch", "expected"),
    [
        (FakeTensor(7, 3), 7),
        ((FakeTensor(), FakeTensor(5)), 5),
        ([["a", "b"], {"y": FakeTensor(2, 2)}], 2),
        ({"ids": [1, 2], "mask": FakeTensor(9)}, 9),
        ("text", None),
        ([1, 2, 3], None),
        (FakeTensor(), None),
    ],
)
def test_infer_batch_size(batch: object, expected: int | None) -> None:
    assert infer_batch_size(batch) == expected


def test_loader_batch_size_is_the_fallback_and_wrapper_forwards() -> None:
    probe, writers, _ = make_probe()
    loader = ListLoader([["s1", "s2"], ["s3"]])
    wrapped = probe.loader(loader)
    assert isinstance(wrapped, TimedLoader) and len(wrapped) == 2 and wrapped.batch_size == 4
    for _epoch in range(2):  # re-iterable like a DataLoader
        for _batch in wrapped:
            probe.step()
    assert [r["samples"] for r in writers[0].records] == [4, 4, 4, 4]


def test_custom_phases_get_slots_until_the_segment_exists() -> None:
    probe, writers, _ = make_probe(phases=("h2d",))
    for name in ("comm", "ckpt", "too_many"):
        with probe.phase(name):
            pass
    probe.step()
    with probe.phase("late"):
        pass
    probe.step()
    assert writers[0].phases[5:] == ("h2d", "comm", "ckpt")
    assert probe.phase_names == writers[0].phases
    first, second = writers[0].records
    assert first["phases"][OTHER] >= 20  # "too_many" (and the gaps) went to "other"
    assert second["phases"][OTHER] >= 10


def test_nested_phase_pauses_the_outer_one() -> None:
    probe, writers, _ = make_probe()
    with probe.phase("forward"), probe.phase("h2d"):
        pass
    probe.step()
    phases = writers[0].records[0]["phases"]
    assert phases[FORWARD] == 20 and phases[5] == 10


def test_live_phase_is_published_once_the_segment_exists() -> None:
    probe, writers, clock = make_probe()
    with probe.phase("forward"):  # no segment yet: nothing to publish into
        pass
    probe.step()
    with probe.phase("backward"):
        pass
    entry, leave = clock.now - clock.tick, clock.now
    assert writers[0].live == [live(BACKWARD, entry), live(OTHER, leave)]  # exit: "no phase"


def test_hook_switches_publish_the_live_phase_too() -> None:
    probe, writers, clock = make_probe()
    probe.step()
    probe._switch(BACKWARD)
    probe._switch(NO_PHASE)  # between phases: time that records count as "other"
    assert writers[0].live == [live(BACKWARD, clock.now - clock.tick), live(OTHER, clock.now)]


def test_writer_failure_disables_with_one_line_and_leaves_the_loop_alone(capsys) -> None:
    probe, writers, _ = make_probe()
    probe.step()
    writers[0].record = _raise  # type: ignore[method-assign]
    results = []
    for batch in probe.loader([1, 2, 3]):
        with probe.phase("forward"):
            results.append(batch * 2)
        probe.step()
    assert results == [2, 4, 6]
    assert not probe.enabled and writers[0].closed
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("traintop: probe disabled")


def test_user_exceptions_pass_through_unchanged() -> None:
    probe, writers, _ = make_probe()
    with pytest.raises(KeyError), probe.phase("forward"):
        raise KeyError("user")

    def broken():
        yield 1
        raise ValueError("loader")

    with pytest.raises(ValueError, match="loader"):
        for _ in probe.loader(broken()):
            pass
    probe.step()
    assert probe.enabled and writers[0].records[0]["phases"][DATA] > 0


def test_writer_creation_failure_disables(capsys) -> None:
    probe = Probe("job", writer_factory=_raise)
    probe.step()
    probe.step()
    assert not probe.enabled
    assert capsys.readouterr().err.count("traintop:") == 1


def test_extras_are_polled_then_attached_to_records() -> None:
    calls = []

    class Extras:
        def at_step(self, step: int, now: int) -> tuple[int, int, int, int]:
            calls.append(step)
            return 500, 1, 4096, 3

    probe, writers, _ = make_probe(extras_factory=Extras)
    probe.step()
    probe.step()
    assert writers[0].records[0]["gpu_ns"] == 0  # detected at step 0, used from step 1
    assert writers[0].records[1]["gpu_ns"] == 500 and writers[0].records[1]["flags"] == 3
    assert calls == [1]


def _raise(*_args: object, **_kwargs: object) -> None:
    raise RuntimeError("boom")


def test_attach_is_idempotent_and_reads_rank_env(tmp_path) -> None:
    code = (
        "import traintop, sys\n"
        "p = traintop.attach()\n"
        "assert traintop.attach('other') is p\n"
        "p.step()\n"
        "print(p.name, p._writer.path.name)\n"
    )
    env = {"TRAINTOP_RING_DIR": str(tmp_path), "RANK": "3", "LOCAL_RANK": "1", "WORLD_SIZE": "4",
           "PATH": "/usr/bin:/bin", "PYTHONPATH": _repo_root()}  # fmt: skip
    tmp_path.chmod(0o700)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True,
                         check=True, timeout=60).stdout.split()  # fmt: skip
    from traintop.collectors.ring_reader import open_segment

    header = open_segment(tmp_path / out[1]).header
    assert out[0] == "python" and header.name == "python"
    assert (header.rank, header.local_rank, header.world_size) == (3, 1, 4)


def _repo_root() -> str:
    import traintop

    return str(__import__("pathlib").Path(traintop.probe.__file__).parents[1])


def test_importing_the_probe_or_the_ring_reader_never_pulls_torch() -> None:
    code = (
        "import sys, traintop.collectors.jobs, traintop, traintop.ring\n"
        "print(sorted(m for m in ('torch', 'numpy', 'textual') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=_repo_root(), timeout=60).stdout  # fmt: skip
    assert out.strip() == "[]"
