"""The facts side file: written whole (traintop/facts_file.py), kept after the rank's close and
removed with its segment, and read back into JobSnapshot fields (collectors/job_facts.py)."""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.isolation import private_dir
from tests.polling import eventually
from traintop import facts_file, ring_paths, stack_helper
from traintop.collectors.job_facts import FactsReader
from traintop.collectors.ring_reader import remove_stale
from traintop.collectors.snapshot import JobFacts, LoaderFacts, OptimizerFacts, SyncSite
from traintop.facts_agent import FactsAgent
from traintop.probe import NO_TICK, Probe
from traintop.ring import RingWriter

SEGMENT = "123-r0-0a1b2c3d.ring"
FACTS = {
    "device": "cuda",
    "autocast": "bf16",
    "compiled": False,
    "cuda_graphs": None,
    "optimizers": [{"name": "AdamW", "fused": True, "foreach": None}],
    "loaders": [
        {
            "num_workers": 4,
            "pin_memory": True,
            "persistent_workers": False,
            "prefetch_factor": 2,
            "batch_size": 64,
        }
    ],
    "has_conv": False,
    "channels_last": None,
    "tf32_matmul": True,
    "tf32_cudnn": True,
    "attention": "flash",
    "pinned_copies": True,
    "syncs_watched": True,
}
PROFILE = {
    "step": 400,
    "taken_ns": 0,
    "step_s": 0.031,
    "kernel_share": 0.6,
    "host_wait_share": 0.3,
    "sync_share": 0.05,
    "kernel_wait_share": 0.03,
    "other_share": 0.02,
    "kernels": 1800,
    "median_kernel_us": 7.5,
    "launch_us_p50": 4.1,
    "graph_launches": 0,
    "pageable_copies": 0,
    "attention": "flash",
    "every_s": 300.0,
    "cost_share": 0.0004,
}


def site(line: int, count: int, kind: str = "item") -> dict:
    return {
        "file": "/job/train.py",
        "line": line,
        "function": "train",
        "kind": kind,
        "count": count,
        "code": f"loss.{kind}()",
    }


def write(path: Path, at_s: float, steps: int, sync: list, **over) -> None:
    """One copy of the file as the helper would write it at ``at_s`` (its mtime too)."""
    doc = facts_file.document(
        int(at_s * 1e9), steps, FACTS, sync, 0, dict(PROFILE, taken_ns=int(at_s * 1e9))
    )
    doc.update(over)
    facts_file.write(path, doc)
    os.utime(path, ns=(int(at_s * 1e9), int(at_s * 1e9)))


@pytest.fixture
def ring(tmp_path: Path) -> Path:
    return private_dir(tmp_path / "ring")


def test_the_snapshot_fields_read_back(ring: Path) -> None:
    write(ring / "123-r0-0a1b2c3d.facts", 100.0, 400, [site(12, 800)], alloc_retries=7)
    got = FactsReader(ring / SEGMENT, 10.0, same_clock=True).read(now_s=103.0)
    assert got["facts"] == JobFacts(
        device="cuda",
        autocast="bf16",
        compiled=False,
        cuda_graphs=None,
        optimizers=(OptimizerFacts("AdamW", True, None),),
        loaders=(LoaderFacts(4, True, False, 2, 64),),
        has_conv=False,
        channels_last=None,
        tf32_matmul=True,
        tf32_cudnn=True,
        attention="flash",
        pinned_copies=True,
        syncs_watched=True,
    )
    assert got["sync_sites"] == (
        SyncSite("/job/train.py", 12, "train", "item", 2.0, 800, "loss.item()"),
    )
    profile = got["gpu_profile"]
    assert profile.step == 400 and profile.kernels == 1800 and profile.age_s == pytest.approx(3.0)
    assert profile.host_wait_share == 0.3 and profile.cost_share == 0.0004
    assert (got["cuda_alloc_retries"], got["cuda_alloc_retries_steps"]) == (7, 400)


def test_sync_rates_are_per_step_over_the_window(ring: Path) -> None:
    path, reader = ring / "123-r0-0a1b2c3d.facts", FactsReader(ring / SEGMENT, 10.0, True)
    write(path, 100.0, 1000, [site(12, 900), site(30, 10, "synchronize")])
    reader.read(100.0)
    write(path, 104.0, 1200, [site(12, 1300), site(30, 10, "synchronize")])
    reader.read(104.0)
    write(path, 108.0, 1400, [site(12, 1700), site(30, 10, "synchronize"), site(40, 50, "nonzero")])
    sites = reader.read(108.0)["sync_sites"]
    assert [(s.line, s.per_step, s.total) for s in sites] == [
        (12, 2.0, 1700),
        (40, 50 / 400, 50),
        (30, 0.0, 10),  # stopped syncing: 0 a step
    ]
    for at, steps in ((112.0, 1600), (116.0, 1800), (120.0, 2000)):  # the line stops syncing
        write(
            path, at, steps, [site(12, 1700), site(30, 10, "synchronize"), site(40, 50, "nonzero")]
        )
        reader.read(at)
    assert all(s.per_step == 0.0 for s in reader.read(120.0)["sync_sites"])


def test_it_rereads_only_when_the_mtime_moved_and_keeps_the_last_good_copy(ring: Path) -> None:
    path, reader = ring / "123-r0-0a1b2c3d.facts", FactsReader(ring / SEGMENT, 10.0, True)
    assert reader.read(1.0) == {}  # no file yet
    write(path, 100.0, 10, [])
    assert reader.read(100.0)["facts"].autocast == "bf16"
    doc = json.loads(path.read_text())
    doc["facts"]["autocast"] = "fp16"
    path.write_text(json.dumps(doc))
    os.utime(path, ns=(int(100e9), int(100e9)))  # same mtime: not read again
    assert reader.read(101.0)["facts"].autocast == "bf16"
    path.write_text("{not json")
    os.utime(path, ns=(int(102e9), int(102e9)))
    assert reader.read(102.0)["facts"].autocast == "bf16"  # a bad copy changes nothing
    path.write_text(json.dumps(dict(doc, v=99)))
    os.utime(path, ns=(int(103e9), int(103e9)))
    assert reader.read(103.0)["facts"].autocast == "bf16"  # another version: not ours
    path.unlink()
    assert reader.read(104.0)["facts"].autocast == "bf16"


def test_fields_of_the_wrong_type_read_as_could_not_tell(ring: Path) -> None:
    bad = {
        "device": 3,
        "autocast": None,
        "compiled": "yes",
        "optimizers": [{"fused": True}, 7],
        "loaders": [{"num_workers": -1}],
        "tf32_matmul": 1,
    }
    path = ring / "123-r0-0a1b2c3d.facts"
    write(
        path,
        100.0,
        10,
        [{"file": "x.py", "line": "12"}],
        facts=bad,
        alloc_retries="many",
        profile={"step": 3, "kernel_share": 0.5},
    )
    got = FactsReader(ring / SEGMENT, 10.0, True).read(100.0)
    assert got == {
        "facts": JobFacts(),
        "sync_sites": (),
        "gpu_profile": None,
        "cuda_alloc_retries": None,
        "cuda_alloc_retries_steps": None,
    }


def test_a_profile_from_another_boot_is_aged_by_the_files_own_clock(ring: Path) -> None:
    write(ring / "123-r0-0a1b2c3d.facts", 100.0, 10, [], profile=dict(PROFILE, taken_ns=int(90e9)))
    reader = FactsReader(ring / SEGMENT, 10.0, same_clock=False)
    reader.read(5000.0)
    assert reader.read(5002.0)["gpu_profile"].age_s == pytest.approx(12.0)


def test_a_reader_never_sees_half_a_file(ring: Path) -> None:
    path, stop, seen, bad = ring / "123-r0-0a1b2c3d.facts", threading.Event(), [], []

    def read() -> None:
        while not stop.is_set():
            try:
                seen.append(json.loads(path.read_text())["steps"])
            except FileNotFoundError:
                continue
            except ValueError as exc:
                bad.append(exc)

    reader = threading.Thread(target=read)
    reader.start()
    for steps in range(300):
        facts_file.write(
            path, facts_file.document(0, steps, FACTS, [site(1, steps)] * (steps % 50), None, None)
        )
    stop.set()
    reader.join()
    assert bad == [] and len(seen) > 0
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert [p.name for p in ring.iterdir()] == [path.name]  # no temporary left


class _NoTorch:
    """The agent's torch where CUDA never initialises: only the generic facts are written."""

    __name__ = "torch"
    cuda = None


def test_the_file_outlives_the_ranks_close_and_goes_with_its_segment(ring: Path) -> None:
    probe = Probe(
        "job",
        writer_factory=lambda phases: RingWriter.create(
            name="job", phases=phases, directory=str(ring)
        ),
    )
    probe._on_segment = lambda writer: stack_helper.start(probe, writer)
    probe._facts = FactsAgent(probe, _NoTorch(), None)
    probe.step()
    segment = Path(probe._writer.path)
    path = facts_file.facts_path(segment)
    assert eventually(path.exists)
    deadline = time.monotonic() + 10
    while not probe._facts._close_hooked and time.monotonic() < deadline:
        probe.step()
        time.sleep(0.05)
    probe.close()
    doc = json.loads(path.read_text())  # written again once the helper's cleanup ran
    assert doc["steps"] == probe._step and doc["facts"] == {"syncs_watched": False}
    assert ring_paths.SIDE_NAME_RE.match(path.name)
    os.utime(segment, (1, 1))
    removed = remove_stale(str(ring), max_age_s=0.0)
    assert path in removed and not path.exists() and not segment.exists()


@pytest.mark.skipif(sys.platform != "linux", reason="the ring directory is Linux's")
def test_an_orphaned_facts_file_is_found(ring: Path) -> None:
    (ring / "123-r0-0a1b2c3d.facts").write_text("{}")
    assert ring_paths.orphan_side_files(ring) == [ring / "123-r0-0a1b2c3d.facts"]


class _Knobs:
    """A KnobWatch stand-in: a model to hook after the first try."""

    compiled_in_place = False
    sampled_at = None

    def __init__(self) -> None:
        self.tries = 0

    def arm_forward_sample(self) -> bool:
        self.tries += 1
        return self.tries > 1


def test_the_helper_asks_the_training_thread_for_a_boundary_and_it_answers_once() -> None:
    probe = SimpleNamespace(_step=40, _tick_at=NO_TICK, _writer=None)
    agent = FactsAgent(probe, _NoTorch(), _Knobs())
    agent._plan(now=100.0)
    assert probe._tick_at == 40  # the next boundary
    agent.on_tick(40, 0)  # nothing to hook yet: asked again at the helper's next wake
    assert probe._tick_at == NO_TICK and agent._want_sample
    agent._plan(now=102.0)
    agent.on_tick(41, 0)
    assert probe._tick_at == NO_TICK and not agent._want_sample and agent._knobs.tries == 2


def test_an_ordinary_step_ignores_a_pause() -> None:
    agent = FactsAgent(SimpleNamespace(_step=0), _NoTorch(), None)
    assert agent.typical_step_s() is None
    for t, steps in ((0.0, 0), (2.0, 200), (4.0, 400), (16.0, 410), (18.0, 610)):
        agent._rate.append((t, steps))
    assert agent.typical_step_s() == pytest.approx(0.01)  # the 12 s evaluation left out
