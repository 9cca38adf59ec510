"""Scaling laws of activation memory: batch, sequence (flash vs eager), tp with SP, cp."""

from __future__ import annotations

import pytest

from meshplan import Cluster, load_model
from meshplan.training import TrainingPlan, resolve_plan
from meshplan.training.memory.activations import layer_activation_bytes

L8 = load_model("llama-3.1-8b")


def per_layer(gpus=8, **fields) -> float:
    plan = resolve_plan(TrainingPlan(**fields), L8, Cluster.build("h100-sxm-80gb", gpus))
    return layer_activation_bytes(L8.layers[0], L8, plan)


@pytest.mark.parametrize("framework", ["megatron", "torchtitan", "hf"])
def test_linear_in_micro_batch(framework):
    one = per_layer(framework=framework, micro_batch_size=1, global_batch_size=8)
    four = per_layer(framework=framework, micro_batch_size=4, global_batch_size=32)
    assert four == pytest.approx(4 * one)


@pytest.mark.parametrize("framework, attention", [("megatron", "flash"), ("hf", "sdpa")])
def test_linear_in_sequence_with_fused_attention(framework, attention):
    short = per_layer(framework=framework, attention=attention, seq_len=2048)
    long = per_layer(framework=framework, attention=attention, seq_len=8192)
    assert long == pytest.approx(4 * short)


def test_quadratic_term_with_eager_attention():
    f = {s: per_layer(framework="hf", attention="eager", seq_len=s) for s in (1024, 2048, 4096)}
    # second difference of f(s) = a s + c s^2 is 2 c s0^2 > 0, and grows 4x when s doubles
    assert f[4096] - 2 * f[2048] > 0
    assert (f[4096] - 2 * f[2048]) == pytest.approx(4 * (f[2048] - 2 * f[1024]))


def test_sequence_parallel_divides_everything_by_tp():
    tp1 = per_layer(framework="megatron", tp=1)
    tp8 = per_layer(framework="megatron", tp=8, sequence_parallel=True)
    assert tp8 == pytest.approx(tp1 / 8)
    no_sp = per_layer(framework="megatron", tp=8, sequence_parallel=False)
    assert tp1 / 8 < no_sp < tp1


def test_context_parallel_divides_by_cp():
    cp1 = per_layer(framework="megatron", seq_len=16384)
    cp4 = per_layer(framework="megatron", seq_len=16384, cp=4)
    assert cp4 == pytest.approx(cp1 / 4)


def test_megatron_llama_layer_matches_the_generalised_korthikanti_formula():
    # bf16, flash attention, SwiGLU, GQA, no dropout, per token per layer:
    # norms 2 x (2h + 4) + GEMM inputs 2 x 2h + q 2ad + k,v 4kd + out 2ad + lse 4a + 6i bytes
    h, a, kv, d, i = 4096, 32, 8, 128, 14336
    per_token = 2 * (2 * h + 4) + 2 * 2 * h + 2 * a * d + 4 * kv * d + 2 * a * d + 4 * a + 6 * i
    assert per_layer(framework="megatron", seq_len=4096) == 4096 * per_token
