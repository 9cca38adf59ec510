"""Forward and backward time of one decoder layer for one micro-batch on one GPU.

GEMMs run on the tokens of one micro-batch (the full local sequence under tensor parallelism;
column-parallel widths divided by tp); fused attention over the causal (or windowed) keys,
divided by cp (unfused "eager" attention: batched GEMMs over the whole score square plus its
softmax passes through HBM); memory-bound kernels over the bytes they stream; tensor-, context- and
expert-parallel collectives on their placed groups. Backward is twice the forward GEMM work
(data and weight gradients; a frozen LoRA base only the data gradient, see `finetune`), the attention kernel's backward ratio, and re-runs forward work for recompute.
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.costs.comm import collective_time
from meshplan.costs.ops import attention_flops
from meshplan.costs.routing import distinct_experts
from meshplan.model.counts import mean_visible_keys
from meshplan.model.spec import DenseMLP, LayerSpec, MoEMLP
from meshplan.training.finetune import adapters as finetune
from meshplan.training.time import moe
from meshplan.training.time.context import CostContext
from meshplan.training.time.fusion import fused_elements_per_token, fused_memory_applies
from meshplan.training.time.kernels import layer_host_s, lora_host_s
from meshplan.training.imbalance.routing import routing_load


@dataclass(frozen=True, slots=True)
class LayerTime:
    """Seconds one layer takes for one micro-batch, with its communication broken out."""

    forward_s: float
    backward_s: float
    weight_grad_s: float
    """The part of backward that computes weight gradients (deferrable by zero-bubble)."""
    tp_comm_s: float
    """Tensor-parallel collectives, forward + backward (exposed share included in the above)."""
    tp_exposed_s: float
    ep_comm_s: float
    cp_exposed_s: float


def _gemms(ctx: CostContext, layer: LayerSpec) -> tuple[float, float]:
    """(dense GEMM time, routed-expert GEMM time) of one layer's forward."""
    p, h, t = ctx.plan, ctx.model.hidden_size, ctx.tokens
    a = layer.attention
    g = ctx.gemm
    if a.mla is None:
        qkv = g(t, (a.num_heads * a.head_dim + 2 * a.num_kv_heads * a.v_head_dim) / p.tp, h)
    else:
        m = a.mla
        down = (m.q_lora_rank or 0) + m.kv_lora_rank + m.qk_rope_head_dim
        q_up = a.num_heads * a.head_dim / p.tp
        qkv = g(t, down, h) + g(t, q_up, m.q_lora_rank or h)
        qkv += g(t, a.num_heads * (m.qk_nope_head_dim + m.v_head_dim) / p.tp, m.kv_lora_rank)
    out = g(t, h, a.num_heads * a.v_head_dim / p.tp)
    mlp, experts = layer.mlp, 0.0
    if isinstance(mlp, DenseMLP):
        return qkv + out + _mlp_gemms(ctx, mlp, t, p.tp), 0.0
    dense = qkv + out + g(t, mlp.num_experts, h)
    if mlp.shared is not None:
        dense += _mlp_gemms(ctx, mlp.shared, t, p.tp)
    touched = touched_experts(ctx, mlp)
    rows = t * mlp.top_k * p.etp / p.tp * imbalance(ctx, mlp) / touched
    return dense, moe.grouped_gemm_s(ctx, mlp, touched, rows, p.etp)


def touched_experts(ctx: CostContext, mlp: MoEMLP) -> float:
    """Experts of this EP rank that some token of the micro-batch reaches (each reads its weights
    and runs its GEMMs once): the local share of those the EP group's tokens touch. All of them
    for pretraining micro-batches; fewer for a few short sequences over many experts."""
    p = ctx.plan
    group_tokens = ctx.tokens * p.ep * p.etp / p.tp
    local = mlp.num_experts / p.ep
    return max(min(local, 1.0), local / mlp.num_experts
               * distinct_experts(group_tokens, mlp.top_k, mlp.num_experts))


def imbalance(ctx: CostContext, mlp: MoEMLP) -> float:
    """Busiest expert rank's load / the mean: from the plan's expert skew when given (see
    training/imbalance/routing.py), else the fitted dropless imbalance; capped by a capacity factor
    (token dropping or forced balance)."""
    p = ctx.plan
    load = ctx.k.moe_imbalance
    if p.expert_skew is not None:
        load = routing_load(p.expert_skew, mlp.num_experts, p.ep, p.moe_balance).busiest_rank
    cap = p.capacity_factor
    return min(load, cap) if cap else load


def _mlp_gemms(ctx: CostContext, mlp: DenseMLP, rows: float, split: int) -> float:
    h, i = ctx.model.hidden_size, mlp.intermediate_size / split
    up = ctx.gemm(rows, i * (2 if mlp.gated else 1), h)
    return up + ctx.gemm(rows, h, i)


def _attention(ctx: CostContext, layer: LayerSpec) -> tuple[float, float]:
    """(forward, backward) attention-core time of the micro-batch, split by tp and cp."""
    if ctx.plan.attention == "eager":
        return _eager_attention(ctx, layer)
    a, p = layer.attention, ctx.plan
    keys = mean_visible_keys(p.seq_len, a, causal=True)
    flops = attention_flops(p.seq_len, keys, a.num_heads / p.tp, a.head_dim, a.v_head_dim, False)
    forward = ctx.attention(flops * p.micro_batch_size / p.cp) * ctx.attention_load
    return forward, ctx.c.attention_backward_ratio * forward


EAGER_SCORE_PASSES = (4, 10)
"""Score-sized HBM passes of unfused attention, in activation-width units: forward writes
the scores, softmax reads them and writes the probabilities, the value GEMM reads those;
backward writes and reads the probability gradient, softmax backward reads probabilities and
gradient and writes the score gradient, which both input-gradient GEMMs read (4 + 6)."""


def _eager_attention(ctx: CostContext, layer: LayerSpec) -> tuple[float, float]:
    """Unfused attention: scores and weighted values as batched GEMMs over the whole square
    (the causal mask is applied to the scores, not skipped), softmax as memory passes."""
    a, p = layer.attention, ctx.plan
    queries, keys = p.seq_len / p.cp, p.seq_len
    count = p.micro_batch_size * a.num_heads / p.tp
    # one batched GEMM kernel over all heads: their tiles share the SMs' waves
    scores = ctx.gemm(count * queries, keys, a.head_dim)
    values = ctx.gemm(count * queries, a.v_head_dim, keys)
    elements = count * queries * keys * ctx.act_width
    forward = scores + values + ctx.memory(EAGER_SCORE_PASSES[0] * elements, kernels=3)
    backward = 2 * (scores + values) + ctx.memory(EAGER_SCORE_PASSES[1] * elements, kernels=4)
    return forward, backward


def _memory_bound(ctx: CostContext, layer: LayerSpec) -> float:
    """Norms, rotary, activation and residual kernels of the forward pass."""
    p, h = ctx.plan, ctx.model.hidden_size
    a = layer.attention
    sp = p.tp if p.sequence_parallel else 1
    mlp = layer.mlp
    if fused_memory_applies(p.implementation, layer):
        elements = fused_elements_per_token(p.implementation, ctx.model, layer, p.tp, sp)
        return ctx.memory(elements * ctx.tokens * ctx.act_width, kernels=ctx.k.kernels_per_layer)
    inter = (mlp.intermediate_size if isinstance(mlp, DenseMLP)
             else mlp.expert.intermediate_size * mlp.top_k) / p.tp
    per_token = 2 * (4 * h / sp + 6 * h / sp)  # two norms (read+write), two residual adds
    per_token += 2 * 2 * (a.num_heads + a.num_kv_heads) * a.head_dim / p.tp  # rotary on q, k
    per_token += 2 * 3 * inter  # gate/up read, activation write
    if isinstance(mlp, MoEMLP):
        routed = mlp.top_k * p.etp / p.tp * imbalance(ctx, mlp)
        per_token += 2 * moe.permute_passes(ctx) * h * routed
    return ctx.memory(per_token * ctx.tokens * ctx.act_width / 2, kernels=ctx.k.kernels_per_layer)


def _tp_comm(ctx: CostContext, layer: LayerSpec) -> float:
    """Forward TP collectives: all-gather + reduce-scatter (SP) or all-reduce, around attention
    and around the MLP; a MoE block folded to etp = 1 dispatches each rank's own sequence shard,
    so only attention's remain; with etp > 1 the experts gather the routed copies instead."""
    p = ctx.plan
    if p.tp == 1:
        return 0.0
    size = ctx.tokens * ctx.model.hidden_size * ctx.act_width
    if p.sequence_parallel:
        one = collective_time("all_gather", size, ctx.groups.tp, ctx.cluster, ctx.comm)
        one += collective_time("reduce_scatter", size, ctx.groups.tp, ctx.cluster, ctx.comm)
    else:
        one = collective_time("all_reduce", size, ctx.groups.tp, ctx.cluster, ctx.comm)
    mlp = layer.mlp
    if not isinstance(mlp, MoEMLP) or p.ep == 1:
        return 2 * one
    if p.etp == 1:
        return one
    # the experts' all-gather / reduce-scatter runs over the expert-TP group after the
    # dispatch, on every routed copy (Megatron-Core's alltoall dispatcher)
    return one * (1 + mlp.top_k * imbalance(ctx, mlp) * p.etp / p.tp)


def _ep_comm(ctx: CostContext, layer: LayerSpec) -> float:
    """Forward dispatch + combine of routed tokens under the plan's dispatcher (training/time/moe.py)."""
    mlp = layer.mlp
    if not isinstance(mlp, MoEMLP):
        return 0.0
    return moe.ep_comm_s(ctx, mlp, imbalance(ctx, mlp))


def _cp_comm(ctx: CostContext, layer: LayerSpec) -> float:
    """Forward ring exchange of keys and values over the cp group."""
    a, p = layer.attention, ctx.plan
    if p.cp == 1:
        return 0.0
    kv = ctx.tokens * 2 * a.num_kv_heads * a.head_dim / p.tp * ctx.act_width
    return collective_time("all_gather", kv * p.cp, ctx.groups.cp, ctx.cluster, ctx.comm)


def layer_time(ctx: CostContext, layer: LayerSpec) -> LayerTime:
    """Forward/backward seconds of `layer` for one micro-batch under the context's plan."""
    k, p = ctx.k, ctx.plan
    dense, experts = _gemms(ctx, layer)
    adapters, dequant = finetune.adapter_forward_s(ctx, layer), finetune.dequant_s(ctx, layer)
    attn, attn_backward = _attention(ctx, layer)
    mem = _memory_bound(ctx, layer)
    tp, cp = _tp_comm(ctx, layer), _cp_comm(ctx, layer)
    ep = moe.ep_exposed_s(ctx, _ep_comm(ctx, layer), dense + experts + attn)
    tp_exposed = _hidden_share(ctx, tp, k.tp_overlap_exposed if p.tp_comm_overlap else 1.0)
    cp_exposed = max(0.0, cp - attn) + k.overlap_penalty * min(cp, attn)
    overhead = k.moe_overhead_s if isinstance(layer.mlp, MoEMLP) else 0.0
    fwd_compute = dense + experts + attn + mem + overhead + adapters + dequant
    forward = fwd_compute + tp_exposed + ep + cp_exposed
    weight_grad = adapters if finetune.is_finetune(p) else dense + experts  # frozen base: dgrad only
    grad_gemm = dense + experts + adapters + weight_grad
    backward = grad_gemm + attn_backward + 2 * mem + dequant
    backward += 2 * (tp_exposed + ep + cp_exposed)
    host_forward, host_backward = layer_host_s(ctx.kernel_profile, ctx.model, layer, p.tp,
                                               p.sequence_parallel, p.ep)
    if finetune.is_finetune(p):
        count = len(finetune.layer_adapters(layer, ctx.model, p))
        host_forward, host_backward = lora_host_s(ctx.kernel_profile, count, (host_forward, host_backward))
    backward = max(backward, host_backward)  # the GPU waits on launches of short kernels
    backward += _recompute(ctx, max(forward, host_forward), attn)
    forward = max(forward, host_forward)
    return LayerTime(forward, backward, weight_grad, 3 * tp, tp_exposed * 3, 3 * ep,
                     3 * cp_exposed)


def _hidden_share(ctx: CostContext, comm: float, exposed_share: float) -> float:
    """Time a collective adds when all but `exposed_share` of it runs under compute: the exposed
    part, plus the overlap penalty on the hidden part (it shares SMs and HBM with the GEMMs)."""
    return comm * (exposed_share + ctx.k.overlap_penalty * (1.0 - exposed_share))


def _recompute(ctx: CostContext, forward: float, attn: float) -> float:
    """Extra forward work in backward: the whole layer (full) or the attention core (selective)."""
    recompute = ctx.plan.recompute
    if recompute == "full":
        return forward * ctx.full_recompute_share
    if recompute == "selective":
        return attn
    return 0.0
