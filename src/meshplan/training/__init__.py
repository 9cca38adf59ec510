"""Training runs: plans, their resolution against a model and cluster, and memory per GPU."""

from meshplan.training.memory.total import MemoryEstimate, StageMemory, estimate_memory
from meshplan.training.plan import TrainingPlan
from meshplan.training.layout.resolve import PlanError, ResolvedPlan, resolve_plan

__all__ = ["MemoryEstimate", "PlanError", "ResolvedPlan", "StageMemory", "TrainingPlan",
           "estimate_memory", "resolve_plan"]
