"""The curated public API and the light-core promise."""

from __future__ import annotations

import inspect
import subprocess
import sys

import meshplan

EXPECTED_API = [
    # errors
    "ConfigError", "MeshplanError", "UnknownNameError", "__version__",
    # model
    "ModelSpec", "from_config", "list_models", "load_model",
    # hardware
    "Cluster", "GPUSpec", "Interconnect", "get_gpu", "get_interconnect", "list_gpus",
    "list_interconnects",
    # training memory, step estimate, plan search
    "TrainingPlan", "MemoryEstimate", "estimate_memory", "resolve_plan", "StepEstimate",
    "estimate_training", "search_training_plans", "estimate_bands",
    # serving simulation and plan search
    "SLO", "ServingPlan", "WorkloadSpec", "synthesize", "simulate", "search_serving_plans",
    "serving_deployment",
    # launch configs
    "export_plan", "export_serving",
    # validation
    "load_records", "validate_records", "validation_report",
]


def test_public_api_is_pinned():
    assert sorted(meshplan.__all__) == sorted(EXPECTED_API)
    assert len(set(meshplan.__all__)) == len(meshplan.__all__)


def test_every_public_name_resolves_and_is_listed_by_dir():
    for name in meshplan.__all__:
        value = getattr(meshplan, name)
        assert value is not None, name
        assert name in dir(meshplan), name
        if callable(value) and name != "__version__":
            assert inspect.getdoc(value), f"{name} has no docstring"


def test_unknown_name_is_an_attribute_error():
    try:
        meshplan.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("meshplan.no_such_name resolved")


def _imported_after(code: str, modules: tuple[str, ...]) -> list[str]:
    probe = f"import sys; {code}; print([m for m in {modules!r} if m in sys.modules])"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True)
    return eval(out.stdout.strip())  # a list literal printed by the probe


def test_import_and_cli_startup_do_not_import_heavy_extras():
    heavy = ("torch", "transformers", "plotly", "jinja2", "fastapi", "huggingface_hub")
    assert _imported_after("import meshplan, meshplan.cli", heavy) == []


def test_import_meshplan_loads_no_numeric_or_serving_stack():
    lazy = ("numpy", "scipy", "meshplan.serving.simulate", "meshplan.training.search.plans",
            "meshplan.export", "meshplan.validate.run")
    assert _imported_after("import meshplan", lazy) == []
    assert "meshplan.serving.simulate" in _imported_after("import meshplan; meshplan.simulate", lazy)
