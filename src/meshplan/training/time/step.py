"""Per-stage work of one micro-batch, data-parallel and optimizer time: the parts of a step."""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from meshplan.costs.comm import collective_time, p2p_time
from meshplan.model.counts import distinct_kinds
from meshplan.training.finetune import adapters as finetune
from meshplan.training.time.context import CostContext
from meshplan.training.time.layer import LayerTime, layer_time
from meshplan.training.time.offload import offload_time, swapped_bytes
from meshplan.training.time.offload_copies import chunk_offload_exposed, param_store_bytes_per_s
from meshplan.training.memory.states import (
    chunk_kinds, fields_but, layer_split, shared_memo, stage_signatures, state_bytes, updated_params,
)

OPTIMIZER_BYTES_PER_PARAM = 34.0
"""Adam step traffic: read fp32 master, grad, two moments (16); write master, moments (12);
write the bf16 weight copy (2); grads in fp32 (4) on read."""


@dataclass(frozen=True, slots=True)
class ChunkTime:
    """One model chunk's forward/backward seconds per micro-batch, with communication parts."""

    forward_s: float
    backward_s: float
    weight_grad_s: float
    tp_exposed_s: float
    ep_s: float
    cp_exposed_s: float
    fsdp_exposed_s: float
    offload_exposed_s: float = 0.0
    """Host<->GPU copies of offloaded activations and parameters not hidden (forward + backward)."""


NOT_LAYER_FIELDS = frozenset({
    "dp", "pp", "vpp", "shard_group", "expert_dp", "global_batch_size", "num_microbatches",
    "chunk_layers", "dp_sharding", "schedule", "optimizer", "offload_optimizer", "rank_order",
    "offload_activations", "offload_params", "offload_target", "chosen", "warnings"})
"""Resolved-plan fields one decoder layer's time does not read: pipeline depth, batch count and
sharding act on whole chunks and stages, and where the layout puts the tensor-, context- and
expert-parallel groups is in the key through their placements; offload copies are costed per chunk around the cached layer
times (`training.time.offload_copies`). A field missing here is part of
the key: a new plan field is assumed to matter until listed."""
_LAYER_TIMES: dict = {}


def _layer_key(ctx: CostContext) -> tuple:
    p, g = ctx.plan, ctx.groups
    fields = fields_but(type(p), NOT_LAYER_FIELDS)(p)
    return (id(ctx.model), id(ctx.cluster), ctx.c, ctx.comm, ctx.k, ctx.clock, ctx.tokens,
            ctx.act_width, ctx.gemm_dtype, ctx.full_recompute_share, ctx.kernel_profile,
            ctx.attention_load,
            g.tp, g.cp, g.ep, fields)


class _LayerEntry(NamedTuple):
    """What plans with one layer key share (see `_layer_entry`)."""

    model: object
    cluster: object
    by_layer: dict[object, LayerTime]
    """LayerTime of each distinct LayerSpec."""
    by_kind: dict[int, LayerTime]
    """The same LayerTimes by layer kind: a chunk's layers are looked up without hashing a frozen
    LayerSpec, field by nested field, for every layer of every plan."""
    sums: dict
    """`_chunk_sums` by chunk shape."""
    ends: dict
    """`_ends` by (first, last)."""


def _layer_cache(ctx: CostContext) -> dict:
    """LayerTime of each distinct layer, shared by the plans of a search that differ only in
    pipeline depth, batch count or sharding (the issue #20 per-layer cost cache)."""
    return _layer_entry(ctx).by_layer


def _layer_entry(ctx: CostContext) -> _LayerEntry:
    """The `_LayerEntry` of the context's layer key."""
    key = _layer_key(ctx)
    hit = _LAYER_TIMES.get(key)
    if hit is not None and hit.model is ctx.model and hit.cluster is ctx.cluster:
        return hit
    cache: dict = {}
    by_kind: dict = {}
    for k in distinct_kinds(ctx.model):
        by_kind[k] = cache[ctx.model.layers[k]] = layer_time(ctx, ctx.model.layers[k])
    if len(_LAYER_TIMES) > 2048:
        _LAYER_TIMES.clear()
    hit = _LAYER_TIMES[key] = _LayerEntry(ctx.model, ctx.cluster, cache, by_kind, {}, {})
    return hit


def _chunk_sums(entry: _LayerEntry, kinds: tuple[int, ...]) -> tuple:
    """(forward, backward, weight-grad, TP exposed, EP, CP exposed sums, per-layer forwards,
    per-layer backwards) of a chunk of layer `kinds` under a `_layer_entry`, added in layer
    order once per entry and chunk shape: plans sharing layer times (other depths, batch counts,
    sharding) have the same chunks again."""
    hit = entry.sums.get(kinds)
    if hit is None:
        times = [entry.by_kind[k] for k in kinds]
        hit = entry.sums[kinds] = (
            sum(t.forward_s for t in times), sum(t.backward_s for t in times),
            sum(t.weight_grad_s for t in times), sum(t.tp_exposed_s for t in times),
            sum(t.ep_comm_s for t in times), sum(t.cp_exposed_s for t in times),
            [t.forward_s for t in times], [t.backward_s for t in times])
    return hit


LOSS_BYTES_PER_LOGIT = (30, 14)
"""(forward, backward) HBM bytes per logit of an unfused fp32 cross-entropy (Megatron's
vocab-parallel loss, PyTorch's cross_entropy on upcast logits). Forward: upcast (read 2,
write 4), row max (read 4), subtract max and exponentiate (read 4, write 4), row sum (read 4),
normalise (read 4, write 4): 30. Backward: scale the saved softmax by the incoming gradient
(read 4, write 4), cast the gradient back to bf16 for the head GEMM (read 4, write 2): 14."""
LOSS_KERNELS = 8
FUSED_LOSS_BYTES_PER_LOGIT = {"compiled": (8, 6), "fused": (2, 4)}
"""The same per implementation that fuses the loss (TrainingPlan.implementation). torch.compile
(Inductor) upcasts the bf16 logits in registers: forward reads them twice (row max, then the
sum of exponentials) and writes the fp32 log-probabilities autograd keeps for backward
(2 + 2 + 4); backward reads those and writes the bf16 gradient (4 + 2). llm.c's fused classifier
(fused_classifier_kernel3) reads each row once for the online softmax statistics and once to
write the gradient over the logits in place, and never materialises probabilities: (2, 4)."""


def loss_bytes_per_logit(implementation: str) -> tuple[int, int]:
    """(forward, backward) HBM bytes per logit of the loss under an implementation."""
    return FUSED_LOSS_BYTES_PER_LOGIT.get(implementation, LOSS_BYTES_PER_LOGIT)


def _embedding_and_head(ctx: CostContext, stage: int) -> tuple[float, float]:
    """(forward, backward) seconds of the embedding (first stage) and LM head + loss (last)."""
    p, m = ctx.plan, ctx.model
    fwd = bwd = 0.0
    frozen = finetune.is_finetune(p)  # a frozen embedding and head: no weight gradients
    if stage == 0:
        gather = ctx.memory(ctx.tokens * m.hidden_size * ctx.act_width * 2)
        fwd, bwd = gather, 0.0 if frozen else 2 * gather
    if stage == p.pp - 1:
        vocab = m.vocab_size / p.tp
        head = ctx.gemm(ctx.tokens, vocab, m.hidden_size)
        loss_f, loss_b = (ctx.memory(ctx.tokens * vocab * b, kernels=LOSS_KERNELS // 2)
                          for b in loss_bytes_per_logit(p.implementation))
        fwd, bwd = fwd + head + loss_f, bwd + (1 if frozen else 2) * head + loss_b
    return fwd, bwd


FSDP_COLLECTIVES_PER_LAYER = {"deepspeed": 4}
"""Parameter gathers (and gradient reduce-scatters) per decoder layer and pass: FSDP2,
Megatron-FSDP and XLA gather one unit per transformer block; DeepSpeed ZeRO-3 fetches each
submodule on its own (QKV, output, two MLP projections)."""


def _fsdp_traffic(ctx: CostContext, layers: list) -> tuple[float, float]:
    """(gather, reduce-scatter) seconds of one pass over `layers`' sharded parameters: one
    collective per unit, each paying the ring's latency, scaled by the framework's fitted
    sharded-traffic factor."""
    p = ctx.plan
    params = sum(sum(layer_split(ctx.model, i, p)) for i in layers)
    trained = finetune.trainable_layer_params(ctx.model, p, layers) if finetune.is_finetune(p) else params
    units = max(1, len(layers) * FSDP_COLLECTIVES_PER_LAYER.get(p.framework, 1))
    grad_width = state_bytes(p, ctx.model.hidden_size).gradients
    group, cluster, comm = ctx.groups.shard, ctx.cluster, ctx.comm
    weights = params * ctx.act_width - finetune.quantized_saving(ctx.model, p, layers, ctx.act_width)  # QLoRA: 4-bit
    gather = units * collective_time("all_gather", weights / units, group, cluster, comm)
    scatter = units * collective_time("reduce_scatter", trained * grad_width / units, group, cluster, comm)
    return gather * ctx.k.fsdp_comm_scale, scatter * ctx.k.fsdp_comm_scale


def _fsdp_exposed(ctx: CostContext, layers: list, forward: float,
                  backward: float) -> tuple[float, float]:
    """(forward, backward) FSDP communication per micro-batch not hidden behind compute. The
    forward gathers every unit's parameters once; backward gathers them again and
    reduce-scatters their gradients (every micro-batch). Each unit's traffic is prefetched
    behind its neighbour's compute, so a phase is exposed only where its traffic outlasts its
    compute, plus the overlap penalty on the rest."""
    p = ctx.plan
    if p.dp_sharding != "full" or ctx.groups.shard.size == 1 or p.pp > 1:
        return 0.0, 0.0  # pipelined FSDP keeps units unsharded within the step (see dp_seconds)
    gather, scatter = _fsdp_traffic(ctx, layers)

    def exposed(traffic: float, compute: float) -> float:
        return max(0.0, traffic - compute) + ctx.k.overlap_penalty * min(traffic, compute)

    return exposed(gather, forward), exposed(gather + scatter, backward)


def chunk_times(ctx: CostContext) -> list[ChunkTime]:
    """Times of every pipeline chunk (index c runs on stage c % pp); chunks with the same layer
    kinds in the same place (first, middle, last) are costed once."""
    entry = _layer_entry(ctx)
    pp, chunks = ctx.plan.pp, ctx.plan.chunk_layers
    by_stage = chunk_kinds(ctx.model, ctx.plan)
    done: dict[tuple, ChunkTime] = {}
    out = []
    for c, chunk in enumerate(chunks):
        kinds = by_stage[c % pp][c // pp]
        key = (kinds, c == 0, c == len(chunks) - 1)
        if key not in done:
            done[key] = _chunk_time(ctx, chunk, _chunk_sums(entry, kinds), _ends(ctx, entry, *key[1:]))
        out.append(done[key])
    return out


def _ends(ctx: CostContext, entry: _LayerEntry, first: bool, last: bool) -> tuple[float, float]:
    """`_embedding_and_head` of the first chunk, the last, both (one chunk) or neither: it reads
    nothing outside the layer key but which end the chunk is, so plans sharing layer times
    share it."""
    hit = entry.ends.get((first, last))
    if hit is None:
        stage = 0 if first else (ctx.plan.pp - 1 if last else -1)
        hit = entry.ends[first, last] = _embedding_and_head(ctx, stage)
    return hit


def _chunk_time(ctx: CostContext, chunk: tuple[int, ...], sums: tuple,
                ends: tuple[float, float]) -> ChunkTime:
    """One chunk's ChunkTime from its layers' summed times (`_chunk_sums`) and its embedding and
    LM head times (`_ends`)."""
    f, b, weight_grad, tp, ep, cp, forwards, backwards = sums
    ef, eb = ends
    fsdp_f, fsdp_b = _fsdp_exposed(ctx, list(chunk), f + ef, b + eb)
    off_f, off_b = chunk_offload_exposed(ctx, chunk, forwards, backwards)
    return ChunkTime(f + ef + fsdp_f + off_f, b + eb + fsdp_b + off_b, weight_grad, tp, ep, cp,
                     fsdp_f + fsdp_b, off_f + off_b)


def p2p_seconds(ctx: CostContext) -> float:
    """One activation (or gradient) transfer between neighbouring pipeline stages."""
    if ctx.plan.pp == 1:
        return 0.0
    sp = ctx.plan.tp if ctx.plan.sequence_parallel else 1
    size = ctx.tokens * ctx.model.hidden_size * ctx.act_width / sp
    return p2p_time(size, ctx.groups.pp_cross_node, ctx.cluster, ctx.comm)


def dp_seconds(ctx: CostContext, stage: int, overlap_window: float) -> tuple[float, float]:
    """(total, exposed) data-parallel gradient reduction + parameter gather for one stage."""
    if ctx.groups.dp.size == 1:
        return 0.0, 0.0
    total, tail = _stage_costs(ctx, stage)[0]
    if tail:  # FSDP without pipelining: per micro-batch, inside backward; only the last is exposed
        return total, ctx.k.dp_exposed_floor * total
    return total, max(total - overlap_window, ctx.k.dp_exposed_floor * total)


def _stage_costs(ctx: CostContext, stage: int) -> tuple[tuple[float, bool], float | None]:
    """(`_dp_traffic`, the on-GPU optimizer step or None with optimizer offload) of a stage,
    once per stage signature, plan fields but NOT_DP_FIELDS, cluster and engine constants. The
    cluster and constants are keyed by identity (the same objects for every plan of a search;
    hashing their fields on every look-up cost more than the answer), and kept in the entry so
    a reused id is never taken for them."""
    memo = shared_memo(ctx.model, ctx.plan, "dp_and_optimizer", NOT_DP_FIELDS)
    key = (stage_signatures(ctx.model, ctx.plan)[stage], id(ctx.cluster), id(ctx.c), id(ctx.k),
           id(ctx.comm))
    hit = memo.get(key)
    if hit is None or not (hit[0] is ctx.cluster and hit[1] is ctx.c and hit[2] is ctx.k
                           and hit[3] is ctx.comm):
        optimizer = None if ctx.plan.offload_optimizer else _optimizer_step(ctx, stage)
        hit = memo[key] = (ctx.cluster, ctx.c, ctx.k, ctx.comm, (_dp_traffic(ctx, stage), optimizer))
    return hit[4]


NOT_DP_FIELDS = frozenset({
    "micro_batch_size", "global_batch_size", "num_microbatches", "recompute", "recompute_num_layers",
    "schedule", "chosen", "warnings"})
"""Resolved-plan fields the data-parallel traffic and the optimizer step (without optimizer
offload, whose copies hide behind backward) do not read: they act on the stage's parameters,
not on its micro-batches. A field missing here is part of the memo's key."""


def _dp_traffic(ctx: CostContext, stage: int) -> tuple[float, bool]:
    p = ctx.plan
    group = ctx.groups.dp
    if group.size == 1:
        return 0.0, False
    params = finetune.trainable_stage_params(ctx.model, p, stage)
    grad_width = state_bytes(p, ctx.model.hidden_size).gradients
    size = (params.dense + params.expert) * grad_width
    if p.dp_sharding == "none":
        return collective_time("all_reduce", size, group, ctx.cluster, ctx.comm), False
    total = collective_time("reduce_scatter", size, group, ctx.cluster, ctx.comm)
    if p.dp_sharding == "full" and p.pp == 1:
        return total, True
    total += collective_time("all_gather", size / grad_width * 2, group, ctx.cluster, ctx.comm)
    return total, False


def optimizer_seconds(ctx: CostContext, stage: int, backward_s: float = 0.0) -> float:
    """The optimizer step: memory-bound over the parameters this GPU updates; with optimizer
    offload, the host's CPU-Adam step, the NVMe swap (ZeRO-Infinity) and the PCIe copies around
    it (see `training.time.offload`), `backward_s` being one micro-batch's backward on this
    stage."""
    p = ctx.plan
    if p.offload_optimizer:
        local = updated_params(finetune.trainable_stage_params(ctx.model, p, stage), p)
        per_param = state_bytes(p, ctx.model.hidden_size)
        return offload_time(ctx.cluster, local, p.num_microbatches, backward_s, per_param.gradients,
                            ctx.k.dp_exposed_floor, swapped_bytes=swapped_bytes(per_param),
                            target=p.offload_target, params_offloaded=p.offload_params).total_s
    return _stage_costs(ctx, stage)[1]


def _optimizer_step(ctx: CostContext, stage: int) -> float:
    """The on-GPU optimizer step (no optimizer offload)."""
    local = updated_params(finetune.trainable_stage_params(ctx.model, ctx.plan, stage), ctx.plan)
    step = ctx.memory(local * OPTIMIZER_BYTES_PER_PARAM, kernels=8)
    if ctx.plan.offload_params:  # the updated 16-bit shard goes back to its host tier
        step += local * ctx.act_width / param_store_bytes_per_s(ctx)
    return step
