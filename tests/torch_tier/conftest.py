"""The torch tier: every test here is marked `torch`; under CI a missing torch is a failure, not a skip."""

from __future__ import annotations

import importlib.util
import os

import pytest

HAVE_TRUTH = all(importlib.util.find_spec(m) for m in ("torch", "transformers"))


def pytest_collection_modifyitems(config, items):
    here = os.path.dirname(__file__)
    for item in items:
        if str(item.fspath).startswith(here):
            item.add_marker(pytest.mark.torch)


def pytest_sessionstart(session):
    if os.environ.get("CI") and not HAVE_TRUTH:
        raise pytest.UsageError(
            "CI runs the torch tier: install it with pip install torch==2.13.0 -e '.[torch,hf,dev]'"
        )
