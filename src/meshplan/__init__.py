"""meshplan: predict and plan LLM training runs and serving deployments on GPU clusters.

The public API is what `__all__` lists; everything else may change between releases.
"""

from meshplan.errors import ConfigError, MeshplanError, UnknownNameError
from meshplan.hardware import (
    Cluster, GPUSpec, Interconnect, get_gpu, get_interconnect, list_gpus, list_interconnects,
)
from meshplan.model import ModelSpec, from_config, list_entries as list_models, load_model
from meshplan.serving.metrics import SLO
from meshplan.serving.plan import ServingPlan
from meshplan.serving.simulate import simulate
from meshplan.serving.workload import WorkloadSpec, synthesize
from meshplan.training import TrainingPlan, estimate_memory, resolve_plan

__version__ = "0.1.0"

__all__ = [
    "Cluster",
    "ConfigError",
    "GPUSpec",
    "Interconnect",
    "MeshplanError",
    "ModelSpec",
    "SLO",
    "ServingPlan",
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
    "simulate",
    "synthesize",
    "WorkloadSpec",
]
