"""A MemoryEstimate as a plain dict (the `train memory --json` payload)."""

from __future__ import annotations

from dataclasses import fields
from typing import Any

from meshplan.training.memory.total import MemoryEstimate


def plan_dict(estimate: MemoryEstimate) -> dict[str, Any]:
    """The resolved plan's fields (chunk layer lists shortened to their sizes). Every field is a
    scalar or a tuple of scalars, so a shallow copy is what `dataclasses.asdict` gave, without
    its deep walk over every layer index (a third of the web app's estimate answer)."""
    plan = estimate.plan
    data = {f.name: getattr(plan, f.name) for f in fields(plan)
            if f.name not in ("chunk_layers", "chosen", "warnings")}
    data["pipeline_split"] = [len(c) for c in plan.chunk_layers]
    return data


def memory_dict(estimate: MemoryEstimate) -> dict[str, Any]:
    """Everything `train memory --json` prints, in bytes."""
    peak = estimate.peak_stage
    return {
        "fits": estimate.fits,
        "peak_bytes": peak.total_bytes,
        "peak_stage": peak.stage,
        "gpu_memory_bytes": estimate.gpu_memory_bytes,
        "headroom_bytes": estimate.gpu_memory_bytes - peak.total_bytes,
        "memory_headroom_bytes": estimate.memory_headroom_bytes,
        "short_of": estimate.short_of,
        "host_peak_bytes": estimate.host_peak_bytes,
        "host_memory_bytes": estimate.host_memory_bytes,
        "nvme_peak_bytes": estimate.nvme_peak_bytes,
        "nvme_capacity_bytes": estimate.nvme_capacity_bytes,
        "activation_bytes_per_layer": estimate.activation_bytes_per_layer,
        "trainable_params": estimate.trainable_params,
        "stages": [stage.to_dict() for stage in estimate.stages],
        "plan": plan_dict(estimate),
        "chosen": dict(estimate.plan.chosen),
        "warnings": list(estimate.plan.warnings),
    }
