"""The README's contract: two commands first, CI runs the second, the catalogs are listed."""

from __future__ import annotations

import re

from meshplan import list_gpus
from meshplan.model import list_entries
from tests.conftest import REPO

README = (REPO / "README.md").read_text()


def _opening_commands() -> list[str]:
    block = re.search(r"```bash\n(.*?)```", README, re.S)
    assert block and README.index(block.group(0)) < README.index("\n## "), "commands come first"
    return [line for line in block.group(1).splitlines() if line.strip()]


def test_readme_opens_with_exactly_two_commands():
    install, test = _opening_commands()
    assert install.startswith("pip install .") and "meshplan " in install
    assert "pytest" in test


def test_ci_runs_the_readme_test_command():
    ci = (REPO / ".ci" / "run").read_text()
    assert _opening_commands()[1] in ci


def test_readme_lists_every_catalog_model_and_gpu():
    for entry in list_entries():
        assert f"`{entry.name}`" in README, entry.name
    for gpu in list_gpus():
        assert f"`{gpu.name}`" in README, gpu.name
