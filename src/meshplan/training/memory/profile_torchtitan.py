"""Kernel profile of torchtitan's own Llama-style model (plain modules, SDPA flash attention).

Per layer without recompute: each RMSNorm keeps its input, its fp32 reciprocal RMS and its
normalised output; rotary embedding multiplies complex fp32 copies of q and k; `repeat_kv`
materialises full-head k and v for SDPA, which saves q, k, v, its output and the fp32
log-sum-exp; the output projection saves a contiguous copy of the attention output; the SwiGLU
MLP saves the w1 and w3 outputs, silu(w1) and the product. Under tensor parallelism the
inputs of the column-parallel projections are saved after their sequence all-gather (DTensor
keeps the gathered tensor; Megatron re-gathers it in backward instead). torchtitan's selective recompute
("op" policy) keeps the layer input, every other matmul output (wq, wv, w1, w2 of the seven),
and SDPA's outputs; everything else is recomputed.
"""

from __future__ import annotations

from meshplan.model.spec import DenseMLP, LayerSpec, ModelSpec
from meshplan.training.memory.activations import Saved, act_bytes, register
from meshplan.training.layout.resolve import ResolvedPlan


def _attention(layer: LayerSpec, h: int, b: float) -> list[Saved]:
    a = layer.attention
    q = a.num_heads * a.head_dim
    kv = (a.num_heads if a.mla else a.num_kv_heads) * a.head_dim
    return [
        Saved("attn_norm_input", b * h, "sp"),
        Saved("attn_norm_rstd", 4, "sp", selective=False),
        Saved("attn_norm_normalized", b * h, "sp", selective=False),
        Saved("qkv_input", b * h, "none", selective=False),
        Saved("rope_q_fp32", 4 * q, "tp", selective=False),
        Saved("rope_k_fp32", 4 * kv, "tp", selective=False),
        Saved("wq_output", b * q, "tp", plain=False),
        Saved("wv_output", b * kv, "tp", plain=False),
        Saved("sdpa_q", b * q, "tp", selective=False),
        Saved("sdpa_k_repeated", b * q, "tp", selective=False),
        Saved("sdpa_v_repeated", b * a.num_heads * a.v_head_dim, "tp", selective=False),
        Saved("sdpa_out", b * a.num_heads * a.v_head_dim, "tp"),
        Saved("sdpa_lse", 4 * a.num_heads, "tp"),
        Saved("wo_input", b * a.num_heads * a.v_head_dim, "tp", selective=False),
    ]


def _swiglu(mlp: DenseMLP, prefix: str, split, b: float, h: int) -> list[Saved]:
    i = mlp.intermediate_size
    if not mlp.gated:
        return [Saved(f"{prefix}w1_output", b * i, split),
                Saved(f"{prefix}w2_input", b * i, split, selective=False),
                Saved(f"{prefix}w2_output", b * h, "sp", plain=False)]
    return [Saved(f"{prefix}w1_output", b * i, split),
            Saved(f"{prefix}w3_output", b * i, split, selective=False),
            Saved(f"{prefix}silu_output", b * i, split, selective=False),
            Saved(f"{prefix}w2_input", b * i, split, selective=False),
            Saved(f"{prefix}w2_output", b * h, "sp", plain=False)]


def _mlp(layer: LayerSpec, h: int, b: float) -> list[Saved]:
    out = [Saved("ffn_norm_input", b * h, "sp", selective=False),
           Saved("ffn_norm_rstd", 4, "sp", selective=False),
           Saved("ffn_norm_normalized", b * h, "sp", selective=False),
           Saved("ffn_input", b * h, "none", selective=False)]
    mlp = layer.mlp
    if isinstance(mlp, DenseMLP):
        return out + _swiglu(mlp, "", "tp", b, h)
    out += [Saved("router_scores", 4 * mlp.num_experts, "sp"),
            Saved("expert_input", b * h, "routed", selective=False)]
    out += _swiglu(mlp.expert, "expert_", "routed_etp", b, h)
    if mlp.shared is not None:
        out += _swiglu(mlp.shared, "shared_", "tp", b, h)
    return out


@register("torchtitan")
def torchtitan_profile(layer: LayerSpec, model: ModelSpec, plan: ResolvedPlan) -> list[Saved]:
    """Saved tensors of one torchtitan decoder layer (bf16 compute under FSDP mixed precision)."""
    b, h = act_bytes(plan), model.hidden_size
    return _attention(layer, h, b) + _mlp(layer, h, b)
