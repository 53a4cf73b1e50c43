"""JobCollector: turns the training processes' ring segments into JobSnapshots.

Each tick polls live segments incrementally (no record is read twice) into a window of column
sums per job (collectors/job_window.py), and derives rates and shares from that window; beyond
16 live ranks each rank is read and summarised in turns (collectors/turns.py), the job on
screen (``focus``) on every tick.
A segment found finished or crashed is read to its end once, closed, and kept as its summary:
ended jobs cost no reads, no liveness checks and no worker sampling, however many there are.
DataLoader workers come from the tick's one process scan (``ProcessCollector.readings``): a
trainer's children by ppid, never another rank (Lightning's launcher makes rank 1 a child of
rank 0).  Timestamps in records are CLOCK_MONOTONIC ns, so ``clock`` must be that clock in
seconds (time.monotonic); tests pass a fake one together with scripted records.
"""

from __future__ import annotations

import dataclasses
import operator
import time
from collections.abc import Callable, Iterable
from typing import Protocol

from traintop.collectors import run_end, stall, warmup
from traintop.collectors.cgroup import CgroupReader
from traintop.collectors.handoff import Handoffs
from traintop.collectors.job_facts import FactsReader
from traintop.collectors.job_memory import JobMemoryReader
from traintop.collectors.job_sockets import SocketQueues
from traintop.collectors.job_window import NEWEST, JobWindow
from traintop.collectors.loader_workers import with_state
from traintop.collectors.phase_names import is_comm_phase
from traintop.collectors.proc_state import ProcReader, children
from traintop.collectors.rates import measured
from traintop.collectors.ring_header import SegmentHeader
from traintop.collectors.ring_ledger import Entry, newest_per_group
from traintop.collectors.ring_reader import (
    HotBlock,
    PollResult,
    Segment,
    SegmentError,
    open_segment,
    remove_stale,
    segment_paths,
)
from traintop.collectors.snapshot import Ending, JobSnapshot, ThreadCpu, WorkerSnapshot
from traintop.collectors.stacks import REPLY_WAIT_S, phase_samples, rank_stack, rank_threads
from traintop.collectors.stall_watch import STACK_REFRESH_S, StallWatch, moved_ns
from traintop.collectors.turns import in_turn

STALL_MIN_S = 5.0
STALL_STEP_FACTOR = 5.0
LIVE_RESOLUTION_NS = 16  # the live word keeps its start time rounded down to 16 ns
STARTING_REFRESH_S = 5.0  # where a rank before its first step is, asked again after this long
# A thread other than the training one runnable (on a CPU or queued for one) this share of the
# time: its helper is asked for every
# Python thread (names, stacks, whether each needs the GIL), at most every THREADS_EVERY_S, and
# the answer is shown for THREADS_KEEP_S (traintop/thread_samples.py, diagnosis/rules_gil.py)
THREAD_ASK_PCT = 20.0
THREADS_EVERY_S = 10.0
THREADS_KEEP_S = 30.0
THREAD_SAMPLES = (20, 25)  # samples, ms apart
PEER_WAIT_SHARE = 0.1  # a rank waiting on its peers this share: its sockets are read
_NS = 1e9


class _Job:
    """One segment being followed: its reader, its window and its last known state."""

    def __init__(self, segment: Segment, window_s: float, reader: ProcReader,
                 reply_wait_s: float) -> None:  # fmt: skip
        self.segment = segment
        self.header = segment.header
        self.window_s = window_s
        self.window = JobWindow(segment.header, window_s)
        self.liveness = "live"
        self.restarted = False
        self.hot: HotBlock | None = None
        self.fresh: PollResult | None = None  # this tick's records, for JobCollector.on_records
        self.due = True  # summarised this tick (else its last snapshot, ``shown``, is kept)
        # The last summary and when it was made: a live rank's until its next turn, an ended
        # one's for good (made once it was read to its end: only a closed segment is ended).
        self.shown: JobSnapshot | None = None
        self.shown_at: float | None = None
        self.entries: list[Entry] = []  # the ledger as last read (format 1.2)
        self.watch = StallWatch(segment.path, segment.header, reader, reply_wait_s)
        self.stacks = self.watch.stacks
        self.facts = FactsReader(segment.path, window_s, segment.header.same_host_clock())
        self.handoffs = Handoffs(window_s)  # the trainer's handoff of each worker's batch
        self.seen_live_s: float | None = None  # the last tick that found its writer alive
        self.end_s: float | None = None  # when an ended rank ended, on the monitor's clock
        self.how_ended: Ending | None = None  # how it ended (collectors/run_end.py)
        self.witnessed = False  # the kernel's word on its end was asked (collectors/oom_witness)
        self.threads_asked = -1e18  # when its helper was last asked for its Python threads
        self.busy_tids: set[int] = set()  # threads that were busy when it was asked
        # Before its first step: whether it works (collectors/warmup.py), and its parent, to
        # tell a process that only started the ranks (mp.spawn's) from a rank.
        header = segment.header
        self.warmup = warmup.Warmup(header.pid, header.visible())
        self.ppid = header.ppid or None

    def gone(self) -> bool:
        """Unlinked and no longer written: the cleaner (or the writer) removed it."""
        return self.liveness != "live"

    def poll(self, newest: int | None, now: float) -> None:
        """Read new records; an ended segment is read to its end once, then closed for good,
        and when it ended is settled (``end_s``).

        A segment gone bad keeps its last numbers and shows as crashed.  ``newest``: see
        ``Segment.poll`` (None when every record is wanted, by a recorder).
        """
        if self.segment.closed:
            return
        try:
            stepped = len(self._read(newest).records) > 0
            self.handoffs.add(now, self.hot)
            self.liveness = self.segment.liveness(stepped)
            if self.liveness == "live":
                self.seen_live_s = now
                return
            self._read(None)  # what the writer published up to its exit: all of it
            self.read_ledger()  # how it ended, for the post-mortem of its collectives
            self.segment.close()
        except (SegmentError, OSError):
            self.segment.close()
            self.liveness = "crashed"
        self.end_s = self._end(now)
        self.how_ended = run_end.ending_of(self.segment.path, self.hot, self.liveness)

    @property
    def stepped(self) -> bool:
        """Whether any step of it was published (else it is starting)."""
        return self.window.steps_total > 0

    def _end(self, now: float) -> float:
        """When the rank ended: a finished writer's own close time (the heartbeat it writes
        on close), else the last tick that found its writer alive, else its last sign of life
        in the ring (it ended before this monitor looked: a phase it entered, the stack helper's
        last wake); never after ``now``."""
        same_clock = self.header.same_host_clock()
        if self.liveness == "finished" and self.hot is not None and same_clock:
            return min(now, self.hot.heartbeat_ns / _NS)
        if self.seen_live_s is not None:
            return self.seen_live_s
        signs = [self.header.created_monotonic_ns, self.window.last_end_ns or 0]
        if self.hot is not None and same_clock:
            signs.append(self.hot.live_start_ns)  # a phase entered after the last step
            signs.append(self.hot.alive_ns)  # the stack helper's last wake
        return min(now, max(signs) / _NS)

    def ending(self) -> tuple[float | None, bool]:
        """An ended rank's end as wall-clock time (None: running, or a writer of another boot)
        and whether it had stopped stepping before it ended: its last step is older, at its
        end, than the stall limit, so its final rate is 0, not the rate before the stall."""
        if self.end_s is None:
            return None, False
        last = self.window.last_end_ns
        stopped = last is not None and self.end_s - last / _NS > stall_limit_s(self.window)
        if not self.header.same_host_clock():
            return None, stopped
        offset_ns = self.header.created_realtime_ns - self.header.created_monotonic_ns
        return offset_ns / _NS + self.end_s, stopped

    def carries(self, now: float) -> bool:
        """Whether this rank, not in turn, may keep its shown snapshot: its writer still holds
        the segment (the flock alone: two system calls) and its state reads as shown, so an
        end, a crash or a stall is summarised at once."""
        if self.shown is None or self.segment.closed:
            return False
        try:
            live = self.segment.liveness(stepped=True) == "live"
        except (SegmentError, OSError):  # the poll that follows finds out what it is
            return False
        if live:
            self.seen_live_s = now
        return live and _state(self, now) == self.shown.state

    def _read(self, newest: int | None) -> PollResult:
        if not self.stepped:  # its layout may change until its first record: read it first
            self._follow(self.segment.hot())
        # The window keeps only its last ``window_s`` of a backlog: read no older records.
        within_ns = None if newest is None else int(self.window_s * _NS)
        result = self.segment.poll(newest, within_ns)
        self.window.add(result)
        self.fresh = result if self.fresh is None else _joined(self.fresh, result)
        self.window.steps_total = self.segment.next_index
        self.hot = self.segment.last_hot
        self._follow(self.hot)
        return result

    def _follow(self, hot: HotBlock) -> None:
        """The writer rewrote its header: its rank identity, learnt late, or (before its first
        record, a segment made at start-up) its phases, which the window is then made for (a
        first step read in the same instant as the rewrite is counted, not measured)."""
        if not self.segment.follow_header(hot):
            return
        phases = len(self.header.phases)
        self.header = self.segment.header
        if len(self.header.phases) != phases:
            self.window = JobWindow(self.header, self.window_s)
            self.window.steps_total = self.segment.next_index
        else:
            self.window.follow_header(self.header)

    def read_ledger(self) -> None:
        """Re-read the ledger when it moved on, or while an entry may still get its exit.
        Only for a rank that stopped stepping (or ended): a stepping rank's ledger is news to
        no one, and reading it costs 50 µs a tick."""
        if self.segment.closed or not self.header.ledger:
            return
        written = self.hot.ledger_head if self.hot is not None else 0
        last = self.entries[-1] if self.entries else None
        moved = last is None or last.index + 1 != written
        if written and (moved or any(not e.exit_ns for e in self.entries)):
            self.entries = self.segment.ledger()


class JobCollector:
    """Follows every segment of the current user; call collect() from the sampler thread."""

    def __init__(
        self,
        directory: str | None = None,
        window_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
        processes: ProcessTable | None = None,
        gc_every_s: float = 60.0,
        gc_max_age_s: float = 600.0,
        reply_wait_s: float = REPLY_WAIT_S,
    ) -> None:
        self._directory = directory
        self._window_s = window_s
        self._clock = clock
        self._processes = processes
        self._jobs: dict[str, _Job] = {}  # by segment path
        self._gc_every_s, self._gc_max_age_s = gc_every_s, gc_max_age_s
        self._next_gc = clock()
        self.errors: tuple[str, ...] = ()
        self._last_at: float | None = None  # when the previous collect ran
        # The job id (``JobSnapshot.job_id``) the user looks at, set from the UI thread: its
        # ranks are summarised on every tick, the others in turns beyond 16 live ranks.  Else
        # the job of ``focus_pid``'s rank (`diagnose --job PID`, `record --job PID`).
        self.focus: str | None = None
        self.focus_pid: int | None = None
        # Called on the sampler thread with each segment's newly read records (a recorder keeps
        # every step); it must only hand them on, never block.
        self.on_records: Callable[[SegmentHeader, PollResult], None] | None = None
        self.stall, self.hang = stall.from_env()  # ValueError (one line) for a bad setting
        # Phase samples asked for from any thread (``sample_phase``), sent on the next tick.
        self._sample_asks: dict[int, tuple[str | None, int, int]] = {}
        self.cgroups = CgroupReader()  # each live rank's CPU limit (collectors/cgroup.py)
        # ... its memory and PSI, and the kernel's word on a rank gone (collectors/job_memory.py)
        self.memory = JobMemoryReader(self.cgroups, clock)
        self.sockets = SocketQueues(clock=clock)  # what its connections hold, while it waits
        # The kernel's view of the ranks that stopped stepping (collectors/stall_watch.py); an
        # unanswered stack request is followed by the signal after ``reply_wait_s``.
        self._procs, self.reply_wait_s = ProcReader(), reply_wait_s

    def collect(self) -> tuple[JobSnapshot, ...]:
        """Poll all segments and summarise them; never raises for a bad segment."""
        now = self._clock()
        self._collect_garbage(now)
        self._discover()
        jobs = sorted(self._jobs.values(), key=lambda j: (j.header.name, j.header.rank))
        self._plan_turns(jobs, now)
        newest = None if self.on_records is not None else NEWEST
        for job in jobs:
            job.due = job.due or not job.carries(now)
            if job.due or newest is None:  # a recorder needs every record, on every tick
                job.poll(newest, now)
        self._hand_on_records()
        self._witness_ends(jobs)
        _mark_restarts(jobs)
        asks, self._sample_asks = self._sample_asks, {}
        for job in jobs:
            self._tend_stacks(job, now, asks.get(job.header.pid))
        workers = self._workers([job for job in jobs if job.liveness == "live" and job.due])
        self._tend_warmups(jobs, now, workers)
        launchers = _launchers(jobs)
        return tuple(self._snapshot(job, now, workers) for job in jobs if job not in launchers)

    def _witness_ends(self, jobs: list[_Job]) -> None:
        """The kernel's word on each rank found ended this tick (collectors/oom_witness.py):
        an OOM kill, or a SIGKILL the OOM killer did not send; live ranks' records go on."""
        for job in jobs:
            if job.how_ended is not None and not job.witnessed:
                job.witnessed = True
                workers = [w.pid for w in job.shown.workers] if job.shown is not None else []
                job.how_ended = self.memory.witness.word(
                    job.header.pid, job.how_ended, workers, job.end_s
                )
        live = {job.header.pid for job in jobs if job.liveness == "live"}
        self.memory.forget(live)
        self.sockets.forget(live)

    def _tend_warmups(self, jobs: list[_Job], now: float, workers: dict) -> None:
        """Read what each rank that has not stepped yet is doing (collectors/warmup.py)."""
        for job in jobs:
            if job.due and job.liveness == "live" and not job.stepped:
                job.warmup.limit_s = self.stall.after_s(None)
                job.warmup.tick(now, workers.get(job.header.pid, ()))

    def _plan_turns(self, jobs: list[_Job], now: float) -> None:
        """Mark the live ranks whose turn it is (``_Job.due``); see ``traintop.collectors.turns``.

        Ranks are ordered by job, not by name (sweep runs often share one), so a job's ranks
        keep their turns together.
        """
        live = sorted((j for j in jobs if not j.segment.closed), key=_turn_order)
        interval = None if self._last_at is None else now - self._last_at
        self._last_at = now
        jobs_of = [job.window.job_id for job in live]
        focus = self.focus if self.focus is not None else _job_of(live, self.focus_pid)
        turns = in_turn([job.shown_at for job in live], jobs_of, focus, now, interval)
        for job, due in zip(live, turns, strict=True):
            job.due = due

    def sample_phase(
        self, pid: int, phase: str | None = None, count: int = 20, interval_ms: int = 50
    ) -> None:
        """Have rank ``pid``'s helper sample its stack ``count`` times ``interval_ms`` apart,
        folding those taken in ``phase`` (None: all): the answer comes as that rank's
        ``JobSnapshot.phase_samples`` on a later tick (``count x interval_ms`` plus a tick).
        Safe from any thread; nothing is sampled until asked."""
        self._sample_asks[pid] = (phase, count, interval_ms)

    def _tend_stacks(self, job: _Job, now: float, ask: tuple | None) -> None:
        """Read the ledger of a rank that stopped stepping, what the kernel says of it, where it
        is and, while it waits for a batch, its workers (``collectors/stall_watch.py``); a rank
        that steps is asked nothing and keeps no stack and no ledger."""
        if job.segment.closed or not job.header.ledger:
            return
        limit = self.stall.after_s(job.window.step_time_p50_s())
        age = job.window.last_step_age_s(now)
        stepping = age is None or age < stall.capture_after_s(limit)
        if stepping:  # its threads first: the helper answers in turn, and they take half as long
            self._ask_threads(job, now)
        if ask is not None:
            job.stacks.ask_samples(now, *ask)
        if stepping:
            job.watch.quiet()
            job.entries = []
            job.stacks.poll(now, job.hot)
        else:
            job.read_ledger()
            last = moved_ns(job.window.last_end_ns, job.hot, [e.enter_ns for e in job.entries])
            phase = live_phase(job, "stalled", now)[0]
            refresh = STACK_REFRESH_S if job.stepped else STARTING_REFRESH_S
            job.watch.tend(now, job.hot, last, phase, self._worker_pids, refresh)

    def _ask_threads(self, job: _Job, now: float) -> None:
        """Ask a stepping rank's helper for its Python threads when one of its threads but the
        training one (and the helper) is busy: the kernel first, the process only then.  A busy
        thread an answer did not list is not a Python thread (torch's intra-op pool, NCCL's):
        it holds no GIL, and is not asked about again."""
        hot, table = job.hot, self._processes
        if hot is None or table is None or now - job.threads_asked < THREADS_EVERY_S:
            return
        python = {t.tid for answer, _ in job.stacks.threads for t in answer}
        skip = {hot.train_tid, hot.helper_tid} | (job.busy_tids - python)
        threads = table.threads_of(job.header.pid)
        busy = [t.tid for t in threads if t.tid not in skip and _runnable(t) >= THREAD_ASK_PCT]
        if busy and job.stacks.ask_threads(now, *THREAD_SAMPLES):
            job.threads_asked = now
            job.busy_tids.update(busy)

    def _worker_pids(self, pid: int) -> list[int]:
        """A rank's children, oldest first: from the tick's process scan, else from /proc."""
        if self._processes is None:
            return children(pid)
        return sorted(w.pid for w in self._processes.workers_of({pid}).get(pid, ()))

    def stacks_pending(self) -> bool:
        """Whether a stack asked of some rank (or of the worker it waits on), or a second
        reading of a stalled rank's CPU time, has not come back yet."""
        return any(job.watch.pending() for job in list(self._jobs.values()))

    def share_process_scan(self, processes: ProcessTable) -> None:
        """Take DataLoader workers from ``processes``' scan, which runs just before each collect."""
        self._processes = processes

    def _workers(self, live: list[_Job]) -> dict[int, tuple[WorkerSnapshot, ...]]:
        if self._processes is None or not live:
            return {}
        return self._processes.workers_of({job.header.pid for job in live})

    def _hand_on_records(self) -> None:
        sink = self.on_records
        for job in self._jobs.values():
            fresh, job.fresh = job.fresh, None
            if sink is not None and fresh is not None and (len(fresh.records) or fresh.lost):
                sink(job.header, fresh)

    def close(self) -> None:
        for job in self._jobs.values():
            job.segment.close()
        self._jobs.clear()

    def _discover(self) -> None:
        errors = []
        present = set(segment_paths(self._directory))
        for path in present - self._jobs.keys():
            try:
                self._jobs[path] = _Job(
                    open_segment(path), self._window_s, self._procs, self.reply_wait_s
                )
            except SegmentError as exc:
                errors.append(str(exc))
        for path in [p for p, job in self._jobs.items() if p not in present and job.gone()]:
            self._jobs.pop(path).segment.close()
        self.errors = tuple(errors)

    def _collect_garbage(self, now: float) -> None:
        if now >= self._next_gc:
            self._next_gc = now + self._gc_every_s
            remove_stale(self._directory, self._gc_max_age_s)

    def _snapshot(
        self, job: _Job, now: float, workers: dict[int, tuple[WorkerSnapshot, ...]]
    ) -> JobSnapshot:
        # a live rank waiting for its turn: ``carries`` saw its state unchanged
        if not job.due and job.shown is not None:
            return job.shown
        state = _state(job, now)
        kept = job.shown
        if job.segment.closed and kept is not None and kept.state == state:
            return _aged(kept, job.window.last_step_age_s(now))
        live = live_phase(job, state, now)  # (None, None) for an ended job: none to keep
        # before its first step, the warm-up's reading of the process is its ``proc``
        extras = self._extras(job, now) | _life(job, state, now) | self._host_side(job, workers)
        ended_at, stopped = job.ending()
        stopped = stopped or state == "stalled"  # no step for the stall limit: its rate is 0
        snapshot = job.window.snapshot(
            now,
            state,
            with_state(workers.get(job.header.pid, ()), job.watch.workers),
            live,
            ended_at=ended_at,
            stopped=stopped,
            **extras,
        )
        if state == "stalled" and not job.stepped:  # blocked before its first step: how long
            snapshot = dataclasses.replace(snapshot, last_step_age_s=job.warmup.blocked_s(now))
        job.shown, job.shown_at = snapshot, now
        return snapshot

    def _limits(self, job: _Job) -> dict:
        """What the rank's cgroups allow it: CPUs, and read bandwidth (none for an ended one)."""
        if job.segment.closed:
            return {"cpu_limit": None, "read_limit_bps": None}
        pid, cgroups = job.header.pid, self.cgroups
        return {"cpu_limit": cgroups.limit(pid), "read_limit_bps": cgroups.read_limit(pid)}

    def _extras(self, job: _Job, now: float) -> dict:
        """The ledger's newest collective per group, the stack, the stall limits, the CPU limit."""
        p50 = job.window.step_time_p50_s()
        ledger = job.header.ledger
        now_ns = int(now * 1e9)
        return {
            "collectives": newest_per_group(job.entries, now_ns) if ledger else (),
            "collectives_total": (job.hot.ledger_head if job.hot else 0) if ledger else None,
            "stack": rank_stack(job.stacks.taken, now),
            "proc": job.watch.proc,
            "phase_samples": phase_samples(job.stacks.samples, now),
            "threads": rank_threads(job.stacks.threads, now, THREADS_KEEP_S),
            "stall_after_s": self.stall.after_s(p50),
            "hang_after_s": self.hang.after_s(p50),
            **self._limits(job),
            **job.handoffs.per_batch(),
            **job.facts.read(now),  # what the job already does, its syncs, its GPU profile
        }

    def _host_side(self, job: _Job, workers: dict[int, tuple[WorkerSnapshot, ...]]) -> dict:
        """A live rank's memory (its cgroup, and its processes' unique memory while that is a
        concern) and its own cgroup's PSI; none for an ended one."""
        if job.segment.closed:
            return {}
        pid = job.header.pid
        kids = [w.pid for w in workers.get(pid, ())]
        queued = self.sockets.read(pid) if _waits_on_peers(job.shown) else None
        return {"memory": self.memory.read(pid, kids), "pressure": self.memory.pressure(pid),
                "send_queue_bytes": queued}  # fmt: skip


def _runnable(thread: ThreadCpu) -> float:
    return thread.cpu_pct + (thread.wait_pct or 0.0)


def _waits_on_peers(shown: JobSnapshot | None) -> bool:
    """Whether a rank spent ``PEER_WAIT_SHARE`` of its recent steps waiting on its peers."""
    if shown is None or shown.world_size < 2:
        return False
    return sum(p.share for p in shown.phases if is_comm_phase(p.name)) >= PEER_WAIT_SHARE


def _turn_order(job: _Job) -> tuple[str, int]:
    return job.window.job_id, job.header.rank


def _job_of(jobs: list[_Job], pid: int | None) -> str | None:
    """The job id of the rank whose writer is ``pid`` (None: no such rank, or no pid)."""
    return next((job.window.job_id for job in jobs if job.header.pid == pid), None)


def _joined(first: PollResult, then: PollResult) -> PollResult:
    return PollResult(
        first.records.joined(then.records), first.lost + then.lost, first.rejected + then.rejected
    )


def _aged(summary: JobSnapshot, age_s: float | None) -> JobSnapshot:
    """An ended job's kept summary with its age brought up to now (the only field that moves).

    Built from its fields in order: half the cost of ``dataclasses.replace``, paid per ended
    job and tick.
    """
    if summary.last_step_age_s is None:
        return summary
    values = list(_SNAPSHOT_FIELDS(summary))
    values[_AGE_FIELD] = age_s
    return JobSnapshot(*values)


_FIELD_NAMES = [field.name for field in dataclasses.fields(JobSnapshot)]
_SNAPSHOT_FIELDS = operator.attrgetter(*_FIELD_NAMES)
_AGE_FIELD = _FIELD_NAMES.index("last_step_age_s")


def live_phase(job: _Job, state: str, now_s: float) -> tuple[str | None, float | None]:
    """The phase a running trainer is in and for how long, from its live word (None: unknown).

    The writer publishes a phase when it is entered, but a step ending does not rewrite the word
    (that would cost every step a store): a phase entered before the newest recorded step ended
    closed with it, so the trainer has been between phases ("other") since that step's end.
    """
    hot, header = job.hot, job.header
    if state not in ("live", "stalled", "starting") or hot is None or not hot.live_start_ns:
        return None, None
    if not header.same_host_clock():  # CLOCK_MONOTONIC of another boot: no age to give
        return None, None
    index, start_ns = hot.live_phase, hot.live_start_ns
    end_ns = job.window.last_end_ns
    if end_ns is not None and start_ns + LIVE_RESOLUTION_NS <= end_ns:
        return "other", measured(max(0.0, now_s - end_ns / 1e9))
    if index >= len(header.phases):
        return None, None
    return header.phases[index], measured(max(0.0, now_s - start_ns / 1e9))


def _state(job: _Job, now: float) -> str:
    if job.restarted:
        return "restarted"
    if job.liveness != "live":
        return run_end.state_of(job.how_ended) if job.how_ended else job.liveness
    if not job.stepped:  # before its first step: stalled only when blocked past the limit
        return "stalled" if job.warmup.blocked(now) else "starting"
    age = job.window.last_step_age_s(now)
    if age is None or age <= STALL_MIN_S:  # below any limit: no percentile to sort for it
        return "live"
    return "stalled" if age > stall_limit_s(job.window) else "live"


def stall_limit_s(window: JobWindow) -> float:
    """How long a rank may go without a step before it counts as stalled: ``STALL_MIN_S``, or
    ``STALL_STEP_FACTOR`` median steps when that is longer (slow steps are not a stall)."""
    p50 = window.step_time_p50_s()
    return max(STALL_MIN_S, STALL_STEP_FACTOR * p50) if p50 is not None else STALL_MIN_S


def _life(job: _Job, state: str, now: float) -> dict:
    """The run's life in its snapshot: its first step's length (the warm-up), how it ended,
    and, before its first step, what the kernel says of it."""
    first = job.hot.first_step_ns if job.hot is not None else 0
    life: dict = {"first_step_s": first / _NS if first else None, "ending": job.how_ended}
    if not job.stepped and state in ("starting", "stalled"):
        life["proc"] = job.warmup.proc
    return life


def _launchers(jobs: list[_Job]) -> set[_Job]:
    """Processes that never stepped and are the parent of another rank: mp.spawn's parent,
    a script that starts its ranks itself.  Not runs of their own: not listed."""
    parents = {job.ppid for job in jobs if job.ppid is not None}
    return {job for job in jobs if not job.stepped and job.header.pid in parents}


FAILED_ENDINGS = frozenset({"raised", "exited", "gone"})


def _mark_restarts(jobs: list[_Job]) -> None:
    """A dead instance is "restarted" once a newer process took its name and rank, when it
    failed (raised, exited with a failing status, or gone without a word): a run that finished
    or was stopped keeps that.  Where both parents are known they must be one (torchrun's agent
    restarting its workers, a shell running the script again): another launcher's run on the
    same rendezvous is another run, not a restart."""
    newer: dict[tuple[str, str, int], list[_Job]] = {}
    for job in jobs:
        newer.setdefault((job.header.hostname, job.header.name, job.header.rank), []).append(job)
    for job in jobs:
        same = newer[(job.header.hostname, job.header.name, job.header.rank)]
        failed = job.how_ended is None or job.how_ended.kind in FAILED_ENDINGS
        job.restarted = job.liveness != "live" and failed and any(_replaces(o, job) for o in same)


def _replaces(new: _Job, old: _Job) -> bool:
    """Whether ``new`` started after ``old`` from the same parent (or a parent unknown)."""
    later = new.header.created_monotonic_ns > old.header.created_monotonic_ns
    return later and (new.ppid is None or old.ppid is None or new.ppid == old.ppid)


class ProcessTable(Protocol):
    """What the job collector needs of the tick's process scan (traintop.collectors.processes)."""

    def workers_of(self, pids: Iterable[int]) -> dict[int, tuple[WorkerSnapshot, ...]]: ...

    def threads_of(self, pid: int) -> tuple[ThreadCpu, ...]: ...
