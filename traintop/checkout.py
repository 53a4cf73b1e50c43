"""Where ``traintop.<room>`` lives in a source checkout: in the folder beside the probe's.

The wheel puts each room inside the package (``collectors/`` becomes ``traintop/collectors/``,
setuptools' ``package-dir``); a checkout keeps the rooms at its top level, beside ``traintop/``,
where that folder's own path cannot find them.  setuptools' default editable install maps them
with an import hook, but only for a ``traintop`` found through that hook: Python puts the working
directory first on ``sys.path`` (``python -m pytest``, ``python -m tests.scenarios.matrix``, the
scenario workloads), and from a checkout's root that finds the folder ``./traintop/`` itself;
the strict editable install (a tree of links that editors and pyright follow) has no hook at all.
So in a checkout, however ``traintop`` was found, its path is the real probe folder and then the
checkout's root, and every module's file is the one in the checkout; an installed wheel (no
``pyproject.toml`` beside its package folder) keeps the path the import system gave it.
"""

from __future__ import annotations

import os
from collections.abc import Sequence


def package_path(path: Sequence[str], init_file: str) -> list[str]:
    """``traintop.__path__`` for the package whose ``__init__.py`` is ``init_file``: ``path``
    itself outside a checkout.  Links (the strict editable tree) are followed to the checkout."""
    probe_dir = os.path.dirname(os.path.realpath(init_file))
    root = os.path.dirname(probe_dir)
    if not os.path.isfile(os.path.join(root, "pyproject.toml")):
        return list(path)
    return [probe_dir, root]
