"""Keys of the jobs table in the whole app: focus a job, step into its ranks, expand the ended
jobs, scroll 64 ranks at 80x24; attach mode opens on the attached job."""

from __future__ import annotations

from types import SimpleNamespace

from tests import snapshot_fixtures as sf
from tests.test_tui_app import async_test, make
from traintop.tui.screens.help import HelpScreen
from traintop.tui.widgets.dataloader import DataLoaderPanel
from traintop.tui.widgets.process_table import ProcessTable
from traintop.tui.widgets.training import TrainingPanel
from traintop.views.job_groups import EndedSummary


def both(tick: int):
    """One 8-rank job beside a sweep of 24 runs."""
    return (*sf.ddp_job(8, tick), *sf.sweep(tick))


def ticks(source, count: int = 3):
    return sf.series(count, gpus=8, job_source=source)


def training(app) -> TrainingPanel:
    return app.query_one(TrainingPanel)


@async_test
async def test_attach_opens_on_the_attached_job_with_the_keys():
    window = ticks(both)
    source, app = make(window, focus_job=sf.TRAINER_PID + 3)  # rank 3 of llama-7b
    async with app.run_test(size=(200, 50)) as pilot:
        await sf.feed(pilot, source, window)
        panel = training(app)
        assert panel.has_focus and panel.focused.name == "llama-7b"
        assert app.query_one(DataLoaderPanel).border_subtitle == "llama-7b"


@async_test
async def test_arrows_focus_a_job_and_the_dataloader_follows():
    window = ticks(both)
    source, app = make(window)
    async with app.run_test(size=(200, 50)) as pilot:
        await sf.feed(pilot, source, window)
        panel = training(app)
        assert not panel.has_focus  # the process table has the keys until j or Tab
        await pilot.press("j")
        assert panel.has_focus and panel.focused.name == "llama-7b"
        await pilot.press("down", "down")
        await pilot.pause()
        assert panel.focused.name == "sweep20"
        assert app.query_one(DataLoaderPanel).border_subtitle == "sweep20"
        await pilot.press("j")
        assert not panel.has_focus


@async_test
async def test_enter_on_the_ended_row_expands_it_and_e_folds_it_again():
    window = ticks(sf.sweep)
    source, app = make(window)
    async with app.run_test(size=(200, 50)) as pilot:
        await sf.feed(pilot, source, window)
        panel = training(app)
        await pilot.press("j", "end", "enter")
        assert panel.expanded and len(panel.rows) == 9 + 16
        assert isinstance(panel.rows[8], EndedSummary)
        await pilot.press("down")
        assert panel.focused.name == "sweep1"  # the folded runs, in natural order
        assert "sweep1 " in panel.render().plain
        await pilot.press("e")  # folds them again, but for the one under the cursor
        assert not panel.expanded and len(panel.rows) == 10 and panel.focused.name == "sweep1"
        await pilot.press("home")  # the cursor left it: it folds too
        assert len(panel.rows) == 9


@async_test
async def test_enter_steps_into_the_ranks_and_escape_back():
    window = ticks(lambda tick: sf.ddp_job(8, tick))
    source, app = make(window)
    async with app.run_test(size=(200, 50)) as pilot:
        await sf.feed(pilot, source, window)
        panel = training(app)
        await pilot.press("j", "enter", "down", "down")
        assert panel.in_ranks and panel.border_subtitle == "llama-7b · phases of rank 2"
        await pilot.pause()
        loader = app.query_one(DataLoaderPanel).lines
        highlighted = [
            ln.plain.split()[0] for ln in loader if ln.spans and ln.spans[0].style == "reverse"
        ]
        assert highlighted[-1] == "2"  # the DataLoader follows the rank cursor
        await pilot.press("escape")
        assert not panel.in_ranks
        assert panel.border_subtitle == "llama-7b · phases: mean of 8 ranks"


@async_test
async def test_sixty_four_ranks_scroll_at_80x24():
    window = ticks(lambda tick: sf.ddp_job(64, tick))
    source, app = make(window)
    async with app.run_test(size=(80, 24)) as pilot:
        await sf.feed(pilot, source, window)
        panel = training(app)
        await pilot.press("j", "enter", "end")
        await pilot.pause()
        lines = panel.render().plain.splitlines()
        assert len(lines) == panel.content_size.height < 24
        assert lines[-1].split()[0] == "63" and "▲" in panel.render().plain
        assert max(len(line) for line in lines) <= panel.content_size.width


@async_test
async def test_help_lists_the_jobs_keys():
    _, app = make(ticks(sf.sweep, 1))
    async with app.run_test(size=(120, 40)) as pilot:
        await pilot.press("question_mark")
        assert isinstance(app.screen, HelpScreen)
        keys = app.screen.query_one("#help-keys").render().plain
        assert "Jobs table" in keys and "Ended jobs" in keys and "Ranks" in keys


@async_test
async def test_keys_return_to_the_processes_when_the_last_job_is_gone():
    window = [*ticks(sf.sweep, 2), sf.machine(gpus=8)]
    source, app = make(window[:2])
    async with app.run_test(size=(120, 40)) as pilot:
        await sf.feed(pilot, source, window[:2])
        await pilot.press("j")
        assert training(app).has_focus
        await sf.feed(pilot, source, window[2:])
        assert isinstance(app.focused, ProcessTable)


@async_test
async def test_hiding_the_training_panel_gives_the_row_to_the_dataloader():
    window = ticks(lambda tick: sf.ddp_job(8, tick), 2)
    source, app = make(window)
    async with app.run_test(size=(200, 50)) as pilot:
        await sf.feed(pilot, source, window)
        loader = app.query_one(DataLoaderPanel)
        assert loader.outer_size.width < 100
        await pilot.press("7")
        assert not training(app).display and loader.outer_size.width == 200
        await pilot.press("7")
        assert training(app).display and loader.outer_size.width < 100


@async_test
async def test_the_job_under_the_cursor_is_the_one_the_collector_summarises_every_tick():
    """Beyond 16 live ranks the job collector summarises ranks in turns, but the focused job
    on every tick: the app tells it which job that is, as the cursor moves."""
    window = ticks(both)
    collector = SimpleNamespace(focus=None, sample_phase=lambda pid, phase: None)
    source, app = make(window, job_collector=collector)
    async with app.run_test(size=(200, 50)) as pilot:
        await sf.feed(pilot, source, window)
        panel = training(app)
        assert collector.focus == panel.focused.ranks[0].job_id
        assert panel.focused.name == "llama-7b"
        await pilot.press("j", "down", "down")
        await pilot.pause()
        assert panel.focused.name == "sweep20" and collector.focus == panel.focused.ranks[0].job_id
