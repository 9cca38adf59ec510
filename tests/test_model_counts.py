"""Analytic parameter, FLOP and KV-cache counts against hand-derived formulas.

The measured twins (transformers on the meta device, FlopCounterMode) are in tests/torch_tier.
"""

from __future__ import annotations

import pytest

from meshplan.model import from_config
from meshplan.model.counts import kv_cache_bytes, mean_visible_keys
from meshplan.model.spec import AttentionSpec


def test_llama_31_8b_parameter_count_is_exact(llama_8b_config):
    # 8,030,261,248 is what transformers instantiates for meta-llama/Llama-3.1-8B.
    assert from_config(llama_8b_config).params_total == 8_030_261_248


def test_gpt2_small_parameter_count_is_exact():
    # GPT-2 small: 124,439,808 parameters (transformers GPT2LMHeadModel, tied head).
    cfg = {"model_type": "gpt2", "n_embd": 768, "n_layer": 12, "n_head": 12,
           "n_positions": 1024, "vocab_size": 50257}
    assert from_config(cfg).params_total == 124_439_808


def test_dense_flops_are_two_per_weight_plus_attention(llama_8b_config):
    m = from_config(llama_8b_config)
    s, layers = 2048, 32
    matmul_weights = m.params_total - m.params_embedding - 4096 * 65  # minus 65 RMSNorms
    attn_full = 2 * 32 * 256 * s * layers  # QK^T and AV over 32 heads of 128
    assert m.flops_per_token_forward(s, causal=False) == 2 * matmul_weights + attn_full
    causal = m.flops_per_token_forward(s, causal=True)
    assert causal == 2 * matmul_weights + attn_full * (s + 1) / (2 * s)


def test_moe_active_params_count_top_k_experts_only():
    cfg = {"model_type": "mixtral", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2,
           "vocab_size": 100, "num_local_experts": 8, "num_experts_per_tok": 2}
    m = from_config(cfg)
    expert = 3 * 64 * 128
    assert m.params_total - m.params_active == 2 * (8 - 2) * expert


def test_sliding_window_and_chunk_limit_visible_keys():
    full = AttentionSpec(num_heads=1, num_kv_heads=1, head_dim=1, v_head_dim=1)
    assert mean_visible_keys(4, full, causal=True) == 2.5
    assert mean_visible_keys(4, full, causal=False) == 4
    window = AttentionSpec(num_heads=1, num_kv_heads=1, head_dim=1, v_head_dim=1, sliding_window=2)
    assert mean_visible_keys(4, window, causal=True) == (1 + 2 + 2 + 2) / 4
    chunk = AttentionSpec(num_heads=1, num_kv_heads=1, head_dim=1, v_head_dim=1, attention_chunk=3)
    assert mean_visible_keys(5, chunk, causal=True) == (1 + 2 + 3 + 1 + 2) / 5


def test_kv_cache_bytes_gqa_and_dtypes(llama_8b_config):
    m = from_config(llama_8b_config)
    # 32 layers x (K and V) x 8 kv heads x 128 x 2 bytes = 131,072 bytes per token (vLLM's formula)
    assert m.kv_cache_bytes_per_token("bf16") == 131_072
    assert m.kv_cache_bytes_per_token("fp8") == 65_536


def test_mla_caches_the_latent_not_the_heads():
    cfg = {"model_type": "deepseek_v3", "hidden_size": 7168, "num_hidden_layers": 61,
           "num_attention_heads": 128, "vocab_size": 129280, "intermediate_size": 18432,
           "moe_intermediate_size": 2048, "n_routed_experts": 256, "num_experts_per_tok": 8,
           "n_shared_experts": 1, "first_k_dense_replace": 3, "q_lora_rank": 1536,
           "kv_lora_rank": 512, "qk_nope_head_dim": 128, "qk_rope_head_dim": 64, "v_head_dim": 128}
    m = from_config(cfg)
    assert m.kv_cache_bytes_per_token("bf16") == 61 * (512 + 64) * 2
    # transformers instantiates 671,026,404,352 parameters (no multi-token-prediction module; the
    # router's e_score_correction_bias, 58 x 256 values in the checkpoint, is a buffer there).
    assert m.params_total == 671_026_404_352
    assert 36e9 < m.params_active < 38e9  # the paper's "37B activated"


def test_sliding_layers_cap_kv_cache_at_window():
    cfg = {"model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
           "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
           "head_dim": 16, "vocab_size": 100, "sliding_window": 8}
    m = from_config(cfg)
    per_layer = 2 * 2 * 16 * 2  # K and V, 2 kv heads, 16 wide, bf16
    assert kv_cache_bytes(m, 100) == per_layer * (8 + 100 + 8 + 100)


@pytest.mark.parametrize("key", ["rope_theta", "rope_parameters"])
def test_rope_read_from_either_spelling(llama_8b_config, key):
    cfg = dict(llama_8b_config)
    theta = cfg.pop("rope_theta")
    scaling = cfg.pop("rope_scaling")
    if key == "rope_parameters":
        cfg["rope_parameters"] = {**scaling, "rope_theta": theta}
    else:
        cfg.update(rope_theta=theta, rope_scaling=scaling)
    m = from_config(cfg)
    assert m.rope_theta == 500000.0
    assert m.rope_scaling["rope_type"] == "llama3"


@pytest.mark.parametrize("name", ["llama-3.1-8b", "gemma-2-9b", "deepseek-v3", "mixtral-8x7b"])
def test_per_layer_sums_grouped_by_distinct_layer_are_exact(name):
    """total_params and matmul FLOPs count each distinct layer once times its repeats; the
    forward FLOPs are memoised per model object. All equal the layer-by-layer sums."""
    from meshplan.model import counts, load_model

    model = load_model(name)
    h = model.hidden_size
    assert counts.total_params(model) == (
        sum(counts.layer_params(layer, model).total for layer in model.layers)
        + counts.embedding_params(model) + counts.lm_head_params(model) + counts.final_norm_params(model))
    per_layer = sum(counts.layer_matmul_params_per_token(layer, h) for layer in model.layers)
    assert counts.matmul_flops_per_token(model) == 2 * (per_layer + model.vocab_size * h)
    attn = sum(counts.attention_flops_per_token(layer.attention, 4096, True) for layer in model.layers)
    first = counts.forward_flops_per_token(model, 4096)
    assert first == counts.matmul_flops_per_token(model) + attn
    assert counts.forward_flops_per_token(model, 4096) == first
    assert counts.forward_flops_per_token(model, 8192) != first
