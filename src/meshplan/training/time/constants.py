"""Training-engine constants: what a framework overlaps and what it costs beyond the kernels.

Defaults below are physical guesses with their reasoning; `meshplan calibrate` fits a few of
them (see meshplan.calibration.training) on the calibration records and writes them to
`training/data/fitted_constants.yaml`, which `training_constants` applies on top.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, fields, replace
from importlib import resources

from meshplan.yamlread import load_packaged


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingConstants:
    """Engine behaviour constants (dimensionless unless the name says otherwise)."""

    moe_imbalance: float = 1.2
    """Busiest expert-parallel rank's routed tokens / the mean (dropless routing; learned routers
    with load-balancing losses stay 10-30% above the mean)."""
    tp_overlap_exposed: float = 0.3
    """Share of tensor-parallel communication still exposed with TP-comm overlap on."""
    flex_exposed: float = 1.0
    """Share of the flex (DeepEP / HybridEP) dispatcher's dispatch and combine left exposed
    without an all-to-all overlap schedule (training/time/moe.py): DeepEP receives through a
    hook that holds no SMs, so later kernels run while its traffic lands; 1: none hidden."""
    overlap_penalty: float = 0.1
    """Compute slowdown per second of communication overlapped with it (shared SMs, HBM)."""
    kernels_per_layer: int = 24
    """Memory-bound kernel launches per layer forward (norms, rotary, activation, adds)."""
    dp_exposed_floor: float = 0.1
    """Share of the data-parallel gradient/parameter traffic exposed even when overlapped
    (the last bucket, the first parameter gather)."""
    fp8_overhead: float = 0.15
    """Extra GEMM time under fp8 for casts, amax reductions and scaling (relative)."""
    fp4_cast_scale: float = 2.0
    """NVFP4 quantization work relative to fp8's, next to the same GEMM: a scale per 16-element
    block (and 16 x 16 blocks for weights) on top of the tensor scale, the random Hadamard
    transform of the weight-gradient inputs, stochastic rounding of gradients; about two fp8
    casts' worth of passes over the bf16 inputs (an assumption, checked against Megatron-Bridge's
    published NVFP4 / MXFP8 pairs in the README)."""
    step_overhead_s: float = 0.0
    """Fixed time per optimizer step outside the model (data loading, logging, host syncs)."""
    compute_scale: float = 1.0
    """Fitted multiplier on all kernel time: how far a framework's real kernels on a GPU family
    fall short of (or beat) the microbenchmark-bounded ideal. The product of a per-architecture
    and a per-framework factor."""
    attention_scale: float = 1.0
    """Fitted multiplier on fused-attention kernel time beyond the compute scale: how far
    training attention kernels (causal masks, short CP ring blocks, GQA layouts) fall short
    of the microbenchmarked kernel efficiency."""
    fsdp_comm_scale: float = 1.0
    """Fitted multiplier on the fully-sharded parameter gathers and gradient reduce-scatters of
    a framework: how far its sharded-data-parallel traffic falls short of the modelled NCCL ring
    (per-parameter fetch paths, host synchronisation). 1 = the ring model."""
    moe_overhead_s: float = 0.0
    """Fixed seconds per MoE layer per micro-batch forward (twice in backward): router top-k,
    token permutation bookkeeping and the device-to-host synchronisation the token dispatcher
    needs to size its all-to-all, which drains the kernel queue each time."""


@functools.cache
def _fitted() -> dict:
    try:
        text = resources.files("meshplan.training").joinpath("data").joinpath(
            "fitted_constants.yaml").read_text()
    except FileNotFoundError:
        return {}
    return load_packaged(text) or {}


def apply_fit(table: dict, framework: str, architecture: str) -> TrainingConstants:
    """Defaults, then the fit's global values; compute_scale = architecture x framework factor;
    the framework's sharded-traffic factor."""
    names = {f.name for f in fields(TrainingConstants)}
    base = replace(TrainingConstants(), **{k: v for k, v in table.get("global", {}).items()
                                           if k in names})
    arch = table.get("architecture", {}).get(architecture, {}).get("compute_scale", 1.0)
    row = table.get("framework", {}).get(framework, {})
    return replace(base, compute_scale=arch * row.get("compute_scale", 1.0),
                   fsdp_comm_scale=row.get("fsdp_comm_scale", 1.0))


def training_constants(framework: str, architecture: str) -> TrainingConstants:
    """Constants for a framework on a GPU architecture: defaults, then fitted values."""
    return apply_fit(_fitted(), framework, architecture)
