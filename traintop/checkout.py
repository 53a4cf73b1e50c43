"""Where ``traintop.<room>`` lives in a source checkout: in the folder beside the probe's.

The wheel puts each room inside the package (``collectors/`` becomes ``traintop/collectors/``,
setuptools' ``package-dir``); a checkout keeps the rooms at its top level, beside ``traintop/``,
where that folder's own path cannot find them.  setuptools' default editable install maps them
with an import hook, but only for a ``traintop`` found through that hook: Python puts the working
directory first on ``sys.path`` (``python -m pytest``, ``python -m tests.scenarios.matrix``, the
scenario workloads), and from a checkout's root that finds the folder ``./traintop/`` itself;
the strict editable install (a tree of links that editors and pyright follow) has no hook at all.
So in a checkout, however ``traintop`` was found, its path is the real probe folder and a finder
maps each room to the checkout's folder of that name: every module's file is the checkout's
own, and a module added since the install is found.  Only the rooms are mapped (the root's
other folders, ``tests/`` or ``build/``, are no ``traintop.<name>``).  An installed wheel (no
``pyproject.toml`` beside its package folder) keeps the path the import system gave it.
"""

from __future__ import annotations

import importlib.util
import os
import sys
from collections.abc import Sequence
from importlib.machinery import ModuleSpec
from typing import Any

ROOMS = ("cli", "collectors", "diagnosis", "exporter", "fleet", "pipeline", "store", "tui", "views")


def find_rooms(path: Sequence[str], init_file: str) -> list[str]:
    """In a checkout, put the room finder first on ``sys.meta_path`` (once) and return the real
    probe folder (links of the strict editable tree followed) as the package's path; elsewhere,
    ``path`` as it is.  ``init_file`` is the package's ``__init__.py``."""
    probe_dir = os.path.dirname(os.path.realpath(init_file))
    root = os.path.dirname(probe_dir)
    if not os.path.isfile(os.path.join(root, "pyproject.toml")):
        return list(path)
    if not any(isinstance(f, RoomFinder) and f.root == root for f in sys.meta_path):
        sys.meta_path.insert(0, RoomFinder(root))
    return [probe_dir]


class RoomFinder:
    """Finds ``traintop.<room>`` in the checkout at ``root`` (first on ``sys.meta_path``, so
    that the checkout's folders win over a tree of links made at install time)."""

    def __init__(self, root: str) -> None:
        self.root = root

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> ModuleSpec | None:
        package, _, room = name.partition(".")
        if package != "traintop" or room not in ROOMS:
            return None
        folder = os.path.join(self.root, room)
        init = os.path.join(folder, "__init__.py")
        return importlib.util.spec_from_file_location(
            name, init, submodule_search_locations=[folder]
        )
