"""What a decoder layer saves for backward when its base is frozen and LoRA adapters train.

Measured on Hugging Face models wrapped by PEFT (tests/torch_tier/test_finetune_lora_vs_peft.py checks
this against `saved_tensors_hooks`): a frozen linear needs no weight gradient, so autograd no
longer keeps its input, and a frozen norm weight no longer needs the normalised input. What the
adapters keep instead: PEFT casts the input to the adapters' fp32 (its default
`autocast_adapter_dtype`), a copy per adapter that A's weight gradient reads, and the fp32
rank-r product x A that B's weight gradient reads.

The `hf` profile is adjusted tensor by tensor (Llama-style families; norms that run wholly in
fp32 keep their saves). Other profiles (Megatron-Core / NeMo with bf16 adapters) keep what full
training saves and add the adapters' rank-r products (an upper bound on the base's share).
"""

from __future__ import annotations

from dataclasses import replace

from meshplan.model.lora import adapted_linears
from meshplan.model.spec import DenseMLP, LayerSpec, ModelSpec, MoEMLP
from meshplan.training.memory.activations import Saved, act_bytes
from meshplan.training.memory.profile_hf import FP32_NORMS
from meshplan.training.layout.resolve import ResolvedPlan

FROZEN_LINEAR_INPUTS = ("qkv_input", "mlp_input", "o_proj_input", "o_proj_input_copy")
"""Saved tensors that are only a linear layer's input, kept for its weight gradient."""
ADAPTER_INPUT_BYTES = 4.0
"""PEFT adapters are fp32 on a bf16 base: each casts its input to fp32 and keeps that copy."""


def frozen_base(saved: list[Saved], layer: LayerSpec, model: ModelSpec, plan: ResolvedPlan,
                profile: str) -> list[Saved]:
    """`saved` (the profile's tensors under full training) for a frozen base with adapters."""
    fused = plan.framework == "nemo"
    adapters = adapted_linears(layer, model, plan.lora_targets, fused)
    if profile != "hf":
        width = act_bytes(plan)
        return saved + [Saved("lora_xa", width * plan.lora_rank * len(adapters), "none", selective=False)]
    out = [_frozen(item, layer, model) for item in saved]
    out = [item for item in out if item is not None]
    for k, lin in enumerate(adapters):
        tensor = ADAPTER_INPUT_BYTES * (lin.fan_in + plan.lora_rank)
        out.append(Saved(f"lora_{k}_input_xa", tensor, "none", selective=False))
    return out


def _frozen(item: Saved, layer: LayerSpec, model: ModelSpec) -> Saved | None:
    """One saved tensor under a frozen base: dropped, shrunk or kept."""
    if item.name.endswith("_normalized") or item.name in FROZEN_LINEAR_INPUTS:
        return None  # read by the norm's / the linear's weight gradient only
    if item.name.endswith("swiglu") or item.name.endswith("gelu"):
        return _mlp(item, layer)
    if item.name == "expert_pair":  # the gathered input went with the experts' weight gradient
        return replace(item, bytes_per_token=item.bytes_per_token - 2 * model.hidden_size)
    normalised = 4 if model.family in FP32_NORMS else 2  # bytes of the normalised copy
    if item.name.endswith("_fp32") and model.family in FP32_NORMS:  # fp32 input + normalised
        return replace(item, bytes_per_token=item.bytes_per_token - 4 * model.hidden_size)
    if item.name in ("q_norm", "k_norm"):
        a = layer.attention
        width = a.num_heads * a.head_dim if item.name == "q_norm" else a.num_kv_heads * a.head_dim
        return replace(item, bytes_per_token=item.bytes_per_token - normalised * width)
    return item


def _mlp(item: Saved, layer: LayerSpec) -> Saved:
    """A dense MLP no longer keeps the down projection's input (a down adapter keeps its own fp32
    copy); the gate, up and activation outputs stay (the activation's and the product's input
    gradients read them)."""
    mlp = layer.mlp
    if isinstance(mlp, MoEMLP):
        mlp = mlp.expert if item.name.startswith("expert_") else mlp.shared
    return replace(item, bytes_per_token=item.bytes_per_token - 2 * mlp.intermediate_size)
