"""Self-checks of the activation-memory harness (``hf_saved``).

These tests check the MEASURING side only: that ``hf_saved.measure_saved_bytes``
counts every storage saved for backward once, excludes parameters, attributes
tensors to layers consistently, scales as it must (batch, sequence, vocab) and
that its numbers equal, to the byte, the closed-form per-layer formulas written
in the ``hf_saved`` module docstring (reproduced in :func:`expected` below) for
llama, qwen2, qwen3, mistral, gemma2, gpt2, gpt_neox, mixtral, qwen2_moe and
deepseek_v3, eager and sdpa, at two shapes.
"""

from __future__ import annotations

import functools

import pytest

pytest.importorskip("torch")
pytest.importorskip("transformers")

import torch  # noqa: E402

from . import hf_saved as HS  # noqa: E402
from .small_configs import small_config  # noqa: E402

pytestmark = pytest.mark.torch

SHAPES = [(1, 32), (2, 64)]


# --------------------------------------------------------------------------- helpers


@functools.lru_cache(maxsize=64)
def _model(name: str, attn: str, experts: str = "eager", overrides: tuple = ()):
    cfg = small_config(name)
    cfg.update(dict(overrides))
    return cfg, HS.build_train_model(cfg, attn, experts)


def measure(name: str, b: int, s: int, attn: str = "eager", experts: str = "eager", overrides=(), **kw):
    cfg, model = _model(name, attn, experts, tuple(overrides))
    return HS.measure_saved_bytes(cfg, b, s, attn, experts_implementation=experts, model=model, **kw)


# --------------------------------------------------------------------------- reference formulas


def _rms(T, w):
    """llama-style RMSNorm over width w: fp32 input copy, fp32 rsqrt, bf16 normalised x."""
    return 6 * T * w + 4 * T


def _attn(attn, b, s, a, k, d):
    T = b * s
    if attn == "eager":
        return 8 * T * a * d + 6 * b * a * s * s
    return 4 * T * a * d + 4 * T * k * d + 4 * T * a


def _experts(experts, P, h, I, E, w):
    """Routed experts, per (token, expert) pair; w = bytes of one routing weight."""
    if experts == "eager":
        return P * (16 + w + 6 * h + 8 * I)
    if experts == "grouped_mm":
        return P * (24 + w + 4 * h + 8 * I) + 4 * E
    raise ValueError(experts)


def _gate_in_fp32(name: str, attn: str, experts: str) -> bool:
    """Whether the built model keeps its MoE router weights in fp32 (version-dependent)."""
    _, model = _model(name, attn, experts)
    gates = [m.weight for n, m in model.named_modules() if n.endswith("mlp.gate")]
    return bool(gates) and all(w.dtype == torch.float32 for w in gates)


def expected(name: str, b: int, s: int, attn: str, experts: str = "eager") -> tuple[list[int], dict[str, int]]:
    """Per-layer bytes and outside-layer bytes predicted by the docstring formulas."""
    hf = HS.build_train_config(small_config(name), attn, experts)
    mt = hf.model_type
    T = b * s
    h, V, L = hf.hidden_size, hf.vocab_size, hf.num_hidden_layers
    a = hf.num_attention_heads
    k = getattr(hf, "num_key_value_heads", None) or a
    d = getattr(hf, "head_dim", None) or h // a
    layers: list[int] = []
    out = {"embedding": 8 * T, "lm_head": 2 * T * h}
    loss = 4 * T * V + 8 * (b * (s + 1) if b == 1 else T) + 4
    r = d  # rotary dim
    final = _rms(T, h)

    if mt in ("llama", "mistral", "qwen2", "qwen3"):
        per = 16 * T * h + 8 * T + 8 * T * hf.intermediate_size + _attn(attn, b, s, a, k, d)
        if mt == "qwen3":
            per += 6 * T * a * d + 4 * T * a + 6 * T * k * d + 4 * T * k
        layers = [per] * L
    elif mt == "gemma2":
        assert attn == "eager"
        i = hf.intermediate_size
        per = 36 * T * h + 16 * T + 16 * h + 8 * T * a * d + 8 * b * a * s * s + 8 * T * i
        layers = [per] * L
        final = 8 * T * h + 4 * T + 4 * h
        loss += 2 * T * V  # final logit soft-capping tanh
    elif mt == "gpt2":
        i = hf.n_inner or 4 * h
        core = 2 * b * a * s * s if attn == "eager" else 4 * T * a
        layers = [16 * T * h + 8 * T + core + 10 * T * i] * L
        out["embedding"] += 8 * s  # position ids of wpe
        final = 2 * T * h + 4 * T
        r = 0
    elif mt == "gpt_neox":
        i = hf.intermediate_size
        if attn == "eager":
            per = 14 * T * h + 8 * T + 6 * b * a * s * s + 4 * T * i + (4 * T * h if b == 1 else 0)
        else:
            per = 20 * T * h + 8 * T + 4 * T * a + 4 * T * i
        layers = [per] * L
        final = 2 * T * h + 4 * T
        r = int(d * hf.rope_parameters["partial_rotary_factor"])
    elif mt == "mixtral":
        E, K, I = hf.num_local_experts, hf.num_experts_per_tok, hf.intermediate_size
        per = 16 * T * h + 8 * T + _attn(attn, b, s, a, k, d) + T * (4 * E + 12 * K + 4)
        per += _experts(experts, T * K, h, I, E, 4)
        layers = [per] * L
    elif mt == "qwen2_moe":
        E, K, I = hf.num_experts, hf.num_experts_per_tok, hf.moe_intermediate_size
        Is = hf.shared_expert_intermediate_size
        base = 16 * T * h + 8 * T + _attn(attn, b, s, a, k, d)
        for li in range(L):
            moe = li not in hf.mlp_only_layers and (li + 1) % hf.decoder_sparse_step == 0
            if not moe:
                layers.append(base + 8 * T * hf.intermediate_size)
                continue
            router = T * (4 * E + 8 * K) + (T * (4 + 4 * K) if hf.norm_topk_prob else 0)
            layers.append(base + 8 * T * Is + 2 * T + 2 * T * h + router + _experts(experts, T * K, h, I, E, 2))
    elif mt == "deepseek_v3":
        rq, rkv = hf.q_lora_rank, hf.kv_lora_rank
        dn, dr, dv = hf.qk_nope_head_dim, hf.qk_rope_head_dim, hf.v_head_dim
        dq = dn + dr
        E, K, I = hf.n_routed_experts, hf.num_experts_per_tok, hf.moe_intermediate_size
        Is = I * hf.n_shared_experts
        common = 14 * T * h + 16 * T + 8 * T * (rq + rkv)  # 2 RMSNorms + input-norm output + q_a / kv_a norms
        if attn == "eager":
            common += 4 * T * a * (dq + dv) + 6 * b * a * s * s + (2 * T * a * dn if b == 1 else 0)
        else:  # CPU SDPA math fallback (dq != dv), fp32
            common += 8 * T * a * dq + 6 * T * a * dv + 4 * b * a * s * s
        for li in range(L):
            if li < hf.first_k_dense_replace:
                layers.append(common + 2 * T * h + 8 * T * hf.intermediate_size)
                continue
            # the router runs in fp32: a bf16 gate weight is saved as its fp32 copy (4*E*h), a gate
            # kept in fp32 (transformers >= 5.24 keeps it so) is a parameter and saves nothing
            cast = 0 if _gate_in_fp32(name, attn, experts) else 4 * E * h
            router = 4 * T * h + cast + 4 * T * E + 8 * T * K + (4 * T + 4 * T * K if hf.norm_topk_prob else 0)
            layers.append(common + 2 * T * h + 8 * T * Is + router + _experts(experts, T * K, h, I, E, 4))
        r = dr
    else:
        raise KeyError(mt)
    if r:
        out["shared"] = 4 * s * r
    out["final_norm"] = final
    out["loss"] = loss
    return layers, out


FORMULA_CASES = [
    ("llama", "eager"),
    ("llama", "sdpa"),
    ("qwen2", "eager"),
    ("qwen2", "sdpa"),
    ("mistral", "eager"),
    ("mistral", "sdpa"),
    ("qwen3", "eager"),
    ("qwen3", "sdpa"),
    ("gemma2", "eager"),
    ("gpt2", "eager"),
    ("gpt2", "sdpa"),
    ("gpt_neox", "eager"),
    ("gpt_neox", "sdpa"),
    ("mixtral", "eager"),
    ("mixtral", "sdpa"),
    ("qwen2_moe", "eager"),
    ("qwen2_moe", "sdpa"),
    ("deepseek_v3", "eager"),
    ("deepseek_v3", "sdpa"),
]


@pytest.mark.parametrize("name,attn", FORMULA_CASES)
def test_formula_exact(name, attn):
    """Every per-layer and outside-layer byte count equals the docstring formula, at two shapes."""
    for b, s in SHAPES:
        rep = measure(name, b, s, attn)
        layers, outside = expected(name, b, s, attn)
        assert rep.per_layer_bytes == layers, (name, attn, b, s, HS.format_report(rep, layers=[0]))
        assert rep.outside_layers == outside, (name, attn, b, s, rep.outside_layers, outside)
        assert rep.total_bytes == sum(layers) + sum(outside.values())
        assert rep.logits_bytes == 2 * b * s * rep_vocab(name) and rep.logits_dtype == "bfloat16"


def rep_vocab(name: str) -> int:
    return HS.build_train_config(small_config(name)).vocab_size


@pytest.mark.parametrize("name", ["mixtral", "qwen2_moe"])
def test_grouped_mm_experts_formula(name):
    """transformers' default grouped_mm experts run on CPU too; they save less than eager (no index_add_ copy)."""
    b, s = 2, 64
    rep = measure(name, b, s, "sdpa", experts="grouped_mm")
    assert rep.experts_implementation == "grouped_mm"
    assert rep.per_layer_bytes == expected(name, b, s, "sdpa", "grouped_mm")[0]


# --------------------------------------------------------------------------- structural checks


LLAMA3 = (("num_hidden_layers", 3),)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_layers_equal(attn):
    """Identical layers cost the same, layer 0 included (the embedding output is saved like any layer input)."""
    rep = measure("llama", 2, 32, attn, overrides=LLAMA3)
    assert len(rep.per_layer_bytes) == 3
    assert len(set(rep.per_layer_bytes)) == 1
    # rotary cos/sin are saved by every layer but charged once, to "shared"
    assert rep.outside_layers["shared"] == 4 * 32 * 32
    shapes = [
        [(it.module.split(".", 3)[-1], it.shape, it.dtype, it.bytes) for it in rep.layer_items(i)] for i in range(3)
    ]
    assert shapes[0] == shapes[1] == shapes[2]


def test_moe_layers_equal_and_routing_independent():
    """Eager experts loop over data-dependent token sets, but their total depends only on tokens * top_k."""
    r0 = measure("mixtral", 2, 64, "sdpa", seed=0)
    r1 = measure("mixtral", 2, 64, "sdpa", seed=7)
    assert len(set(r0.per_layer_bytes)) == 1
    assert r0.per_layer_bytes == r1.per_layer_bytes
    per_expert_rows = [it.shape[0] for it in r0.layer_items(0) if it.producer == "index" and it.dtype == "bfloat16"]
    assert sum(per_expert_rows) == 2 * 64 * 2  # T * top_k rows in total


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_batch_linear(attn):
    r1 = measure("llama", 1, 32, attn)
    r2 = measure("llama", 2, 32, attn)
    r4 = measure("llama", 4, 32, attn)
    assert r2.per_layer_bytes == [2 * x for x in r1.per_layer_bytes]
    assert r4.per_layer_bytes == [4 * x for x in r1.per_layer_bytes]
    for region in ("embedding", "final_norm", "lm_head"):
        assert r2.outside_layers[region] == 2 * r1.outside_layers[region]
    assert r2.outside_layers["shared"] == r1.outside_layers["shared"]  # rope cos/sin: batch independent


def test_seq_scaling_sdpa_linear_eager_quadratic():
    b, s = 2, 16  # s != head_dim (32), so the S x S tensors are recognisable by shape
    sd1, sd2 = measure("llama", b, s, "sdpa"), measure("llama", b, 2 * s, "sdpa")
    assert sd2.per_layer_bytes == [2 * x for x in sd1.per_layer_bytes]
    e1, e2 = measure("llama", b, s, "eager"), measure("llama", b, 2 * s, "eager")
    a = 4
    extra = [y - 2 * x for x, y in zip(e1.per_layer_bytes, e2.per_layer_bytes, strict=True)]
    # the S x S scores: fp32 softmax + bf16 probs = 6 bytes per element: 6*b*a*((2s)^2 - 2*s^2)
    assert extra == [6 * b * a * (4 * s * s - 2 * s * s)] * 2
    scores = [it for it in e1.layer_items(0) if it.shape[-2:] == (s, s)]
    want = [("bfloat16", 2 * b * a * s * s), ("float32", 4 * b * a * s * s)]
    assert sorted((it.dtype, it.bytes) for it in scores) == want


def test_parameters_excluded():
    """Layers save no weight: per-layer bytes do not depend on the vocabulary, excluded storages are parameters."""
    small = measure("llama", 2, 32, "eager")
    big = measure("llama", 2, 32, "eager", overrides=(("vocab_size", 2048),))
    assert small.per_layer_bytes == big.per_layer_bytes
    assert small.outside_layers["lm_head"] == big.outside_layers["lm_head"]
    assert big.outside_layers["loss"] > small.outside_layers["loss"]  # log_softmax is T x V fp32
    _, model = _model("llama", "eager")
    used = {n for n, _ in model.named_parameters() if not n.endswith("embed_tokens.weight")}
    assert {it.module for it in small.excluded} == used  # every matmul / norm weight was saved ... and excluded
    assert all(it.where in ("parameter", "buffer") for it in small.excluded)


def test_tied_weights_excluded():
    rep = measure("qwen2", 2, 32, "sdpa")  # tie_word_embeddings: lm_head saves the embedding matrix
    assert "model.embed_tokens.weight" in {it.module for it in rep.excluded}
    assert rep.outside_layers["lm_head"] == 2 * 2 * 32 * 128


def test_storage_dedup_and_views():
    rep = measure("gpt_neox", 1, 32, "eager")
    assert sum(it.bytes for it in rep.items) == rep.total_bytes
    # the residual-stream input of a parallel-residual layer is saved by both norms, counted once
    x = [it for it in rep.layer_items(0) if it.module.endswith("input_layernorm") and it.shape == (1, 32, 64)]
    assert len(x) == 1 and x[0].n_saves == 2
    # at b=1, v is a small view pinning the whole fused qkv output (3x its size)
    pinned = [it for it in rep.layer_items(0) if it.is_view and it.bytes == 3 * it.tensor_bytes]
    assert pinned and pinned[0].producer == "addmm"
    assert rep.unreachable_bytes == 0


def test_dispatch_mode_does_not_change_what_is_saved():
    a = measure("mixtral", 2, 32, "eager", track_producers=True)
    b = measure("mixtral", 2, 32, "eager", track_producers=False)
    assert a.per_layer_bytes == b.per_layer_bytes and a.total_bytes == b.total_bytes


def test_fp32_model_has_no_norm_copies():
    """In fp32 the RMSNorm's .to(float32) is a no-op: the layer input itself is saved (4Th, not 4Th + 2Th...)."""
    cfg = small_config("llama")
    b, s = 2, 16
    rep = HS.measure_saved_bytes(cfg, b, s, "sdpa", dtype=torch.float32)
    hf = HS.build_train_config(cfg, "sdpa")
    T, h, a, k, i = b * s, hf.hidden_size, hf.num_attention_heads, hf.num_key_value_heads, hf.intermediate_size
    d = h // a
    # per norm: input 4Th + rsqrt 4T + normalised 4Th; norm outputs 4Th each; everything else x2 of bf16
    per = 2 * (8 * T * h + 4 * T) + 2 * 4 * T * h + 16 * T * i + 8 * T * a * d + 8 * T * k * d + 4 * T * a
    assert rep.per_layer_bytes == [per] * hf.num_hidden_layers
