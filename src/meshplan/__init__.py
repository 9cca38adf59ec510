"""meshplan: predict and plan LLM training runs and serving deployments on GPU clusters.

The public API is what `__all__` lists; everything else may change between releases. Model,
hardware, training memory and errors are imported with the package; the estimators, searches,
serving simulator, exporters and validation are loaded on first use (PEP 562 `__getattr__`), so
`import meshplan` stays light (no numpy, scipy or serving stack until a name that needs them is
used). docs/api.md shows every entry with a runnable example.
"""

from importlib import import_module

from meshplan.errors import ConfigError, MeshplanError, UnknownNameError
from meshplan.hardware import (
    Cluster, GPUSpec, Interconnect, get_gpu, get_interconnect, list_gpus, list_interconnects,
)
from meshplan.model import ModelSpec, from_config, list_entries as list_models, load_model
from meshplan.training import MemoryEstimate, TrainingPlan, estimate_memory, resolve_plan

__version__ = "0.1.0"

_LAZY = {
    # training: step estimate and plan search
    "StepEstimate": "meshplan.training.estimate",
    "estimate_training": "meshplan.api",
    "search_training_plans": "meshplan.api",
    # serving: workloads, simulation and plan search
    "SLO": "meshplan.serving.metrics",
    "ServingPlan": "meshplan.serving.plan",
    "WorkloadSpec": "meshplan.serving.workload",
    "synthesize": "meshplan.serving.workload",
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

__all__ = [
    "Cluster",
    "ConfigError",
    "GPUSpec",
    "Interconnect",
    "MemoryEstimate",
    "MeshplanError",
    "ModelSpec",
    "TrainingPlan",
    "UnknownNameError",
    "__version__",
    "estimate_memory",
    "from_config",
    "get_gpu",
    "get_interconnect",
    "list_gpus",
    "list_interconnects",
    "list_models",
    "load_model",
    "resolve_plan",
    *_LAZY,
]


def __getattr__(name: str):
    """Import a lazily loaded public name on first use and cache it in the package."""
    if name not in _LAZY:
        raise AttributeError(f"module 'meshplan' has no attribute {name!r}")
    value = getattr(import_module(_LAZY[name]), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
