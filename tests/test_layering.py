"""Layering: the data layer never loads the UI, and the training-side probe never loads psutil.

Each check runs in a fresh interpreter so modules imported by other tests cannot hide a leak.
``pkgutil.walk_packages`` picks up every module, so new files are covered without editing this.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

IMPORT_ALL = """
import importlib, json, pkgutil, sys
failed = {}
for pkg_name in sys.argv[1].split(","):
    pkg = importlib.import_module(pkg_name)
    for info in pkgutil.walk_packages(pkg.__path__, pkg_name + "."):
        try:
            importlib.import_module(info.name)
        except ImportError as exc:  # an optional dependency (torch) that is not installed
            failed[info.name] = str(exc)
print(json.dumps({"modules": sorted(sys.modules), "failed": failed}))
"""


def _import_everything(packages: str) -> dict:
    """Import every module of ``packages`` in a clean interpreter; return what got loaded."""
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, packages],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return json.loads(out.stdout.strip().splitlines()[-1])


def _top_level(modules: list[str]) -> set[str]:
    return {name.split(".")[0] for name in modules}


@pytest.mark.parametrize("packages", ["collectors", "traintop", "collectors,traintop"])
def test_data_layer_never_imports_the_ui(packages):
    loaded = _import_everything(packages)
    assert not _top_level(loaded["modules"]) & {"textual", "rich", "tui"}, loaded["failed"]


def test_probe_never_imports_psutil():
    loaded = _import_everything("traintop")
    assert "psutil" not in _top_level(loaded["modules"])
    assert not _top_level(loaded["modules"]) & {"collectors", "diagnosis"}


def test_collectors_never_import_diagnosis():
    loaded = _import_everything("collectors")
    assert "diagnosis" not in _top_level(loaded["modules"])


def test_store_never_imports_the_ui():
    """store/ sits between diagnosis and the UI: recording and compare run headless."""
    loaded = _import_everything("store")
    assert not _top_level(loaded["modules"]) & {"textual", "rich", "tui", "torch"}


def test_exporter_never_imports_the_ui():
    """exporter/ runs headless under systemd: no Textual, no UI, never torch."""
    loaded = _import_everything("exporter")
    assert not _top_level(loaded["modules"]) & {"textual", "rich", "tui", "torch"}
