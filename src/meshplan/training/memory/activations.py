"""Bytes a decoder layer saves for backward, by kernel profile, recompute and parallel split.

A profile lists the tensors one layer keeps per token (`Saved`), each tagged with how the
parallel layout divides it. `layer_activation_bytes` turns that into bytes for one micro-batch
on one GPU. Profiles: `megatron` (Transformer Engine fused kernels, flash attention; Korthikanti
et al. 2022 generalised to GQA, gated MLPs, MoE and MLA) and `hf` (Hugging Face transformers
modules under plain autograd, eager or sdpa attention), see `profiles_hf`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from meshplan.memo import MISS, IdentityMemo
from meshplan.model.spec import DenseMLP, LayerSpec, ModelSpec, MoEMLP
from meshplan.training.plan import QUANTIZED
from meshplan.training.layout.resolve import ResolvedPlan
from meshplan.training.memory.states import fields_but

Split = Literal["sp", "tp", "none", "routed", "routed_etp"]


@dataclass(frozen=True, slots=True)
class Saved:
    """One tensor a layer saves for backward."""

    name: str
    bytes_per_token: float
    """Bytes per token (per routed token for `routed*` splits) before any parallel split."""
    split: Split
    """sp: divided by tp under sequence parallelism; tp: by tp; routed*: per routed token."""
    selective: bool = True
    """Still saved under the framework's selective recompute policy."""
    plain: bool = True
    """Saved without recompute (False: only the selective policy saves it, e.g. an op output
    that plain autograd does not keep but a save-list policy does)."""
    per_key: bool = False
    """Scales with the keys each query sees (eager attention scores): bytes per token per key."""


Profile = Callable[[LayerSpec, ModelSpec, ResolvedPlan], list[Saved]]
PROFILES: dict[str, Profile] = {}


def register(name: str) -> Callable[[Profile], Profile]:
    """Add a kernel profile under `name`."""

    def decorate(fn: Profile) -> Profile:
        PROFILES[name] = fn
        return fn

    return decorate


def act_bytes(plan: ResolvedPlan) -> float:
    """Bytes of one activation element: 4 in fp32 training, else 2 (bf16/fp16)."""
    return 4.0 if plan.precision == "fp32" else 2.0


def gemm_input_bytes(plan: ResolvedPlan) -> float:
    """Transformer Engine saves fp8 casts of GEMM inputs under fp8 (and, under NVFP4, an fp8-sized
    footprint: the 4-bit values in two layouts, for the forward and the weight gradient, plus
    their block scales)."""
    return 1.0 if plan.precision in QUANTIZED else act_bytes(plan)


FRAMEWORK_PROFILES = {"megatron": "megatron", "nemo": "megatron", "maxtext": "megatron",
                      "torchtitan": "torchtitan"}


def profile_name(plan: ResolvedPlan) -> str:
    """The kernel profile a plan's framework implies (`hf` for Hugging Face-style modules)."""
    return FRAMEWORK_PROFILES.get(plan.framework, "hf")


# ---------------------------------------------------------------- megatron / TE


def _megatron_attention(layer: LayerSpec, h: int, plan: ResolvedPlan) -> list[Saved]:
    a, b, g = layer.attention, act_bytes(plan), gemm_input_bytes(plan)
    out = [Saved("attn_norm_input", b * h, "sp"), Saved("attn_norm_rstd", 4, "sp"),
           Saved("qkv_gemm_input", g * h, "sp")]
    if a.mla is not None:
        m = a.mla
        latent = (m.q_lora_rank or 0) * 2 + m.kv_lora_rank * 2 + m.qk_rope_head_dim
        out.append(Saved("mla_latents", b * latent, "sp"))
    kv_heads = a.num_heads if a.mla else a.num_kv_heads
    out += [Saved("q", b * a.num_heads * a.head_dim, "tp"),
            Saved("k", b * kv_heads * a.head_dim, "tp"),
            Saved("v", b * kv_heads * a.v_head_dim, "tp"),
            Saved("attn_out", g * a.num_heads * a.v_head_dim, "tp")]
    if plan.attention == "flash":
        out.append(Saved("softmax_lse", 4 * a.num_heads, "tp", selective=False))
    else:
        out.append(Saved("softmax", b * a.num_heads, "tp", selective=False, per_key=True))
    return out


def _mlp_tensors(mlp: DenseMLP, prefix: str, split: Split, plan: ResolvedPlan) -> list[Saved]:
    b, g, i = act_bytes(plan), gemm_input_bytes(plan), mlp.intermediate_size
    return [Saved(f"{prefix}fc1_output", b * i * (2 if mlp.gated else 1), split),
            Saved(f"{prefix}fc2_input", g * i, split)]


def _megatron_mlp(layer: LayerSpec, h: int, plan: ResolvedPlan) -> list[Saved]:
    b, g = act_bytes(plan), gemm_input_bytes(plan)
    out = [Saved("mlp_norm_input", b * h, "sp"), Saved("mlp_norm_rstd", 4, "sp"),
           Saved("fc1_gemm_input", g * h, "sp")]
    mlp = layer.mlp
    if isinstance(mlp, DenseMLP):
        return out + _mlp_tensors(mlp, "", "tp", plan)
    out.append(Saved("router_probs", 4 * mlp.num_experts, "sp"))
    out += [Saved("expert_input", g * h, "routed"), Saved("expert_output", b * h, "routed")]
    out += _mlp_tensors(mlp.expert, "expert_", "routed_etp", plan)
    if mlp.shared is not None:
        out += _mlp_tensors(mlp.shared, "shared_", "tp", plan)
    return out


@register("megatron")
def megatron_profile(layer: LayerSpec, model: ModelSpec, plan: ResolvedPlan) -> list[Saved]:
    """Megatron-Core with Transformer Engine: fused norm+GEMM, flash attention, fused RoPE."""
    h = model.hidden_size
    return _megatron_attention(layer, h, plan) + _megatron_mlp(layer, h, plan)


# ---------------------------------------------------------------- bytes


def _divisor(item: Saved, plan: ResolvedPlan) -> float:
    sp = plan.tp if plan.sequence_parallel else 1
    return {"sp": sp, "tp": plan.tp, "none": 1, "routed": 1, "routed_etp": plan.etp}[item.split]


def routed_tokens_per_token(layer: LayerSpec, plan: ResolvedPlan) -> float:
    """Routed-token copies an expert GPU holds per local token (balanced routing)."""
    mlp = layer.mlp
    if not isinstance(mlp, MoEMLP):
        return 0.0
    sp = plan.tp if plan.sequence_parallel else 1
    factor = min(plan.capacity_factor, mlp.num_experts / mlp.top_k) if plan.capacity_factor else 1.0
    return mlp.top_k * factor * plan.etp / sp


def saved_tensors(layer: LayerSpec, model: ModelSpec, plan: ResolvedPlan) -> list[Saved]:
    """The tensors `layer` saves for backward under the plan's kernel profile (a LoRA/QLoRA
    plan's frozen base: see `profile_lora`)."""
    profile = profile_name(plan)
    saved = PROFILES[profile](layer, model, plan)
    if plan.method == "full":
        return saved
    from meshplan.training.finetune.profile_lora import frozen_base

    return frozen_base(saved, layer, model, plan, profile)


NOT_ACTIVATION_FIELDS = frozenset({
    "dp", "pp", "vpp", "ep", "shard_group", "expert_dp", "global_batch_size", "num_microbatches",
    "chunk_layers", "dp_sharding", "schedule", "recompute", "recompute_num_layers",
    "offload_activations", "offload_optimizer", "offload_params", "offload_target", "optimizer",
    "rank_order", "tp_comm_overlap", "doc_lengths", "balance", "expert_skew", "moe_balance",
    "chosen", "warnings"})
"""Resolved-plan fields a layer's saved tensors do not depend on (recompute and offload act on
the result in `memory`). A field missing here is part of the cache key: a new plan field is
assumed to matter until listed."""
_BYTES_CACHE = IdentityMemo(4096)


def _activation_key(plan: ResolvedPlan) -> tuple:
    return fields_but(type(plan), NOT_ACTIVATION_FIELDS)(plan)


def layer_activation_bytes(layer: LayerSpec, model: ModelSpec, plan: ResolvedPlan,
                           selective: bool = False) -> float:
    """Bytes one layer saves for one micro-batch on one GPU, without recompute or under the
    framework's selective policy (cached across plans that differ only in other fields: a plan
    search asks again for every pipeline depth and sharding)."""
    key = (id(layer), id(model), selective, _activation_key(plan))
    hit = _BYTES_CACHE.find(key, layer, model)
    if hit is not MISS:
        return hit
    return _BYTES_CACHE.keep(key, (layer, model), _layer_activation_bytes(layer, model, plan, selective))


def _layer_activation_bytes(layer: LayerSpec, model: ModelSpec, plan: ResolvedPlan,
                            selective: bool) -> float:
    tokens = plan.micro_batch_size * plan.seq_len / plan.cp
    keys = plan.seq_len  # eager attention materialises every key of the sequence
    routed = routed_tokens_per_token(layer, plan)
    total = 0.0
    for item in saved_tensors(layer, model, plan):
        if not (item.selective if selective else item.plain):
            continue
        n = item.bytes_per_token * (keys if item.per_key else 1) / _divisor(item, plan)
        total += n * (routed if item.split.startswith("routed") else 1)
    return total * tokens


def checkpoint_bytes(model: ModelSpec, plan: ResolvedPlan) -> float:
    """Bytes full recompute keeps per layer and micro-batch: the layer's input."""
    sp = plan.tp if plan.sequence_parallel else 1
    tokens = plan.micro_batch_size * plan.seq_len / plan.cp
    return tokens * act_bytes(plan) * model.hidden_size / sp


from meshplan.training.memory import profile_hf, profile_torchtitan  # noqa: E402,F401  (register)
