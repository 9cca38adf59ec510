"""The shipped family defaults equal the installed transformers' config-class defaults."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("transformers")

from meshplan.model.load import family_defaults, supported_families  # noqa: E402

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "gen_family_defaults.py"


def _generator():
    spec = importlib.util.spec_from_file_location("gen_family_defaults", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("family", [f for f in supported_families() if f != "kimi_k2"])
def test_shipped_defaults_match_transformers(family):
    assert family_defaults()[family] == _generator().class_defaults(family)
