"""Shared fixtures: paths to the packaged run records and small model configs."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
RECORDS = REPO / "src" / "meshplan" / "records"
"""The run records the package ships (meshplan.records): the repository holds its own data."""

# Parsed packaged YAML (meshplan.yamlread's cache) goes to a folder of this test run, not the
# user's ~/.cache; subprocesses the tests start inherit it.
os.environ.setdefault("MESHPLAN_CACHE_DIR", tempfile.mkdtemp(prefix="meshplan-test-cache-"))


@pytest.fixture
def llama_8b_config() -> dict:
    """Llama-3.1-8B's architecture keys (meta-llama/Llama-3.1-8B config.json)."""
    return {
        "model_type": "llama", "hidden_size": 4096, "intermediate_size": 14336,
        "num_hidden_layers": 32, "num_attention_heads": 32, "num_key_value_heads": 8,
        "vocab_size": 128256, "rope_theta": 500000.0, "tie_word_embeddings": False,
        "max_position_embeddings": 131072,
        "rope_scaling": {"factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                         "original_max_position_embeddings": 8192, "rope_type": "llama3"},
    }
