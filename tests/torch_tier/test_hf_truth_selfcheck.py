"""Self-checks of the torch ground-truth harness (``hf_truth``) against hand formulas.

These tests check the MEASURING side only: that ``hf_truth`` builds each small
config on the meta device, counts its parameters and forward FLOPs, and that
those numbers equal independent closed-form counts for llama, gpt2 and mixtral.
Run with ``pytest -m torch tests/torch_tier -s`` to see the per-family timings.
"""

from __future__ import annotations

import time

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

from . import hf_truth as H  # noqa: E402
from .small_configs import SMALL_CONFIGS, small_config  # noqa: E402

pytestmark = pytest.mark.torch

SEQ = 16
_TIMINGS: dict[str, tuple[float, float]] = {}

LLAMA_3_1_8B = {
    "model_type": "llama",
    "architectures": ["LlamaForCausalLM"],
    "hidden_size": 4096,
    "intermediate_size": 14336,
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "vocab_size": 128256,
    "max_position_embeddings": 131072,
    "rms_norm_eps": 1e-5,
    "hidden_act": "silu",
    "rope_theta": 500000.0,
    "rope_scaling": {
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
        "rope_type": "llama3",
    },
    "attention_bias": False,
    "mlp_bias": False,
    "tie_word_embeddings": False,
    "torch_dtype": "bfloat16",
}


# ------------------------------------------------------------------ hand formulas


def _llama_parts(c: dict) -> dict[str, int]:
    """Parameter counts of a llama-family config, split into kinds (no biases)."""
    h, inter, n_layers, vocab = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    n_heads = c["num_attention_heads"]
    n_kv = c.get("num_key_value_heads") or n_heads
    hd = c.get("head_dim") or h // n_heads
    attn = h * n_heads * hd + 2 * h * n_kv * hd + n_heads * hd * h
    mlp = 3 * h * inter
    return {
        "embedding": vocab * h,
        "lm_head": 0 if c.get("tie_word_embeddings") else vocab * h,
        "attention": n_layers * attn,
        "mlp": n_layers * mlp,
        "norms": n_layers * 2 * h + h,
    }


def llama_params(c: dict) -> int:
    return sum(_llama_parts(c).values())


def llama_forward_flops(c: dict, seq: int, batch: int = 1) -> int:
    """2 * (matmul weights) * tokens + eager attention 4 * S^2 * heads * head_dim per layer.

    The LM head runs over every position even when tied; eager attention
    materialises the full S x S score matrix (causal mask applied after), so
    there is no causal halving.
    """
    p = _llama_parts(c)
    vocab, h = c["vocab_size"], c["hidden_size"]
    matmul = p["attention"] + p["mlp"] + vocab * h
    n_heads = c["num_attention_heads"]
    hd = c.get("head_dim") or h // n_heads
    attn_core = 4 * seq * seq * n_heads * hd * c["num_hidden_layers"]
    return 2 * matmul * batch * seq + attn_core * batch


def gpt2_params(c: dict) -> int:
    h, n_layers, vocab, pos = c["n_embd"], c["n_layer"], c["vocab_size"], c["n_positions"]
    inner = c.get("n_inner") or 4 * h
    per_layer = (
        2 * 2 * h  # ln_1, ln_2 (weight + bias)
        + h * 3 * h + 3 * h  # c_attn (Conv1D, fused qkv) + bias
        + h * h + h  # attn c_proj + bias
        + h * inner + inner  # mlp c_fc + bias
        + inner * h + h  # mlp c_proj + bias
    )
    return vocab * h + pos * h + n_layers * per_layer + 2 * h  # wte + wpe + blocks + ln_f; lm_head tied


def gpt2_forward_flops(c: dict, seq: int) -> int:
    h, n_layers, vocab = c["n_embd"], c["n_layer"], c["vocab_size"]
    inner = c.get("n_inner") or 4 * h
    matmul = n_layers * (h * 3 * h + h * h + 2 * h * inner) + vocab * h
    return 2 * matmul * seq + 4 * seq * seq * h * n_layers


def mixtral_params(c: dict) -> int:
    h, inter, n_layers, vocab = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    n_heads, n_kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or h // n_heads
    n_exp = c["num_local_experts"]
    attn = h * n_heads * hd + 2 * h * n_kv * hd + n_heads * hd * h
    per_layer = attn + h * n_exp + n_exp * 3 * h * inter + 2 * h
    lm_head = 0 if c.get("tie_word_embeddings") else vocab * h
    return vocab * h + lm_head + n_layers * per_layer + h


def mixtral_forward_flops(c: dict, seq: int) -> int:
    """Dense part + router + top_k experts per token + eager attention."""
    h, inter, n_layers, vocab = c["hidden_size"], c["intermediate_size"], c["num_hidden_layers"], c["vocab_size"]
    n_heads, n_kv = c["num_attention_heads"], c["num_key_value_heads"]
    hd = c.get("head_dim") or h // n_heads
    attn = h * n_heads * hd + 2 * h * n_kv * hd + n_heads * hd * h
    active = attn + h * c["num_local_experts"] + c["num_experts_per_tok"] * 3 * h * inter
    return 2 * (n_layers * active + vocab * h) * seq + 4 * seq * seq * n_heads * hd * n_layers


# ------------------------------------------------------------------ every family


@pytest.mark.parametrize("name", sorted(SMALL_CONFIGS))
def test_small_config_params_and_flops(name: str) -> None:
    cfg = small_config(name)
    t0 = time.perf_counter()
    params = H.count_params(cfg)
    t1 = time.perf_counter()
    flops = H.measure_forward_flops(cfg, SEQ)
    t2 = time.perf_counter()
    _TIMINGS[name] = (t1 - t0, t2 - t1)

    assert params > 0
    assert sum(H.count_params_by_module(cfg).values()) == params
    assert flops > 0
    assert sum(H.measure_forward_flops_by_op(cfg, SEQ).values()) == flops
    by_module = H.measure_forward_flops_by_module(cfg, SEQ)
    assert sum(sum(ops.values()) for ops in by_module.values()) == flops
    assert sum(H.measure_forward_flops_by_kind(cfg, SEQ).values()) == flops
    # only matmul-like ops are counted; eager attention => no sdpa op
    assert set(H.measure_forward_flops_by_op(cfg, SEQ)) <= {"aten.mm", "aten.addmm", "aten.bmm"}
    # the LM head runs over every position: 2 * S * hidden * vocab
    hf = H.build_hf_config(cfg)
    assert H.measure_forward_flops_by_kind(cfg, SEQ)["lm_head"] == 2 * SEQ * hf.hidden_size * hf.vocab_size


@pytest.mark.parametrize("name", ["llama", "mixtral", "deepseek_v3", "gpt_oss"])
def test_flops_scale_linearly_with_batch(name: str) -> None:
    cfg = small_config(name)
    assert H.measure_forward_flops(cfg, SEQ, batch=2) == 2 * H.measure_forward_flops(cfg, SEQ)


# ------------------------------------------------------------------ hand-checked families


@pytest.mark.parametrize("name", ["llama", "llama_tied_bias"])
def test_llama_params_by_hand(name: str) -> None:
    cfg = small_config(name)
    expected = llama_params(cfg)
    if cfg.get("attention_bias"):
        n_kv = cfg["num_key_value_heads"]
        hd = cfg["hidden_size"] // cfg["num_attention_heads"]
        expected += cfg["num_hidden_layers"] * (cfg["hidden_size"] + 2 * n_kv * hd + cfg["hidden_size"])
    if cfg.get("mlp_bias"):
        expected += cfg["num_hidden_layers"] * (2 * cfg["intermediate_size"] + cfg["hidden_size"])
    assert H.count_params(cfg) == expected


def test_llama_params_by_kind_by_hand() -> None:
    cfg = small_config("llama")
    parts = {k: v for k, v in _llama_parts(cfg).items() if v}
    assert H.count_params_by_module(cfg) == parts


def test_gpt2_params_by_hand() -> None:
    cfg = small_config("gpt2")
    assert H.count_params(cfg) == gpt2_params(cfg)


def test_mixtral_params_by_hand() -> None:
    cfg = small_config("mixtral")
    assert H.count_params(cfg) == mixtral_params(cfg)


@pytest.mark.parametrize("seq", [16, 64])
def test_llama_flops_by_hand(seq: int) -> None:
    cfg = small_config("llama")
    assert H.measure_forward_flops(cfg, seq) == llama_forward_flops(cfg, seq)
    assert H.measure_forward_flops(cfg, seq, batch=3) == llama_forward_flops(cfg, seq, batch=3)


def test_llama_attention_is_counted_as_bmm() -> None:
    """Eager attention: QK^T and PV are two aten.bmm (batch*heads, S, d) x (., d, S), no sdpa.

    Projections are aten.mm (no bias) / aten.addmm (bias).  Per layer the
    attention module itself owns exactly 2 * 2 * S * S * heads * head_dim.
    """
    cfg = small_config("llama")
    h, n_heads, n_layers = cfg["hidden_size"], cfg["num_attention_heads"], cfg["num_hidden_layers"]
    hd = h // n_heads
    by_op = H.measure_forward_flops_by_op(cfg, SEQ)
    assert set(by_op) == {"aten.mm", "aten.bmm"}
    assert by_op["aten.bmm"] == 4 * SEQ * SEQ * n_heads * hd * n_layers
    by_kind = H.measure_forward_flops_by_kind(cfg, SEQ)
    assert by_kind["attention_core"] == by_op["aten.bmm"]
    core = {k: v for k, v in H.measure_forward_flops_by_module(cfg, SEQ).items() if k.endswith("self_attn")}
    assert len(core) == n_layers
    assert all(ops == {"aten.bmm": 4 * SEQ * SEQ * n_heads * hd} for ops in core.values())


def test_gpt2_flops_by_hand() -> None:
    """Conv1D layers are aten.addmm; the tied LM head is still a full aten.mm."""
    cfg = small_config("gpt2")
    assert H.measure_forward_flops(cfg, SEQ) == gpt2_forward_flops(cfg, SEQ)
    by_op = H.measure_forward_flops_by_op(cfg, SEQ)
    assert by_op["aten.mm"] == 2 * SEQ * cfg["n_embd"] * cfg["vocab_size"]


def test_mixtral_flops_by_hand() -> None:
    """batched_mm experts: one bmm per projection over tokens * top_k rows; router is an mm."""
    cfg = small_config("mixtral")
    assert H.measure_forward_flops(cfg, SEQ) == mixtral_forward_flops(cfg, SEQ)
    h, inter, top_k = cfg["hidden_size"], cfg["intermediate_size"], cfg["num_experts_per_tok"]
    by_kind = H.measure_forward_flops_by_kind(cfg, SEQ)
    assert by_kind["experts"] == 2 * SEQ * top_k * 3 * h * inter * cfg["num_hidden_layers"]
    assert by_kind["router"] == 2 * SEQ * h * cfg["num_local_experts"] * cfg["num_hidden_layers"]


def test_llama4_experts_are_dense_in_hf() -> None:
    """HF llama4 runs every expert on every token; measure_forward_flops_sparse undoes that."""
    cfg = small_config("llama4_text")
    h, inter = cfg["hidden_size"], cfg["intermediate_size"]
    n_exp, top_k = cfg["num_local_experts"], cfg["num_experts_per_tok"]
    n_moe = len(range(cfg["interleave_moe_layer_step"] - 1, cfg["num_hidden_layers"], cfg["interleave_moe_layer_step"]))
    dense_experts = 2 * SEQ * n_exp * 3 * h * inter * n_moe
    assert H.measure_forward_flops_by_kind(cfg, SEQ)["experts"] == dense_experts
    raw = H.measure_forward_flops(cfg, SEQ)
    assert H.measure_forward_flops_sparse(cfg, SEQ) == raw - dense_experts + dense_experts * top_k // n_exp
    # every other family is unchanged
    assert H.measure_forward_flops_sparse(small_config("mixtral"), SEQ) == H.measure_forward_flops(
        small_config("mixtral"), SEQ
    )


# ------------------------------------------------------------------ config plumbing


def test_text_config_unwraps_multimodal_and_aliases() -> None:
    assert H.text_config(small_config("gemma3"))["model_type"] == "gemma3_text"
    assert H.text_config(small_config("llama4"))["model_type"] == "llama4_text"
    assert H.text_config(small_config("kimi_k2"))["model_type"] == "deepseek_v3"
    bare = {"model_type": "gemma3", "text_config": {"hidden_size": 64}}
    assert H.text_config(bare)["model_type"] == "gemma3_text"
    assert H.text_config(small_config("llama")) == small_config("llama")
    for wrapper, inner in [("gemma3", "gemma3_text"), ("llama4", "llama4_text")]:
        assert H.count_params(small_config(wrapper)) == H.count_params(small_config(inner))
        assert H.measure_forward_flops(small_config(wrapper), SEQ) == H.measure_forward_flops(small_config(inner), SEQ)


def test_build_hf_config_forces_eager_and_batched_mm() -> None:
    hf = H.build_hf_config(small_config("kimi_k2"))  # carries an fp8 quantization_config
    assert hf._attn_implementation == "eager"
    assert hf._experts_implementation == "batched_mm"
    assert getattr(hf, "quantization_config", None) is None
    model = H.build_model(small_config("kimi_k2"))
    assert model.config._experts_implementation == "batched_mm"
    assert next(model.parameters()).device.type == "meta"
    assert not model.training


def test_hub_only_keys_are_tolerated() -> None:
    """A config.json as downloaded: loader keys, use_cache, dtype, attn settings of its own."""
    cfg = small_config("llama")
    hub = dict(
        cfg,
        use_cache=True,
        torch_dtype="bfloat16",
        architectures=["LlamaForCausalLM"],
        transformers_version="4.43.0.dev0",
        attn_implementation="sdpa",
        _name_or_path="meta-llama/x",
        auto_map={"AutoModelForCausalLM": "remote.Model"},
    )
    assert H.count_params(hub) == H.count_params(cfg)
    assert H.measure_forward_flops(hub, SEQ) == H.measure_forward_flops(cfg, SEQ)


def test_deepseek_v3_router_bias_is_a_buffer() -> None:
    cfg = small_config("deepseek_v3")
    names = {n for n, _ in H.build_model(cfg).named_parameters()}
    assert not any("e_score_correction_bias" in n for n in names)
    bufs = H.persistent_buffers(cfg)
    n_moe = cfg["num_hidden_layers"] - cfg["first_k_dense_replace"]
    assert sorted(v for k, v in bufs.items() if "e_score_correction_bias" in k) == [(cfg["n_routed_experts"],)] * n_moe


# ------------------------------------------------------------------ full size


def test_llama_3_1_8b_full_size_on_meta() -> None:
    assert H.count_params(LLAMA_3_1_8B) == 8_030_261_248
    assert llama_params(LLAMA_3_1_8B) == 8_030_261_248
    assert H.measure_forward_flops(LLAMA_3_1_8B, 128) == llama_forward_flops(LLAMA_3_1_8B, 128)


def test_zz_report_timings() -> None:
    """Print per-family build+count / forward timings (visible with -s)."""
    if not _TIMINGS:
        pytest.skip("per-family tests did not run in this session")
    print("\nfamily            params_s  flops_s")
    for name, (tp, tf) in sorted(_TIMINGS.items(), key=lambda kv: -sum(kv[1])):
        print(f"{name:16s}  {tp:8.3f}  {tf:7.3f}")
    total = sum(a + b for a, b in _TIMINGS.values())
    print(f"{'total':16s}  {total:17.3f}")
    assert total < 60
