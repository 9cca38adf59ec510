"""Every ```python block of docs/**/*.md runs: the blocks of one page in order, in one namespace, so
the API page cannot drift from the code. The examples use small models and few requests."""

from __future__ import annotations

import re

import pytest

from tests.conftest import REPO

DOCS = REPO / "docs"
PAGES = sorted(p for p in DOCS.rglob("*.md") if "```python" in p.read_text())
BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    """The code of every ```python fenced block, in order."""
    return [m.group(1) for m in BLOCK.finditer(text)]


def test_block_extraction_finds_only_python_fences():
    text = "a\n```python\nx = 1\n```\n```console\n$ ls\n```\n```python\ny = x\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y = x\n"]


def test_api_page_covers_every_public_name():
    import meshplan

    code = "\n".join(python_blocks((REPO / "docs" / "api.md").read_text()))
    missing = [n for n in meshplan.__all__ if n != "__version__" and f"meshplan.{n}" not in code]
    assert not missing, f"docs/api.md has no example using {missing}"


@pytest.mark.parametrize("page", PAGES, ids=[str(p.relative_to(DOCS)) for p in PAGES])
def test_python_blocks_run(page, capsys):
    blocks = python_blocks(page.read_text())
    namespace: dict = {"__name__": f"docs_{page.stem}"}
    for i, code in enumerate(blocks, 1):
        line = page.read_text()[: page.read_text().index(code)].count("\n") + 1
        try:
            exec(compile(code, f"{page.relative_to(DOCS)}:{line}", "exec"), namespace)
        except Exception as exc:  # the failing block's place, then the error
            raise AssertionError(f"docs/{page.relative_to(DOCS)}, python block {i} (line {line}) failed: {exc!r}") from exc
