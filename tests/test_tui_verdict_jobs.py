"""The banner and the details screen say what the engine says about every job.

Same windows as tests/test_diagnosis_jobs.py: the banner names the worst live job's bottleneck
and how many other jobs run (with their verdicts), an ended job speaks in the past tense, and
a box where nothing runs says so instead of "no verdict yet".
"""

from __future__ import annotations

from dataclasses import replace

from tests.snapshot_fixtures import ddp_job, series, sweep
from tests.test_diagnosis_jobs import DDP, rank, window
from tests.test_tui_verdict import async_test, banner_text, make, settle
from traintop.cli.diagnose import _exit_code, _stabilised
from traintop.diagnosis.api import VerdictStabilizer, diagnose
from traintop.diagnosis.verdict_history import point_from
from traintop.tui.screens.details import finding_text, job_items, job_name, title_text
from traintop.tui.widgets.verdict import banner_lines
from traintop.views.verdict_text import headline, label, other_jobs_fact

HEALTHY = rank(200, wait=0.002, phases=(("forward", 0.99),))
STARVED = rank(400, wait=0.7, phases=(("forward", 0.3),), name="starved.py")
SECOND = rank(401, wait=0.002, phases=(("forward", 0.99),), name="other.py")
CRASHED = rank(300, state="crashed", wait=0.94, age=120.0, name="old.py")


def _stable(jobs, cpu):
    return VerdictStabilizer().update(window(jobs, cpu))


def test_banner_names_the_worst_job_and_counts_the_others() -> None:
    verdict = _stable([HEALTHY, STARVED, SECOND], {200: 395.0, 400: 5.0, 401: 395.0})
    assert other_jobs_fact(verdict) == "+2 other jobs: compute ×2"
    line = banner_lines(verdict, 160)[0].plain
    assert line.startswith("◆ INPUT STARVED — data wait 70 % of time")
    assert line.endswith("· +2 other jobs: compute ×2 · d: details")


def test_ended_runs_are_not_other_jobs_in_the_banner() -> None:
    verdict = _stable([HEALTHY, CRASHED], {200: 395.0})
    assert headline(verdict) == "COMPUTE-BOUND"
    assert other_jobs_fact(verdict) is None
    assert "other job" not in banner_lines(verdict, 160)[0].plain


def test_nothing_running_says_no_live_job() -> None:
    verdict = _stable([CRASHED], {})
    line = banner_lines(verdict, 160)[0].plain
    assert line.startswith("◇ NO LIVE JOB — no live training job; old.py crashed ")
    assert "was data_starved" in line


def test_ended_job_asked_for_is_shown_in_the_past_tense() -> None:
    verdict = VerdictStabilizer().update(window([HEALTHY, CRASHED], {200: 395.0}), job_pid=300)
    assert headline(verdict) == "CRASHED: WAS INPUT STARVED"
    assert title_text(verdict).plain == "◆ CRASHED: WAS INPUT STARVED"
    assert "conf" not in banner_lines(verdict, 160)[0].plain  # a final word has no age


def test_details_list_every_job_live_first_then_ended() -> None:
    verdict = _stable([HEALTHY, STARVED, CRASHED], {200: 395.0, 400: 5.0})
    rows = [(marker.plain, text.plain) for marker, text in job_items(verdict)]
    assert rows[0] == (
        "◆ ",
        "INPUT STARVED  starved.py (pid 400)  (shown above) — data wait 70 % of time",
    )
    assert rows[1][1].startswith("COMPUTE-BOUND  train.py (pid 200) — no GPU: training runs on")
    assert rows[2][1].startswith("crashed  old.py (pid 300) — crashed ")
    assert finding_text(verdict).plain.splitlines()[1].startswith("starved.py (pid 400) · warning")


def test_unknown_for_a_live_job_is_explained_not_waiting() -> None:
    job = "run:tcp://127.0.0.1:29701/8"
    phases = (("forward", 0.2), ("backward", 0.7))
    ranks = [rank(500 + r, r, job_id=job, world=8, phases=phases) for r in range(8)]
    verdict = diagnose(window(ranks, {500 + r: 30.0 for r in range(8)}))
    line = banner_lines(verdict, 200)[0].plain
    assert line.startswith("◇ NO BOTTLENECK FOUND — steps spend 70 % in backward (175 ms), off CPU")


@async_test
async def test_monitor_banner_and_details_for_a_ddp_job_beside_a_sweep():
    """The app on a box running an 8-rank DDP job and a sweep (6 live runs, 18 ended): the
    banner names the worst job's verdict and the other live jobs' (never an ended run's); the
    details screen lists every job, ended ones last."""
    ticks = series(8, gpus=8, job_source=lambda t: (*ddp_job(8, t), *sweep(t)))
    source, app = make(ticks[0])
    async with app.run_test(size=(200, 50)) as pilot:
        await settle(pilot, source, ticks)
        verdict = app.verdicts.shown.verdict
        head = label(verdict.primary.bottleneck)
        others = other_jobs_fact(verdict)
        text = banner_text(app)
        assert text.startswith(f"◆ {head} — "), text
        assert others.startswith("+6 other jobs: ") and f"{others} · d: details" in text
        focus = verdict.per_job[0]
        assert verdict.live_jobs == 7 and len(verdict.jobs) == len(focus.ranks)
        assert any(len(j.ranks) == 8 for j in verdict.per_job)
        await pilot.press("d")
        lines = [body.plain for _, body in job_items(verdict)]
        assert lines[0].startswith(f"{head}  {job_name(focus)}  (shown above)")
        assert (
            len(lines) == 25
            and sum(line.startswith(("finished", "crashed")) for line in lines) == 18
        )


def test_diagnose_judges_a_short_observation_instead_of_collecting() -> None:
    """`diagnose --for 2`: the whole observation is the window, never "collecting data"."""
    snaps = window([HEALTHY], {200: 395.0})[:3]
    verdict, timeline = _stabilised(snaps, None)
    assert verdict.primary.bottleneck == "compute"
    assert timeline == [[0.0, "unknown"], [2.0, "compute"]]


def test_diagnose_exit_status_says_whether_a_live_job_was_judged() -> None:
    cases = {
        "verdict": ([HEALTHY, CRASHED], None, 0),
        "only ended runs": ([CRASHED], None, 3),
        "asked about an ended run": ([HEALTHY, CRASHED], 300, 3),
        "nothing at all": ([], None, 3),
    }
    for name, (jobs, pid, code) in cases.items():
        verdict, _ = _stabilised(window(jobs, {200: 395.0}), pid)
        assert _exit_code(verdict, pid) == code, name
    offcpu = [rank(500, phases=(("backward", 0.9),))]
    verdict, _ = _stabilised(window(offcpu, {500: 20.0}), None)
    assert verdict.primary.bottleneck == "unknown" and _exit_code(verdict, None) == 1


def test_a_stalled_job_is_named_stalled_in_the_banner() -> None:
    """A rank stalled (5 s) below the job's stall limit (10 s): no hang yet, said so."""
    hung = replace(rank(100, state="stalled", age=8.0), live_phase="backward", live_phase_s=7.5)
    verdict = diagnose(window([hung], {100: 0.5}))
    line = banner_lines(verdict, 200)[0].plain
    assert line.startswith("◇ JOB STALLED — stalled: no step for 8.0 s, in backward for 7.5 s")


def test_a_job_past_its_stall_limit_is_a_hang_in_the_banner() -> None:
    hung = replace(rank(100, state="stalled", age=43.0), live_phase="backward", live_phase_s=42.5)
    verdict = diagnose(window([hung], {100: 0.5}))
    line, case = (c.plain for c in banner_lines(verdict, 200, two_lines=True))
    assert line == "◆ HANG 43s · rank 0 in backward for 42s · d: details", line
    assert case.startswith("  Job stalled 43s: no collective ledger"), case  # said once each


def test_history_follows_the_straggler_rank() -> None:
    """The details' "data wait" line is the straggler's (85 %), not rank 0's (0 %)."""
    ranks = [
        rank(100, 0, job_id=DDP, world=2, wait=0.0, phases=(("backward", 0.9),)),
        rank(101, 1, job_id=DDP, world=2, wait=0.85, phases=(("backward", 0.1),)),
    ]
    snaps = window(ranks, {100: 8.0, 101: 6.0})
    verdict = diagnose(snaps)
    assert point_from(snaps[-1], verdict, None).data_wait_pct == 85.0
