"""The pipeline: each snapshot judged once and handed on with its verdict, a recording fed on
the same thread, a replay's verdicts passed through, and the whole set-up made in one place."""

from __future__ import annotations

import ast
import json
import subprocess
import sys

from tests import import_graph
from tests.diagnosis_factories import Scene
from tests.ring_helpers import make_segment
from tests.snapshot_fixtures import ScriptedSource, machine, series
from tests.test_sampler import _collectors
from traintop.collectors.sampler import Sampler
from traintop.diagnosis.verdict_runner import VerdictRunner
from traintop.pipeline.job_source import JobsWhenPresent
from traintop.pipeline.live import Pipeline

DATA_CPU = Scene(data_wait=0.62, worker_cpu=98)


class Tap:
    """A recording tap that keeps what it is given."""

    def __init__(self) -> None:
        self.kept: list = []

    def add(self, snapshot, verdict) -> None:
        self.kept.append((snapshot, verdict))


class Jobs:
    """The job collector's part the pipeline uses: focus, and asks for stack samples."""

    def __init__(self) -> None:
        self.focus: str | None = None
        self.asked: list = []

    def sample_phase(self, pid: int, phase: str | None = None) -> None:
        self.asked.append((pid, phase))

    def collect(self) -> tuple:
        return ()


def test_each_snapshot_is_delivered_with_its_verdict_and_recorded_with_it():
    window = DATA_CPU.window(n=5)
    pipeline, tap, got = Pipeline(ScriptedSource(window)), Tap(), []
    pipeline.tap = tap
    pipeline.start(lambda snapshot, update: got.append((snapshot, update)))
    assert [s for s, _ in got] == window
    assert pipeline.runner.runs == 5  # judged once each
    assert [len(u.history) for _, u in got] == [1, 2, 3, 4, 5]
    assert tap.kept == [(s, u.verdict) for s, u in got]
    assert got[-1][1].verdict.primary.bottleneck == "data_cpu"


def test_the_first_frame_s_snapshot_is_judged_with_the_first_tick():
    """Shown before any verdict (one snapshot spans no time), in the window from the start."""
    first, *rest = DATA_CPU.window(n=3)
    source = ScriptedSource(rest)
    pipeline, got = Pipeline(source, first=first), []
    assert pipeline.first() is first and not source.started
    assert pipeline._runner is None  # nothing judged, the diagnosis not even imported
    pipeline.start(lambda snapshot, update: got.append(update))
    assert pipeline.runner.runs == 3
    assert [len(u.history) for u in got] == [2, 3]


class Replay(ScriptedSource):
    """A source with recorded verdicts, as a replay is."""

    def __init__(self, snapshots, update) -> None:
        super().__init__(snapshots)
        self.update = update

    def verdict_for(self, snapshot):
        return self.update


def test_a_replay_s_recorded_verdicts_are_handed_on_not_judged_again():
    recorded = VerdictRunner().update(machine())
    pipeline, got = Pipeline(Replay(series(3), recorded)), []
    pipeline.start(lambda snapshot, update: got.append(update))
    assert got == [recorded] * 3
    assert pipeline._runner is None  # never made: nothing was judged


def test_focus_and_stack_asks_reach_the_job_collector_unless_told_not_to():
    jobs = Jobs()
    pipeline = Pipeline(ScriptedSource([]), jobs=jobs)  # pyright: ignore[reportArgumentType]
    pipeline.focus_job("run:tcp://10.0.0.1:29500/8")
    assert jobs.focus == "run:tcp://10.0.0.1:29500/8"
    pipeline.runner._sample(4242, "data")  # what a verdict's wish for samples calls
    assert jobs.asked == [(4242, "data")]
    quiet = Pipeline(ScriptedSource([]), jobs=jobs, ask_stacks=False)  # pyright: ignore[reportArgumentType]
    assert quiet.runner._sample is None


def test_the_job_collector_is_made_once_a_segment_exists(tmp_path, monkeypatch):
    """Until a ring segment appears a tick lists the ring directory and finds nothing; the
    first segment (or a recording, which needs the collector itself) makes the collector."""
    monkeypatch.setenv("TRAINTOP_RING_DIR", str(tmp_path))
    made: list = []
    source = JobsWhenPresent(lambda: made.append(Jobs()) or made[-1])  # pyright: ignore[reportArgumentType]
    assert source.collect() == () and made == []
    make_segment(tmp_path).close()
    assert source.collect() == () and len(made) == 1
    assert source.collector is made[0]  # made once


def test_a_tick_samples_judges_and_records_now():
    collectors = _collectors()
    pipeline, tap = Pipeline(Sampler(collectors), collectors=collectors), Tap()
    pipeline.tap = tap
    snapshot, update = pipeline.tick()
    assert tap.kept == [(snapshot, update.verdict)]
    assert pipeline.interval_s == 1.0
    pipeline.interval_s = 2.0
    assert pipeline.sampler is not None and pipeline.sampler.interval_s == 2.0


SNAPSHOT_ALONE = """
import json, sys
from traintop.pipeline.live import live_pipeline
with live_pipeline(0.25) as pipeline:
    snapshot = pipeline.settled(0.1)
print(json.dumps([snapshot.cpu is not None, sorted(m for m in sys.modules if ".diagnosis" in m)]))
"""


def test_snapshot_json_s_pipeline_never_loads_the_diagnosis():
    """The runner is made at its first verdict: `snapshot --json` judges nothing."""
    out = subprocess.run([sys.executable, "-c", SNAPSHOT_ALONE], capture_output=True, text=True,
                         timeout=60, check=True)  # fmt: skip
    assert json.loads(out.stdout) == [True, []]


# The parts of a pipeline, and the modules that make them: the pipeline's own room, and the
# one place each part is defined or assembled.
PARTS = {
    "Sampler": {"traintop.collectors.sampler"},
    "JobCollector": {"traintop.collectors.jobs"},
    "build_collectors": {"traintop.collectors.factory"},
    "VerdictRunner": {"traintop.diagnosis.verdict_runner"},
    "VerdictWindow": {"traintop.diagnosis.verdict_window", "traintop.diagnosis.verdict_runner"},
}


def _calls(path) -> set[str]:
    """Names of the functions and classes ``path`` calls by name."""
    tree = ast.parse(path.read_text())
    return {
        node.func.id if isinstance(node.func, ast.Name) else node.func.attr
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Name | ast.Attribute)
    }


def test_the_pipeline_is_set_up_in_one_place():
    """No surface makes a sampler, a job collector or a verdict runner of its own: the
    monitor, `record`, `diagnose`, `snapshot` and the exporter all run the pipeline."""
    made_elsewhere = sorted(
        f"{module} makes {part}"
        for module, path in import_graph.modules().items()
        if not module.startswith("traintop.pipeline")
        for part in _calls(path) & PARTS.keys()
        if module not in PARTS[part]
    )
    assert made_elsewhere == []


def test_the_check_sees_a_set_up_outside_the_pipeline():
    """A negative control: the scan finds the parts where they are made."""
    live = import_graph.modules()["traintop.pipeline.live"]
    assert {"Sampler", "JobCollector", "build_collectors"} <= _calls(live)
