"""meshplan: predict and plan LLM training runs and serving deployments on GPU clusters.

The public API is what `__all__` lists; everything else may change between releases. Only the
errors are imported with the package; every other name (model, hardware, training, serving,
exports, validation) is loaded on first use (PEP 562 `__getattr__`), so `import meshplan` and
the CLI's start-up import nothing they do not use (no pydantic, numpy, scipy or serving stack
until a name that needs them is used). docs/api.md shows every entry with a runnable example.
"""

from importlib import import_module

from meshplan.errors import ConfigError, MeshplanError, UnknownNameError

__version__ = "0.1.0"

_LAZY = {
    # hardware and models
    "Cluster": "meshplan.hardware",
    "GPUSpec": "meshplan.hardware",
    "Interconnect": "meshplan.hardware",
    "get_gpu": "meshplan.hardware",
    "get_interconnect": "meshplan.hardware",
    "list_gpus": "meshplan.hardware",
    "list_interconnects": "meshplan.hardware",
    "ModelSpec": "meshplan.model",
    "from_config": "meshplan.model",
    "list_models": "meshplan.model",
    "load_model": "meshplan.model",
    # training: plan, memory, step estimate and plan search
    "TrainingPlan": "meshplan.training",
    "MemoryEstimate": "meshplan.training",
    "estimate_memory": "meshplan.training",
    "resolve_plan": "meshplan.training",
    "StepEstimate": "meshplan.training.estimate",
    "estimate_training": "meshplan.api",
    "search_training_plans": "meshplan.api",
    "estimate_bands": "meshplan.bands.training",
    # serving: workloads, simulation and plan search
    "SLO": "meshplan.serving.metrics.summary",
    "ServingPlan": "meshplan.serving.plan",
    "WorkloadSpec": "meshplan.serving.traffic.workload",
    "synthesize": "meshplan.serving.traffic.workload",
    "simulate": "meshplan.serving.simulate",
    "search_serving_plans": "meshplan.api",
    "serving_deployment": "meshplan.api",
    # launch configs
    "export_plan": "meshplan.export",
    "export_serving": "meshplan.export.serving",
    # validation against run records
    "load_records": "meshplan.validate.records",
    "validate_records": "meshplan.api",
    "validation_report": "meshplan.api",
}
"""Public names loaded on first use: name -> the module that defines it."""
_RENAMED = {"list_models": "list_entries"}
"""Public names whose defining module calls them otherwise."""

__all__ = ["ConfigError", "MeshplanError", "UnknownNameError", "__version__", *_LAZY]


def __getattr__(name: str):
    """Import a lazily loaded public name on first use and cache it in the package."""
    if name not in _LAZY:
        raise AttributeError(f"module 'meshplan' has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name]), _RENAMED.get(name, name))
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
