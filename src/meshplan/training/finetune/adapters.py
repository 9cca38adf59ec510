"""LoRA and QLoRA fine-tuning: what changes against full training in states, traffic and work.

- Only the adapters train: gradients, master copies, optimizer states, the optimizer step and
  the data-parallel gradient reduction cover the adapter parameters alone.
- The base is frozen: 16-bit weights (LoRA) or, for QLoRA, the linear weights of the decoder
  layers in NF4 with double quantization (`NF4_BYTES_PER_PARAM`); embeddings, the LM head, norms,
  biases and routers stay 16-bit (bitsandbytes replaces linear layers only; transformers keeps
  the output head unquantized).
- Backward through a frozen linear computes only its input gradient (one GEMM of the forward's
  size instead of two); the adapters run forward, input- and weight-gradient GEMMs.
- QLoRA dequantizes each NF4 weight to bf16 before each GEMM that uses it, in forward and again
  in backward (bitsandbytes' MatMul4Bit: `dequantize_4bit` then a bf16 matmul): a memory-bound
  pass reading the 4-bit weight and writing the 16-bit copy.
"""

from __future__ import annotations

from collections import Counter

from meshplan.model import lora
from meshplan.model.counts import layer_kinds, matmul_flops_per_token
from meshplan.model.quant import DOUBLE_QUANT_BLOCK, NF4_BLOCK, NF4_BYTES_PER_PARAM  # noqa: F401 (one NF4 layout)
from meshplan.model.spec import LayerSpec, ModelSpec
from meshplan.training.layout.capabilities import FUSED_ADAPTERS
from meshplan.training.layout.resolve import ResolvedPlan
from meshplan.training.memory.states import (
    SHARDED_STATES, StageParams, plan_memo, stage_chunk_kinds, stage_params, stage_signatures,
    state_bytes,
)

DEQUANT_KERNELS_PER_LAYER = 7
"""Dequantize launches per layer pass: one per linear weight of a Llama-style layer."""


def is_finetune(plan: ResolvedPlan) -> bool:
    """True for LoRA and QLoRA plans."""
    return plan.method != "full"


def _fused(plan: ResolvedPlan) -> bool:
    return plan.framework in FUSED_ADAPTERS


def layer_adapters(layer: LayerSpec, model: ModelSpec, plan: ResolvedPlan) -> list[lora.Linear]:
    """The adapted linear layers of `layer` under `plan`."""
    return lora.adapted_linears(layer, model, plan.lora_targets, _fused(plan))


def trainable_params(model: ModelSpec, plan: ResolvedPlan) -> int:
    """Parameters the optimizer updates: every one (full) or the adapters'."""
    if not is_finetune(plan):
        return model.params_total
    return lora.adapter_params(model, plan.lora_targets, plan.lora_rank, _fused(plan))


def _layer_adapter_params(model: ModelSpec, plan: ResolvedPlan, kind: int) -> float:
    layer = model.layers[kind]
    return sum(lin.adapter_params(plan.lora_rank, plan.tp) for lin in layer_adapters(layer, model, plan))


def _stage_sum(model: ModelSpec, plan: ResolvedPlan, stage: int, name: str, fn) -> float:
    """sum over the stage's layers of fn(kind), once per layer kind and stage signature."""
    memo = plan_memo(model, plan)
    key = (name, stage_signatures(model, plan)[stage])
    if key not in memo:
        kinds = Counter(k for chunk in stage_chunk_kinds(model, plan, stage) for k in chunk)
        memo[key] = sum(n * fn(k) for k, n in kinds.items())
    return memo[key]


def trainable_stage_params(model: ModelSpec, plan: ResolvedPlan, stage: int) -> StageParams:
    """Trainable parameters per GPU of `stage`, split as the states model splits them."""
    if not is_finetune(plan):
        return stage_params(model, plan, stage)
    adapters = _stage_sum(model, plan, stage, "adapters",
                          lambda k: _layer_adapter_params(model, plan, k))
    return StageParams(adapters, 0.0, adapters)


def trainable_layer_params(model: ModelSpec, plan: ResolvedPlan, layers: list[int]) -> float:
    """Adapter parameters per GPU of decoder layers `layers`."""
    kinds = layer_kinds(model)
    return sum(_layer_adapter_params(model, plan, kinds[i]) for i in layers)


def quantized_saving(model: ModelSpec, plan: ResolvedPlan, layers: list[int], width: float) -> float:
    """Bytes per GPU QLoRA's NF4 storage saves over `width`-byte weights in decoder layers
    `layers` (0 for other methods): what an FSDP all-gather of those layers no longer moves."""
    if plan.method != "qlora":
        return 0.0
    kinds = layer_kinds(model)
    return (width - NF4_BYTES_PER_PARAM) * sum(sum(_quantized(model, plan, kinds[i])) for i in layers)


def _quantized(model: ModelSpec, plan: ResolvedPlan, kind: int) -> tuple[float, float]:
    """(dense, expert) 4-bit weights of layer `kind` per GPU."""
    return _layer_quantized(model.layers[kind], model, plan)


def _layer_quantized(layer: LayerSpec, model: ModelSpec, plan: ResolvedPlan) -> tuple[float, float]:
    dense, expert = lora.quantized_params(layer, model)
    return dense / plan.tp, expert / (plan.ep * plan.etp)


def base_weight_bytes(model: ModelSpec, plan: ResolvedPlan, stage: int,
                      params: StageParams) -> tuple[float, float]:
    """(dense, expert) bytes per GPU of the frozen base of `stage`, before sharding."""
    width = 4.0 if plan.precision == "fp32" else 2.0
    dense, expert = params.dense * width, params.expert * width
    if plan.method == "qlora":
        saved = width - NF4_BYTES_PER_PARAM
        dense -= saved * _stage_sum(model, plan, stage, "q_dense", lambda k: _quantized(model, plan, k)[0])
        expert -= saved * _stage_sum(model, plan, stage, "q_expert", lambda k: _quantized(model, plan, k)[1])
    return dense, expert


def model_states(model: ModelSpec, plan: ResolvedPlan, stage: int,
                 params: StageParams) -> dict[str, float]:
    """Weights (frozen base + adapters), gradients, master weights and optimizer states per GPU
    of `stage`: the adapters' states by the framework's precision rules (`state_bytes`), before
    offload (`memory.offload_states`)."""
    per_param = state_bytes(plan, model.hidden_size)
    sharded = SHARDED_STATES[plan.dp_sharding]
    dense, expert = base_weight_bytes(model, plan, stage, params)
    if "weights" in sharded:
        dense, expert = dense / plan.shard_group, expert / plan.expert_dp
    adapters = trainable_stage_params(model, plan, stage).dense
    out = {"weights": dense + expert}
    for name in ("weights", "gradients", "master", "optimizer"):
        share = adapters / plan.shard_group if name in sharded else adapters
        out[name] = out.get(name, 0.0) + getattr(per_param, name) * share
    return out


def adapter_forward_s(ctx, layer: LayerSpec) -> float:
    """Forward seconds of `layer`'s adapters for one micro-batch: x A, (x A) B and the scaled add
    onto the base output."""
    p, t = ctx.plan, ctx.tokens
    total = 0.0
    for lin in layer_adapters(layer, ctx.model, p):
        fan_in = lin.fan_in / p.tp if lin.split == "row" else lin.fan_in
        fan_out = lin.fan_out / p.tp if lin.split == "col" else lin.fan_out
        total += ctx.gemm(t, p.lora_rank, fan_in) + ctx.gemm(t, fan_out, p.lora_rank)
        total += ctx.memory(3 * t * fan_out * ctx.act_width, kernels=2)
    return total


def dequant_s(ctx, layer: LayerSpec) -> float:
    """Seconds to dequantize `layer`'s NF4 weights to bf16 once (QLoRA; 0 otherwise)."""
    if ctx.plan.method != "qlora":
        return 0.0
    dense, expert = _layer_quantized(layer, ctx.model, ctx.plan)
    return ctx.memory((dense + expert) * (NF4_BYTES_PER_PARAM + 2.0), kernels=DEQUANT_KERNELS_PER_LAYER)


def step_flops_per_token(model: ModelSpec, plan: ResolvedPlan) -> tuple[float, float]:
    """(model, hardware) FLOPs per token of a LoRA/QLoRA step: the base's forward and input
    gradient (2 x its matmuls, 3 x attention: its backward computes dQ, dK and dV), the
    adapters' forward and both gradients (3 x); hardware adds the recomputed forward."""
    forward = model.flops_per_token_forward(plan.seq_len, causal=True)
    matmul = float(matmul_flops_per_token(model))
    attention = forward - matmul
    kinds = Counter(layer_kinds(model))
    adapters = 2.0 * plan.lora_rank * sum(
        n * (lin.fan_in + lin.fan_out) for k, n in kinds.items()
        for lin in layer_adapters(model.layers[k], model, plan))
    flops = 2 * matmul + 3 * attention + 3 * adapters
    extra = forward + adapters if plan.recompute == "full" else 0.0
    return flops, flops + extra
