"""The documentation site builds with `mkdocs build --strict`: no broken link or anchor, no page
missing from the nav, no docstring the API reference cannot render (griffe's warnings fail the
build too). Needs the `docs` extra (part of `dev`)."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys

import pytest

from tests.conftest import REPO

pytestmark = pytest.mark.skipif(
    importlib.util.find_spec("mkdocs") is None or importlib.util.find_spec("mkdocstrings") is None,
    reason="the docs extra is not installed: pip install -e '.[docs]'")


def test_mkdocs_build_strict(tmp_path):
    env = {**os.environ, "NO_MKDOCS_2_WARNING": "1"}
    done = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
                          cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    warnings = [line for line in done.stderr.splitlines() if line.startswith(("WARNING", "ERROR"))]
    assert done.returncode == 0 and not warnings, "mkdocs build --strict failed:\n" + done.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "index.html").is_file()


def test_reference_page_lists_every_public_name(tmp_path):
    sys.path.insert(0, str(REPO / "docs"))
    try:
        import hooks
    finally:
        sys.path.remove(str(REPO / "docs"))
    import meshplan

    names = [name for name, _ in hooks.public_names()]
    assert sorted(names) == sorted(n for n in meshplan.__all__ if n not in
                                   ("ConfigError", "MeshplanError", "UnknownNameError", "__version__"))
