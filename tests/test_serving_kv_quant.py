"""4-/2-bit KV cache (KIVI-style, meshplan.serving.cost.kvquant): bytes per token with group scales,
the 16-bit residual per request, the dequantisation cost in decode attention, capacity and
speed in the direction physics says, and the refusal on engines that do not ship it."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from meshplan.cli.app import app
from meshplan.hardware import Cluster, get_gpu
from meshplan.model import load_model
from meshplan.serving.engine.deployment import build_replicas, resolve_pools
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.cost.kvquant import (GROUP_SIZE, RESIDUAL_TOKENS, dequant_s_per_byte,
                                           kv_element_bytes)
from meshplan.serving.cost.memory import kv_layout
from meshplan.serving.plan import ServingPlan
from meshplan.serving.traffic.workload import WorkloadSpec, synthesize

MODEL = load_model("llama-3.1-8b")
CLUSTER = Cluster.build(gpu="h100-sxm-80gb", num_gpus=1)
ELEMENTS = 32 * 8 * (128 + 128)
"""Llama-3.1-8B KV elements per token: 32 layers x 8 KV heads x (K 128 + V 128)."""


def plan(kv: str) -> ServingPlan:
    return ServingPlan(kv_cache_dtype=kv, what_if=kv in ("int4", "int2"))


def test_element_bytes_count_the_group_scale_and_zero_point():
    # 4 (or 2) bits + an fp16 scale and fp16 zero point per 32 elements = 1 more bit
    assert kv_element_bytes("int4") == pytest.approx((4 + 32 / GROUP_SIZE) / 8) == 0.625
    assert kv_element_bytes("int2") == 0.375
    assert kv_element_bytes("fp8") == 1.0 and kv_element_bytes("bf16") == 2.0


def test_layout_by_hand():
    for kv, width in (("int4", 0.625), ("int2", 0.375)):
        layout = kv_layout(MODEL, plan(kv))
        assert layout.bytes_per_token == ELEMENTS * width
        assert layout.windowed_bytes_per_request == RESIDUAL_TOKENS * ELEMENTS * (2 - width)
    assert kv_layout(MODEL, plan("bf16")).windowed_bytes_per_request == 0.0


def cost_and_pool(kv: str):
    wl = synthesize(WorkloadSpec(arrival="offline", num_requests=4, dataset="fixed", input_len=64, output_len=8))
    pool = resolve_pools(MODEL, CLUSTER, plan(kv), wl)[0]
    return build_replicas(MODEL, CLUSTER, pool, wl, IterationLog(), 0)[0].cost, pool


def test_decode_attention_adds_dequantisation_to_its_arithmetic():
    cost, _ = cost_and_pool("int4")
    seqs, ctx = 64, 64 * 4000.0
    read = ctx * ELEMENTS * 0.625 + seqs * RESIDUAL_TOKENS * ELEMENTS * (2 - 0.625)
    per_byte = 4 / 0.625 / get_gpu("h100-sxm-80gb").peak_flops("fp32")
    assert cost.dequant_s_per_byte == pytest.approx(per_byte) == dequant_s_per_byte("int4", CLUSTER.gpu)
    compute = ctx * cost.full_flops_per_pair * cost.attn_unit + read * per_byte
    expected = max(read * cost.kv_read_s_per_byte, compute)
    assert cost.decode_attention(seqs, ctx) == pytest.approx(expected, rel=1e-12)
    assert cost_and_pool("bf16")[0].dequant_s_per_byte == 0.0


def test_fewer_bits_hold_more_tokens_and_read_faster():
    pools = {kv: cost_and_pool(kv) for kv in ("bf16", "fp8", "int4", "int2")}
    tokens = [pools[kv][1].memory.kv_tokens for kv in ("bf16", "fp8", "int4", "int2")]
    assert tokens == sorted(tokens) and len(set(tokens)) == 4
    attn = [pools[kv][0].decode_attention(32, 32 * 8000.0) for kv in ("bf16", "fp8", "int4")]
    assert attn == sorted(attn, reverse=True)


runner = CliRunner()
BASE = ["serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-requests", "5"]


@pytest.mark.parametrize("engine, kv, name", [("vllm", "int2", "vLLM"), ("sglang", "int4", "SGLang"),
                                               ("tensorrt-llm", "int4", "TensorRT-LLM")])
def test_engines_refuse_sub_byte_kv_without_what_if(engine, kv, name):
    out = runner.invoke(app, [*BASE, "--engine", engine, "--kv-cache-dtype", kv])
    assert out.exit_code == 2
    assert f"kv_cache_dtype='{kv}'" in out.output and name in out.output and "--what-if" in out.output
    assert runner.invoke(app, [*BASE, "--engine", engine, "--kv-cache-dtype", kv, "--what-if"]).exit_code == 0


def test_exporters_refuse_sub_byte_kv():
    from meshplan.errors import ConfigError
    from meshplan.export.serving import export_serving

    for target in ("vllm", "sglang"):
        with pytest.raises(ConfigError, match="kv_cache_dtype='int4'"):
            export_serving(target, "meta-llama/Llama-3.1-8B", plan("int4"))
