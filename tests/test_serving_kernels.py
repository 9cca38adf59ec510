"""Kernel rates of today's serving engines (serving/data/kernel_rates.yaml): every figure is
sourced, the packaged engine constants are the ones the figures give, FP8 weights halve what a
decode step streams, MoE decode reads each touched expert once, FP8 dispatch halves the
expert-parallel all-to-all."""

from __future__ import annotations

from dataclasses import replace

import pytest

from meshplan import ServingPlan
from meshplan.costs.routing import distinct_experts
from meshplan.hardware import Cluster
from meshplan.hardware.catalog import get_gpu
from meshplan.model import load_model
from meshplan.serving.cost import kernels
from meshplan.serving.cost.constants import engine_constants, resolve
from meshplan.serving.cost.iteration import IterationCost
from meshplan.serving.cost.memory import kv_layout

TABLES = ("fp8_dense_gemm", "fp8_grouped_gemm", "mla_decode", "attention_prefill")


def _cost(model_name: str, gpu: str, plan: ServingPlan, engine: str | None = None, **constants) -> IterationCost:
    model = load_model(model_name)
    cluster = Cluster.build(gpu=gpu, num_gpus=plan.gpus_per_replica)
    k = replace(engine_constants(engine or plan.engine), **constants)
    return IterationCost(model, cluster, plan, kv_layout(model, plan), k)


def _tables(data: dict):
    for name in TABLES:
        yield name, data[name]
    for name, table in data["ep_dispatch_combine"].items():
        yield f"ep_dispatch_combine.{name}", table


def test_every_table_names_a_pinned_source_and_a_catalog_gpu():
    data = kernels.rates()
    for source in data["sources"].values():
        assert source["repo"] and len(source["commit"]) == 40 and source["path"] and source["where"]
    for name, table in _tables(data):
        assert table["source"] in data["sources"], name
        get_gpu(table["gpu"])  # raises for a GPU the catalog lacks
        for row in table.get("rows", []):
            assert len(row) == len(table["columns"]), (name, row)


def test_grouped_gemm_efficiency_is_what_deepgemm_measures():
    # DeepGEMM's grouped GEMMs reach ~90% of its dense GEMMs' rate at the same per-expert shape.
    derived = kernels.grouped_gemm_efficiency()
    assert 0.85 < derived < 0.97
    for engine in ("vllm", "sglang", "tensorrt-llm"):  # the defaults a fit starts from
        assert resolve(engine, {}).grouped_gemm_efficiency == pytest.approx(derived, abs=0.01), engine


def test_decode_attention_streams_kv_at_flashmla_bandwidth():
    derived = kernels.decode_attention_bandwidth_fraction()
    assert derived == pytest.approx(3000e9 / 3.35e12)
    for engine in ("vllm", "sglang"):  # engines without a fit price paged decode at this rate
        assert resolve(engine, {}).kv_read_efficiency == pytest.approx(derived, abs=0.01), engine


def test_fp8_weights_halve_the_bytes_a_decode_step_streams():
    # Llama 3.1 8B at batch 1 is weight-bandwidth bound: FP8 reads half the bytes of BF16
    # (the per-kernel launch time, ~0.5 ms over 32 layers, does not halve).
    bf16 = _cost("llama-3.1-8b", "h200-sxm-141gb", ServingPlan(engine="vllm", weights_dtype="bf16"))
    fp8 = _cost("llama-3.1-8b", "h200-sxm-141gb", ServingPlan(engine="vllm", weights_dtype="fp8"))
    assert 0.5 < fp8.linear(1) / bf16.linear(1) < 0.6


def test_moe_decode_reads_each_touched_expert_once():
    # At decode the routed experts take at least (distinct experts touched x expert bytes) / HBM
    # bandwidth, and once every local expert is touched more tokens cost little more: each
    # expert's weights are read once per iteration, not once per token.
    model = load_model("qwen3-235b-a22b")
    plan = ServingPlan(engine="sglang", weights_dtype="fp8", tp=8, ep=8)
    cost = _cost("qwen3-235b-a22b", "h200-sxm-141gb", plan)
    mlp = model.layers[0].mlp
    expert_bytes = 3 * mlp.expert.intermediate_size * model.hidden_size * 1.0  # fp8
    times = {}
    for batch in (1, 8, 64, 256):
        touched = distinct_experts(batch, mlp.top_k, mlp.num_experts) / plan.ep
        floor = touched * expert_bytes / cost.cluster.gpu.hbm_bandwidth_bytes_per_s
        times[batch] = cost._moe(mlp, batch) - cost._gemm(batch, mlp.num_experts, model.hidden_size)
        assert times[batch] >= floor, batch
    assert times[256] < 1.25 * times[64]


def test_fp8_dispatch_shrinks_the_expert_all_to_all():
    assert kernels.dispatch_bytes_per_element("sglang", "fp8") == pytest.approx(1 + 4 / 128)
    assert kernels.dispatch_bytes_per_element("sglang", "bf16") == 2.0
    assert kernels.dispatch_bytes_per_element("vllm", "fp8") == 2.0
    assert kernels.dispatch_bytes_per_element("tensorrt-llm-pytorch", "fp8") == 2.0  # fitted at 16 bits
    plan = ServingPlan(engine="sglang", weights_dtype="fp8", tp=8, ep=8)
    fp8, wide = _cost("qwen3-235b-a22b", "h100-sxm-80gb", plan), _cost("qwen3-235b-a22b", "h100-sxm-80gb", plan)
    wide.dispatch_width = 2.0  # the same step with a 16-bit dispatch
    layer = fp8.model.layers[0]
    tokens = 8192  # a prefill-sized batch: bandwidth bound, not latency bound
    assert fp8._ep_comm(layer, tokens) < 0.85 * wide._ep_comm(layer, tokens)
    vllm = _cost("qwen3-235b-a22b", "h100-sxm-80gb", ServingPlan(engine="vllm", weights_dtype="fp8", tp=8, ep=8))
    assert vllm.dispatch_width == 2.0


def test_blackwell_attention_ceiling_is_the_measured_b200_kernel():
    from meshplan.costs.constants import upper_bound

    fmha = kernels.rates()["attention_prefill"]
    measured = fmha["forward_tflops"] * 1e12 / get_gpu(fmha["gpu"]).peak_flops("bf16")
    assert upper_bound("blackwell", "fused_attention_efficiency") == pytest.approx(measured, abs=0.001)
