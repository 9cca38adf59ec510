"""Memory of one serving GPU: weights, activation peak, reserved buffers, and the KV cache left.

The engines size their KV cache the same way (vLLM's profile run, SGLang's
mem_fraction_static, TensorRT-LLM's free-memory fraction): of the memory the engine may use,
what the weights, the activation peak of the largest batch and the runtime's own buffers
(CUDA graphs, NCCL, allocator) do not take becomes KV blocks. Sliding-window layers keep at
most their window per request; their KV is charged per running request, not per token.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from meshplan.errors import DoesNotFitError
from meshplan.hardware import GPUSpec
from meshplan.model import counts
from meshplan.model.quant import GROUPS, WeightPrecision
from meshplan.model.spec import LayerSpec, ModelSpec, MoEMLP
from meshplan.model.stored import layer_weight_bits
from meshplan.serving.cost.kvquant import QUANTIZED_KV, kv_element_bytes, residual_bytes_per_request
from meshplan.serving.cost.lora import adapter_bytes, lora_slots
from meshplan.serving.cost.weights import plan_precision, weights_dtype
from meshplan.serving.plan import ServingPlan

GIB = 2**30
RUNTIME_RESERVED_BYTES = 1.5 * GIB
"""CUDA context (~0.5 GiB), NCCL buffers and captured CUDA graphs (~1 GiB): what a vLLM
start-up log reports as non-torch memory plus graph memory on an 8B model."""


def kv_dtype(plan: ServingPlan) -> str:
    """The KV-cache dtype: the plan's, or the activation dtype for `auto`."""
    if plan.kv_cache_dtype != "auto":
        return plan.kv_cache_dtype
    return "fp16" if plan.weights_dtype == "fp16" else "bf16"


def expert_shards(plan: ServingPlan) -> int:
    """GPUs the routed experts are divided over: with ep > 1 every GPU of a pipeline stage holds
    1/(tp x dp) of them (ep groups of experts, each split tp x dp / ep ways); without, TP shards
    each expert and DP replicas hold their own copy."""
    return max(plan.ep, plan.tp * plan.dp) if plan.ep > 1 else plan.tp


def stage_layers(model: ModelSpec, pp: int) -> tuple[LayerSpec, ...]:
    """The layers of the largest pipeline stage (the first ceil(L/pp))."""
    return model.layers[: math.ceil(model.num_layers / pp)]


def weight_bytes_per_gpu(model: ModelSpec, plan: ServingPlan) -> float:
    """Weight bytes on the busiest GPU: decoder layers of the first stage split by tp (experts
    by ep/tp), each group of weights in its precision (meshplan.serving.cost.weights: the plan's
    dtype, or the checkpoint's per group); embedding and LM head in 16 bits, vocab-parallel."""
    precision = plan_precision(model, plan)
    widths = {precision.format(g).bits for g in GROUPS}
    if len(widths) > 1:
        return _mixed_weight_bytes(model, plan, precision)
    bits = widths.pop()
    total = 0.0
    for layer in stage_layers(model, plan.pp):
        lp = counts.layer_params(layer, model)
        dense = lp.total - lp.routed_experts
        total += dense / plan.tp * bits / 8 + lp.routed_experts / expert_shards(plan) * bits / 8
    if plan.mtp_drafts:  # one more decoder layer like the last, and its 2h -> h projection
        lp = counts.layer_params(model.layers[-1], model)
        dense = lp.total - lp.routed_experts + 2 * model.hidden_size ** 2
        total += dense / plan.tp * bits / 8 + lp.routed_experts / expert_shards(plan) * bits / 8
    embed = model.params_embedding + model.params_lm_head
    return total + 2.0 * embed / plan.tp


def _mixed_weight_bytes(model: ModelSpec, plan: ServingPlan, precision: WeightPrecision) -> float:
    """`weight_bytes_per_gpu` for a checkpoint whose groups differ in precision."""
    total = sum(_layer_weight_bytes(layer, model, plan, precision) for layer in stage_layers(model, plan.pp))
    if plan.mtp_drafts:
        total += _layer_weight_bytes(model.layers[-1], model, plan, precision)
        total += 2 * model.hidden_size ** 2 / plan.tp * precision.format("mlp").bits / 8
    embed = model.params_embedding + model.params_lm_head
    return total + 2.0 * embed / plan.tp


def _layer_weight_bytes(layer: LayerSpec, model: ModelSpec, plan: ServingPlan,
                        precision: WeightPrecision) -> float:
    """Bytes of one decoder layer on one GPU, each group of weights in its own precision
    (meshplan.model.stored); dense parts split by tp, experts by ep/tp."""
    dense, routed = layer_weight_bits(layer, model, precision)
    return (dense / plan.tp + routed / expert_shards(plan)) / 8


def _kv_split(layer: LayerSpec, tp: int) -> float:
    """Cached elements per token of `layer` on one TP rank (KV heads split, at least one head;
    the MLA latent is replicated on every rank)."""
    a = layer.attention
    if a.mla is not None:
        return counts.kv_elements_per_token(a)
    heads = max(1, math.ceil(a.num_kv_heads / tp))
    return heads * (a.head_dim + a.v_head_dim)


@dataclass(frozen=True, slots=True, kw_only=True)
class KVLayout:
    """KV bytes per GPU: per token of full-attention layers, and per request for windowed ones."""

    bytes_per_token: float
    """Bytes one context token occupies over the stage's full-attention layers."""
    windowed_bytes_per_request: float
    """Bytes a running request holds whatever its length: sliding-window / chunked layers
    (window-bounded), and a 4-/2-bit KV cache's 16-bit residual of recent tokens."""


def kv_layout(model: ModelSpec, plan: ServingPlan) -> KVLayout:
    """How the KV cache of one GPU grows (all-windowed models are treated as full attention)."""
    dtype = kv_dtype(plan)
    width = kv_element_bytes(dtype)
    layers = stage_layers(model, plan.pp)
    full = sum(_kv_split(l, plan.tp) for l in layers if not _span(l))
    windowed = sum(_kv_split(l, plan.tp) * _span(l) for l in layers if _span(l))
    if full == 0:
        full = sum(_kv_split(l, plan.tp) for l in layers)
        windowed = 0.0
    per_request = windowed * width
    if dtype in QUANTIZED_KV:  # KIVI's 16-bit residual of recent tokens, over every layer
        per_request += residual_bytes_per_request(sum(_kv_split(l, plan.tp) for l in layers), dtype)
    return KVLayout(bytes_per_token=full * width, windowed_bytes_per_request=per_request)


def _span(layer: LayerSpec) -> int:
    a = layer.attention
    return a.sliding_window or a.attention_chunk or 0


def activation_peak_bytes(model: ModelSpec, plan: ServingPlan, max_tokens: int, max_seqs: int) -> float:
    """Peak transient memory of the largest iteration: the widest per-token intermediates of one
    layer (attention projections, the MLP's up-projection and activation) over `max_tokens`,
    plus fp32 logits of `max_seqs` sampled rows."""
    h, widest = model.hidden_size, 0.0
    for layer in stage_layers(model, plan.pp):
        a, mlp = layer.attention, layer.mlp
        qkv = (a.num_heads * a.head_dim + 2 * a.num_kv_heads * a.v_head_dim) / plan.tp
        if isinstance(mlp, MoEMLP):
            inter = mlp.expert.intermediate_size * mlp.top_k / expert_shards(plan) * plan.tp
        else:
            inter = mlp.intermediate_size / plan.tp
        widest = max(widest, 3 * h + qkv + 3 * inter)
    return 2.0 * widest * max_tokens + 4.0 * max_seqs * model.vocab_size / plan.tp


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingMemory:
    """Memory of the busiest GPU of a replica and the KV blocks it leaves."""

    usable_bytes: float
    weights_bytes: float
    activation_bytes: float
    reserved_bytes: float
    kv_bytes: float
    kv: KVLayout
    block_size: int
    num_blocks: int

    def to_dict(self) -> dict[str, float]:
        """Plain-dict form (bytes and blocks)."""
        return {k: getattr(self, k) for k in ("usable_bytes", "weights_bytes", "activation_bytes",
                                                "reserved_bytes", "kv_bytes", "block_size", "num_blocks")}

    @property
    def kv_tokens(self) -> int:
        """Context tokens the KV cache holds."""
        return self.num_blocks * self.block_size


def serving_memory(model: ModelSpec, gpu: GPUSpec, plan: ServingPlan, *, utilization: float,
                   block_size: int, max_tokens: int, max_seqs: int,
                   fraction_of: str = "total") -> ServingMemory:
    """KV blocks per replica; ConfigError naming the shortfall when the model does not fit.
    `utilization` is a share of the whole GPU (vLLM, SGLang) or, with `fraction_of=
    "free_after_weights"`, of what weights, activations and runtime leave (TensorRT-LLM)."""
    weights = weight_bytes_per_gpu(model, plan)
    if plan.lora_adapters:  # preallocated adapter slots at max rank (counted with the weights)
        weights += lora_slots(plan) * adapter_bytes(list(stage_layers(model, plan.pp)), model, plan.tp, plan.lora_rank)
    act = activation_peak_bytes(model, plan, max_tokens, max_seqs)
    left = gpu.hbm_bytes - weights - act - RUNTIME_RESERVED_BYTES
    if fraction_of == "total":
        usable = gpu.hbm_bytes * utilization
        kv_bytes = usable - weights - act - RUNTIME_RESERVED_BYTES
    else:
        usable = gpu.hbm_bytes
        kv_bytes = left * utilization
    layout = kv_layout(model, plan)
    blocks = int(kv_bytes // (layout.bytes_per_token * block_size)) if kv_bytes > 0 else 0
    if blocks <= 0:
        raise DoesNotFitError(
            f"{model.name} does not fit on {gpu.name} with tp={plan.tp} pp={plan.pp} "
            f"({weights_dtype(model, plan)} weights): weights {weights / GIB:.1f} GiB + activations "
            f"{act / GIB:.1f} GiB + runtime {RUNTIME_RESERVED_BYTES / GIB:.1f} GiB leave no KV cache "
            f"in the {usable / GIB:.1f} GiB the engine may use; raise tp/pp, quantize the weights or "
            f"lower max_num_batched_tokens")
    return ServingMemory(usable_bytes=usable, weights_bytes=weights, activation_bytes=act,
                         reserved_bytes=RUNTIME_RESERVED_BYTES, kv_bytes=kv_bytes, kv=layout,
                         block_size=block_size, num_blocks=blocks)
