"""A run's life, part by part (issue 34): which process is a run, the segment made at start-up
(its phases taken until the first step, its first step kept), the ending's words and files, the
run token, live runs on one address split, a starting rank's text, and the final verdict that
says what held longest.  The same on real processes: tests/test_run_life.py."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest

from tests.diagnosis_factories import Scene
from tests.isolation import private_dir
from tests.polling import eventually
from traintop import run_end, run_start
from traintop.collectors import run_end as read_end
from traintop.collectors.jobs import JobCollector
from traintop.collectors.ring_reader import open_segment
from traintop.collectors.snapshot import Ending, Frame, JobSnapshot, ProcState, RankStack
from traintop.collectors.warmup import Warmup, on_cpu, read_stat
from traintop.diagnosis.export import ending_to_dict
from traintop.diagnosis.job_groups import split_live
from traintop.diagnosis.life_tally import LifeTally
from traintop.diagnosis.model import Finding
from traintop.diagnosis.run_life import ending_place, ending_text, place, starting_text
from traintop.diagnosis.stabilizer import VerdictStabilizer
from traintop.probe import Probe
from traintop.ring import RingWriter
from traintop.ring_format import FIRST_STEP_WORD
from traintop.run_token import tagged
from traintop.tui.screens.details import stack_items

TORCHRUN = ["/venv/bin/python", "-m", "torch.distributed.run", "--nproc_per_node=2", "t.py"]


@pytest.mark.parametrize(
    ("mark", "pid", "ppid", "argv", "expected"),
    [
        ("100", 100, 1, ["python", "train.py"], "run"),  # the command `traintop run` exec'd
        ("100", 200, 100, ["python", "train.py"], "run"),  # a shell script's python
        ("100", 100, 1, TORCHRUN, "launcher"),
        ("100", 100, 1, ["/venv/bin/torchrun", "t.py"], "launcher"),
        ("100", 300, 200, ["python", "train.py"], ""),  # a run's own child (compile worker)
        ("0", 0, 1, ["python", "train.py"], ""),  # a run leaves "0" to its children
        ("100", 200, 100, ["python", "-c", "from multiprocessing.spawn import spawn_main"], ""),
        ("", 100, 1, ["python", "train.py"], ""),  # not under `traintop run`
    ],
)
def test_which_process_is_a_run(mark, pid, ppid, argv, expected) -> None:
    env = {run_start.ENV_STARTUP: mark} if mark else {}
    assert run_start.role(env, pid, ppid, argv) == expected


def _probe(ring: Path) -> tuple[Probe, RingWriter]:
    writer = RingWriter.create(name="early", phases=("data", "forward", "backward", "optimizer",
                                                    "other"), directory=str(ring))  # fmt: skip
    probe = Probe("early", writer_factory=lambda phases: writer)
    probe._create_writer()  # as traintop.run_start does at start-up
    return probe, writer


def test_a_segment_made_at_start_up_takes_phases_until_its_first_step(tmp_path: Path) -> None:
    probe, writer = _probe(private_dir(tmp_path / "ring"))
    reader = open_segment(writer.path)
    assert reader.header.phases[5:] == ()
    probe.mark("logging")  # a custom phase before the first step: the header takes it
    assert reader.follow_header(reader.hot()) and reader.header.phases[5] == "logging"
    probe.step()
    probe.mark("late")  # after the first record: counted as "other", as it always was
    probe.step()
    header = open_segment(writer.path).header
    assert header.phases == ("data", "forward", "backward", "optimizer", "other", "logging")
    assert [len(r.phase_ns) for r in open_segment(writer.path).last(2)] == [6, 6]
    writer.close()


def test_the_first_step_is_kept_and_the_rest_cost_nothing_more(tmp_path: Path) -> None:
    probe, writer = _probe(private_dir(tmp_path / "ring"))
    writer.record(0, 1000, [0, 7_000_000_000, 0, 0, 1], 8)
    assert writer.record == writer._record  # the bare closure from the second record on
    writer.record(1, 2000, [0, 5, 0, 0, 1], 8)
    assert open_segment(writer.path).hot().first_step_ns == 7_000_000_001
    assert writer._q[FIRST_STEP_WORD] == 7_000_000_001
    probe.close()


def test_a_run_that_never_stepped_is_removed_at_a_clean_exit(tmp_path: Path) -> None:
    probe, writer = _probe(private_dir(tmp_path / "ring"))
    run_end.start(probe, writer)
    path = writer.path
    probe.close()
    assert not path.exists() and os.listdir(path.parent) == []


def _raise(kind: type[BaseException], **attrs: object) -> BaseException:
    try:
        error = kind("bad batch")
        for name, value in attrs.items():
            setattr(error, name, value)
        raise error
    except BaseException as caught:
        return caught


def test_an_exception_is_raised_a_keyboard_interrupt_or_sigval_a_signal() -> None:
    error = _raise(ValueError)
    raised = run_end.ending_of(error, error.__traceback__)
    assert raised["kind"] == "raised" and raised["detail"] == "ValueError: bad batch"
    assert raised["frame"][0] == __file__ and raised["frame"][2] == "_raise"
    assert raised["stack"] == [raised["frame"]]  # caught where it was raised
    ctrl_c = _raise(KeyboardInterrupt)
    assert run_end.ending_of(ctrl_c, None)["detail"] == "SIGINT"
    elastic = _raise(RuntimeError, sigval=signal.SIGTERM)  # torch elastic's SignalException
    assert run_end.ending_of(elastic, None) == {"kind": "signal", "detail": "SIGTERM",
                                                "frame": None, "stack": [],
                                                "exit_code": -15}  # fmt: skip


def _through_the_probe() -> BaseException:
    try:
        run_end.exit_ending(1, None, None)  # type: ignore[arg-type]  # raises inside traintop
    except AttributeError as caught:
        return caught
    raise AssertionError("exit_ending took None for a frame")


def test_an_exception_inside_the_probe_names_the_scripts_frame_unless_it_is_all_the_probe() -> None:
    """Ctrl+C lands inside a step hook as often as not: the frame said is the script's."""
    error = _through_the_probe()
    assert run_end.ending_of(error, error.__traceback__)["frame"][2] == "_through_the_probe"
    assert [f[2] for f in run_end.ending_of(error, error.__traceback__)["stack"]] == [
        "_through_the_probe"
    ]  # traintop's frames inside it left out
    inner = run_end.ending_of(error, error.__traceback__.tb_next)
    assert inner["frame"][0] == run_end.__file__ and inner["frame"][2] == "exit_ending"
    assert inner["stack"] == [inner["frame"]]


def test_a_failing_sys_exit_is_the_exception_being_handled_else_exited_where_called() -> None:
    caller = sys._getframe()
    line, exited = caller.f_lineno, run_end.exit_ending(3, None, caller)  # one line
    stack = exited.pop("stack")
    assert exited == {"kind": "exited", "detail": "sys.exit(3)", "exit_code": 3,
                      "frame": [__file__, line, caller.f_code.co_name]}  # fmt: skip
    assert stack[-1] == exited["frame"] and len(stack) > 1  # its callers: pytest's frames
    assert run_end.exit_ending("loss is NaN", None, caller)["exit_code"] == 1  # printed, exits 1
    error = _raise(ValueError)  # mp.spawn's child: sys.exit(1) in the except that caught it
    spawned = run_end.exit_ending(1, error, caller)
    assert spawned["kind"] == "raised" and spawned["detail"] == "ValueError: bad batch"
    assert spawned["frame"][2] == "_raise" and spawned["exit_code"] == 1
    saved = run_end.exit_ending(None, _raise(KeyboardInterrupt), caller)  # saved, then exit
    assert saved["kind"] == "signal" and saved["detail"] == "SIGINT" and saved["exit_code"] == 0


DUMP = """Thread 0x00007f0000000002 (most recent call first):
  File "/usr/lib/python3.11/threading.py", line 320 in wait

Current thread 0x00007f0000000001 (most recent call first):
  File "/src/train.py", line 88 in save_checkpoint
  File "/src/train.py", line 120 in main
"""


def test_a_signal_dump_says_which_signal_and_where_a_fatal_one_says_gone(tmp_path: Path) -> None:
    segment = tmp_path / "1-r0-00000000.ring"
    with open(tmp_path / "1-r0-00000000.sig", "wb") as f:
        f.seek(signal.SIGTERM * read_end.REGION)
        f.write(DUMP.encode())
    stopped = read_end.ending_of(segment, None, "crashed")
    assert (stopped.kind, stopped.detail, stopped.exit_code) == ("signal", "SIGTERM", -15)
    assert stopped.frame == Frame("/src/train.py", 88, "save_checkpoint", "")
    assert [f.function for f in stopped.stack] == ["main", "save_checkpoint"]  # outermost first
    assert read_end.state_of(stopped) == "stopped"
    with open(tmp_path / "1-r0-00000000.sig", "wb") as f:
        f.write(b"Fatal Python error: Segmentation fault\n\n" + DUMP.encode())
    fatal = read_end.ending_of(segment, None, "crashed")
    assert fatal.kind == "gone" and fatal.detail == "Segmentation fault (SIGSEGV) in native code"
    os.unlink(tmp_path / "1-r0-00000000.sig")
    assert read_end.ending_of(segment, None, "crashed") == Ending("gone")
    assert read_end.ending_of(segment, None, "finished") == Ending("finished")


def _deep() -> BaseException:
    try:
        json.loads("{")  # raises three frames down, inside the standard library
    except ValueError as caught:
        return caught
    raise AssertionError("json took '{'")


def test_the_end_file_wins(tmp_path: Path) -> None:
    segment = tmp_path / "1-r0-00000000.ring"
    error = _raise(ValueError)
    run_end.write_end(segment, run_end.ending_of(error, error.__traceback__))
    ending = read_end.ending_of(segment, None, "finished")
    assert ending.kind == "raised" and ending.frame.function == "_raise"
    assert read_end.state_of(ending) == "crashed" and ending.exit_code == 1
    assert ending.stack == (ending.frame,) and "raise error" in ending.frame.code
    error = _deep()
    run_end.write_end(segment, run_end.ending_of(error, error.__traceback__))
    ending = read_end.ending_of(segment, None, "finished")
    assert [f.function for f in ending.stack] == ["_deep", "loads", "decode", "raw_decode"]
    assert ending.frame == ending.stack[-1] and ending.frame.file.endswith("json/decoder.py")
    line = ending.stack[0].line
    assert (
        ending_place(ending)
        == f" in _deep (test_run_life_parts.py:{line}), calling loads (__init__.py)"
    )


def test_an_end_file_without_a_stack_or_with_a_bad_one_keeps_its_frame(tmp_path: Path) -> None:
    """An older probe's ``.end`` has no stack; a malformed one is dropped whole."""
    segment = tmp_path / "1-r0-00000000.ring"
    frame = ["/src/train.py", 88, "save"]
    for stack in (None, [frame, ["half"]], "x"):
        body = {"kind": "signal", "detail": "SIGINT", "frame": frame, "exit_code": -2}
        run_end.write_end(segment, body if stack is None else {**body, "stack": stack})
        ending = read_end.ending_of(segment, None, "finished")
        assert ending.frames == (Frame("/src/train.py", 88, "save", ""),) == (ending.frame,)


def test_a_run_id_keeps_its_token_whatever_its_length() -> None:
    assert tagged("tcp://127.0.0.1:29500", "1a2b3c4d") == "tcp://127.0.0.1:29500#1a2b3c4d"
    long = tagged("tcp://" + "h" * 80 + ":29500", "1a2b3c4d")
    assert len(long.encode()) == 63 and long.endswith("#1a2b3c4d")


def _rank(pid: int, rank: int, started: float, state: str = "live", **more) -> JobSnapshot:
    return JobSnapshot(pid, "job", rank, rank, 3, state, 10, 1.0, None, 0.1, 0.1, None, None,
                       None, 1.0, None, job_id="run:tcp://h:29563/3", started_at=started,
                       **more)  # fmt: skip


def test_a_stopped_rank_of_an_earlier_run_is_not_lent_to_the_next() -> None:
    old = _rank(10, 2, 1000.0, state="stalled")
    new = [_rank(20 + r, r, 1900.0 + r) for r in range(3)]
    runs = split_live([old, *new])
    assert [sorted(r.pid for r in run) for run in runs] == [[20, 21, 22], [10]]
    early = split_live([old, *new[:2]])  # the new run's rank 2 not up yet: still apart
    assert [sorted(r.pid for r in run) for run in early] == [[20, 21], [10]]


FRAMES = (
    Frame("/src/train.py", 40, "main"),
    Frame("/venv/lib/python3.11/site-packages/torch/_inductor/compile_fx.py", 900, "compile_fx"),
    Frame("/usr/lib/python3.11/ast.py", 50, "parse"),
)


def test_a_starting_rank_says_how_long_whether_on_cpu_and_where() -> None:
    assert place(FRAMES) == "compile_fx (torch/_inductor)"
    assert place(FRAMES[:1]) == "main (train.py:40)"
    job = _rank(10, 0, 1000.0, state="starting", proc=ProcState("R", 80.0, 99.0),
                stack=RankStack(FRAMES, 1.0, "helper"))  # fmt: skip
    text = starting_text(job, 1085.0)
    assert text == "first step for 1m25s, on CPU in compile_fx (torch/_inductor)"
    idle = replace(job, proc=ProcState("S", 80.0, 0.0), stack=None)
    assert starting_text(idle, 1010.0) == "first step for 10s, off CPU (S)"


def test_a_starting_rank_is_stalled_only_once_seen_blocked_past_the_limit() -> None:
    me = Warmup(os.getpid(), visible=True)
    me.limit_s = 10.0
    me.tick(100.0)
    me.tick(130.0)  # between two looks, this test process used less than a fifth of a core
    assert me.proc is not None and me.proc.state == "R"  # it is reading its own /proc: running
    assert not me.blocked(130.0)
    unseen = Warmup(1, visible=False)
    unseen.limit_s = 10.0
    unseen.tick(100.0)
    assert not unseen.blocked(500.0)  # another namespace: never stalled on a guess


def test_a_starting_rank_blocked_off_cpu_past_the_limit_is_stalled() -> None:
    """A process asleep (say in a rendezvous that never completes), seen twice 15 s apart on
    the monitor's clock with no CPU spent: blocked past the 10 s limit."""
    asleep = subprocess.Popen(["sleep", "60"])
    try:
        assert eventually(lambda: (read_stat(asleep.pid) or ("R",))[0] == "S")
        rank = Warmup(asleep.pid, visible=True)
        rank.limit_s = 10.0
        rank.tick(100.0)
        rank.tick(115.0)
        assert rank.proc.state == "S" and not on_cpu(rank.proc)
        assert rank.blocked(115.0) and rank.blocked_s(115.0) == 15.0
    finally:
        asleep.kill()
        asleep.wait()


def test_the_ending_line_names_the_rank_that_explains_it() -> None:
    raised = Ending("raised", "ValueError: bad", Frame("/src/t.py", 40, "check"), 1)
    ranks = [
        _rank(20, 0, 1.0, state="stopped", ending=Ending("signal", "SIGTERM", None, -15)),
        _rank(21, 1, 1.0, state="crashed", ending=raised),
        _rank(22, 2, 1.0, state="stopped", ending=Ending("signal", "SIGTERM", None, -15)),
    ]
    text = ending_text(ranks)
    assert (
        text == "rank 1 raised ValueError: bad in check (t.py:40); ranks 0, 2: stopped by SIGTERM"
    )
    done = [_rank(20, 0, 1.0, state="finished", ending=Ending("finished"))]
    assert ending_text(done) == ""


TORCH = "/venv/lib/python3.11/site-packages/torch"


def test_an_ending_inside_a_library_names_the_users_line_and_the_call_it_made() -> None:
    """Ctrl+C during backward stops in torch's engine: the line the user wrote is what they
    ask for, with the call it made (past nn.Module's pass-through frames)."""
    stack = (
        Frame("/src/train.py", 120, "main"),
        Frame("/src/train.py", 42, "train_step", "loss.backward()"),
        Frame(f"{TORCH}/_tensor.py", 626, "backward"),
        Frame(f"{TORCH}/autograd/graph.py", 979, "_engine_run_backward"),
    )
    ctrl_c = Ending("signal", "SIGINT", stack[-1], -2, stack=stack)
    (rank,) = [_rank(20, 0, 1.0, state="stopped", ending=ctrl_c)]
    assert ending_text([rank]) == (
        "stopped by SIGINT (Ctrl+C) in train_step (train.py:42), calling backward (_tensor.py)"
    )
    through = (stack[1], Frame(f"{TORCH}/nn/modules/module.py", 1775, "_wrapped_call_impl"),
               Frame(f"{TORCH}/nn/modules/module.py", 1786, "_call_impl"),
               Frame(f"{TORCH}/nn/modules/linear.py", 125, "forward"))  # fmt: skip
    raised = Ending("raised", "RuntimeError: shapes", through[-1], 1, stack=through)
    assert ending_place(raised) == " in train_step (train.py:42), calling forward (linear.py)"
    alone = Ending("signal", "SIGTERM", stack[-1], -15, stack=stack[2:])  # no frame of theirs
    assert ending_place(alone) == " in _engine_run_backward (torch/autograd)"
    own = Ending("raised", "ValueError", stack[1], 1, stack=stack[:2])  # raised in their line
    assert ending_place(own) == " in train_step (train.py:42)"
    listed = ending_to_dict(ctrl_c)  # `traintop jobs --json`, `diagnose --json`
    assert listed["stack"][1] == ["/src/train.py", 42, "train_step"]
    assert listed["frame"] == listed["stack"][-1] == [f"{TORCH}/autograd/graph.py", 979,
                                                      "_engine_run_backward"]  # fmt: skip


def test_the_rank_that_raised_first_explains_the_job() -> None:
    """Rank 1's exception ended it; rank 0's collective raised a moment later (gloo saw its
    peer go): rank 1 explains the job, whatever their numbers."""
    first = Ending("raised", "ValueError: bad", Frame("/src/t.py", 40, "check"), 1, 100.0)
    after = Ending("raised", "DistBackendError: peer closed", None, 1, 100.4)
    ranks = [_rank(20, 0, 1.0, state="crashed", ending=after),
             _rank(21, 1, 1.0, state="crashed", ending=first)]  # fmt: skip
    assert ending_text(ranks).startswith("rank 1 raised ValueError: bad in check (t.py:40)")


def test_the_tally_keeps_what_held_longest() -> None:
    tally = LifeTally()
    compute, network = Finding("compute", 0.9, "ok", "c"), Finding("network", 0.5, "info", "n")
    for t in range(0, 60, 2):
        tally.add({1, 2}, compute, float(t))
    for t in range(60, 70, 2):
        tally.add({1, 2}, network, float(t))
    life = tally.life({1, 2})
    assert life.finding is compute and life.seconds == 60.0 and life.total_s == 68.0
    assert tally.life({3}) is None


def _with_ending(snapshots: list, ending: Ending) -> list:
    return [replace(s, jobs=tuple(replace(j, ending=ending) for j in s.jobs)) for s in snapshots]


def test_an_ended_job_says_how_it_ended_and_what_it_was_for_most_of_its_life() -> None:
    """Compute for 40 s, data-starved for its last 10: stopped by SIGTERM, it was compute."""
    stab, compute = VerdictStabilizer(), Scene()
    starved = compute.but(data_wait=0.7, gpu_busy=0.3, worker_cpu=5.0)
    for start in range(1000, 1040, 2):
        assert stab.update(compute.window(start=float(start))).primary.bottleneck == "compute"
    for start in range(1040, 1052, 2):
        stab.update(starved.window(start=float(start)))
    stopped = starved.but(state="stopped", last_step_age=3.0, workers=0)
    at = Frame("/src/train.py", 88, "step")
    ending = Ending("signal", "SIGTERM", at, -15, stack=(at,))
    verdict = stab.update(_with_ending(stopped.window(start=1052.0), ending))
    (job,) = verdict.per_job
    assert not job.live and job.ending == ending
    assert job.primary.bottleneck == "compute"
    assert job.primary.summary.startswith("stopped by SIGTERM ") and ": was compute: " in (
        job.primary.summary
    )
    texts = [e.text for e in job.primary.evidence]
    assert texts[0] == "stopped by SIGTERM in step (train.py:88)"
    assert texts[1].startswith("compute for ") and " it was watched running" in texts[1]
    items = [str(body) for _, body in stack_items(verdict)]  # the details screen's stacks
    assert items == [f"{job.name}: where it ended: stopped by SIGTERM",
                     'File "/src/train.py", line 88, in step']  # fmt: skip
    about = stack_items(replace(verdict, job_id=job.job_id))  # `traintop --job PID` on it
    assert str(about[0][1]) == "where it ended: stopped by SIGTERM"
    finished = stab.update(_with_ending(stopped.window(start=1054.0), Ending("finished")))
    assert stack_items(finished) == []  # nothing to say of a run that finished


def test_a_monitor_lists_a_starting_run_and_hides_a_parent_that_only_spawned(tmp_path) -> None:
    ring = private_dir(tmp_path / "ring")
    parent = RingWriter.create(name="spawner", phases=("other",), directory=str(ring))
    collector = JobCollector(str(ring))
    (job,) = collector.collect()
    assert job.state == "starting" and job.steps_total == 0 and job.proc is not None
    child = [sys.executable, "-c", "import sys, traintop.ring as r; w = r.RingWriter.create("
             "name='rank', phases=('other',), directory=sys.argv[1]); w.record(0, 1, [5], 0); "
             "print(flush=True); sys.stdin.read()", str(ring)]  # fmt: skip
    proc = subprocess.Popen(
        child,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])},
    )
    try:
        proc.stdout.readline()
        names = {j.name for j in collector.collect()}
        assert names == {"rank"}  # the spawner only started the rank (mp.spawn's parent)
    finally:
        proc.stdin.close()
        proc.wait(timeout=60)
        parent.close()
        collector.close()
