"""Expert-parallel MoE physics (training/time/moe.py): grouped expert GEMMs bounded by their weight
reads, dispatch volume and bandwidth by dispatcher (NCCL all-to-all vs DeepEP-style flex with
per-node deduplication and fp8 dispatch), and what an all-to-all overlap schedule hides; the
power-cap exponent from NVIDIA's paired data-sheet rows."""

from __future__ import annotations

import math
from dataclasses import replace

import pytest

from meshplan import Cluster, load_model
from meshplan.costs.ops import POWER_CLOCK_EXPONENT
from meshplan.hardware import get_gpu
from meshplan.model.spec import MoEMLP
from meshplan.training import TrainingPlan, resolve_plan
from meshplan.training.estimate import estimate_step
from meshplan.training.time import moe
from meshplan.training.time.constants import TrainingConstants
from meshplan.training.time.context import cost_context
from meshplan.training.time.layer import layer_time
from meshplan.validate.schema import Record
from meshplan.yamlread import load_packaged
from meshplan.validate.training_records import training_case
from tests.conftest import RECORDS

DSV3 = load_model("deepseek-v3")
QWEN = load_model("qwen3-30b-a3b")


def context(model, gpu="h100-sxm-80gb", n=64, **fields):
    cluster = Cluster.build(gpu, n)
    base = dict(seq_len=4096, global_batch_size=n * 4, micro_batch_size=1)
    plan = resolve_plan(TrainingPlan(**(base | fields)), model, cluster)
    return cost_context(model, plan, cluster, TrainingConstants())


def moe_layer(model):
    return next(layer for layer in model.layers if isinstance(layer.mlp, MoEMLP))


def test_few_tokens_per_expert_are_bound_by_reading_the_expert_weights():
    # 4 tokens per expert: the grouped GEMM cannot go faster than streaming every touched
    # expert's three weight matrices from HBM once, and 4x the rows cost (almost) nothing more.
    ctx = context(QWEN, n=8, ep=8)
    mlp = moe_layer(QWEN).mlp
    e, h = mlp.expert.intermediate_size, QWEN.hidden_size
    weights = 16 * 3 * e * h * 2  # 16 local experts, gate/up/down, bf16
    floor = weights / (ctx.cluster.gpu.hbm_bandwidth_bytes_per_s * ctx.c.hbm_efficiency)
    few = moe.grouped_gemm_s(ctx, mlp, 16, 4, 1)
    assert floor < few < 1.25 * floor
    assert moe.grouped_gemm_s(ctx, mlp, 16, 16, 1) == pytest.approx(few, rel=0.05)
    # thousands of tokens per expert: compute-bound, linear in the rows
    big = moe.grouped_gemm_s(ctx, mlp, 16, 4096, 1)
    assert moe.grouped_gemm_s(ctx, mlp, 16, 8192, 1) == pytest.approx(2 * big, rel=0.05)


def test_rows_are_padded_to_the_kernel_tile_per_expert():
    ctx = context(QWEN, n=8, ep=8)
    mlp = moe_layer(QWEN).mlp
    assert moe.grouped_gemm_s(ctx, mlp, 16, 1537, 1) == moe.grouped_gemm_s(ctx, mlp, 16, 1600, 1)


def test_flex_sends_a_token_once_per_remote_node_and_fp8_halves_the_dispatch():
    # DeepSeek-V3 top-8 of 256 experts over EP64 on 8 H100 nodes: an NCCL all-to-all moves every
    # routed copy, DeepEP one copy per node reached; fp8 dispatch moves (1 + 4/128) bytes/element.
    layer = moe_layer(DSV3)
    a2a = context(DSV3, ep=64, moe_dispatcher="alltoall")
    flex = context(DSV3, ep=64, moe_dispatcher="flex")
    fp8 = context(DSV3, ep=64, moe_dispatcher="flex", precision="fp8")
    load = 1.0
    assert moe.ep_comm_s(flex, layer.mlp, load) < 0.8 * moe.ep_comm_s(a2a, layer.mlp, load)
    assert moe.dispatch_width(fp8) == pytest.approx(1 + 4 / 128)
    assert moe.dispatch_width(flex) == 2.0
    one = moe.ep_comm_s(flex, layer.mlp, load) / 2  # dispatch and combine, both bf16
    assert moe.ep_comm_s(fp8, layer.mlp, load) == pytest.approx(one * (1 + (1 + 4 / 128) / 2), rel=0.02)


def test_nodes_a_token_reaches_follow_from_top_k_over_groups():
    assert moe.touched_share(1, 8, 256) == 1.0
    assert moe.touched_share(256, 8, 256) == pytest.approx(8.0)
    eight = moe.touched_share(8, 8, 256)  # 1 - P(no expert of a node among the 8)
    miss = math.prod((256 - 32 - j) / (256 - j) for j in range(8))
    assert eight == pytest.approx(8 * (1 - miss))


def test_node_limited_routing_caps_the_nodes_a_token_reaches():
    # DeepSeek-V3 (config.json n_group 8, topk_group 4): a token's 8 experts come from at most
    # 4 of the 8 expert groups, one group per node at EP64 on 8 nodes, so DeepEP sends it to 4
    # nodes at most (8 x (1 - C(7,4)/C(8,4)) = 4 on average) instead of ~5.3 unrestricted.
    mlp = moe_layer(DSV3).mlp
    assert (mlp.n_group, mlp.topk_group) == (8, 4)
    assert (moe_layer(QWEN).mlp.n_group, moe_layer(QWEN).mlp.topk_group) == (1, 1)
    free = replace(mlp, topk_group=8)
    assert moe.touched_units(mlp, 8) == pytest.approx(4.0)
    assert moe.touched_units(free, 8) == pytest.approx(moe.touched_share(8, 8, 256))
    assert moe.touched_units(mlp, 4) == pytest.approx(moe.touched_share(4, 4, 8))
    # groups spread over two units each: the top-8 land on the 8 units of the 4 chosen groups
    assert moe.touched_units(mlp, 16) == pytest.approx(moe.touched_share(8, 8, 128))
    flex = context(DSV3, ep=64, moe_dispatcher="flex")
    assert moe.ep_comm_s(flex, mlp, 1.0) < 0.85 * moe.ep_comm_s(flex, free, 1.0)


def test_each_rank_dispatches_its_own_sequence_parallel_shard():
    # Megatron-Core's alltoall dispatcher sends a rank's sequence-parallel shard over the EP
    # group and only then all-gathers the routed copies over the expert-TP group
    # (token_dispatcher.py, dispatch_postprocess): the all-to-all does not grow with etp,
    # the expert-TP gather carries every routed copy.
    layer = moe_layer(QWEN)
    folded = context(QWEN, n=8, tp=2, ep=4, etp=1)
    expert_tp = context(QWEN, n=8, tp=2, ep=4, etp=2)
    assert moe.ep_comm_s(expert_tp, layer.mlp, 1.0) == pytest.approx(moe.ep_comm_s(folded, layer.mlp, 1.0))
    gathered = layer_time(expert_tp, layer).tp_comm_s / layer_time(folded, layer).tp_comm_s
    assert gathered == pytest.approx(1 + layer.mlp.top_k * expert_tp.k.moe_imbalance, rel=1e-9)


def test_calibration_moe_records_state_what_they_ran():
    rows = [r for r in load_packaged((RECORDS / "training-calibration.yaml").read_text())["records"]
            if (r["training"].get("ep") or 1) > 1]
    assert len(rows) >= 22
    for r in rows:
        assert r["training"].get("moe_dispatcher") in moe.DISPATCHERS, r["id"]
        assert isinstance(r["training"].get("moe_a2a_overlap"), bool), r["id"]


def test_expert_parallelism_across_nodes_costs_more_than_inside_an_nvlink_domain():
    # gpt-oss-like EP64: on 8-GPU B200 nodes the dispatch crosses 400 Gb/s NICs, on a GB200 NVL72
    # rack it stays on NVLink (Megatron-Bridge measured 8,047 vs 15,784 tokens/s per GPU).
    model = load_model("qwen3-30b-a3b")
    hgx = estimate_step(model, Cluster.build("b200-180gb", 64),
                        resolve_plan(TrainingPlan(ep=64, seq_len=4096, global_batch_size=256,
                                                  micro_batch_size=1, moe_dispatcher="alltoall"),
                                     model, Cluster.build("b200-180gb", 64)))
    nvl = estimate_step(model, Cluster.build("gb200-186gb", 64),
                        resolve_plan(TrainingPlan(ep=64, seq_len=4096, global_batch_size=256,
                                                  micro_batch_size=1, moe_dispatcher="alltoall"),
                                     model, Cluster.build("gb200-186gb", 64)))
    assert hgx.breakdown["ep_comm"] > 5 * nvl.breakdown["ep_comm"]


def test_all_to_all_overlap_hides_dispatch_behind_compute():
    layer = moe_layer(DSV3)
    plain = context(DSV3, ep=64, moe_dispatcher="flex")
    overlapped = context(DSV3, ep=64, moe_dispatcher="flex", moe_a2a_overlap=True)
    assert layer_time(overlapped, layer).forward_s < layer_time(plain, layer).forward_s
    k = overlapped.k
    assert moe.ep_exposed_s(overlapped, 1.0, 3.0) == pytest.approx(k.overlap_penalty * 1.0)
    assert moe.ep_exposed_s(overlapped, 3.0, 1.0) == pytest.approx(2.0 + k.overlap_penalty)
    assert moe.ep_exposed_s(plain, 2.0, 5.0) == pytest.approx(2.0)  # flex_exposed default 1
    half = replace(plain, k=replace(plain.k, flex_exposed=0.5))
    assert moe.ep_exposed_s(half, 2.0, 5.0) == pytest.approx(1.0 + 0.1 * 1.0)
    nccl = context(DSV3, ep=64, moe_dispatcher="alltoall")
    assert moe.ep_exposed_s(replace(nccl, k=half.k), 2.0, 5.0) == 2.0  # NCCL blocks the block


def test_dispatcher_defaults_to_alltoall_for_every_framework():
    # Megatron-Bridge's model providers default to alltoall; its perf configs opt into flex per
    # model and GPU, so nemo gets no flex default and its records say what they ran.
    for framework in ("nemo", "megatron", "torchtitan", None):
        kwargs = {"framework": framework} if framework else {}
        assert context(DSV3, ep=64, **kwargs).plan.moe_dispatcher == "alltoall"
    assert context(DSV3, ep=64, framework="nemo", moe_dispatcher="flex").plan.moe_dispatcher == "flex"


def test_megatron_bridge_moe_records_state_their_dispatcher():
    files = [RECORDS / "training-calibration.yaml", RECORDS / "held-out" / "megatron-bridge.yaml"]
    rows = [r for f in files for r in load_packaged(f.read_text())["records"]
            if r["id"].startswith(("mbh-", "mbridge-")) and (r["training"].get("ep") or 1) > 1]
    assert len(rows) >= 50
    for r in rows:
        assert r["training"].get("moe_dispatcher") in moe.DISPATCHERS, r["id"]
        assert isinstance(r["training"].get("moe_a2a_overlap"), bool), r["id"]


def test_record_keys_reach_the_plan():
    row = {"id": "x", "kind": "training", "source": {"name": "t"}, "model": "deepseek-v3",
           "hardware": {"gpu": "h800-sxm-80gb", "num_gpus": 512},
           "training": {"framework": "other", "seq_length": 4096, "ep": 64,
                        "moe_dispatcher": "flex", "moe_a2a_overlap": True},
           "measured": {"tokens_per_s_per_gpu": 1000.0}}
    plan = training_case(Record.model_validate(row)).plan
    assert plan.moe_dispatcher == "flex" and plan.moe_a2a_overlap is True


def test_power_exponent_reproduces_the_paired_data_sheet_rows():
    # The same die at two power envelopes: per-SM dense BF16 rate ratio vs power ratio.
    exponents = []
    for low, high in (("b200-180gb", "gb200-186gb"), ("b300-288gb", "gb300-288gb")):
        a, b = get_gpu(low), get_gpu(high)
        rate = (a.peak_flops("bf16") / a.sm_count) / (b.peak_flops("bf16") / b.sm_count)
        exponents.append(math.log(rate) / math.log(a.tdp_w / b.tdp_w))
    assert POWER_CLOCK_EXPONENT == pytest.approx(sum(exponents) / 2, abs=0.01)


def test_megatron_launch_names_the_dispatcher_and_the_overlap():
    from meshplan.export import export_plan

    ctx = context(DSV3, ep=64, moe_dispatcher="flex", moe_a2a_overlap=True)
    text = export_plan("megatron", DSV3, ctx.cluster, ctx.plan)
    assert "--moe-token-dispatcher-type flex" in text
    assert "--moe-flex-dispatcher-backend deepep" in text
    assert "--overlap-moe-expert-parallel-comm" in text
    plain = context(DSV3, ep=64)
    text = export_plan("megatron", DSV3, plain.cluster, plain.plan)
    assert "--moe-token-dispatcher-type alltoall" in text and "overlap-moe" not in text
