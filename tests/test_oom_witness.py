"""The kernel's word on a rank gone without one: the OOM killer (its cgroup's limit, or the
host's RAM) or a plain SIGKILL, from the kernel log and from the counters kept while it lived;
and the words every surface prints for it.  The log lines are this VM's kernel's own (an OOM
kill in a v1 memory cgroup, Linux 6.18) and a cgroup v2 host's, the counters a fake tree's."""

from __future__ import annotations

from dataclasses import replace
from pathlib import Path

from tests import snapshot_fixtures as sf
from tests.cgroup_files import Clock
from tests.test_diagnosis_jobs import rank
from traintop.collectors.cgroup import CgroupReader
from traintop.collectors.memcg import MemcgReader
from traintop.collectors.oom_witness import KernelLog, OomWitness, kernel_log_kills, oom_kills
from traintop.collectors.snapshot import Ending, Kill
from traintop.diagnosis.kill_words import how_killed, kill_text, said, short
from traintop.diagnosis.run_life import ending_text, how

MIB = 1 << 20
GIB = 1 << 30
PID = 19206
MEMCG = [
    b"4,3520,1245777194,-;pt_data_worker invoked oom-killer: gfp_mask=0x100cca(GFP_HIGHUSER_MOVABLE), order=0, oom_score_adj=0\n",  # noqa: E501
    b"6,3560,1245777803,-;oom-kill:constraint=CONSTRAINT_MEMCG,nodemask=(null),cpuset=/,mems_allowed=0,oom_memcg=/ttmem-test,task_memcg=/ttmem-test,task=python,pid=19206,uid=0\n",
    b"3,3561,1245777833,-;Memory cgroup out of memory: Killed process 19206 (python) total-vm:1389608kB, anon-rss:606412kB, file-rss:72252kB, shmem-rss:0kB, UID:0 pgtables:1696kB oom_score_adj:0\n",  # noqa: E501
]
HOST = [
    b"6,900,88000000,-;oom-kill:constraint=CONSTRAINT_NONE,nodemask=(null),cpuset=/,mems_allowed=0,global_oom,task_memcg=/user.slice,task=python3,pid=2840,uid=1000\n",
    b"3,901,88000100,-;Out of memory: Killed process 2840 (python3) total-vm:1063932kB, anon-rss:522624kB, file-rss:6144kB, shmem-rss:0kB, UID:1000 pgtables:1200kB oom_score_adj:0\n",  # noqa: E501
]


def test_the_kernel_log_names_each_victim_and_its_scope() -> None:
    log = kernel_log_kills([b"6,1,500000,-;eth0: renamed from ttf6420b\n", *MEMCG, *HOST])
    assert log.kills == {19206: ("cgroup", "/ttmem-test"), 2840: ("host", "/user.slice")}
    assert log.oldest_s == 0.5
    assert log.covers(1245.8) and not log.covers(0.1) and not log.covers(None)
    assert KernelLog({}, None).covers(10.0) is False
    assert kernel_log_kills([MEMCG[2]]).kills == {19206: ("cgroup", "")}  # a line alone


def test_the_hosts_oom_kill_count() -> None:
    assert oom_kills(b"\npgfault 10\noom_kill 3\nnuma_hit 2\n") == 3
    assert oom_kills(b"\npgfault 10\n") is None


def _world(tmp_path: Path, kmsg: list[bytes] | None, host_kills: int = 0):
    """A fake v1 memory cgroup /job (1 GiB limit) holding PID, a vmstat, a kernel log file."""
    root = tmp_path / "cg" / "memory" / "job"
    root.mkdir(parents=True)
    files = {"memory.limit_in_bytes": f"{GIB}\n", "memory.usage_in_bytes": f"{1000 * MIB}\n",
             "memory.max_usage_in_bytes": f"{GIB}\n", "memory.failcnt": "12\n",
             "memory.stat": f"total_rss {1000 * MIB}\ntotal_shmem 0\n",
             "memory.oom_control": "oom_kill_disable 0\nunder_oom 0\noom_kill 0\n"}  # fmt: skip
    for name, text in files.items():
        (root / name).write_text(text)
    proc = tmp_path / "proc" / str(PID)
    proc.mkdir(parents=True)
    (proc / "cgroup").write_text("4:memory:/job\n")
    (tmp_path / "vmstat").write_text(f"pgfault 1\noom_kill {host_kills}\n")
    log = tmp_path / "kmsg"
    if kmsg is not None:
        log.write_bytes(b"".join(kmsg))
    clock = Clock()
    memcg = MemcgReader(CgroupReader(root=tmp_path / "cg", proc=tmp_path / "proc"), clock)
    witness = OomWitness(memcg, clock, vmstat=str(tmp_path / "vmstat"), kmsg=str(log),
                         meminfo=lambda: (3 * GIB, 4 * GIB))  # fmt: skip
    return root, memcg, witness, clock


GONE = Ending("gone")


def test_an_oom_kill_counted_in_its_cgroup_since_it_was_last_alive(tmp_path: Path) -> None:
    """No kernel log to read: the group's oom_kill rose, the working set sat at its limit."""
    root, memcg, witness, clock = _world(tmp_path, kmsg=None)
    witness.alive(PID, memcg.read(PID))
    (root / "memory.oom_control").write_text("oom_kill_disable 0\nunder_oom 0\noom_kill 1\n")
    clock.now += 1.0
    ending = witness.word(PID, GONE)
    assert ending.exit_code == -9
    assert ending.kill == Kill("oom", "cgroup", PID, GIB, 1000 * MIB, 1.0, "cgroup counters")
    assert said(ending) == (
        "killed by the OOM killer (cgroup memory limit 1.0 GiB reached: 1000 MiB in use 1s before)"
    )


def test_counters_unchanged_while_it_was_watched_read_sigkill(tmp_path: Path) -> None:
    _, memcg, witness, clock = _world(tmp_path, kmsg=None)
    witness.alive(PID, memcg.read(PID))
    clock.now += 1.0
    ending = witness.word(PID, GONE)
    assert ending.kill == Kill("sigkill", pid=PID, source="counters unchanged")
    assert said(ending) == "killed (SIGKILL), not by the OOM killer"
    assert how(ending) == "by SIGKILL" and short(ending) == "killed (SIGKILL)"


def test_the_kernel_log_names_it_though_nobody_watched_it(tmp_path: Path) -> None:
    """A one-shot `traintop jobs` after the end: the log says who and where."""
    _, _, witness, _ = _world(tmp_path, kmsg=MEMCG)
    ending = witness.word(PID, GONE, end_s=1245.8)
    assert ending.kill is not None and ending.kill.source == "kernel log"
    assert (ending.kill.by, ending.kill.scope) == ("oom", "cgroup")
    assert how(ending) == "by the OOM killer"


def test_a_log_that_reaches_back_past_the_end_and_names_nobody_reads_sigkill(
    tmp_path: Path,
) -> None:
    _, _, witness, _ = _world(tmp_path, kmsg=HOST)
    assert witness.word(PID, GONE, end_s=90.0).kill == Kill("sigkill", pid=PID, source="kernel log")
    _, _, young, _ = _world(tmp_path / "b", kmsg=HOST)
    assert young.word(PID, GONE, end_s=10.0) == GONE  # the log began after: it cannot tell


def test_another_processs_oom_kill_meanwhile_is_not_the_ranks(tmp_path: Path) -> None:
    """CI's case: a `kill -9` while another process on the box was OOM-killed.  The host's
    count rose, but the log reaches back past the end and names only the other victim."""
    _, _, witness, clock = _world(tmp_path, kmsg=HOST)
    witness.alive(PID, None)  # a rank outside any memory cgroup: only the host's count
    (tmp_path / "vmstat").write_text("pgfault 1\noom_kill 1\n")
    clock.now += 1.0
    ending = witness.word(PID, GONE, end_s=90.0)
    assert ending.kill == Kill("sigkill", pid=PID, source="kernel log")


def test_nothing_to_tell_by_leaves_it_gone_without_a_word(tmp_path: Path) -> None:
    _, _, witness, _ = _world(tmp_path, kmsg=None)
    assert witness.word(PID, GONE) == GONE
    assert said(GONE) is None


def test_a_rank_that_raised_after_its_worker_was_killed(tmp_path: Path) -> None:
    """DataLoader: "worker (pid 31) is killed by signal: Killed": the log names the worker."""
    kmsg = [line.replace(b"19206", b"31") for line in MEMCG]
    _, _, witness, _ = _world(tmp_path, kmsg=kmsg)
    raised = Ending(
        "raised", "RuntimeError: DataLoader worker (pid 31) is killed by signal: Killed."
    )
    ending = witness.word(PID, raised, workers=[31], end_s=1245.8)
    assert ending.kill is not None and ending.kill.pid == 31
    assert said(ending) == (
        "raised RuntimeError: DataLoader worker (pid 31) is killed by signal: Killed.; its "
        "DataLoader worker 31 was killed by the OOM killer (cgroup memory limit reached)"
    )
    assert how_killed(ending) == "(RuntimeError: its worker killed by the OOM killer)"


def test_a_signal_or_a_crash_in_native_code_is_left_as_it_is(tmp_path: Path) -> None:
    _, _, witness, _ = _world(tmp_path, kmsg=MEMCG)
    for ending in (Ending("signal", "SIGTERM"), Ending("gone", "Segmentation fault (SIGSEGV)")):
        assert witness.word(PID, ending) == ending


def test_the_words_of_each_kill() -> None:
    host = Kill("oom", "host", 7, 64 * GIB, 64 * GIB - 100 * MIB, 2.0, "host counters")
    assert kill_text(host) == (
        "killed by the OOM killer (the host ran out of memory: 100 MiB of 64.0 GiB available "
        "2s before)"
    )
    assert kill_text(Kill("oom")) == "killed by the OOM killer"


def test_a_jobs_ending_line_says_the_oom_killer_for_the_rank_it_took() -> None:
    oom = Ending("gone", exit_code=-9, kill=Kill("oom", "cgroup", 5, 8 * GIB, 8 * GIB - MIB, 1.0))
    ranks = [replace(rank(100 + r, r, world=2, state="gone"), ending=e)
             for r, e in enumerate((oom, Ending("signal", "SIGTERM")))]  # fmt: skip
    text = ending_text(ranks)
    assert text.startswith("rank 0 killed by the OOM killer (cgroup memory limit 8.0 GiB "
                           "reached: 8.0 GiB in use 1s before)")  # fmt: skip
    assert text.endswith("; rank 1: stopped by SIGTERM")


def test_a_recording_keeps_the_kernels_word_and_the_host_side() -> None:
    """The codec writes the new fields by name: an ended rank's kill, a live rank's memory,
    PSI and threads, the host's PSI come back as they went."""
    import json

    from tests.test_diagnosis_killers import _memory
    from traintop.collectors.memory_state import Pressure, PressureSet
    from traintop.collectors.snapshot import Frame, PyThread, Snapshot
    from traintop.store.codec import Decoder, current_schema, encode

    psi = PressureSet(Pressure(0.3, None, 30.0), Pressure(0.1, 0.02, 9.0), None)
    thread = PyThread(7, "stats", False, 10, 0, 8, 10, (Frame("t.py", 3, "f"),), 7)
    kill = Kill("oom", "cgroup", PID, GIB, GIB - MIB, 1.0, "kernel log")
    ended = replace(rank(100, 0), state="gone", ending=Ending("gone", exit_code=-9, kill=kill))
    live = replace(rank(101, 1), memory=_memory(GIB, 1e6), pressure=psi, threads=(thread,))
    snap = replace(sf.machine(gpus=0, jobs=(ended, live)), pressure=psi)
    back = Decoder(current_schema()).decode(Snapshot, json.loads(json.dumps(encode(snap))))
    assert back.pressure == psi and back.jobs == snap.jobs
