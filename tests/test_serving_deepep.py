"""DeepEP's dispatch modes in the serving iteration cost (meshplan.serving.cost.deepep): normal
kernels (steps with prefill tokens under SGLang's --deepep-mode auto) send one copy per
destination node and forward over NVLink; low-latency kernels (decode-only steps) keep the
top-k all-to-all. The distinct-node count is meshplan.costs.routing.touched_units, shared with
training's flex dispatcher."""

from __future__ import annotations

import itertools
import math
from dataclasses import replace

import numpy as np
import pytest

from meshplan.costs.comm import collective_time
from meshplan.costs.routing import touched_share, touched_units
from meshplan.hardware import Cluster
from meshplan.model import load_model
from meshplan.model.spec import MoEMLP
from meshplan.serving.cost import deepep
from meshplan.serving.cost.constants import constants_key, engine_constants
from meshplan.serving.cost.iteration import IterationCost
from meshplan.serving.cost.kernels import COMBINE_BYTES
from meshplan.serving.cost.memory import kv_layout
from meshplan.serving.plan import ServingPlan

DSV3 = load_model("deepseek-v3")
KIMI = load_model("kimi-k2")


def moe_layer(model):
    return next(layer for layer in model.layers if isinstance(layer.mlp, MoEMLP))


def cost(model, gpus: int, engine: str = "sglang", gpu: str = "h100-sxm-80gb", tbo: bool = False) -> IterationCost:
    """An attention-DP + EP replica over `gpus` GPUs, 8 per node (`tbo`: two-batch overlap)."""
    cluster = Cluster.build(gpu, gpus, gpus_per_node=8)
    plan = ServingPlan(engine=engine, tp=1, dp=gpus, ep=gpus, weights_dtype="fp8")
    return IterationCost(model, cluster, plan, kv_layout(model, plan),
                         engine_constants(constants_key(engine, None)), two_batch_overlap=tbo)


def deepseek_router(units: int, tokens: int = 20000, seed: int = 0) -> float:
    """Mean distinct units (equal slices of the experts) a token's experts land on, by simulating
    DeepSeek-V3's group-limited router on random scores: rank the 8 groups of 32 experts by the
    sum of their top-2 scores, keep the best 4, take the top-8 experts among those."""
    rng = np.random.default_rng(seed)
    scores = rng.random((tokens, 256))
    group_score = np.sort(scores.reshape(tokens, 8, 32), axis=2)[:, :, -2:].sum(axis=2)
    keep = np.zeros((tokens, 8), dtype=bool)
    np.put_along_axis(keep, np.argsort(group_score, axis=1)[:, -4:], True, axis=1)
    masked = np.where(np.repeat(keep, 32, axis=1), scores, -1.0)
    unit = np.sort(np.argpartition(masked, -8, axis=1)[:, -8:] // (256 // units), axis=1)
    return float((1 + (np.diff(unit, axis=1) != 0).sum(axis=1)).mean())


def test_distinct_units_match_a_brute_force_enumeration():
    # every top-4 choice of 16 experts over 4 units of 4: the exact mean of distinct units
    choices = list(itertools.combinations(range(16), 4))
    exact = sum(len({e // 4 for e in c}) for c in choices) / len(choices)
    assert touched_share(4, 4, 16) == pytest.approx(exact, rel=1e-12)
    # group-limited: every choice of 2 of 4 groups, groups two per unit or one per unit
    mlp = MoEMLP(num_experts=16, top_k=4, expert=moe_layer(DSV3).mlp.expert, n_group=4, topk_group=2)
    pairs = list(itertools.combinations(range(4), 2))
    assert touched_units(mlp, 2) == pytest.approx(sum(len({g // 2 for g in p}) for p in pairs) / len(pairs))
    assert touched_units(mlp, 4) == pytest.approx(2.0)


@pytest.mark.parametrize("nodes", [2, 4, 8])
def test_distinct_nodes_match_deepseeks_router(nodes):
    # node-limited routing: the expected nodes of the shared formula within 2% of the simulated
    # router (each chosen group almost always holds one of the top-8 experts)
    assert touched_units(moe_layer(DSV3).mlp, nodes) == pytest.approx(deepseek_router(nodes), rel=0.02)


def test_distinct_gpus_under_node_limited_routing_are_slightly_undercounted():
    # with groups spread over several units (GPUs), the formula spreads the top-8 uniformly over
    # the chosen groups' experts; the router's chosen groups each hold a top expert, so it reaches
    # a few more: a known under-count of the NVLink copies, below 8%
    formula, simulated = touched_units(moe_layer(DSV3).mlp, 32), deepseek_router(32)
    assert formula < simulated < formula * 1.08


def test_normal_mode_sends_one_copy_per_remote_node_for_deepseek_v3_ep32():
    c = cost(DSV3, 32)
    mlp = moe_layer(DSV3).mlp
    assert (c.ep_group.nodes, c.ep_group.ranks_per_node) == (4, 8)
    remote, local = deepep.normal_copies(mlp, c.ep_group, c.cluster)
    # today's all-to-all: top-8 copies, 24 of every 32 destinations off the node
    assert remote == pytest.approx(touched_units(mlp, 4) * 3 / 4) and remote < 0.4 * 8 * 24 / 32
    assert local == pytest.approx(touched_units(mlp, 32) * 7 / 8)
    layer = moe_layer(DSV3)
    for tokens in (512, 4096, 16384):
        assert c._ep_comm(layer, tokens, normal=True) < 0.6 * c._ep_comm(layer, tokens)


def test_low_latency_mode_keeps_the_top_k_all_to_all():
    c = cost(DSV3, 32)
    layer, t = moe_layer(DSV3), 128
    rows = c._ep_rows(layer.mlp, t)
    expected = 2 * c.k.collective_s + sum(collective_time("all_to_all", rows * w, c.ep_group, c.cluster)
                                          for w in (c.dispatch_width, COMBINE_BYTES))
    assert c._ep_comm(layer, t) == pytest.approx(expected, rel=1e-12)
    decode = (t, t, t, t * 2000.0, 0, 0.0, t)  # a decode-only step: no prefill tokens
    assert c(*decode) == pytest.approx(c.batch(np.array([decode]))[0], rel=1e-12)
    assert c.linear(t) != c.linear_normal(t)


@pytest.mark.parametrize("tbo", [False, True])
def test_prefill_steps_dispatch_in_normal_mode_and_decode_steps_in_low_latency(tbo):
    c = cost(DSV3, 32, tbo=tbo)
    assert c.deepep and c.tbo == tbo
    steps = np.array([(4096, 4, 0, 0.0, 4096, 4096 * 4097 / 2, 4),
                      (256, 256, 256, 256 * 2000.0, 0, 0.0, 256),
                      (1024, 65, 64, 64 * 2000.0, 960, 960 * 961 / 2, 65)])
    one_by_one = [c(*(int(v) if i not in (3, 5) else v for i, v in enumerate(row))) for row in steps]
    assert c.batch(steps) == pytest.approx(one_by_one, rel=1e-12)
    decode, prefill = c._memo, c._mode_memos[1]
    if tbo:  # the overlapped pass prices both micro-batches in the step's mode
        decode, prefill = c._mode_memos[0], c._mode_memos[2]
    assert set(prefill) == {4096, 1024} and set(decode) == {256}


def test_other_engines_and_gpus_keep_the_all_to_all():
    layer = moe_layer(DSV3)
    for c in (cost(DSV3, 32, engine="vllm"), cost(DSV3, 8, gpu="mi300x-192gb")):
        assert not c.deepep
        step = (4096, 4, 0, 0.0, 4096, 4096 * 4097 / 2, 4)
        assert c(*step) == pytest.approx(c.batch(np.array([step]))[0], rel=1e-12)
        assert c._mode_memos[1:] == (None, None)
    assert cost(DSV3, 8).deepep


def test_a_model_without_groups_uses_unlimited_routing():
    mlp = moe_layer(KIMI).mlp
    assert mlp.n_group == 1
    c = cost(KIMI, 32)
    remote, _ = deepep.normal_copies(mlp, c.ep_group, c.cluster)
    assert remote == pytest.approx(touched_share(4, mlp.top_k, mlp.num_experts) * 3 / 4)
    # the same experts with DeepSeek's node limit would reach fewer nodes
    limited = replace(mlp, n_group=8, topk_group=4)
    assert deepep.normal_copies(limited, c.ep_group, c.cluster)[0] < remote


def test_rates_are_derived_from_deepeps_table():
    # intranode EP8: (153 + 158) / 2 GB/s of the H800's 200 GB/s NVLink per direction
    assert deepep.nvlink_efficiency() == pytest.approx(155.5 / 200)
    # internode rows, the own node's share removed: EP16 43 x 1/2, EP32 57.5 x 3/4, EP64 50.5 x 7/8
    assert deepep.rdma_efficiency() == pytest.approx(statistics_median([21.5, 57.5 * 3 / 4, 50.5 * 7 / 8]) / 50)


def statistics_median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2] if len(ordered) % 2 else math.fsum(ordered[len(ordered) // 2 - 1:][:2]) / 2


def test_normal_kernels_take_their_sms_from_the_compute_they_hide_under(monkeypatch):
    """overlap.two_batch_time: compute C overlapped with M seconds of DeepEP normal kernels that
    occupy s = 20 / sm_count of the SMs (the legacy Buffer's default, deepep.NORMAL_KERNEL_SMS)
    takes max(M, C + s M); the low-latency decode kernels take none. A TBO prefill step of
    DeepSeek-V3 over EP32 H100s costs exactly that much more than with s = 0."""
    from meshplan.serving.cost.overlap import two_batch_time
    assert two_batch_time(1.0, 0.5, 0.0, 0.2) == pytest.approx(1.1)  # C dominates: + s M
    assert two_batch_time(0.3, 1.0, 0.0, 0.2) == pytest.approx(1.0)  # C fits inside M slowed
    assert deepep.normal_sm_share(132) == pytest.approx(20 / 132)
    c = cost(DSV3, 32, tbo=True)
    prefill = (4096, 4, 0, 0.0, 4096, 4096 * 4097 / 2, 4)
    decode = (256, 256, 256, 256 * 2000.0, 0, 0.0, 256)
    whole, compute, comm, exposed = c.overlapped(4096, True)
    inside = c.prefill_attention(4096, 4096 * 4097 / 2) * c.moe_layers / c.num_layers
    extra = max(compute + inside + 20 / 132 * comm, comm) - max(compute + inside, comm)
    assert extra > 0
    slowed = (c(*prefill), c(*decode), c.batch(np.array([prefill, decode])))
    monkeypatch.setattr("meshplan.serving.cost.iteration.normal_sm_share", lambda sm: 0.0)
    free = cost(DSV3, 32, tbo=True)
    assert slowed[0] - free(*prefill) == pytest.approx(extra * c.device, rel=1e-9)
    assert slowed[1] == pytest.approx(free(*decode), rel=1e-12)
    assert slowed[2] - free.batch(np.array([prefill, decode])) == pytest.approx([extra * c.device, 0.0], abs=1e-12)
