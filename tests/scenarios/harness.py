"""Run a real training workload under `traintop run`, then ask `traintop diagnose` about it.

Everything here talks to the installed `traintop` console script through subprocesses, exactly
as a user would, so a scenario proves the whole pipeline: probe -> ring -> collectors ->
diagnosis -> CLI.  Every process a scenario starts gets its own session and is killed with all
of its descendants when the scenario ends, whatever happened.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import psutil

from tests.process_trees import ended
from tests.scenarios.matrix import MATRIX_ENV
from traintop.ring_format import HEAD_WORD
from traintop.ring_paths import ENV_DIR, SEGMENT_NAME_RE

WORKLOADS = Path(__file__).parent / "workloads"
DIAGNOSE_FOR_S = 12.0  # the matrix's window, what docs/scenarios.md reports
# The suite's: in every run of the matrix (docs/scenarios-matrix.json, 108 verdicts) the first
# verdict shown came 2.9-3.9 s into its 12 s window (the engine's 3 s minimum window, a tick
# later where CPU rates need a second sample) and never changed after, so 5 s gives the same
# verdict, held for at least one more tick, and the solo part 7 s back a test.
SUITE_FOR_S = 5.0
EXIT_NO_LIVE_JOB = 3  # `traintop diagnose`: nothing runs (cli/diagnose.py)
NO_LIVE_JOB = "no_live_job"
SEGMENT_TIMEOUT_S = 30.0
RESULTS_ENV = "TRAINTOP_SCENARIO_RESULTS"
VERDICT_DEADLINE_S = 15.0  # issue 9: named right within 15 s of the job's start
# The suite holds a verdict to a multiple of its target: how long torch takes to import depends
# on what else the machine runs (the suite runs tests side by side), and the figure itself is
# the matrix's to report, against the target (tests/scenarios/matrix.py, docs/scenarios.md).
SUITE_SLACK = 3.0


class ScenarioUnavailable(Exception):
    """The machine cannot host this scenario (no loop devices, no netns...): skip, say why."""


@dataclass
class Workload:
    """One started training process (or launcher) and where its output went."""

    proc: subprocess.Popen
    started: float  # time.monotonic() just before the process was started
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def log_tail(self, chars: int = 2000) -> str:
        """The end of the workload's output, for assertion messages."""
        try:
            return self.log_path.read_text(errors="replace")[-chars:]
        except OSError as exc:
            return f"(no log: {exc})"

    def stop(self) -> None:
        """Kill the whole tree: the session, then any descendant that left it."""
        kill_tree(self.proc)


@dataclass(frozen=True)
class DiagnoseRun:
    """One `traintop diagnose --json` subprocess and what it printed."""

    returncode: int
    verdict: dict | None
    stderr: str
    started: float
    finished: float

    @property
    def bottleneck(self) -> str | None:
        return self.verdict.get("bottleneck") if self.verdict else None

    @property
    def label(self) -> str:
        """What the run answered, as the confusion matrix counts it: the bottleneck id,
        ``no_live_job`` (exit 3), or ``error`` (no JSON)."""
        if self.returncode == EXIT_NO_LIVE_JOB:
            return NO_LIVE_JOB
        return self.bottleneck or "error"

    @property
    def flips(self) -> int:
        """How often the shown verdict changed from one bottleneck to another after it first
        committed (``unknown`` while collecting does not count; a return to it does)."""
        timeline = (self.verdict or {}).get("timeline") or []
        shown = [b for _, b in timeline]
        while shown and shown[0] == "unknown":
            shown.pop(0)
        return max(0, len(shown) - 1)


def scenario_env(ring_dir: Path, **extra: str) -> dict[str, str]:
    """The environment for both the workload and diagnose: a private ring directory."""
    env = dict(os.environ, PYTHONUNBUFFERED="1", **extra)
    env[ENV_DIR] = str(ring_dir)
    return env


def traintop_cmd() -> list[str]:
    """`traintop` run by the interpreter running the tests (no reliance on $PATH)."""
    return [
        sys.executable,
        "-c",
        "import sys; from traintop.cli.main import main; sys.exit(main())",
    ]


def traintop_run(
    script: str, *args: str, prefix: Sequence[str] = (), name: str | None = None
) -> list[str]:
    """`[prefix...] traintop run [--name NAME] -- python workloads/<script> args...`."""
    target = [sys.executable, str(WORKLOADS / script), *args]
    named = ["--name", name] if name else []
    return [*prefix, *traintop_cmd(), "run", *named, "--", *target]


def start_workload(argv: Sequence[str], env: dict[str, str], log_path: Path) -> Workload:
    """Start ``argv`` in a new session with its output in ``log_path``."""
    with open(log_path, "wb") as log:
        started = time.monotonic()
        proc = subprocess.Popen(
            list(argv),
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Workload(proc, started, log_path)


@contextmanager
def running(workloads: list[Workload]) -> Iterator[list[Workload]]:
    """Yield the list, then kill every workload in it, even when the scenario failed."""
    try:
        yield workloads
    finally:
        for workload in workloads:
            workload.stop()


def kill_tree(proc: subprocess.Popen) -> None:
    """SIGKILL the session led by ``proc`` and every descendant seen before the kill."""
    try:
        descendants = psutil.Process(proc.pid).children(recursive=True)
    except psutil.Error:
        descendants = []
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    for child in descendants:
        with suppress(psutil.Error):
            child.kill()
    proc.wait()
    deadline = time.monotonic() + 5.0
    while not all(ended(c.pid) for c in descendants) and time.monotonic() < deadline:
        time.sleep(0.01)


def workload_processes(ring_dir: Path | None = None) -> list[str]:
    """``"pid cmdline"`` of every live process running one of the scenario workloads; with
    ``ring_dir``, only those writing there (other scenarios may run beside this one)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmdline = " ".join(proc.info["cmdline"] or ())
        if str(WORKLOADS) not in cmdline or proc.info["status"] == psutil.STATUS_ZOMBIE:
            continue
        if ring_dir is None or _ring_dir_of(proc) == str(ring_dir):
            found.append(f"{proc.info['pid']} {cmdline}")
    return found


def _ring_dir_of(proc: psutil.Process) -> str | None:
    try:
        return proc.environ().get(ENV_DIR)
    except psutil.Error:
        return None


def segment_pids(ring_dir: Path) -> dict[int, int]:
    """``{pid: rank}`` of every ring segment in ``ring_dir`` that holds a step: under
    `traintop run` a segment exists from start-up, long before the job measures anything."""
    found: dict[int, int] = {}
    for name in os.listdir(ring_dir) if ring_dir.is_dir() else ():
        match = SEGMENT_NAME_RE.match(name)
        if match and _stepped(ring_dir / name):
            found[int(match.group(1))] = int(match.group(2))
    return found


def _stepped(path: Path) -> bool:
    """Whether the segment's head word says a step was published."""
    try:
        with path.open("rb") as f:
            f.seek(HEAD_WORD * 8)
            return int.from_bytes(f.read(8), "little") > 0
    except OSError:
        return False


def wait_for_segments(
    ring_dir: Path, count: int, workloads: Sequence[Workload], timeout_s: float = SEGMENT_TIMEOUT_S
) -> dict[int, int]:
    """Wait until ``count`` segments hold a step; fail early with the log of a workload that
    died."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found = segment_pids(ring_dir)
        if len(found) >= count:
            return found
        for workload in workloads:
            if workload.proc.poll() is not None:
                raise AssertionError(
                    f"workload exited with {workload.proc.returncode} before publishing its "
                    f"ring segment:\n{workload.log_tail()}"
                )
        time.sleep(0.1)
    raise AssertionError(f"only {len(segment_pids(ring_dir))}/{count} ring segments after "
                         f"{timeout_s:.0f} s:\n{workloads[0].log_tail()}")  # fmt: skip


def diagnose_for_s(matrix_s: float = DIAGNOSE_FOR_S) -> float:
    """The observation window: the matrix's own, or the suite's shorter one."""
    return matrix_s if os.environ.get(MATRIX_ENV) else min(matrix_s, SUITE_FOR_S)


def run_diagnose(
    env: dict[str, str],
    job_pid: int | None = None,
    for_s: float | None = None,
    prefix: Sequence[str] = (),
) -> DiagnoseRun:
    """Run `traintop diagnose --for S --json [--job PID]` to completion and parse its JSON
    (``for_s``: ``diagnose_for_s()`` unless given)."""
    for_s = diagnose_for_s() if for_s is None else for_s
    argv = [*prefix, *traintop_cmd(), "diagnose", "--for", str(for_s), "--json"]
    if job_pid is not None:
        argv += ["--job", str(job_pid)]
    started = time.monotonic()
    done = subprocess.run(
        argv, env=env, capture_output=True, text=True, timeout=for_s + 60, stdin=subprocess.DEVNULL
    )
    finished = time.monotonic()
    try:
        verdict = json.loads(done.stdout) if done.stdout.strip() else None
    except json.JSONDecodeError:
        verdict = None
    stderr = done.stderr if verdict is not None else done.stderr + done.stdout
    return DiagnoseRun(done.returncode, verdict, stderr.strip(), started, finished)


def time_to_verdict(job_started: float, run: DiagnoseRun) -> float | None:
    """Seconds from job start until the reported verdict began to hold.

    ``since_s`` is how long the stabilised primary had held when the window closed; the window
    closes just before diagnose exits, so this errs on the late side.
    """
    if run.verdict is None:
        return None
    since = run.verdict.get("since_s")
    held = float(since) if isinstance(since, (int, float)) else 0.0
    return max(0.0, run.finished - job_started - held)


def in_time(ttv: float | None, deadline_s: float = VERDICT_DEADLINE_S) -> bool:
    """Whether a suite test accepts this time to verdict: answered, within the slack."""
    return ttv is not None and ttv <= deadline_s * SUITE_SLACK


def describe(run: DiagnoseRun) -> str:
    """One block for assertion messages: the verdict JSON, or why there is none."""
    if run.verdict is None:
        return f"diagnose exited {run.returncode} without JSON: {run.stderr}"
    return json.dumps(run.verdict, indent=1)[:4000]


_GIVEN_PORTS: set[int] = set()


def free_port(low: int = 29700, high: int = 29800) -> int:
    """A TCP port in ``[low, high)`` nothing listens on now, for a job's rendezvous.

    Under pytest-xdist each worker takes its own slice of the range, so two tests running side
    by side never pick the same port between this check and their job's bind; and a port given
    once is not given again by this process, since a job seen to end may still hold it while
    its processes exit on a busy box (the next job's rendezvous then failed: EADDRINUSE)."""
    import socket

    low, high = _worker_slice(low, high)
    for port in range(low, high):
        if port in _GIVEN_PORTS:
            continue
        with socket.socket() as sock, suppress(OSError):
            sock.bind(("127.0.0.1", port))
            _GIVEN_PORTS.add(port)
            return port
    raise ScenarioUnavailable(f"no free TCP port in {low}-{high - 1}")


def _worker_slice(low: int, high: int) -> tuple[int, int]:
    """This pytest-xdist worker's share of ``[low, high)``; the whole of it outside xdist."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    count = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    if not worker.startswith("gw") or count <= 1:
        return low, high
    width = (high - low) // count
    start = low + int(worker[2:]) * width
    return start, start + width


def rank_env(ring_dir: Path, rank: int, world: int, port: int) -> dict[str, str]:
    """A torchrun-like environment for one rank of a job on this host (loopback gloo)."""
    return scenario_env(
        ring_dir,
        RANK=str(rank),
        LOCAL_RANK=str(rank),
        WORLD_SIZE=str(world),
        MASTER_ADDR="127.0.0.1",
        MASTER_PORT=str(port),
        GLOO_SOCKET_IFNAME="lo",
    )


def record(
    scenario: str,
    workload: Workload,
    run: DiagnoseRun,
    wanted: str | None = None,
    deadline_s: float = VERDICT_DEADLINE_S,
) -> float | None:
    """Print the measured figures and append them to ``$TRAINTOP_SCENARIO_RESULTS`` if set
    (with what was wanted, what was answered, how often it flipped and the time allowed, for
    the matrix)."""
    from tests.scenarios.report import append_result

    ttv = time_to_verdict(workload.started, run)
    print(f"\nscenario {scenario}: verdict {run.label}, time-to-verdict {ttv} s")
    extra = {
        "wanted": wanted or scenario,
        "got": run.label,
        "flips": run.flips,
        "deadline_s": deadline_s,
    }
    append_result(RESULTS_ENV, scenario, ttv, run.verdict, **extra)
    return ttv
