"""The regime of a question: the features that decide which published runs are comparable to
it, and how far apart two regimes are. A regime class names its features (`Features`): the
training Regime here, the serving one in serving_regime.py."""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import ClassVar


@dataclass(frozen=True, slots=True)
class Features:
    """How a regime class is compared: what a differing category costs, what each factor of two
    of a numeric feature costs, the numeric features' labels (their calibrated range is checked)
    and the category pairs whose combination must have been measured."""

    category_cost: dict
    octave_cost: dict
    range_label: dict
    combinations: tuple
    named: tuple = ()
    """Categories whose unmeasured value is a reason of its own."""
    flags: dict = field(default_factory=dict)
    """Labels of boolean categories: {name: (label when true, label when false)}."""


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

    FEATURES: ClassVar[Features]

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


RANGE_LABEL = {"hidden_size": "model width (hidden size)",
               "tokens_per_microbatch": "tokens per micro-batch per GPU",
               "num_gpus": "GPU count"}
COMBINATIONS = (("architecture", "moe"), ("architecture", "framework"), ("framework", "moe"))
"""Pairs of categories whose combination must have been measured."""
Regime.FEATURES = Features(CATEGORY_COST, OCTAVE_COST, RANGE_LABEL, COMBINATIONS,
                           named=("framework", "implementation", "precision", "architecture"),
                           flags={"moe": ("MoE", "dense")})


def distance(a, b) -> float:
    """How unlike two regimes of one class are (0 for the same); records weigh exp(-distance)."""
    f = type(a).FEATURES
    d = sum(cost for name, cost in f.category_cost.items() if getattr(a, name) != getattr(b, name))
    for name, cost in f.octave_cost.items():
        d += cost * abs(math.log2(getattr(a, name) / getattr(b, name)))
    return d


def _label(f: Features, name: str, value) -> str:
    if name in f.flags:
        return f.flags[name][0] if value else f.flags[name][1]
    return str(value)


@dataclass(frozen=True, slots=True)
class Span:
    """What a set of regimes covers: numeric ranges, categories and measured combinations."""

    ranges: dict
    categories: dict
    combinations: dict


def span_of(seen: list) -> Span:
    """The span of `seen`, regimes of one class (computed once per residual pool)."""
    f = type(seen[0]).FEATURES
    ranges = {n: (min(getattr(r, n) for r in seen), max(getattr(r, n) for r in seen)) for n in f.range_label}
    categories = {n: {getattr(r, n) for r in seen} for n in f.category_cost}
    combinations = {(x, y): {(getattr(r, x), getattr(r, y)) for r in seen} for x, y in f.combinations}
    return Span(ranges, categories, combinations)


def out_of_regime(q, seen: list | Span) -> list[str]:
    """Why `q` lies outside what the regimes `seen` (or their span) cover, empty when inside:
    a numeric feature beyond the measured range, a category never measured, or a combination
    never measured."""
    f = type(q).FEATURES
    span = seen if isinstance(seen, Span) else span_of(seen)
    reasons = []
    for name, label in f.range_label.items():
        value, (low, high) = getattr(q, name), span.ranges[name]
        if not low <= value <= high:
            reasons.append(f"{label} {value:,.0f} outside the calibrated {low:,.0f}-{high:,.0f}")
    for name in f.named:
        if getattr(q, name) not in span.categories[name]:
            reasons.append(f"no calibration record with {name} {_label(f, name, getattr(q, name))}")
    for x, y in f.combinations:
        pair = (getattr(q, x), getattr(q, y))
        known = pair[0] in span.categories[x] and pair[1] in span.categories[y]
        if known and pair not in span.combinations[(x, y)]:
            reasons.append(f"no calibration record of {_label(f, x, pair[0])} with {_label(f, y, pair[1])}")
    return reasons
