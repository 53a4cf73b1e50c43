"""A stopped job in one line of at most 76 cells (diagnosis/hang_line.py): who, where, for how
long, for every kind of stop, as the banner shows it at 80 columns; the kernel's word on a rank
(stopped, traced, blocked, busy, gone) and the loader worker a rank waits on; and a hang that
silences its consequences (no "also" the stop itself explains)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from tests import snapshot_fixtures as sf
from traintop.collectors.snapshot import Frame, ProcState, RankStack, WorkerSnapshot
from traintop.diagnosis.api import diagnose
from traintop.diagnosis.hang import hang_of
from traintop.tui.widgets.verdict import banner_lines

BASE = sf.hung_job(19.0)  # rank 2 never reached all_reduce #1042; ranks 0, 1, 3 wait in it
WORKER_STACK = (
    Frame("/usr/lib/python3.11/multiprocessing/process.py", 108, "run"),
    Frame("/venv/site-packages/torch/utils/data/_utils/worker.py", 374, "_worker_loop"),
    Frame("/home/ana/llama/data.py", 70, "__getitem__", "return self.read_batch(i)"),
    Frame("/home/ana/llama/data.py", 88, "read_batch", "blob = f.read()"),
)
IDLE = WorkerSnapshot(9001, None, None, None, ProcState("S", 0.0, 0.0, "do_poll", "poll"))


def rank2(proc: ProcState) -> list:
    ranks = list(BASE)
    ranks[2] = replace(ranks[2], proc=proc)
    return ranks


def in_collective(op: str, rank: int) -> list:
    ranks = list(BASE)
    c = replace(BASE[0].collectives[0], op=op, shape="" if op == "barrier" else "f32[1]")
    ranks[rank] = replace(ranks[rank], collectives=(c,), stack=BASE[0].stack)
    return ranks


def waiting_for_data(worker: ProcState) -> list:
    """One process whose rank waits in ``__next__`` for its second worker."""
    stack = RankStack(WORKER_STACK, 1.0, "signal")
    busy_one = WorkerSnapshot(9002, None, None, None, worker, stack)
    return [replace(BASE[2], rank=0, world_size=1, collectives=(), collectives_total=0,
                    workers=(IDLE, busy_one))]  # fmt: skip


def shaped() -> list:
    """Ranks 2-3 reduce a tensor twice the size the others reduce."""
    c = BASE[0].collectives[0]
    return [replace(r, collectives=(replace(c, shape=f"f32[{1024 * (1 + (r.rank >= 2))}]"),),
                    stack=BASE[0].stack) for r in BASE]  # fmt: skip


def exited() -> list:
    """Rank 3 finished; ranks 0 and 2 failed in the all-reduce after it, rank 1 waits in it."""
    c = BASE[0].collectives[0]
    ended = {3: ("finished", ()), 0: ("crashed", (replace(c, raised=True, duration_s=0.1),)),
             2: ("crashed", (replace(c, raised=True, duration_s=0.1),))}  # fmt: skip
    ranks = [replace(r, collectives=(c,), stack=BASE[0].stack) for r in BASE]
    for rank, (state, collectives) in ended.items():
        ranks[rank] = replace(ranks[rank], state=state, collectives=collectives, stack=None)
    return ranks


CASES = {
    "not_entered": (BASE, "HANG 19s · rank 2 in fetch_shard (data.py:41) · others wait in "
                          "all_reduce"),
    "stopped": (rank2(ProcState("T", 1.0, 0.0)),
                "HANG 19s · rank 2 stopped (kill -CONT 4244) · ranks 0-1,3 wait in all_reduce"),
    "traced": (rank2(ProcState("t", 1.0, 0.0)),
               "HANG 19s · rank 2 held by a debugger · ranks 0-1,3 wait in all_reduce #1042"),
    "blocked": (rank2(ProcState("D", 1.0, 0.0, "nfs_wait_bit_killable", "read",
                                "/mnt/data/shard-00042.tar")),
                "HANG 19s · rank 2 in fetch_shard (data.py:41), D: read shard-00042.tar"),
    "busy": (rank2(ProcState("R", 10.0, 99.0, runnable_pct=100.0)),
             "BUSY 19s · rank 2 on CPU in fetch_shard · ranks 0-1,3 wait in all_reduce"),
    "gone": (rank2(ProcState("X")),
             "HANG 19s · rank 2 gone · ranks 0-1,3 wait in all_reduce #1042"),
    "not_finished": (in_collective("all_reduce", 2),
                     "HANG 19s · every rank in all_reduce #1042, none left: link or peer device"),
    "desync": (in_collective("barrier", 2),
               "HANG 19s · rank 2 in barrier #1042 · ranks 0-1,3 in all_reduce #1042"),
    "desync_shapes": (shaped(),
                      "HANG 19s · ranks 2-3 in all_reduce #1042 f32[2048] · others f32[1024]"),
    "exit": (exited(), "HANG 19s · rank 3 gone · ranks 0,2 failed · rank 1 waits in all_reduce"),
    "worker_blocked": (waiting_for_data(ProcState("D", 0.0, 0.0, "nfs_wait_bit_killable", "read",
                                                  "/mnt/data/shard-7.tar")),
                       "HANG 19s · rank 0 waits on worker 9002 in read_batch, D: read "
                       "shard-7.tar"),
    "worker_asleep": (waiting_for_data(ProcState("S", 0.0, 0.0, "pipe_read", "read",
                                                 "/tmp/shard.fifo")),
                      "HANG 19s · rank 0 waits on worker 9002 in read_batch: read shard.fifo"),
}  # fmt: skip


@pytest.mark.parametrize("case", CASES)
def test_each_kind_of_stop_is_one_line_that_fits_80_columns(case: str) -> None:
    ranks, line = CASES[case]
    hang = hang_of(ranks)
    assert hang.line == line and len(line) <= 76
    verdict = diagnose([sf.machine(gpus=0, jobs=tuple(ranks), tick=t) for t in (0, 5)])
    (banner,) = banner_lines(verdict, 78)  # 80 columns less the banner's edge
    assert banner.plain.startswith(f"◆ {line}") and "…" not in banner.plain, banner.plain


def test_the_kernels_word_decides_the_kind_and_the_level() -> None:
    stopped = hang_of(rank2(ProcState("T", 1.0, 0.0)))
    assert (stopped.kind, stopped.level) == ("stopped", "stalled")
    assert "rank 2 is stopped (SIGSTOP or job control): `kill -CONT 4244` resumes it" in \
        stopped.summary  # fmt: skip
    busy = hang_of(rank2(ProcState("R", 10.0, 30.0, runnable_pct=95.0)))  # a crowded box
    assert busy.level == "busy" and "runnable 95 % (the CPUs are crowded)" in busy.summary
    asleep = hang_of(rank2(ProcState("S", 10.0, 0.0, "hrtimer_nanosleep", "clock_nanosleep")))
    assert asleep.level == "stalled" and "working" not in asleep.summary
    long_asleep = [replace(r, last_step_age_s=90.0) for r in rank2(ProcState("S", 1.0, 0.0))]
    assert hang_of(long_asleep).level == "hung"
    long_busy = [replace(r, last_step_age_s=90.0)
                 for r in rank2(ProcState("R", 1.0, 99.0, runnable_pct=99.0))]  # fmt: skip
    assert hang_of(long_busy).level == "busy"  # past the hang limit: still working, not hung
    gone = hang_of(rank2(ProcState("Z")))
    assert gone.kind == "dead_rank" and "rank 2 gone (a zombie" in gone.summary


def test_a_rank_waiting_for_data_names_its_worker_not_the_idle_one() -> None:
    (ranks, _line) = CASES["worker_blocked"]
    hang = hang_of(ranks)
    (place,) = hang.ranks
    assert place.worker.pid == 9002  # blocked in its read; 9001 idles in poll
    assert ("it waits for its DataLoader worker 9002 (blocked in the kernel (state D) in read "
            "on /mnt/data/shard-7.tar, wchan nfs_wait_bit_killable), at data.py:88 in "
            "read_batch: blob = f.read()") in hang.summary  # fmt: skip


def test_a_hang_silences_its_consequences_and_keeps_the_causes_it_does_not_explain() -> None:
    """Without the silencing this window also says host_overhead and compute (the stop seen
    from another side); a GPU throttled on the box is a cause of its own and stays."""
    bare = diagnose([sf.machine(gpus=0, jobs=BASE, tick=t) for t in range(6)])
    assert bare.primary.bottleneck == "hang" and bare.also == ()
    hot = diagnose([sf.machine(gpus=4, jobs=BASE, tick=t) for t in range(6)])
    assert [f.bottleneck for f in hot.also] == ["throttle_thermal"]


def test_the_wide_banner_says_the_case_once_under_the_line() -> None:
    verdict = diagnose([sf.machine(gpus=0, jobs=BASE, tick=t) for t in (0, 5)])
    first, second = (c.plain for c in banner_lines(verdict, 300, two_lines=True))
    assert first == f"◆ {CASES['not_entered'][1]} · d: details"
    assert second.startswith("  Job stalled 19s: rank 2 never reached all_reduce #1042")
    assert "try: look at where the late rank is" in second
    assert (first + second).count("rank 2 never reached") == 1


TORCH = "/venv/site-packages/torch/utils/data"
WAITS_ON_PIN = (
    Frame("/home/ana/llama/train.py", 120, "train"),
    Frame(f"{TORCH}/dataloader.py", 725, "__next__"),
    Frame(f"{TORCH}/dataloader.py", 1291, "_try_get_data"),
    Frame("/usr/lib/python3.11/queue.py", 180, "get"),
)


def pin_thread(inner: tuple[Frame, ...]) -> list:
    """One rank waiting in ``__next__`` on its pin_memory thread's queue."""
    pin = (Frame(f"{TORCH}/_utils/pin_memory.py", 59, "_pin_memory_loop"), *inner)
    stack = RankStack(WAITS_ON_PIN, 1.0, "helper", pin_memory=pin)
    return [replace(waiting_for_data(ProcState("D", 0.0, 0.0, "x", "read", "/mnt/s.tar"))[0],
                    stack=stack)]  # fmt: skip


def test_a_rank_waiting_on_a_stuck_pin_memory_thread_names_it_not_a_worker() -> None:
    pinning = pin_thread((Frame(f"{TORCH}/_utils/pin_memory.py", 64, "pin_memory"),))
    hang = hang_of(pinning)
    (place,) = hang.ranks
    assert place.pin_memory and place.worker is None
    line = "HANG 19s · rank 0 waits on pin thread in pin_memory (pin_memory.py:64)"
    assert hang.line == line
    assert "it waits for its pin_memory thread, at pin_memory.py:64 in pin_memory" in hang.summary
    queue = "/usr/lib/python3.11/multiprocessing/queues.py"
    forwarding = hang_of(pin_thread((Frame(queue, 113, "get"),)))  # it waits on a worker
    (place,) = forwarding.ranks
    assert not place.pin_memory and place.worker.pid == 9002


def test_a_rank_stopped_inside_its_last_collective_is_not_what_the_others_wait_in() -> None:
    """Stopped after gloo finished its all-reduce #1042 but before it returned, while its peers
    went on to #1043: the others wait in #1043, and the stopped rank holds them."""
    moved = [replace(r, collectives=(replace(r.collectives[0], seq=1043),)) for r in BASE]
    moved[2] = replace(moved[2], collectives=BASE[0].collectives, proc=ProcState("T", 1.0, 0.0))
    hang = hang_of(moved)
    assert (hang.kind, hang.seq, hang.inside) == ("stopped", 1043, (0, 1, 3))
    assert hang.line == CASES["stopped"][1]
