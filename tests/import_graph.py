"""The tree's import graph, read from the source (every import, those under ``TYPE_CHECKING``
and inside functions included): what the layering tests check and what a reviewer can print.

``python -m tests.import_graph`` prints the circles and the modules of ``tui/`` with no UI import.
Module names come from the folders the way ``pyproject.toml`` maps them (``collectors/`` is
``traintop.collectors``). ``from package import name`` is an import of ``package.name`` when that
is a module, as the import system itself resolves it.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import tomllib

ROOT = Path(__file__).resolve().parents[1]
UI_LIBRARIES = ("textual", "rich")


@cache
def folders() -> dict[str, Path]:
    """Each import package of the namespace and the folder holding it."""
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    mapped = config.get("package-dir", {})
    return {pkg: ROOT / mapped.get(pkg, pkg.replace(".", "/")) for pkg in config["packages"]}


@cache
def modules() -> dict[str, Path]:
    """Every module of the namespace by dotted name, packages by their ``__init__``."""
    found = {}
    for pkg, folder in folders().items():
        for path in folder.glob("*.py"):
            name = pkg if path.stem == "__init__" else f"{pkg}.{path.stem}"
            found[name] = path
    return found


def _owner(name: str) -> str | None:
    """The module ``name`` lives in: itself, or the nearest enclosing module."""
    while name and name not in modules():
        name = name.rpartition(".")[0]
    return name or None


def _imported(module: str, tree: ast.AST) -> Iterator[str]:
    is_package = modules()[module].stem == "__init__"
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parts = module.split(".")[: len(module.split(".")) - node.level + is_package]
                base = ".".join([*parts, *([base] if base else [])])
            names = [f"{base}.{alias.name}" for alias in node.names]
            subs = [n for n in names if n in modules()]
            yield from subs if len(subs) == len(names) else [base, *subs]


@cache
def graph() -> dict[str, frozenset[str]]:
    """Module -> the namespace's modules it imports; external top-level names as ``ext:NAME``."""
    edges = {}
    for module, path in modules().items():
        targets = set()
        for name in _imported(module, ast.parse(path.read_text())):
            owner = _owner(name)
            targets.add(owner if owner else "ext:" + name.split(".")[0])
        targets.discard(module)
        edges[module] = frozenset(targets)
    return edges


def circles() -> list[list[str]]:
    """Strongly connected groups of more than one module (Tarjan), each sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph().get(node, ()):
            if nxt not in graph():
                continue
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    sys.setrecursionlimit(max(10_000, sys.getrecursionlimit()))
    for node in sorted(graph()):
        if node not in index:
            visit(node)
    return found


def uses_ui(module: str) -> bool:
    """Whether ``module`` imports Textual or Rich, itself or through a module of ``tui/``."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current in seen:
            continue
        seen.add(current)
        targets = graph()[current]
        if any(t in {f"ext:{lib}" for lib in UI_LIBRARIES} for t in targets):
            return True
        todo += [t for t in targets if t.startswith("traintop.tui")]
    return False


def without_ui(room: str = "traintop.tui") -> list[str]:
    """Modules of ``room`` (package ``__init__`` files aside) that import no UI library."""
    return sorted(
        m
        for m, path in modules().items()
        if m.startswith(room) and path.stem != "__init__" and not uses_ui(m)
    )


def reaches(module: str) -> set[str]:
    """Every module of the namespace that importing ``module`` may load, itself included."""
    seen, todo = set(), [module]
    while todo:
        current = todo.pop()
        if current not in seen and current in graph():
            seen.add(current)
            todo += graph()[current]
            todo += [p for p in _parents(current) if p in graph()]
    return seen


def _parents(module: str) -> list[str]:
    parts = module.split(".")
    return [".".join(parts[:i]) for i in range(1, len(parts))]


if __name__ == "__main__":
    print(f"{len(modules())} modules, {len(circles())} circles")
    for group in circles():
        print("circle:", " ".join(group))
    for module in without_ui():
        print("no UI import in tui/:", module)
