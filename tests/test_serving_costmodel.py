"""Serving iteration cost: distinct experts a batch touches, grouped expert GEMMs, pipeline host
time; and the engine-by-engine calibration fit."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from meshplan import ServingPlan
from meshplan.calibration import serving as cs
from meshplan.hardware import Cluster
from meshplan.model import load_model
from meshplan.serving.cost.constants import engine_constants
from meshplan.serving.cost.iteration import IterationCost, distinct_experts
from meshplan.serving.cost.memory import kv_layout


def _monte_carlo_distinct(tokens: int, top_k: int, experts: int, trials: int = 4000) -> float:
    """Mean number of distinct experts over `trials` batches, each token drawing top_k of
    `experts` without replacement (uniform router)."""
    rng = np.random.default_rng(7)
    picks = np.argsort(rng.random((trials, tokens, experts)), axis=2)[:, :, :top_k]
    hit = np.zeros((trials, experts), dtype=bool)
    np.put_along_axis(hit, picks.reshape(trials, -1), True, axis=1)
    return float(hit.sum(axis=1).mean())


@pytest.mark.parametrize("tokens,top_k,experts", [(1, 8, 128), (4, 8, 128), (16, 8, 128),
                                                  (3, 2, 8), (40, 1, 16), (64, 8, 128)])
def test_distinct_experts_matches_monte_carlo(tokens, top_k, experts):
    assert distinct_experts(tokens, top_k, experts) == pytest.approx(
        _monte_carlo_distinct(tokens, top_k, experts), rel=0.02)


def test_distinct_experts_limits():
    assert distinct_experts(0, 8, 128) == 0.0
    assert distinct_experts(1, 8, 128) == pytest.approx(8.0)  # one token: exactly its top-k
    assert distinct_experts(1, 2, 8) == pytest.approx(2.0)  # not 8(1 - (7/8)^2) = 1.875
    assert distinct_experts(10_000, 8, 128) == pytest.approx(128.0)
    assert distinct_experts(16, 8, 128) < 16 * 8  # a batch reuses experts


def _cost(model_name: str, gpu: str, plan: ServingPlan, **constants) -> IterationCost:
    model = load_model(model_name)
    cluster = Cluster.build(gpu=gpu, num_gpus=plan.gpus_per_replica)
    k = replace(engine_constants("tensorrt-llm"), **constants)
    return IterationCost(model, cluster, plan, kv_layout(model, plan), k)


def test_grouped_gemm_efficiency_slows_only_expert_gemms():
    plan = ServingPlan(engine="tensorrt-llm", weights_dtype="fp8")
    moe_fast = _cost("qwen3-30b-a3b", "h100-sxm-80gb", plan, grouped_gemm_efficiency=1.0)
    moe_slow = _cost("qwen3-30b-a3b", "h100-sxm-80gb", plan, grouped_gemm_efficiency=0.25)
    assert moe_slow.linear(8192) > 1.5 * moe_fast.linear(8192)  # compute-bound prefill
    dense_fast = _cost("llama-3.1-8b", "h100-sxm-80gb", plan, grouped_gemm_efficiency=1.0)
    dense_slow = _cost("llama-3.1-8b", "h100-sxm-80gb", plan, grouped_gemm_efficiency=0.25)
    assert dense_slow.linear(8192) == pytest.approx(dense_fast.linear(8192))


def test_few_tokens_read_only_the_experts_they_reach():
    # Decode of one token on a 128-expert model reads ~8 experts' weights, not all 128: far
    # cheaper than a batch that reaches every expert.
    plan = ServingPlan(engine="tensorrt-llm", weights_dtype="fp8")
    cost = _cost("qwen3-30b-a3b", "h100-sxm-80gb", plan)
    assert cost.linear(1) < 0.5 * cost.linear(256)


def test_pipeline_pays_the_fixed_host_time_once_per_micro_batch():
    plan = ServingPlan(engine="tensorrt-llm", pp=4)
    base = _cost("llama-3.1-70b", "h100-sxm-80gb", plan, iteration_s=1e-3, per_seq_s=0.0)
    more = _cost("llama-3.1-70b", "h100-sxm-80gb", plan, iteration_s=2e-3, per_seq_s=0.0)
    args = (64, 64, 64, 64 * 1000.0, 0, 0.0, 64)
    assert more(*args) - base(*args) == pytest.approx(4 * 1e-3, rel=1e-9)
    calls = np.array([args], dtype=float)
    assert more.batch(calls)[0] == pytest.approx(more(*args), rel=1e-9)


def test_fit_prices_each_engine_on_its_own_cases(monkeypatch):
    class Case:
        def __init__(self, engine):
            self.engine, self.measured = engine, {"output_tokens_per_s": 1.0}
    cases = [Case("tensorrt-llm")] * 25 + [Case("tensorrt-llm-pytorch")] * 25 + [Case("vllm")] * 3
    seen = {}

    def fake(engine, own, max_nfev, start_from):
        seen[engine] = {c.engine for c in own}
        return {}
    monkeypatch.setattr(cs, "_fit_engine", fake)
    cs.fit(cases)
    assert seen == {"tensorrt-llm": {"tensorrt-llm"}, "tensorrt-llm-pytorch": {"tensorrt-llm-pytorch"}}
