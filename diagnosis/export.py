"""The JSON shape of a verdict (``traintop diagnose --json``): plain types, stable keys.

Keys are only ever added: ``per_job`` (one verdict per job, live ones worst first, then ended
ones in the past tense), ``job_id`` (the job the top-level verdict is about) and ``live_jobs``
came with multi-rank jobs; ``share`` (the share of time a finding claims) and each job's
``budget`` (every rank's phases and its long steps' excess by phase) with the time budget; each
job's ``ending`` (how an ended job ended: ``kind``, ``detail``, ``frame``, ``exit_code``) with a
run's life, and its ``kill`` (the kernel's word on a rank gone: the OOM killer or a SIGKILL)
with issue 43; ``fixes`` (each remedy with what it is ``expected`` to buy) with predicted gains;
everything before them means what it meant.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from traintop.collectors.memory_state import JobMemory
from traintop.collectors.snapshot import (
    Collective,
    Ending,
    Frame,
    Kill,
    ProcState,
    PyThread,
    WorkerSnapshot,
)
from traintop.diagnosis.gain_text import gain_words
from traintop.diagnosis.kill_words import kill_text
from traintop.diagnosis.model import (
    Finding,
    Gain,
    Hang,
    JobSummary,
    JobVerdict,
    RankHang,
    RankTime,
    Verdict,
)
from traintop.diagnosis.rules_gil import gil_share


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _finding(f: Finding) -> dict[str, Any]:
    return {
        "bottleneck": f.bottleneck,
        "confidence": f.confidence,
        "severity": f.severity,
        "summary": f.summary,
        "share": round(f.share, 3),
        "evidence": [e.text for e in f.evidence],
        "remedies": list(f.remedies),
        "fixes": [{"remedy": r, "expected": expected(f.gain_of(r))} for r in f.remedies],
    }


def expected(g: Gain | None) -> dict[str, Any]:
    """What a remedy is predicted to buy: ``speedup`` (steps/s after over now) with ``low``,
    ``high`` and ``bound_by`` (what limits the job then); a bound alone as ``high`` with
    ``speedup`` null; ``{"none": reason}`` where no figure can be given.  ``words`` is what
    the text surfaces print."""
    if g is None:
        return {"none": "no prediction made (an older recording, or a finding without one)"}
    if g.speedup is None and g.high is None:
        return {"none": g.reason or "not modelled", "words": gain_words(g)}
    now = g.steps_per_s
    after = now * g.speedup if now is not None and g.speedup is not None else None
    return {"speedup": _round(g.speedup), "low": _round(g.low), "high": _round(g.high),
            "bound_by": g.bound_by, "steps_per_s": _round(now),
            "predicted_steps_per_s": _round(after), "change": g.change or None,
            "knob": g.knob or None, "value": g.value, "reason": g.reason or None,
            "words": gain_words(g)}  # fmt: skip


def _also(also: tuple[Finding, ...]) -> list[dict[str, Any]]:
    return [
        {
            "bottleneck": f.bottleneck,
            "confidence": f.confidence,
            "summary": f.summary,
            "share": round(f.share, 3),
        }
        for f in also
    ]


def _budget(t: RankTime) -> dict[str, Any]:
    return {
        "rank": t.rank,
        "pid": t.pid,
        "phases": dict(t.phases),
        "long_steps": t.long_steps,
        "excess": dict(t.excess),
    }


def _rank(j: JobSummary) -> dict[str, Any]:
    return {
        "pid": j.pid,
        "name": j.name,
        "rank": j.rank,
        "job_id": j.job_id,
        "state": j.state,
        "steps_per_s": j.steps_per_s,
        "samples_per_s": j.samples_per_s,
        "data_wait_share": j.data_wait_share,
    }


def job_to_dict(v: JobVerdict) -> dict[str, Any]:
    """One job's verdict: who it is (id, name, ranks), what holds, and when it ended."""
    s = v.straggler
    return {
        "job_id": v.job_id,
        "name": v.name,
        "state": v.state,
        "live": v.live,
        "ranks": [_rank(r) for r in v.ranks],
        **_finding(v.primary),
        "also": _also(v.also),
        "since_s": _round(v.since_s),
        "ended_at": v.ended_at,
        "straggler": None
        if s is None
        else {"rank": s.rank, "pid": s.pid, "gap": round(s.gap, 3), "text": s.text},
        "hang": None if v.hang is None else hang_to_dict(v.hang),
        "budget": [_budget(t) for t in v.budget],
        "ending": ending_to_dict(v.ending),
    }


def ending_to_dict(e: Ending | None) -> dict[str, Any] | None:
    """How a run ended: ``kind`` (finished, raised, signal, gone), ``detail`` (the exception,
    the signal's name), ``frame`` (``[file, line, function]`` where it was), ``stack`` (the
    frames it ended in, outermost first, ``frame`` the last) and ``exit_code`` (a signal's as
    ``-N``; None where unknown), ``kill`` (the kernel's word where a rank went without one:
    ``by`` "oom" or "sigkill", ``scope`` "cgroup" or "host", ``pid`` of the process killed,
    ``limit_bytes`` and ``used_bytes`` at the last reading ``before_s`` before, ``text`` as
    every surface says it; None where none was had); None while it runs."""
    if e is None:
        return None
    frame = None if e.frame is None else _frame(e.frame)
    return {"kind": e.kind, "detail": e.detail, "frame": frame,
            "stack": [_frame(f) for f in e.frames], "exit_code": e.exit_code,
            "kill": _kill(e.kill)}  # fmt: skip


def _kill(k: Kill | None) -> dict[str, Any] | None:
    if k is None:
        return None
    return {"by": k.by, "scope": k.scope, "pid": k.pid, "limit_bytes": k.limit_bytes,
            "used_bytes": k.used_bytes, "before_s": k.before_s, "source": k.source,
            "text": kill_text(k)}  # fmt: skip


def _frame(frame: Frame) -> list[Any]:
    return [frame.file, frame.line, frame.function]


def hang_to_dict(h: Hang) -> dict[str, Any]:
    """A stopped job's case (``per_job[].hang``): the kind, the collective the others wait in,
    which ranks are in it and which are not, where each rank is, its stack, the folded lines."""
    return {
        "level": h.level,
        "kind": h.kind,
        "line": h.line,
        "for_s": _round(h.for_s),
        "summary": h.summary,
        "group": h.group,
        "seq": h.seq,
        "op": h.op,
        "shapes": list(h.shapes),
        "inside": list(h.inside),
        "missing": list(h.missing),
        "waited_s": _round(h.waited_s),
        "timeout_s": h.timeout_s,
        "aborts_in_s": _round(h.aborts_in_s),
        "folds": [{"ranks": list(f.ranks), "where": f.where} for f in h.folds],
        "ranks": [_rank_hang(r) for r in h.ranks],
        "evidence": list(h.evidence),
    }


def _rank_hang(r: RankHang) -> dict[str, Any]:
    return {
        "rank": r.rank,
        "pid": r.pid,
        "state": r.state,
        "text": r.text,
        "collective": None if r.collective is None else _collective(r.collective),
        "stack_source": r.stack_source or None,
        "stack": [[f.file, f.line, f.function, f.code] for f in r.frames],
        "process": _process(r.proc),
        "worker": None if r.worker is None else _worker(r.worker),
        "pin_memory": [[f.file, f.line, f.function, f.code] for f in r.pin_memory],
    }


def _process(p: ProcState | None) -> dict[str, Any] | None:
    """What the kernel said of the thread: its state letter, CPU share, wait channel, the
    system call it is in and the file that call is on."""
    if p is None:
        return None
    return {"state": p.state, "cpu_pct": p.cpu_pct, "wchan": p.wchan, "syscall": p.syscall,
            "file": p.file}  # fmt: skip


def _worker(w: WorkerSnapshot) -> dict[str, Any]:
    """The DataLoader worker a rank waits on: its pid, its state, its stack."""
    frames = w.stack.frames if w.stack is not None else ()
    return {"pid": w.pid, "process": _process(w.proc),
            "stack": [[f.file, f.line, f.function, f.code] for f in frames]}  # fmt: skip


def _collective(c: Collective) -> dict[str, Any]:
    return {
        "group": c.group,
        "seq": c.seq,
        "op": c.op,
        "shape": c.shape,
        "inside": c.inside,
        "age_s": _round(c.age_s),
        "raised": c.raised,
        "site": c.site,
    }


def verdict_to_dict(v: Verdict) -> dict[str, Any]:
    """Flatten a verdict for ``json.dumps``; evidence becomes its human-readable sentences."""
    return {
        **_finding(v.primary),
        "also": _also(v.also),
        "jobs": [_rank(j) for j in v.jobs],
        "mode": v.mode,
        "window_s": round(v.window_s, 3),
        "since_s": _round(v.since_s),
        "job_id": v.job_id,
        "live_jobs": v.live_jobs,
        "per_job": [job_to_dict(j) for j in v.per_job],
    }


def memory_to_dict(m: JobMemory | None) -> dict[str, Any] | None:
    """A rank's memory (``jobs --json``): its memory cgroup (limit, what it cannot reclaim and
    its growth, limit hits, OOM kills) and, while memory is a concern, each process's USS, PSS
    and USS growth (the rank's first, then its DataLoader workers')."""
    if m is None:
        return None
    c = m.cgroup
    cgroup = None if c is None else {
        "cgroup": c.cgroup, "version": c.version, "limit_bytes": c.limit_bytes,
        "usage_bytes": c.usage_bytes, "anon_bytes": c.anon_bytes,
        "growth_bytes_per_s": c.growth_bytes_per_s, "limit_hits": c.limit_hits,
        "oom_kills": c.oom_kills,
    }  # fmt: skip
    procs = [{"pid": p.pid, "uss_bytes": p.uss_bytes, "pss_bytes": p.pss_bytes,
              "growth_bytes_per_s": p.growth_bytes_per_s} for p in m.processes]  # fmt: skip
    return {"cgroup": cgroup, "processes": procs, "concern": m.concern}


def threads_to_dict(threads: Sequence[PyThread]) -> list[dict[str, Any]]:
    """A rank's Python threads as its helper last sampled them (``jobs --json``): name, whether
    it trains, how much of its running needs the GIL (None: it barely ran), where it is."""
    return [{"tid": t.tid, "name": t.name, "training": t.training, "gil_share": gil_share(t),
             "frame": _frame(t.frames[-1]) if t.frames else None} for t in threads]  # fmt: skip
