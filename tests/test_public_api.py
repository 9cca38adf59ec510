"""The curated public API and the light-core promise."""

from __future__ import annotations

import subprocess
import sys

import meshplan

EXPECTED_API = [
    "Cluster", "ConfigError", "GPUSpec", "Interconnect", "MeshplanError", "ModelSpec", "SLO", "ServingPlan", "WorkloadSpec", "simulate", "synthesize", "TrainingPlan",
    "UnknownNameError", "__version__", "estimate_memory", "from_config", "get_gpu", "get_interconnect", "list_gpus",
    "list_interconnects", "list_models", "load_model", "resolve_plan",
]


def test_public_api_is_pinned():
    assert sorted(meshplan.__all__) == sorted(EXPECTED_API)
    for name in meshplan.__all__:
        assert hasattr(meshplan, name), name


def test_import_and_cli_startup_do_not_import_heavy_extras():
    code = (
        "import sys, meshplan, meshplan.cli;"
        "heavy = [m for m in ('torch', 'transformers', 'plotly', 'fastapi', 'huggingface_hub')"
        " if m in sys.modules]; print(heavy)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"
