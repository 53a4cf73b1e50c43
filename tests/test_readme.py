"""The README's set-up commands are the project's contract with a fresh machine."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _bash_blocks(text: str) -> list[str]:
    return [b.strip() for b in re.findall(r"```bash\n(.*?)```", text, flags=re.S)]


def test_ci_runs_exactly_the_readme_test_command():
    readme = (ROOT / "README.md").read_text()
    ci_lines = [ln for ln in (ROOT / ".ci" / "run").read_text().splitlines() if ln.strip()]
    test_cmd = next(b for b in _bash_blocks(readme) if "pytest" in b)
    assert ci_lines[-1].strip() == test_cmd


def test_readme_installs_torch_only_as_the_local_cpu_wheel():
    for block in _bash_blocks((ROOT / "README.md").read_text()):
        for spec in re.findall(r"\btorch\S*", block):
            assert spec == "torch==2.13.0", block


def test_readme_screenshots_exist():
    readme = (ROOT / "README.md").read_text()
    for path in re.findall(r"\]\((screenshots/[^)]+)\)", readme):
        assert (ROOT / path).is_file(), path
