"""mkdocs hooks: the API reference page lists every public name of `meshplan.__all__`.

`meshplan/__init__.py` loads its public names lazily (a PEP 562 `__getattr__` over its `_LAZY`
table), which static analysis cannot follow, so the reference page holds one marker and this hook
replaces it with a `::: module.name` block per public name, read from that table at build time.
The page therefore never names a module path: when a name moves, the table moves it.
"""

from __future__ import annotations

import ast
from pathlib import Path

MARKER = "<!-- public API -->"
INIT = Path(__file__).resolve().parent.parent / "src" / "meshplan" / "__init__.py"


def public_names() -> list[tuple[str, str]]:
    """(public name, 'module.attribute') for every lazily loaded entry of meshplan.__all__."""
    tables: dict[str, dict] = {}
    for node in ast.parse(INIT.read_text()).body:
        if isinstance(node, ast.Assign) and isinstance(node.targets[0], ast.Name):
            if node.targets[0].id in ("_LAZY", "_RENAMED"):
                tables[node.targets[0].id] = ast.literal_eval(node.value)
    renamed = tables.get("_RENAMED", {})
    return [(name, f"{module}.{renamed.get(name, name)}") for name, module in tables["_LAZY"].items()]


def reference_markdown() -> str:
    """One `:::` block per public name, under a heading with the name users call."""
    parts = []
    for name, target in public_names():
        parts.append(f"## `meshplan.{name}`\n\n::: {target}\n    options:\n      show_root_heading: false\n"
                     f"      heading_level: 3\n")
    return "\n".join(parts)


def on_page_markdown(markdown: str, page, config, files) -> str:
    if MARKER in markdown:
        return markdown.replace(MARKER, reference_markdown())
    return markdown
