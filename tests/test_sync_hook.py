"""The sync hook (traintop/sync_hook.py) in real Python processes, against a fake torch.cuda
whose syncs raise torch's own warning text from C, attributed to the user's line
(tests/workloads/fake_cuda): each sync counted at its line with its kind, never shown, never
an exception, whatever the user's warning filters, catchers and hooks do."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
FAKE = REPO / "tests" / "workloads" / "fake_cuda"
HEADER = """\
import json, sys, warnings
import torch
from traintop import sync_hook
filters_before = list(warnings.filters)
hook = sync_hook.install(torch)
s = torch.Scalar()


def report(**extra):
    sites = hook.ledger.sites() if hook else None
    print(json.dumps({"sites": sites, **extra}))
"""


def run_user(tmp_path: Path, body: str, *flags: str, env: dict | None = None) -> tuple:
    """Run ``body`` after HEADER as a script file; (its report, stderr, the script's lines)."""
    script = tmp_path / "user_script.py"
    text = HEADER + textwrap.dedent(body)
    script.write_text(text)
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINTOP", "PYTHONW"))}
    environ.update(PYTHONPATH=f"{FAKE}{os.pathsep}{REPO}", **(env or {}))
    done = subprocess.run(
        [sys.executable, *flags, str(script)],
        env=environ,
        text=True,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.splitlines()[-1]), done.stderr, text.splitlines()


def at(lines: list[str], marker: str) -> int:
    return next(i for i, line in enumerate(lines, 1) if line.endswith(f"# {marker}"))


def counted(report: dict, lines: list[str]) -> dict[str, tuple[str, int]]:
    """marker -> (kind, count), for every site of the report."""
    by_line = {s["line"]: (s["kind"], s["count"]) for s in report["sites"]}
    markers = [line.rsplit("# ", 1)[1] for line in lines if "# @" in line]
    return {m: by_line[at(lines, m)] for m in markers if at(lines, m) in by_line}


def test_each_sync_is_counted_at_its_line_with_its_kind_and_never_shown(tmp_path: Path) -> None:
    report, stderr, lines = run_user(
        tmp_path,
        """
        for _ in range(3):
            s.item()  # @item
            s.cpu()  # @copy
        torch.scaler_step(s)  # @inside-torch
        torch.cuda.synchronize()  # @synchronize
        torch.cuda.Event().synchronize()  # @event
        torch.accelerator.synchronize()  # @accelerator
        report(first=repr(warnings.filters[0]), rest=warnings.filters[1:] == filters_before)
    """,
    )
    assert counted(report, lines) == {
        "@item": ("item", 3),
        "@copy": ("copy", 3),
        "@inside-torch": ("item", 1),  # the user's line; the kind from torch's own line
        "@synchronize": ("synchronize", 1),
        "@event": ("event", 1),
        "@accelerator": ("synchronize", 1),  # once, though it calls torch.cuda.synchronize
    }
    item = next(s for s in report["sites"] if s["line"] == at(lines, "@item"))
    assert item["file"].endswith("user_script.py") and item["function"] == "<module>"
    assert item["code"] == "s.item()  # @item"
    assert "traintop.sync_hook" in report["first"] and report["rest"]
    assert stderr == ""  # nothing printed, not even once per line


def test_no_filter_catcher_or_reset_of_the_user_turns_a_sync_into_an_error(tmp_path) -> None:
    """``-W error``, then ``simplefilter("error")``, a pytest-style catcher, ``resetwarnings``,
    a direct edit of the list (undone by the helper's ``keep_first``), and the user's own
    ``showwarning``: every sync counted, none raised or shown; the user's own warnings still
    go through their filters and their hook."""
    report, stderr, lines = run_user(
        tmp_path,
        """
        s.item()  # @under-W-error
        warnings.simplefilter("error")
        s.item()  # @after-simplefilter
        with warnings.catch_warnings(record=True) as log:
            warnings.filterwarnings("always", category=DeprecationWarning)
            warnings.filterwarnings("error")
            s.item()  # @in-catcher
        warnings.resetwarnings()
        s.item()  # @after-reset
        warnings.filters.insert(0, ("error", None, Warning, None, 0))
        hook.keeper.keep_first()
        s.item()  # @after-direct-edit
        caught = []
        warnings.showwarning = lambda message, *rest: caught.append(str(message))
        warnings.simplefilter("always")
        warnings.warn("a warning of the user's")
        s.item()  # @with-user-hook
        try:
            warnings.simplefilter("error")
            warnings.warn("raised as the user asked")
        except UserWarning as exc:
            raised = str(exc)
        report(log=len(log), caught=caught, raised=raised)
    """,
        "-W",
        "error",
    )
    sites = counted(report, lines)
    assert sites == {m: ("item", 1) for m in sites} and len(sites) == 6
    assert report["log"] == 0 and report["caught"] == ["a warning of the user's"]
    assert report["raised"] == "raised as the user asked" and stderr == ""


def test_the_users_own_sync_debug_mode_stays_theirs(tmp_path: Path) -> None:
    report, stderr, lines = run_user(
        tmp_path,
        """
        before = torch.cuda.get_sync_debug_mode()
        torch.cuda.set_sync_debug_mode("warn")
        with warnings.catch_warnings(record=True) as log:
            warnings.simplefilter("always")
            s.item()  # @user-warn
        torch.cuda.set_sync_debug_mode("error")
        try:
            s.item()  # @user-error
        except RuntimeError as exc:
            error = str(exc)
        torch.cuda.set_sync_debug_mode("default")
        s.item()  # @user-default
        try:
            torch.cuda.set_sync_debug_mode("bogus")
        except RuntimeError:
            bad = "raised"
        report(before=before, seen=[str(w.message)[:37] for w in log], error=error, bad=bad,
               now=torch.cuda.get_sync_debug_mode(), underneath=torch._state["mode"])
    """,
    )
    assert report["before"] == 0 and report["now"] == 0 and report["underneath"] == 1
    assert report["seen"] == [torch_text()]  # the user asked to see them: they do
    assert report["error"] == torch_text() and report["bad"] == "raised"
    assert counted(report, lines) == {"@user-warn": ("item", 1), "@user-default": ("item", 1)}
    assert stderr == ""


def test_syncs_of_traintop_itself_are_not_counted(tmp_path: Path) -> None:
    report, _, _ = run_user(
        tmp_path,
        """
        hook.ledger.paused = True  # as the step profiler does around its own drain
        torch.cuda.synchronize()
        s.item()
        hook.ledger.paused = False
        report(device_syncs=torch._state["device_syncs"])
    """,
    )
    assert report == {"sites": [], "device_syncs": 1}


def test_it_can_be_switched_off(tmp_path: Path) -> None:
    report, stderr, _ = run_user(
        tmp_path,
        """
        s.item()
        report(untouched=warnings.filters == filters_before, mode=torch._state["mode"])
    """,
        env={"TRAINTOP_SYNC_HOOK": "0"},
    )
    assert report == {"sites": None, "untouched": True, "mode": 0} and stderr == ""


def test_a_torch_lacking_an_api_gets_one_line_and_nothing_patched(tmp_path: Path) -> None:
    script = tmp_path / "lacking.py"
    script.write_text(
        textwrap.dedent("""
        import json, warnings
        import torch
        from traintop import sync_hook
        del torch.cuda.Event
        before = list(warnings.filters)
        hook = sync_hook.install(torch)
        print(json.dumps([hook is None, warnings.filters == before,
                          torch.cuda.synchronize is torch._synchronize]))
    """)
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith("TRAINTOP")}
    environ["PYTHONPATH"] = f"{FAKE}{os.pathsep}{REPO}"
    done = subprocess.run(
        [sys.executable, str(script)], env=environ, text=True, capture_output=True, timeout=60
    )
    assert json.loads(done.stdout) == [True, True, True]
    assert done.stderr.startswith("traintop: sync hook disabled (AttributeError")
    assert done.stderr.count("\n") == 1


def test_under_pytest_with_warnings_as_errors(tmp_path: Path) -> None:
    """A job under pytest ``-W error`` (its catcher per test, its filters): syncs pass."""
    (tmp_path / "conftest.py").write_text(
        textwrap.dedent("""
        import json, torch
        from traintop import sync_hook

        def pytest_configure(config):
            config.hook_ = sync_hook.install(torch)

        def pytest_unconfigure(config):
            with open("counts.json", "w") as f:
                json.dump([s["count"] for s in config.hook_.ledger.sites()], f)
    """)
    )
    (tmp_path / "test_job.py").write_text(
        textwrap.dedent("""
        import torch

        def test_a_step_that_syncs(recwarn):
            torch.Scalar().item()
            torch.Scalar().item()
            assert len(recwarn) == 0
    """)
    )
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("TRAINTOP", "PYTEST"))}
    environ["PYTHONPATH"] = f"{FAKE}{os.pathsep}{REPO}"
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            "-q",
            "-W",
            "error",
            "-p",
            "no:cacheprovider",
            "test_job.py",
        ],
        cwd=tmp_path,
        env=environ,
        text=True,
        capture_output=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert json.loads((tmp_path / "counts.json").read_text()) == [1, 1]  # two lines


def torch_text() -> str:
    return "called a synchronizing CUDA operation"
