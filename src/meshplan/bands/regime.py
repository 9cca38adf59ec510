"""The regime of a training question: the features that decide which published runs are
comparable to it, and how far apart two regimes are."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass


@dataclass(frozen=True, slots=True, kw_only=True)
class Regime:
    """What a prediction's error depends on, as the calibration residuals show it."""

    moe: bool
    """Mixture-of-experts layers (routing, dispatch, grouped GEMMs) or dense."""
    architecture: str
    """GPU generation (volta, ampere, hopper, blackwell, cdna3, ...)."""
    framework: str
    """The training framework (megatron, nemo, torchtitan, deepspeed, hf, ...)."""
    precision: str
    """GEMM precision: fp32, fp16, bf16, fp8, fp4."""
    hidden_size: int
    """Model width: small models spend more of a step on host dispatch and small kernels."""
    tokens_per_microbatch: float
    """Tokens one GPU holds per micro-batch (micro-batch x sequence / context-parallel size)."""
    num_gpus: int
    implementation: str = "eager"
    """How the trainer launches its kernels: eager, compiled (torch.compile, XLA) or fused (llm.c):
    host time, fused memory passes and the loss differ between them."""

    def to_dict(self) -> dict:
        return asdict(self)


def regime_of(model, cluster, plan) -> Regime:
    """The regime of a resolved plan for `model` on `cluster`."""
    return Regime(moe=model.is_moe, architecture=cluster.gpu.architecture,
                  framework=plan.framework, precision=plan.precision,
                  hidden_size=model.hidden_size,
                  tokens_per_microbatch=plan.micro_batch_size * plan.seq_len / plan.cp,
                  num_gpus=cluster.num_gpus, implementation=plan.implementation)


CATEGORY_COST = {"moe": 2.0, "architecture": 1.0, "framework": 1.0, "precision": 0.5,
                 "implementation": 1.0}
"""Distance added by a differing category: MoE residuals spread twice as wide as dense ones in
the calibration set, so a dense run says least about an MoE question."""
OCTAVE_COST = {"hidden_size": 0.5, "tokens_per_microbatch": 0.3, "num_gpus": 0.2}
"""Distance per factor of two between numeric features."""


def distance(a: Regime, b: Regime) -> float:
    """How unlike two regimes are (0 for the same); records weigh exp(-distance)."""
    d = sum(cost for name, cost in CATEGORY_COST.items() if getattr(a, name) != getattr(b, name))
    for name, cost in OCTAVE_COST.items():
        d += cost * abs(math.log2(getattr(a, name) / getattr(b, name)))
    return d


RANGE_LABEL = {"hidden_size": "model width (hidden size)",
               "tokens_per_microbatch": "tokens per micro-batch per GPU",
               "num_gpus": "GPU count"}
CATEGORIES = ("framework", "implementation", "precision", "architecture")
"""Categorical features a question must share with some calibration record."""
COMBINATIONS = (("architecture", "moe"), ("architecture", "framework"), ("framework", "moe"))
"""Pairs of categories whose combination must have been measured."""


def _label(name: str, value) -> str:
    if name == "moe":
        return "MoE" if value else "dense"
    return str(value)


@dataclass(frozen=True, slots=True)
class Span:
    """What a set of regimes covers: numeric ranges, categories and measured combinations."""

    ranges: dict
    categories: dict
    combinations: dict


def span_of(seen: list[Regime]) -> Span:
    """The span of `seen` (computed once per residual pool)."""
    ranges = {n: (min(getattr(r, n) for r in seen), max(getattr(r, n) for r in seen)) for n in RANGE_LABEL}
    categories = {n: {getattr(r, n) for r in seen} for n in CATEGORIES + ("moe",)}
    combinations = {(x, y): {(getattr(r, x), getattr(r, y)) for r in seen} for x, y in COMBINATIONS}
    return Span(ranges, categories, combinations)


def out_of_regime(q: Regime, seen: list[Regime] | Span) -> list[str]:
    """Why `q` lies outside what the regimes `seen` (or their span) cover, empty when inside:
    a numeric feature beyond the measured range, a category never measured, or a combination
    never measured."""
    span = seen if isinstance(seen, Span) else span_of(seen)
    reasons = []
    for name, label in RANGE_LABEL.items():
        value, (low, high) = getattr(q, name), span.ranges[name]
        if not low <= value <= high:
            reasons.append(f"{label} {value:,.0f} outside the calibrated {low:,.0f}-{high:,.0f}")
    for name in CATEGORIES:
        if getattr(q, name) not in span.categories[name]:
            reasons.append(f"no calibration record with {name} {getattr(q, name)}")
    for x, y in COMBINATIONS:
        pair = (getattr(q, x), getattr(q, y))
        known = pair[0] in span.categories[x] and pair[1] in span.categories[y]
        if known and pair not in span.combinations[(x, y)]:
            reasons.append(f"no calibration record of {_label(x, pair[0])} with {_label(y, pair[1])}")
    return reasons
