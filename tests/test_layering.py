"""Layering: imports run one way, probe -> collectors -> diagnosis -> pipeline -> store,
exporter, fleet, views -> tui -> cli, with no circles, and ``tui/`` holds only modules that draw.

The direction and the circles are read from the source (``tests/import_graph.py``: every import,
lazy and ``TYPE_CHECKING`` ones included), so a new module is covered without editing this.
Third-party libraries are checked by importing every module of a room in a fresh interpreter,
where a dependency that arrives through another package shows as well.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests import import_graph

LAYERS = (
    ("probe",),
    ("collectors",),
    ("diagnosis",),
    ("pipeline",),
    ("store", "exporter", "fleet", "views"),
    ("tui",),
    ("cli",),
)
ROOMS = {room for layer in LAYERS for room in layer}
LEVEL = {room: level for level, layer in enumerate(LAYERS) for room in layer}


def room_of(module: str) -> str:
    """``traintop.collectors.jobs`` -> ``collectors``; the probe's modules are its root."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[1] in ROOMS else "probe"


def test_the_tree_has_no_import_circles() -> None:
    assert import_graph.circles() == []


def test_every_import_runs_down_the_layers() -> None:
    upward = [
        f"{module} -> {target}"
        for module, targets in import_graph.graph().items()
        for target in targets
        if not target.startswith("ext:") and LEVEL[room_of(target)] > LEVEL[room_of(module)]
    ]
    assert upward == []


def test_rooms_of_one_layer_do_not_import_each_other() -> None:
    """store, exporter, fleet and views each answer to one reason to change."""
    across = [
        f"{module} -> {target}"
        for module, targets in import_graph.graph().items()
        for target in targets
        if not target.startswith("ext:")
        and room_of(target) != room_of(module)
        and LEVEL[room_of(target)] == LEVEL[room_of(module)]
    ]
    assert across == []


def test_tui_holds_only_modules_that_draw() -> None:
    """A module importing no Textual (itself or through another UI module) lives elsewhere."""
    assert import_graph.without_ui() == []


def test_the_graph_sees_every_room() -> None:
    """A negative control: the reader finds the rooms and real edges between them."""
    rooms = {room_of(m) for m in import_graph.modules()}
    assert rooms == ROOMS
    assert "traintop.collectors.snapshot" in import_graph.graph()["traintop.tui.app"]
    assert "traintop.pipeline.live" in import_graph.graph()["traintop.exporter.run"]
    assert "ext:textual" in import_graph.graph()["traintop.tui.app"]


IMPORT_ALL = """
import importlib, json, pkgutil, sys
failed = {}
for pkg_name in sys.argv[1].split(","):
    pkg = importlib.import_module(pkg_name)
    names = [pkg_name] + [i.name for i in pkgutil.walk_packages(pkg.__path__, pkg_name + ".")]
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError as exc:  # an optional dependency (torch) that is not installed
            failed[name] = str(exc)
print(json.dumps({"modules": sorted(sys.modules), "failed": failed}))
"""


def _loaded_by(packages: str) -> set[str]:
    """Top-level names loaded by importing every module of ``packages`` in a clean process."""
    out = subprocess.run(
        [sys.executable, "-c", IMPORT_ALL, packages],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    loaded = json.loads(out.stdout.strip().splitlines()[-1])
    return {name.split(".")[0] for name in loaded["modules"]}


UI = {"textual", "rich"}


@pytest.mark.parametrize(
    ("packages", "forbidden"),
    [
        # the probe runs inside training processes: standard library (and the user's torch)
        ("traintop", UI | {"psutil", "prometheus_client", "numpy"}),
        ("traintop.collectors,traintop.diagnosis", UI | {"torch", "prometheus_client"}),
        ("traintop.pipeline", UI | {"torch", "prometheus_client"}),  # every surface runs it
        ("traintop.store,traintop.fleet,traintop.views", UI | {"torch"}),
        ("traintop.exporter", UI | {"torch"}),  # headless under systemd
        ("traintop.cli", {"torch"}),
    ],
)
def test_libraries_each_room_loads(packages: str, forbidden: set[str]) -> None:
    assert not _loaded_by(packages) & forbidden


def test_the_probe_package_alone_loads_no_room() -> None:
    """`import traintop` in a training process brings the probe and nothing of the monitor."""
    code = "import json, sys, traintop; print(json.dumps(sorted(sys.modules)))"
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    loaded = {m for m in json.loads(out.stdout) if m.startswith("traintop.")}
    assert {room_of(m) for m in loaded} == {"probe"}
