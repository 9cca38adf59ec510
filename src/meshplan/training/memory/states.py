"""Model states per GPU: weights, gradients, master weights and optimizer states per stage.

Parameters are split by kind: tensor-parallel matrices (attention, dense MLP, shared experts,
vocabulary-parallel embedding and LM head) divide by tp; norms and routers are replicated;
routed experts divide by ep x etp. Sharded states then divide by the data-parallel shard group
(dense) or the expert data-parallel group (experts).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from functools import lru_cache
from operator import attrgetter

from meshplan.memo import MISS, IdentityMemo
from meshplan.model import counts
from meshplan.model.counts import layer_kinds
from meshplan.model.spec import ModelSpec
from meshplan.training.layout.resolve import ResolvedPlan

SHARDED_STATES = {
    "none": (),
    "optimizer": ("master", "optimizer"),
    "gradients": ("master", "optimizer", "gradients"),
    "full": ("master", "optimizer", "gradients", "weights"),
}
"""Which states each dp_sharding level divides over the shard group."""

OPTIMIZER_BYTES = {"adamw": 8.0, "adam": 8.0, "sgd": 4.0}
"""fp32 state bytes per parameter: Adam's two moments, SGD's momentum."""


@dataclass(frozen=True, slots=True)
class StateBytes:
    """Bytes per parameter of each model state, before sharding."""

    weights: float
    gradients: float
    master: float
    optimizer: float


def state_bytes(plan: ResolvedPlan, hidden: int) -> StateBytes:
    """Per-parameter bytes by framework family and precision.

    Megatron-LM: bf16 weights, fp32 main gradients (it forces fp32 gradient accumulation for
    bf16), fp32 master copy. NeMo 2 and DeepSpeed: bf16 weights and gradients (NeMo's
    grad_reduce_in_fp32 is off in its recipes), fp32 master. PyTorch-native (torchtitan, FSDP, HF,
    llm-foundry): fp32 parameters are the master copy, bf16 compute copies are transient, fp32
    gradients. fp32 training has no separate master copy.
    """
    opt = OPTIMIZER_BYTES.get(plan.optimizer, 8.0 / hidden)  # adafactor: factored rows + columns
    if plan.precision == "fp32":
        return StateBytes(4.0, 4.0, 0.0, opt)
    if plan.framework == "megatron":
        return StateBytes(2.0, 4.0, 4.0, opt)
    if plan.framework in ("nemo", "deepspeed"):
        return StateBytes(2.0, 2.0, 4.0, opt)
    return StateBytes(0.0, 4.0, 4.0, opt)


@dataclass(frozen=True, slots=True)
class StageParams:
    """Parameters held by one GPU of a pipeline stage, by how they are split."""

    dense: float
    """Tensor-parallel and replicated parameters (per GPU, after the tp split)."""
    expert: float
    """Routed-expert parameters (per GPU, after the ep x etp split)."""
    largest_unit: float
    """The largest FSDP unit per GPU (a layer, the embedding or the LM head), unsharded."""


def updated_params(params: StageParams, plan: ResolvedPlan) -> float:
    """Parameters one GPU of the stage updates: its shard when data parallelism shards the
    optimizer (or more), else all it holds."""
    if plan.dp_sharding == "none":
        return params.dense + params.expert
    return params.dense / plan.shard_group + params.expert / plan.expert_dp


def layer_split(model: ModelSpec, i: int, plan: ResolvedPlan) -> tuple[float, float]:
    """(dense, expert) parameters of layer i per GPU."""
    lp = counts.layer_params(model.layers[i], model)
    dense = (lp.attention + lp.mlp + lp.shared_experts) / plan.tp + lp.router + lp.norms
    return dense, lp.routed_experts / (plan.ep * plan.etp)


_PLAN_MEMO: list = [None, None, {}]
"""[model, plan, {key: value}] of the plan last costed (identity-keyed; plans are immutable)."""


def plan_memo(model: ModelSpec, plan: ResolvedPlan) -> dict:
    """A scratch dict for values of the plan being costed, emptied when another plan comes: the
    memory model, the DP traffic and the optimizer step ask for the same stages and layer kinds
    again and again."""
    if _PLAN_MEMO[0] is not model or _PLAN_MEMO[1] is not plan:
        _PLAN_MEMO[:] = [model, plan, {}]
    return _PLAN_MEMO[2]


_SHARED = IdentityMemo(4096)
"""(name, id(model), plan fields read) -> (model, memo): see `shared_memo`."""


def shared_memo(model: ModelSpec, plan: ResolvedPlan, name: str, unread: frozenset[str]) -> dict:
    """A scratch dict shared by every plan equal to `plan` in all fields but `unread`, which
    whatever is stored under `name` must not read: a search tries each layout with several
    recompute choices and batch counts, and the stages' model states, logits and buffers are the
    same for all of them. A field missing from `unread` is part of the key (safe by default)."""
    memo = plan_memo(model, plan)
    hit = memo.get(("shared", name))
    if hit is None:
        key = (name, id(model), fields_but(type(plan), unread)(plan))
        entry = _SHARED.find(key, model)
        if entry is MISS:
            entry = _SHARED.keep(key, (model,), {})
        hit = memo[("shared", name)] = entry
    return hit


@lru_cache(maxsize=32)
def fields_but(cls: type, unread: frozenset[str]) -> attrgetter:
    """A getter of the tuple of `cls`'s dataclass fields not in `unread`, in declaration order
    (a memo key; much faster than reading the fields one by one)."""
    return attrgetter(*(f for f in cls.__dataclass_fields__ if f not in unread))


def stage_signatures(model: ModelSpec, plan: ResolvedPlan) -> tuple[int, ...]:
    """Per stage, the first stage whose costs are the same: the same layer kinds in each of its
    chunks, and the same place (holding the embedding, the LM head, or neither). Such stages hold
    the same parameters and run the same work per micro-batch, so the memory and time models
    cost each signature once per plan."""
    return _layout(model, plan)[2]


def chunk_kinds(model: ModelSpec, plan: ResolvedPlan) -> tuple[tuple[tuple[int, ...], ...], ...]:
    """Per stage, `stage_chunk_kinds` (one look-up for a loop over every chunk)."""
    return _layout(model, plan)[1]


def stage_chunk_kinds(model: ModelSpec, plan: ResolvedPlan, stage: int) -> tuple[tuple[int, ...], ...]:
    """The layer kinds (`counts.layer_kinds`) of each chunk of `stage`."""
    return _layout(model, plan)[1][stage]


def stage_kind_counts(model: ModelSpec, plan: ResolvedPlan, stage: int) -> tuple[tuple[int, int], ...]:
    """(layer kind, layers of it) on `stage`, kinds in order of first appearance."""
    return _layout(model, plan)[3][stage]


_LAYOUTS = IdentityMemo(1024)
"""(id(model), pp, chunk_layers) -> (model, chunk kinds per stage, signatures, kind counts per
stage): the plans of a search share a few pipeline layouts, and walking every layer of each
plan's layout again cost more than the memory model's arithmetic."""


def _layout(model: ModelSpec, plan: ResolvedPlan) -> tuple:
    """(model, chunk kinds, signatures, kind counts) of the plan's layout: from the plan's memo,
    else the layout cache (hashing the split's layer tuples once per plan)."""
    memo = plan_memo(model, plan)
    hit = memo.get("layout")
    if hit is not None:
        return hit
    key = (id(model), plan.pp, plan.chunk_layers)
    hit = _LAYOUTS.find(key, model)
    if hit is MISS:
        hit = _LAYOUTS.keep(key, (model,), (model, *_stage_kinds(model, plan.pp, plan.chunk_layers)))
    memo["layout"] = hit
    return hit


def _stage_kinds(model: ModelSpec, pp: int, chunk_layers: tuple) -> tuple[tuple, tuple[int, ...], tuple]:
    """(layer kinds of each chunk of each stage, each stage's signature, each stage's kind counts)."""
    kinds = layer_kinds(model)
    chunks: list[list] = [[] for _ in range(pp)]
    for c, chunk in enumerate(chunk_layers):
        chunks[c % pp].append(tuple(kinds[i] for i in chunk))
    first: dict = {}
    signatures = tuple(first.setdefault((tuple(cs), s == 0, s == pp - 1), s)
                       for s, cs in enumerate(chunks))
    counted = tuple(tuple(Counter(k for chunk in cs for k in chunk).items()) for cs in chunks)
    return tuple(tuple(cs) for cs in chunks), signatures, counted


def stage_params(model: ModelSpec, plan: ResolvedPlan, stage: int) -> StageParams:
    """Parameters per GPU on pipeline stage `stage`, including embedding and LM head."""
    memo = plan_memo(model, plan)
    key = ("stage_params", stage_signatures(model, plan)[stage])
    if key not in memo:
        memo[key] = _stage_params(model, plan, stage)
    return memo[key]


def _stage_params(model: ModelSpec, plan: ResolvedPlan, stage: int) -> StageParams:
    dense = expert = unit = 0.0
    for kind, n in stage_kind_counts(model, plan, stage):  # equal layers split alike
        d, e = layer_split(model, kind, plan)
        dense, expert, unit = dense + n * d, expert + n * e, max(unit, d + e)
    vocab = model.vocab_size * model.hidden_size / plan.tp
    if stage == 0:
        positions = model.learned_position_embeddings * model.hidden_size
        dense, unit = dense + vocab + positions, max(unit, vocab + positions)
    if stage == plan.pp - 1:
        dense += counts.final_norm_params(model)
        if not model.tie_word_embeddings or plan.pp > 1:  # a tied head is a copy off stage 0
            dense, unit = dense + vocab, max(unit, vocab)
    return StageParams(dense, expert, unit)
