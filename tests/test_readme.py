"""The README's set-up commands are the project's contract with a fresh machine, and the README
is the door to every document: short, with each of `docs/` one click away."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci_lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip()]
    test_cmd = next(b for b in _bash_blocks(readme) if "tests.suite" in b)
    assert ci_lines[-1].strip() == test_cmd


def test_readme_installs_torch_only_as_the_local_cpu_wheel():
    for block in _bash_blocks((ROOT / "README.md").read_text()):
        # Requirement specs only: the extra in '.[torch,test]' is a name, not a requirement.
        for spec in re.findall(r"(?<![\[,])\btorch\S*", block):
            assert spec == "torch==2.13.0", block


def test_readme_commands_install_what_torch_needs():
    """A fresh virtualenv has no numpy: torch warns at import and the demo cannot run without.
    The monitor's own dependencies bring it (collectors/ring_columns.py)."""
    deps = re.search(
        r"^dependencies = \[(.*?)^\]", (ROOT / "pyproject.toml").read_text(), re.M | re.S
    )
    assert deps and re.search(r'^\s*"numpy\b', deps.group(1), re.M)
    installs = [b for b in _bash_blocks((ROOT / "README.md").read_text()) if "pip install" in b]
    assert installs
    for block in installs:
        assert re.search(r"-e '\.\[torch\b[^']*\]'", block), block


def test_the_test_command_type_checks_after_ruff_and_before_the_suite():
    command = next(b for b in _bash_blocks((ROOT / "README.md").read_text()) if "tests.suite" in b)
    assert command.index("&& ruff check . &&") < command.index("&& pyright &&")
    assert command.index("&& pyright &&") < command.index("python3 -m tests.suite")
    extras = (ROOT / "pyproject.toml").read_text()
    assert re.search(r'^\s*"pyright\[nodejs\]==[\d.]+",', extras, re.M)  # Node.js from PyPI


def test_readme_installs_in_the_mode_editors_and_pyright_follow():
    """The strict editable install: a tree of links, not an import hook (CONTRIBUTING.md)."""
    installs = [b for b in _bash_blocks((ROOT / "README.md").read_text()) if "pip install" in b]
    assert installs
    for block in installs:
        assert "-e '.[torch" in block and "--config-settings editable_mode=strict" in block, block


def test_ci_runs_in_a_fresh_virtualenv():
    """CI must not pass thanks to packages the machine's own Python happens to have."""
    script = (ROOT / ".ci" / "run").read_text()
    made = script.index("python3 -m venv")
    assert made < script.index("/bin/activate") < script.rindex("python3 -m tests.suite")


def _links(doc: Path) -> list[Path]:
    """The files a Markdown document links to by relative path, anchors dropped."""
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text())
    return [(doc.parent / t).resolve() for t in targets if "://" not in t]


def test_every_relative_link_of_the_docs_resolves():
    for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
        for target in _links(doc):
            assert target.exists(), f"{doc.name} -> {target}"


def test_the_readme_is_short_and_every_document_is_one_click_away():
    assert len((ROOT / "README.md").read_text().splitlines()) <= 250
    linked = set(_links(ROOT / "README.md"))
    assert {p.resolve() for p in (ROOT / "docs").glob("*.md")} <= linked
    assert any(p.suffix == ".svg" for p in linked)
