"""The README's contract: two commands first, CI runs the second, a page, not a manual; the
documentation lists the catalogs."""

from __future__ import annotations

import re

from meshplan import list_gpus
from meshplan.model import list_entries
from tests.conftest import REPO

README = (REPO / "README.md").read_text()
CATALOG_PAGE = REPO / "docs" / "models-and-hardware.md"


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


def test_readme_is_short_and_links_the_documentation():
    assert README.count("\n") <= 200, "the README is a page: the rest belongs in docs/"
    for link in re.findall(r"\]\((docs/[^)#]*)", README):
        assert (REPO / link).exists(), f"README links to a missing {link}"


def test_docs_list_every_catalog_model_and_gpu():
    page = CATALOG_PAGE.read_text()
    for entry in list_entries():
        assert f"`{entry.name}`" in page, f"{entry.name} is not in {CATALOG_PAGE.name}"
    for gpu in list_gpus():
        assert f"`{gpu.name}`" in page, f"{gpu.name} is not in {CATALOG_PAGE.name}"


def test_the_docs_index_page_quotes_the_readme_commands():
    index = (REPO / "docs" / "index.md").read_text()
    for command in _opening_commands():
        assert command in index, command
