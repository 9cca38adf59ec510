"""Training-engine constants: what a framework overlaps and what it costs beyond the kernels.

Defaults below are physical guesses with their reasoning; `meshplan calibrate` fits the
`FITTED` ones per GPU family on the calibration records and writes them to
`training/data/fitted_constants.yaml`, which `training_constants` applies on top.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from importlib import resources

import yaml


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingConstants:
    """Engine behaviour constants (dimensionless unless the name says otherwise)."""

    moe_imbalance: float = 1.2
    """Busiest expert-parallel rank's routed tokens / the mean (dropless routing; learned routers
    with load-balancing losses stay 10-30% above the mean)."""
    tp_overlap_exposed: float = 0.3
    """Share of tensor-parallel communication still exposed with TP-comm overlap on."""
    overlap_penalty: float = 0.1
    """Compute slowdown per second of communication overlapped with it (shared SMs, HBM)."""
    kernels_per_layer: int = 24
    """Memory-bound kernel launches per layer forward (norms, rotary, activation, adds)."""
    dp_exposed_floor: float = 0.1
    """Share of the data-parallel gradient/parameter traffic exposed even when overlapped
    (the last bucket, the first parameter gather)."""
    fp8_overhead: float = 0.15
    """Extra GEMM time under fp8 for casts, amax reductions and scaling (relative)."""
    step_overhead_s: float = 0.0
    """Fixed time per optimizer step outside the model (data loading, logging, host syncs)."""
    compute_scale: float = 1.0
    """Fitted multiplier on all kernel time (framework efficiency relative to the microbenchmarks)."""


FITTED = ("compute_scale", "tp_overlap_exposed", "overlap_penalty")
"""The constants the calibration fits; the others stay at their physical defaults."""


@functools.cache
def _fitted() -> dict:
    try:
        text = resources.files("meshplan.training").joinpath("data").joinpath(
            "fitted_constants.yaml").read_text()
    except FileNotFoundError:
        return {}
    return yaml.safe_load(text).get("constants", {})


def training_constants(framework: str, architecture: str) -> TrainingConstants:
    """Constants for a framework on a GPU architecture: defaults, then fitted values."""
    base = TrainingConstants()
    names = {f.name for f in fields(TrainingConstants)}
    table = _fitted()
    for key in ("default", architecture, f"{framework}/{architecture}", framework):
        values = {k: v for k, v in (table.get(key) or {}).items() if k in names}
        base = replace(base, **values)
    return base
