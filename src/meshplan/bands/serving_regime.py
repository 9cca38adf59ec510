"""The regime of a serving question: what decides which published serving benchmarks are
comparable to it (engine, GPU generation, dense or MoE, weight precision, disaggregation, how
requests arrive, prompt and output lengths)."""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import ClassVar

from meshplan.bands.regime import Features
from meshplan.model.quant import headline_dtype


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingRegime:
    """What a serving prediction's error depends on, as the serving residuals show it."""

    moe: bool
    """Mixture-of-experts layers (grouped GEMMs, expert dispatch) or dense."""
    architecture: str
    """GPU generation (ampere, hopper, blackwell, cdna3, ...)."""
    engine: str
    """The serving engine (vllm, sglang, tensorrt-llm)."""
    precision: str
    """Weights dtype (bf16, fp16, fp8, fp4, int4, ...)."""
    disaggregated: bool
    """Prefill and decode in separate pools."""
    load: str
    """How requests arrive: offline (all at once), closed-loop (fixed concurrency) or timed
    (open-loop arrivals at a rate: queueing sets the latencies)."""
    input_len: float
    """Mean prompt tokens per request."""
    output_len: float
    """Mean output tokens per request."""

    FEATURES: ClassVar[Features]

    def to_dict(self) -> dict:
        return asdict(self)


ServingRegime.FEATURES = Features(
    category_cost={"moe": 2.0, "architecture": 1.0, "engine": 1.0, "precision": 0.5,
                   "disaggregated": 1.0, "load": 1.0},
    octave_cost={"input_len": 0.3, "output_len": 0.2},
    range_label={"input_len": "mean prompt length (tokens)", "output_len": "mean output length (tokens)"},
    combinations=(("architecture", "moe"), ("architecture", "engine"), ("engine", "moe"),
                  ("engine", "load"), ("engine", "disaggregated")),
    named=("engine", "precision", "architecture", "load"),
    flags={"moe": ("MoE", "dense"), "disaggregated": ("disaggregated serving", "aggregated serving")})


def load_of(workload) -> str:
    """offline, closed-loop or timed, from how a Workload feeds its requests."""
    if workload.concurrency is not None:
        return "closed-loop"
    return "offline" if all(r.arrival_s == 0 for r in workload.requests) else "timed"


def serving_regime(model, architecture: str, plan, load: str, requests) -> ServingRegime:
    """The regime of `plan` serving `model` on GPUs of `architecture`, requests (anything with
    input_len and output_len) arriving as `load` says."""
    n = max(1, len(requests))
    return ServingRegime(moe=model.is_moe, architecture=architecture, engine=plan.engine,
                         precision=headline_dtype(model.weights, plan.weights_dtype), disaggregated=plan.disaggregated is not None, load=load,
                         input_len=max(1.0, sum(r.input_len for r in requests) / n),
                         output_len=max(1.0, sum(r.output_len for r in requests) / n))


def serving_regime_of(model, cluster, plan, workload) -> ServingRegime:
    """The regime of a serving plan for `model` on `cluster` under `workload`."""
    return serving_regime(model, cluster.gpu.architecture, plan, load_of(workload), workload.requests)
