"""A ModelSpec's headline numbers as a plain dict (the `model show --json` payload)."""

from __future__ import annotations

from collections import Counter
from typing import Any

from meshplan.model import counts
from meshplan.model.quant import GROUPS
from meshplan.model.spec import ModelSpec, MoEMLP
from meshplan.model.stored import checkpoint_bytes

KV_DTYPES = ("bf16", "fp8", "int4")


def params_by_kind(model: ModelSpec) -> dict[str, int]:
    """Whole-model parameters split by kind (attention, mlp, experts, router, norms, embeddings)."""
    totals: Counter[str] = Counter()
    for layer in model.layers:
        lp = counts.layer_params(layer, model)
        totals.update(attention=lp.attention, mlp=lp.mlp, routed_experts=lp.routed_experts,
                      shared_experts=lp.shared_experts, router=lp.router, norms=lp.norms)
    totals["norms"] += counts.final_norm_params(model)
    totals["embedding"] = counts.embedding_params(model)
    totals["lm_head"] = counts.lm_head_params(model)
    return dict(totals)


def layer_mix(model: ModelSpec) -> dict[str, int]:
    """How many layers are MoE, sliding-window, chunked or latent-attention."""
    attn = [layer.attention for layer in model.layers]
    return {
        "moe": sum(isinstance(layer.mlp, MoEMLP) for layer in model.layers),
        "sliding_window": sum(a.sliding_window is not None for a in attn),
        "chunked_attention": sum(a.attention_chunk is not None for a in attn),
        "latent_attention": sum(a.mla is not None for a in attn),
    }


def layer_label(model: ModelSpec, i: int) -> str:
    """A short description of layer i: attention span and MLP kind."""
    layer = model.layers[i]
    a = layer.attention
    attn = "mla" if a.mla else f"sliding {a.sliding_window}" if a.sliding_window else (
        f"chunked {a.attention_chunk}" if a.attention_chunk else "full")
    mlp = layer.mlp
    ffn = f"moe {mlp.num_experts}x top-{mlp.top_k}" if isinstance(mlp, MoEMLP) else "dense"
    return f"{attn} attention, {ffn} mlp"


def layer_groups(model: ModelSpec) -> list[dict[str, Any]]:
    """Runs of consecutive identical layers with their per-layer parameters by kind."""
    groups: list[dict[str, Any]] = []
    for i, layer in enumerate(model.layers):
        if groups and model.layers[groups[-1]["first"]] == layer:
            groups[-1]["last"] = i
            continue
        lp = counts.layer_params(layer, model)
        per_layer = {k: getattr(lp, k) for k in lp.__slots__ if getattr(lp, k)}
        groups.append({"first": i, "last": i, "kind": layer_label(model, i),
                       "params_per_layer": {**per_layer, "total": lp.total}})
    return groups


def checkpoint_weights(model: ModelSpec) -> dict[str, Any] | None:
    """What the checkpoint's quantization_config says, per group of weights, and the bytes it
    implies; None for a checkpoint without one (16-bit weights)."""
    w = model.weights
    if w is None:
        return None
    groups = {g: {"format": w.format(g).name, "bits_per_weight": w.format(g).bits,
                  "activations": w.format(g).activations} for g in GROUPS}
    return {"quant_method": w.method, "dtype": w.dtype, "groups": groups,
            "bytes": checkpoint_bytes(model, w), "notes": list(w.notes)}


def model_summary(model: ModelSpec, seq_len: int = 4096) -> dict[str, Any]:
    """Headline numbers; FLOPs at `seq_len` with causal attention, KV bytes for bf16 by default."""
    first = model.layers[0].attention
    return {
        "name": model.name,
        "family": model.family,
        "params_total": model.params_total,
        "params_active": model.params_active,
        "params_embedding": model.params_embedding,
        "params_lm_head": model.params_lm_head,
        "params_by_kind": params_by_kind(model),
        "num_layers": model.num_layers,
        "hidden_size": model.hidden_size,
        "vocab_size": model.vocab_size,
        "num_attention_heads": first.num_heads,
        "num_key_value_heads": first.num_kv_heads,
        "head_dim": first.head_dim,
        "tie_word_embeddings": model.tie_word_embeddings,
        "max_position_embeddings": model.max_position_embeddings,
        "layer_mix": layer_mix(model),
        "checkpoint_weights": checkpoint_weights(model),
        "layer_groups": layer_groups(model),
        "seq_len": seq_len,
        "flops_per_token_forward": model.flops_per_token_forward(seq_len, causal=True),
        "flops_per_token_forward_full_attention": model.flops_per_token_forward(seq_len, causal=False),
        "kv_cache_bytes_per_token": model.kv_cache_bytes_per_token("bf16"),
        "kv_cache_bytes_per_token_by_dtype": {
            d: model.kv_cache_bytes_per_token(d) for d in KV_DTYPES
        },
    }
