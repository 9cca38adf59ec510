"""Touched experts in training micro-batches (costs/routing.py, training/time/layer.py): a
micro-batch of T routed tokens with top-k of E experts reads and runs only the experts some token
reaches, E (1 - (1 - k/E)^T) in expectation; checked against a sampled uniform router."""

from __future__ import annotations

import numpy as np
import pytest

from meshplan import Cluster, load_model
from meshplan.model.spec import MoEMLP
from meshplan.training import TrainingPlan, resolve_plan
from meshplan.training.time.context import cost_context
from meshplan.training.time.layer import layer_time, touched_experts


def sampled_local_touched(tokens: int, top_k: int, experts: int, ep: int, trials: int = 400) -> float:
    """Mean distinct experts on EP rank 0 when `tokens` tokens each pick top_k of `experts` at random."""
    rng = np.random.default_rng(0)
    local = experts // ep
    counts = []
    for _ in range(trials):
        picks = np.argsort(rng.random((tokens, experts)), axis=1)[:, :top_k]
        counts.append(len(np.unique(picks[picks < local])))
    return float(np.mean(counts))


def moe_context(seq_len: int, ep: int, gpus: int = 8):
    model = load_model("deepseek-v3")
    cluster = Cluster.build("h100-sxm-80gb", gpus)
    plan = resolve_plan(TrainingPlan(ep=ep, tp=1, pp=1, micro_batch_size=1, seq_len=seq_len,
                                     global_batch_size=gpus, dp_sharding="full"), model, cluster)
    layer = next(layer for layer in model.layers if isinstance(layer.mlp, MoEMLP))
    return cost_context(model, plan, cluster), layer


@pytest.mark.parametrize("seq_len, ep", [(1, 8), (2, 8), (4, 1), (8, 8), (64, 8)])
def test_touched_experts_match_a_sampled_router(seq_len, ep):
    ctx, layer = moe_context(seq_len, ep)
    predicted = touched_experts(ctx, layer.mlp)
    sampled = sampled_local_touched(seq_len * ep, layer.mlp.top_k, layer.mlp.num_experts, ep)
    assert predicted == pytest.approx(max(1.0, sampled), rel=0.05)  # 400 trials: sampling error ~2%


def test_pretraining_micro_batches_touch_every_local_expert():
    ctx, layer = moe_context(4096, 8)
    assert touched_experts(ctx, layer.mlp) == pytest.approx(layer.mlp.num_experts / 8)


def test_a_short_micro_batch_streams_only_the_touched_experts_weights():
    """One token per rank, 8 in the EP group, over 256 experts with top-8 touch ~58 of them, so the
    expert GEMMs read ~23% of the expert weights: the layer is faster than if all were read."""
    ctx, layer = moe_context(1, 8)
    everyone = touched_experts(ctx, layer.mlp)
    assert everyone < 0.3 * layer.mlp.num_experts / 8
    short = layer_time(ctx, layer).forward_s
    long_ctx, _ = moe_context(64, 8)
    assert short < layer_time(long_ctx, layer).forward_s  # more tokens, more experts touched
