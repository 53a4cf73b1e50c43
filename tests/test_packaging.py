"""The wheel adds exactly one import name, `traintop`, to a fresh virtualenv; a checkout finds
its rooms however it was installed (traintop/checkout.py).

Five generic names (`tui`, `collectors`, `store`, ...) are taken on the package index by other
projects: installed into a training environment beside them, one would overwrite the other.
"""

from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
import sys
import venv
import zipfile
from pathlib import Path

import pytest

from tests import import_graph
from traintop import checkout

ROOT = Path(__file__).resolve().parents[1]
PIP_OWN = {"pip", "setuptools", "_distutils_hack", "pkg_resources", "distutils-precedence.pth"}
ROOMS = sorted(pkg for pkg in import_graph.folders() if pkg.count(".") == 1)  # traintop.<room>
# What a Python finds for the namespace and each room (importing the probe only: stdlib).
ORIGINS = f"""
import importlib.util, json, traintop
found = {{name: importlib.util.find_spec(name).origin for name in {ROOMS!r}}}
others = [name for name in ("traintop.tests", "traintop.build") if importlib.util.find_spec(name)]
print(json.dumps({{"path": traintop.__path__, **found, "others": others}}))
"""


def _source_copy(into: Path) -> Path:
    """The files git tracks, copied: setuptools builds in the source folder (``build/``)."""
    listed = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    for name in filter(None, listed.stdout.decode().split("\0")):
        if (ROOT / name).is_file():
            (into / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, into / name)
    return into


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    source = _source_copy(tmp_path_factory.mktemp("source"))
    # setuptools in this environment builds it offline; without it pip fetches a build backend
    offline = ["--no-build-isolation"] if importlib.util.find_spec("setuptools") else []
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", *offline, "-w", str(out), source],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip
    (found,) = out.glob("traintop-*.whl")
    return found


def _site_packages(env: Path) -> Path:
    (found,) = env.glob("lib/python3*/site-packages")
    return found


def _fresh_env(env: Path) -> Path:
    """A virtualenv without pip of its own (this one's installs into it: ``pip --python``)."""
    venv.EnvBuilder(with_pip=False).create(env)
    return env


def _install(env: Path, wheel: Path) -> None:
    subprocess.run(
        [sys.executable, "-m", "pip", "--python", env / "bin" / "python", "install", "-q",
         "--no-deps", "--no-index", wheel],
        check=True, capture_output=True, timeout=300,
    )  # fmt: skip


def test_a_fresh_virtualenv_gains_one_top_level_name(wheel: Path, tmp_path: Path) -> None:
    env = _fresh_env(tmp_path / "venv")
    before = {p.name for p in _site_packages(env).iterdir()}
    _install(env, wheel)
    added = {p.name for p in _site_packages(env).iterdir()} - before - PIP_OWN
    assert {name for name in added if not name.endswith(".dist-info")} == {"traintop"}
    assert (env / "bin" / "traintop").exists()
    installed = _site_packages(env) / "traintop"
    assert _origins(env / "bin" / "python", cwd=tmp_path) == {
        "path": [str(installed)],
        **{room: str(installed / room.split(".")[1] / "__init__.py") for room in ROOMS},
        "others": [],
    }


def _origins(python: Path | str, cwd: Path, *flags: str) -> dict:
    done = subprocess.run([str(python), *flags, "-c", ORIGINS], cwd=cwd, capture_output=True,
                          text=True, timeout=60)  # fmt: skip
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def _checkout_origins(root: Path) -> dict:
    return {
        "path": [str(root / "traintop")],
        **{room: str(root / room.split(".")[1] / "__init__.py") for room in ROOMS},
        "others": [],  # the root's other folders are no traintop.<name>
    }


def test_from_a_checkouts_root_each_room_is_its_folder() -> None:
    """``python -m pytest`` and the scenario workloads put the root first on ``sys.path``: its
    ``traintop/`` is found, with or without an install (``-S``: none, not even the deps)."""
    assert _origins(sys.executable, ROOT, "-S") == _checkout_origins(ROOT)
    assert sorted(f"traintop.{room}" for room in checkout.ROOMS) == ROOMS  # as pyproject maps


def test_a_strict_editable_install_finds_the_rooms_of_its_checkout(tmp_path: Path) -> None:
    """The README's install: through its tree of links from anywhere, and from the root."""
    source = _source_copy(tmp_path / "source")
    built = subprocess.run(
        [sys.executable, "-c", "import sys; from setuptools import build_meta as b; "
         "print(b.build_editable(sys.argv[1], {'editable_mode': 'strict'}))", str(tmp_path)],
        cwd=source, check=True, capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    env = _fresh_env(tmp_path / "venv")
    _install(env, tmp_path / built.stdout.split()[-1])
    links = next((source / "build").glob("__editable__.*/traintop/__init__.py"))
    assert links.is_symlink()
    for cwd in (tmp_path, source):
        assert _origins(env / "bin" / "python", cwd) == _checkout_origins(source)


def test_the_wheel_holds_every_module_of_the_tree(wheel: Path) -> None:
    """Each room's folder lands under `traintop/`, where `python -m tests.import_graph` says."""
    names = set(zipfile.ZipFile(wheel).namelist())
    for module, path in import_graph.modules().items():
        inside = module.replace(".", "/") + ("/__init__.py" if path.stem == "__init__" else ".py")
        assert inside in names, module
    assert "traintop/shim/sitecustomize.py" in names
    assert "traintop/tui/styles/app.tcss" in names
