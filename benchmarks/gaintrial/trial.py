"""Run the cases: A, its prediction written down, then B with the remedy; interleaved repeats.

For each repeat of a case: A runs and is recorded; the prediction its verdict makes for the case's
knob is appended to the state file (with the model's version) before B is started; B runs with
the remedy applied, at the value the first repeat's prediction proposed.  Each run is checked
for other load on the box (runs.py) and run again when disturbed; the rejected run stays in the
state file, marked.  Everything is appended as soon as it is known, so a killed trial resumes
where it stopped.
"""

from __future__ import annotations

import json
import math
import subprocess
import tempfile
import time
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import asdict, dataclass, replace
from pathlib import Path

from gaintrial.cases import Case
from gaintrial.predict import prediction
from gaintrial.runs import Run, Setting, environment, prefix_for, record, started, uncache

from tests.scenarios.matrix import load_state as load_state

ROOT = Path(__file__).resolve().parents[2]


@dataclass(frozen=True)
class Options:
    state: Path
    out: Path  # recordings and logs
    repeat: int = 3
    warm_s: float = 8.0
    record_s: float = 20.0
    max_others: float = 0.15  # CPUs other work may take during a run
    max_peak: float = 0.6  # ... in any one second
    retries: int = 4  # disturbed runs of one role run again this many times
    quiet_wait_s: float = math.inf  # the most to wait for the box to quieten before a run


def model_version() -> str:
    """The commit of the tree the model ran from, ``+`` when its diagnosis code is modified."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=ROOT, capture_output=True, text=True)
        return done.stdout.strip()

    dirty = git("status", "--porcelain", "--", "diagnosis")
    return git("rev-parse", "--short", "HEAD") + ("+" if dirty else "")


def append(path: Path, row: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as out:
        out.write(json.dumps(row, default=str) + "\n")


def accepted(rows: list[dict], case: str, rep: int, role: str) -> dict | None:
    return next(
        (
            r
            for r in rows
            if r["case"] == case and r["rep"] == rep and r["role"] == role and r["accepted"]
        ),
        None,
    )


def set_arg(args: tuple[str, ...], flag: str, value: str) -> tuple[str, ...]:
    """``args`` with ``flag``'s value replaced (added when absent)."""
    out = list(args)
    if flag in out:
        out[out.index(flag) + 1] = value
        return tuple(out)
    return (*out, flag, value)


def setting_a(case: Case, env: dict) -> Setting:
    data = env.get("data")
    return Setting(case.args, case.quota, data, throttled=data is not None)


def setting_b(case: Case, a: Setting, env: dict, value: float | None) -> Setting | None:
    """A with the remedy applied (None: it needs a proposed value and none was made)."""
    flags = {"workers": "--workers", "prefetch": "--prefetch", "threads": "--threads"}
    if case.apply in flags:
        return (
            None
            if value is None
            else replace(a, args=set_arg(a.args, flags[case.apply], str(int(value))))
        )
    if case.apply == "quota":
        return None if value is None else replace(a, quota=value)
    if case.apply == "ram":
        return replace(a, data=env["ram"], throttled=False)
    if case.apply == "no_pause":
        return replace(a, args=set_arg(a.args, "--pause-every", "0"))
    return replace(a, args=set_arg(a.args, "--slow-ms", "0"))  # no_slow


QUIET_S = 6.0  # the box must stay quiet this long before a run starts (each run is checked anyway)


def box_busy(seconds: float = QUIET_S) -> float:
    """CPUs busy on the box over ``seconds`` (nothing of the trial's runs)."""
    from gaintrial.runs import TICK, _busy_ticks

    start, t0 = _busy_ticks()[0], time.monotonic()
    time.sleep(seconds)
    return (_busy_ticks()[0] - start) / TICK / (time.monotonic() - t0)


def wait_quiet(opts: Options) -> float:
    """Wait (up to ``quiet_wait_s``) until the box is quiet; the last reading.  A run on a
    busy box would only be rejected, its CPU taken from the others' work for nothing."""
    deadline = time.monotonic() + opts.quiet_wait_s
    busy = box_busy()
    while busy > opts.max_others and time.monotonic() < deadline:
        busy = box_busy()
    return busy


def one_run(case: Case, setting: Setting, env: dict, opts: Options, tag: str) -> Run:
    """Start the job as ``setting`` says, record it warm, stop it."""
    work = Path(tempfile.mkdtemp(prefix=f"{tag}-", dir=opts.out))
    if setting.data is not None:
        uncache(setting.data)
    with ExitStack() as stack:
        prefix = prefix_for(stack, setting, env, tag)
        jobs = stack.enter_context(
            started(case.name, setting, case.ranks, case.trainers, work, prefix)
        )
        return record(case.name, work, jobs, opts.warm_s, opts.record_s)


def measured(
    case: Case, rep: int, role: str, setting: Setting, env: dict, opts: Options, rows: list[dict]
) -> Iterator[dict]:
    """Runs of one role until one is undisturbed (or the retries are spent): each as a row."""
    for attempt in range(opts.retries + 1):
        quiet = wait_quiet(opts)
        run = one_run(case, setting, env, opts, f"{case.name}-{rep}-{role}-{attempt}")
        ok = run.steps_per_s is not None and run.others_cpus <= opts.max_others
        ok = ok and run.others_peak <= opts.max_peak
        row = {
            "case": case.name,
            "rep": rep,
            "role": role,
            "attempt": attempt,
            "accepted": ok,
            "quiet_before": round(quiet, 3),
            "setting": asdict(setting),
            "run": asdict(run),
            "at": time.time(),
        }
        if role == "A" and run.steps_per_s is not None:
            row["prediction"] = prediction(run.recording, case.name, case.knob, asked=case.asked)
            row["model"] = model_version()
        append(opts.state, row)
        rows.append(row)
        yield row
        if ok:
            return


def proposed(rows: list[dict], case: Case) -> float | None:
    """The value the first accepted A's prediction proposed (what every B runs with)."""
    first = min(
        (r for r in rows if r["case"] == case.name and r["role"] == "A" and r["accepted"]),
        key=lambda r: r["rep"],
        default=None,
    )
    gain = (first or {}).get("prediction", {}).get("gain") if first else None
    return gain.get("value") if gain else None


def run_case(case: Case, opts: Options, rows: list[dict], log) -> None:
    """Every repeat of ``case`` still missing, A before B."""
    with (
        tempfile.TemporaryDirectory(prefix=f"{case.name}-env-", dir=opts.out) as work,
        environment(case.quota, case.disk_bps, case.files, case.file_kib, Path(work)) as env,
    ):
        a_setting = setting_a(case, env)
        for rep in range(opts.repeat):
            if accepted(rows, case.name, rep, "A") is None:
                for row in measured(case, rep, "A", a_setting, env, opts, rows):
                    log(row)
            b_setting = setting_b(case, a_setting, env, proposed(rows, case))
            if b_setting is None or accepted(rows, case.name, rep, "A") is None:
                continue
            if accepted(rows, case.name, rep, "B") is None:
                for row in measured(case, rep, "B", b_setting, env, opts, rows):
                    log(row)
