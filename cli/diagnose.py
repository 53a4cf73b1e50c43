"""`traintop diagnose`: sample for a while, then print the stabilised verdict.

Exit status: 0 a bottleneck (or healthy compute) was named for a live job or the machine;
1 no verdict (no sample, an unknown pid, or no rule held: the explanation is printed);
3 no live training job (nothing runs, or ``--job`` names a job that has ended: its final
verdict is printed in the past tense).  2 is the CLI's usage error.
"""

from __future__ import annotations

import json
import sys
import threading
import time

EXIT_NO_VERDICT = 1
EXIT_NO_LIVE_JOB = 3
# After the observation, what was asked of a stalled rank (its stack, its worker's, a second
# reading of its CPU time) is waited for this long at most: one judgement, whatever --for is.
STACK_WAIT_S = 2.0
SAMPLES_WAIT_S = 30.0  # however short --for, a verdict needs the engine's fewest snapshots


def _observe(for_s: float, interval_s: float, job_pid: int | None) -> list:
    """Run the live pipeline for `for_s` seconds and return every snapshot it produced; the
    job of ``job_pid`` is summarised on every tick, however many ranks run beside it."""
    from traintop.collectors.stacks import ONE_SHOT_REPLY_WAIT_S
    from traintop.pipeline.live import live_pipeline

    window: list = []
    lock = threading.Lock()

    def keep(snap, _update) -> None:
        # judged as it goes too (the pipeline does), so that a rank whose time no rule places
        # has its stacks sampled while the observation lasts (the verdict printed is the whole
        # window's, below)
        with lock:
            window.append(snap)

    with live_pipeline(interval_s, job_pid=job_pid, reply_wait_s=ONE_SHOT_REPLY_WAIT_S) as pipeline:
        pipeline.start(keep)
        threading.Event().wait(for_s)
        _enough_samples(lock, window)
        _settle(pipeline.jobs, lock, window)
    with lock:
        return list(window)


def _enough_samples(lock: threading.Lock, window: list) -> None:
    """Wait, ``SAMPLES_WAIT_S`` at most, for the fewest snapshots the engine judges: on a
    loaded box they can take longer than a short ``--for`` (``--for 2`` answered "no sample was
    taken" while four test workers shared two cores, and with one snapshot "collecting data",
    naming none of the runs that had ended)."""
    from traintop.diagnosis.engine import MIN_SAMPLES

    _wait_for_samples(lock, window, MIN_SAMPLES, time.monotonic() + SAMPLES_WAIT_S)


def _settle(jobs, lock: threading.Lock, window: list) -> None:
    """While a stalled rank's stack (or its worker's, or its CPU rate) is still coming, let
    the sampler tick on, ``STACK_WAIT_S`` at most, until a snapshot taken after it came."""
    deadline = time.monotonic() + STACK_WAIT_S
    if not jobs.stacks_pending():
        return
    while jobs.stacks_pending() and time.monotonic() < deadline:
        time.sleep(0.1)
    with lock:
        seen = len(window)
    _wait_for_samples(lock, window, seen + 1, deadline)  # the snapshot that carries what came


def _wait_for_samples(lock: threading.Lock, window: list, count: int, deadline: float) -> None:
    """Until ``window`` holds ``count`` snapshots, or ``deadline`` (monotonic) passes."""
    while time.monotonic() < deadline:
        with lock:
            if len(window) >= count:
                return
        time.sleep(0.05)


def _stabilised(window: list, job_pid: int | None, memory=None):
    """Replay the observation tick by tick, as the monitor would; the whole observation is the
    window, so its end is judged even when ``--for`` is shorter than the usual minimum.
    Returns the last verdict and the timeline: ``[seconds into the window, bottleneck]`` at
    every change of the shown primary (a verdict that flips shows up here).  ``memory`` (a
    ``RunMemory``) follows the runs tick by tick: a job restarted under the same name is held
    against its run before (``memory.lines``)."""
    from traintop.diagnosis import VerdictStabilizer
    from traintop.diagnosis.engine import MIN_WINDOW_S

    span = window[-1].monotonic - window[0].monotonic if window else 0.0
    stabilizer = VerdictStabilizer(min_window_s=min(MIN_WINDOW_S, span))
    verdict, timeline = None, []
    for end in range(1, len(window) + 1):
        verdict = stabilizer.update(window[:end], job_pid=job_pid)
        if memory is not None:
            memory.update(window[end - 1], verdict)
        shown = verdict.primary.bottleneck
        if not timeline or timeline[-1][1] != shown:
            timeline.append([round(window[end - 1].monotonic - window[0].monotonic, 2), shown])
    return verdict, timeline


def _print_text(verdict, against: tuple[str, ...] = ()) -> None:
    p = verdict.primary
    print(f"{p.bottleneck}: {p.summary} (confidence {p.confidence:.0%}, {verdict.mode} mode)")
    focus = next((j for j in verdict.per_job if j.job_id == verdict.job_id), None)
    if focus is not None:
        print(f"  job: {_job_name(focus)}")
    for ev in p.evidence:
        print(f"  evidence: {ev.text}")
    for i, remedy in enumerate(p.remedies, 1):
        print(f"  fix {i}: {remedy}")
        gain = p.gain_of(remedy)
        if gain is not None:
            print(f"    expect: {_expect(gain)}")
    for line in against:
        print(f"  restarted: {line}")
    for other in verdict.also:
        print(f"  also: {other.bottleneck}: {other.summary}")
    for job in verdict.per_job:
        if job.job_id != verdict.job_id:
            print(f"  {_job_line(job)}")


def _expect(gain) -> str:
    """``num_workers 1 → 4: ≈ 2.9× ...``: the change, where it has a short name, and the
    prediction with its range and reason."""
    from traintop.diagnosis.gain_text import gain_words

    words = gain_words(gain)
    return f"{gain.change}: {words}" if gain.change else words


def _job_line(job) -> str:
    """One line per other job: live ones with their verdict, ended ones with their final word."""
    head = f"{'other job' if job.live else 'ended job'}: {_job_name(job)}"
    if job.live:
        return f"{head}: {job.primary.bottleneck}: {job.primary.summary}"
    return f"{head}: {job.primary.summary}"


def _job_name(job) -> str:
    """``train.py (run:tcp://10.0.0.1:29500/8, ranks 0-7)``: the name, its key and its ranks."""
    from traintop.diagnosis.text import rank_list

    ranks = f", ranks {rank_list([r.rank for r in job.ranks])}" if len(job.ranks) > 1 else ""
    return f"{job.name} ({job.job_id}{ranks})"


def _not_live(verdict, job_pid: int | None) -> bool:
    """Nothing runs (no live job, no GPU process), or the job asked for has ended."""
    if job_pid is not None:
        return not any(j.live and any(r.pid == job_pid for r in j.ranks) for j in verdict.per_job)
    return verdict.idle_box and verdict.live_jobs == 0


def _exit_code(verdict, job_pid: int | None) -> int:
    if _not_live(verdict, job_pid):
        return EXIT_NO_LIVE_JOB
    return 0 if verdict.primary.bottleneck != "unknown" else EXIT_NO_VERDICT


def _print(verdict, timeline: list, job_pid: int | None, as_json: bool,
           against: tuple[str, ...] = ()) -> None:  # fmt: skip
    from traintop.diagnosis import verdict_to_dict
    from traintop.diagnosis.engine import no_live_job

    if as_json:
        doc = {**verdict_to_dict(verdict), "timeline": timeline, "against": list(against)}
        json.dump(doc, sys.stdout, indent=2)
        sys.stdout.write("\n")
    elif job_pid is None and _not_live(verdict, None):
        print(f"traintop: {no_live_job(verdict.per_job)}")
    else:
        _print_text(verdict, against)


def run_diagnose(*, for_s: float, job_pid: int | None, as_json: bool, interval_s: float) -> int:
    """Observe, diagnose, print; the exit status says whether a live job got a verdict."""
    window = _observe(for_s, interval_s, job_pid)
    if job_pid is not None and not any(j.pid == job_pid for s in window for j in s.jobs):
        print(
            f"traintop: no training job with pid {job_pid} (see `traintop jobs`)", file=sys.stderr
        )
        return EXIT_NO_VERDICT
    from traintop.diagnosis.run_memory import RunMemory

    memory = RunMemory()
    verdict, timeline = _stabilised(window, job_pid, memory)
    if verdict is None:
        print("traintop: no sample was taken", file=sys.stderr)
        return EXIT_NO_VERDICT
    _print(verdict, timeline, job_pid, as_json, memory.lines)
    return _exit_code(verdict, job_pid)
