"""Kernel profile of Hugging Face transformers models under plain autograd (bf16, eager or sdpa).

Transcribed from what `torch.autograd.graph.saved_tensors_hooks` records on the real models
(tests/torch_tier/hf_saved.py has the measured formulas and checks this profile against them):
- RMSNorm (Llama style) keeps an fp32 copy of its input, the fp32 reciprocal RMS and the bf16
  normalised input; Gemma's RMSNorm runs entirely in fp32; LayerNorm keeps its input and fp32
  statistics. The norm's output is saved once by the projections that read it.
- Eager attention repeats k and v to all heads and saves the softmax in fp32 and its bf16 copy
  (GPT-2 keeps one bf16 softmax; Gemma 2's soft-cap adds a bf16 tanh); SDPA saves q, k, v,
  its output (also the output projection's input) and an fp32 log-sum-exp.
- Fused-QKV families (GPT-2, GPT-NeoX, Phi-3) keep the whole fused projection output alive
  through the view SDPA saves as v (and, without rotary, as q and k too).
- SwiGLU saves gate, up, act and product; GELU MLPs their input and output (gelu_new: 4 + 1).
- MoE (grouped_mm experts, transformers 5's default): router softmax, top-k indices and
  renormalisation; per routed (token, expert) pair sort/permutation indices, routing weight,
  gathered input, gate/up, act, product and expert output.
"""

from __future__ import annotations

from meshplan.model.spec import AttentionSpec, DenseMLP, LayerSpec, ModelSpec, MoEMLP
from meshplan.training.memory.activations import Saved, register
from meshplan.training.layout.resolve import ResolvedPlan

FUSED_QKV = {"gpt2", "gpt_neox", "phi3"}
ROPE_BY_CAT = {"gpt_neox", "phi3", "nemotron"}
"""Rotary applied to a slice and concatenated: SDPA's output then needs a copy for o_proj."""
FP32_NORMS = {"gemma2", "gemma3_text", "olmo2", "gpt_oss"}
"""RMSNorms that also keep their normalised output in fp32 (weight applied in fp32)."""
SOFTMAX_BYTES_PER_KEY = {"gpt2": 2.0, "gemma2": 8.0}
"""Bytes saved per (query, key, head) by eager attention; default 6 (fp32 + bf16 copy)."""
FP32_ROUTER = {"deepseek_v2", "deepseek_v3", "kimi_k2"}
BF16_ROUTING_WEIGHTS = {"qwen2_moe", "qwen3_moe"}


def norm(model: ModelSpec, width: int, name: str, with_input: bool = True) -> list[Saved]:
    """Tensors one hidden-width norm keeps (not its output, which its consumer saves)."""
    if model.norm == "layernorm":
        out = [Saved(f"{name}_stats", 8, "sp", selective=False)]
        return ([Saved(f"{name}_input", 2 * width, "sp")] if with_input else []) + out
    if model.family in FP32_NORMS:
        return [Saved(f"{name}_fp32", 8 * width + 4, "sp", selective=False)]
    return [Saved(f"{name}_fp32_input", 4 * width, "sp", selective=False),
            Saved(f"{name}_rstd", 4, "sp", selective=False),
            Saved(f"{name}_normalized", 2 * width, "sp", selective=False)]


def qk_norms(a: AttentionSpec, family: str) -> list[Saved]:
    """Per-head or full-width RMSNorm of queries and keys (Qwen3, Gemma 3, OLMo 2)."""
    q, k = a.num_heads * a.head_dim, a.num_kv_heads * a.head_dim
    per = 8 if family in FP32_NORMS else 6
    if a.qk_norm == "per_head":
        return [Saved("q_norm", per * q + 4 * a.num_heads, "tp", selective=False),
                Saved("k_norm", per * k + 4 * a.num_kv_heads, "tp", selective=False)]
    if a.qk_norm == "full_width":
        return [Saved("q_norm", per * q + 4, "tp", selective=False),
                Saved("k_norm", per * k + 4, "tp", selective=False)]
    return []


def mla_latents(a: AttentionSpec) -> list[Saved]:
    """DeepSeek MLA: the q and kv latent norms and the up-projections' inputs."""
    m = a.mla
    ranks = (m.q_lora_rank or 0) + m.kv_lora_rank
    return [Saved("mla_latents", 8 * ranks + 8, "sp", selective=False)]


def attention(a: AttentionSpec, model: ModelSpec, plan: ResolvedPlan) -> list[Saved]:
    """The attention core between the q/k/v projections and the output projection."""
    family = model.family
    q, v_out = a.num_heads * a.head_dim, a.num_heads * a.v_head_dim
    if plan.attention == "eager":
        per_key = SOFTMAX_BYTES_PER_KEY.get(family, 6.0)
        v = 2 * v_out
        if family == "gpt_neox" and plan.micro_batch_size == 1:
            v = 2 * (q + a.num_kv_heads * (a.head_dim + a.v_head_dim))  # a view pins the fused qkv
        return [Saved("q", 2 * q, "tp", selective=False),
                Saved("k_repeated", 2 * q, "tp", selective=False),
                Saved("v_repeated", v, "tp", selective=False),
                Saved("softmax", per_key * a.num_heads, "tp", selective=False, per_key=True),
                Saved("o_proj_input", 2 * v_out, "tp", selective=False)]
    kv = a.num_heads if a.mla else a.num_kv_heads
    qk = 2 * (q + kv * a.head_dim)  # rotary makes new q and k tensors
    v = 2 * kv * a.v_head_dim
    if family in FUSED_QKV:
        v = 2 * (q + kv * (a.head_dim + a.v_head_dim))  # v pins the fused projection output
        if model.learned_position_embeddings:
            qk = 0  # no rotary: q and k are views of that same output
    out = [Saved("q_k", qk, "tp", selective=False),
           Saved("v", v, "tp", selective=False),
           Saved("sdpa_out", 2 * v_out, "tp", selective=False),
           Saved("sdpa_lse", 4 * a.num_heads, "tp", selective=False)]
    if family in ROPE_BY_CAT:
        out.append(Saved("o_proj_input_copy", 2 * v_out, "tp", selective=False))
    return out


def dense_mlp(mlp: DenseMLP, prefix: str = "", split="tp") -> list[Saved]:
    """Saved tensors of one dense MLP (its input is counted with the norm)."""
    i = mlp.intermediate_size
    if mlp.gated:
        return [Saved(f"{prefix}swiglu", 8 * i, split, selective=False)]
    per = 10 if mlp.activation == "gelu_new" else 4
    return [Saved(f"{prefix}gelu", per * i, split, selective=False)]


def moe(mlp: MoEMLP, model: ModelSpec) -> list[Saved]:
    """Router, routed experts (per routed pair) and shared expert of one MoE layer."""
    h, e, k = model.hidden_size, mlp.num_experts, mlp.top_k
    weight = 2 if model.family in BF16_ROUTING_WEIGHTS else 4
    out = [Saved("router", 4 * e + 8 * k + 4 + 4 * k, "sp", selective=False)]
    if model.family in FP32_ROUTER:
        out.append(Saved("router_fp32_input", 4 * h, "sp", selective=False))
    pair = 24 + weight + 4 * h
    out.append(Saved("expert_pair", pair, "routed", selective=False))
    out += dense_mlp(mlp.expert, "expert_", "routed_etp")
    if mlp.shared is not None:
        out += dense_mlp(mlp.shared, "shared_")
        if mlp.shared_expert_gate:
            out.append(Saved("shared_gate", 2 + 2 * h, "sp", selective=False))
    return out


@register("hf")
def hf_profile(layer: LayerSpec, model: ModelSpec, plan: ResolvedPlan) -> list[Saved]:
    """Saved tensors of one Hugging Face decoder layer in bf16."""
    h, a = model.hidden_size, layer.attention
    parallel = model.parallel_residual and model.norm == "layernorm"
    out = norm(model, h, "attn_norm") + [Saved("qkv_input", 2 * h, "sp", selective=False)]
    out += mla_latents(a) if a.mla else qk_norms(a, model.family)
    out += attention(a, model, plan)
    out += norm(model, h, "mlp_norm", with_input=not parallel)
    out.append(Saved("mlp_input", 2 * h, "sp", selective=False))
    out += dense_mlp(layer.mlp) if isinstance(layer.mlp, DenseMLP) else moe(layer.mlp, model)
    for k in range(layer.num_norms - 2):  # Gemma's post-attention / post-MLP norms
        out += norm(model, h, f"post_norm_{k}")
    return out
