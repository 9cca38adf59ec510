"""The repository stands alone: no file names a path outside it, and every third-party module
the package imports is a declared dependency (of the core, or of the extra its part needs).
`.ci/run` proves the same on a clean clone in a new venv; this test names the offending line."""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from pathlib import Path

import pytest

from tests.conftest import REPO

PACKAGE = REPO / "src" / "meshplan"
HERE = Path(__file__).resolve()
TEXTS = [p for d in ("src", "tests", "benchmarks", "scripts") for p in sorted((REPO / d).rglob("*.py"))
         if p.resolve() != HERE]
TEXTS += [REPO / "README.md", *sorted((REPO / "docs").rglob("*.md")), *sorted((REPO / ".ci").glob("*")),
          *sorted((REPO / "src").rglob("*.yaml")), *sorted((REPO / "src").rglob("*.md"))]
"""Every file that could name a path: code, docs, CI, packaged data (this file spells the
patterns, so it is left out)."""
OUTSIDE = re.compile(r"\.\./shared|shared/run-records|\"shared\" / |/work/|/tmp/layout|/home/\w")
"""Text that names a folder beside or above the clone (the old ../shared), or a machine path."""
CLIMB = re.compile(r"Path\(__file__\)(?:\.resolve\(\))?(\.parents\[(\d+)\]|(?:\.parent\b)+)((?:\.parent\b)*)")
"""`Path(__file__)` climbing: `.parent` chains and `.parents[N]`."""


def _landing(path: Path, match: re.Match) -> Path:
    """The folder a `Path(__file__)` climb in `path` reaches."""
    ups = match.group(1).count(".parent") if match.group(2) is None else int(match.group(2)) + 1
    ups += match.group(3).count(".parent")
    return path.resolve().parents[ups - 1]


@pytest.mark.parametrize("path", TEXTS, ids=lambda p: str(p.relative_to(REPO)))
def test_no_file_names_a_path_outside_the_repository(path: Path):
    text = path.read_text() if path.is_file() else ""
    for number, line in enumerate(text.splitlines(), 1):
        assert not OUTSIDE.search(line), f"{path.name}:{number} names a path outside the repository: {line.strip()}"
        for match in CLIMB.finditer(line):
            landing = _landing(path, match)
            assert landing == REPO or REPO in landing.parents, (
                f"{path.name}:{number} climbs to {landing}, outside the repository: {line.strip()}")


def test_the_climb_check_sees_a_climb_out():
    line = 'X = Path(__file__).resolve().parents[2] / "shared"'
    landing = _landing(REPO / "tests" / "t.py", CLIMB.search(line))
    assert landing == REPO.parent


EXTRA_OF = {"ui/": "ui", "cli/commands/ui.py": "ui", "report/": "viz", "model/hub.py": "hf", "parallel.py": "ray"}
"""Parts of the package that may import an extra's modules (prefix of the path in the package)."""
DIST = {"yaml": "pyyaml", "huggingface_hub": "huggingface-hub"}
"""Import name -> distribution name, where they differ."""


def _dist(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, 1)[0].lower().replace("_", "-")


def _declared() -> dict[str, set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    extras = {name: {_dist(r) for r in reqs} for name, reqs in project["optional-dependencies"].items()}
    return {"core": {_dist(r) for r in project["dependencies"]}, **extras}


def _imports(tree: ast.AST) -> set[str]:
    """Top-level modules imported anywhere in the tree (function-local too), plus the modules
    named as strings to importlib.import_module / report.viz.require."""
    names = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            names |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names.add(node.module)
        elif (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", None))
              in ("require", "import_module") and node.args and isinstance(node.args[0], ast.Constant)
              and isinstance(node.args[0].value, str)):
            names.add(node.args[0].value)
    return {n.split(".")[0] for n in names} - set(sys.stdlib_module_names) - {"meshplan"}


def _third_party_imports() -> list[tuple[str, str]]:
    out = []
    for path in sorted(PACKAGE.rglob("*.py")):
        where = path.relative_to(PACKAGE).as_posix()
        out += [(where, module) for module in sorted(_imports(ast.parse(path.read_text())))]
    return out


def test_every_import_of_the_package_is_declared():
    declared = _declared()
    for where, module in _third_party_imports():
        dist = DIST.get(module, module).lower().replace("_", "-")
        extra = next((e for prefix, e in EXTRA_OF.items() if where.startswith(prefix)), None)
        allowed = declared["core"] | (declared[extra] if extra else set())
        assert dist in allowed, (f"{where} imports {module} ({dist}), which is declared neither in "
                                 f"the core dependencies nor in the extra {extra!r}")


def test_the_import_scan_sees_every_kind_of_import():
    tree = ast.parse("import a.b\nfrom c import d\ndef f():\n    import e\nrequire('g.h')\n")
    assert _imports(tree) == {"a", "c", "e", "g"}


def test_the_core_is_light():
    assert _declared()["core"] == {"numpy", "scipy", "pydantic", "typer", "rich", "pyyaml"}
