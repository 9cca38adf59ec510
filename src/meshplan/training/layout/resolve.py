"""Check a TrainingPlan against a model and a cluster, and fill what the user left open.

Every impossible combination raises a PlanError that prints every factor involved and the
nearest valid values; every value meshplan chose is recorded in `ResolvedPlan.chosen`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import lru_cache

from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.memo import MISS, IdentityMemo
from meshplan.model import lora
from meshplan.model.counts import distinct_kinds
from meshplan.model.spec import ModelSpec, MoEMLP
from meshplan.training.layout.capabilities import FUSED_ADAPTERS, feature_problems, frameworks_for
from meshplan.training.imbalance.doclengths import check_spec, is_fixed
from meshplan.training.time.kernels import profile_for
from meshplan.training.plan import TrainingPlan
from meshplan.training.imbalance.routing import expert_shares

DEFAULT_SHARDING = {"megatron": "optimizer", "nemo": "optimizer", "deepspeed": "optimizer",
                    "torchtitan": "full", "fsdp": "full", "llm-foundry": "full", "maxtext": "full"}
DEFAULT_ATTENTION = {"megatron": "flash", "nemo": "flash", "hf": "sdpa"}
DEFAULT_IMPLEMENTATION = {"maxtext": "compiled"}
"""How a framework launches its kernels when the plan does not say (others: eager)."""
TP_OVERLAP_FRAMEWORKS = ("nemo", "megatron")
"""Frameworks whose usual set-up overlaps tensor-parallel communication with the GEMMs under
sequence parallelism: NeMo's recipes turn Transformer Engine's tp-comm-overlap on, and
Megatron-LM's own published benchmarks pass --tp-comm-overlap (it needs sequence parallel).
In torchtitan async TP is opt-in."""
MICROBATCHES_PER_STAGE = 8
"""Sequences per data-parallel rank and pipeline stage when the global batch is left open: at
one sequence per micro-batch, enough that the 1F1B fill and drain (pp - 1 micro-batch slots)
cost about a ninth of the step."""
MAX_MICROBATCHES = 65_536
"""Micro-batches per step per DP rank the pipeline simulation accepts (real runs use tens to
hundreds; the cap keeps a mistyped global batch from hanging the simulation)."""
NO_FLASH_ARCHITECTURES = ("volta",)
"""GPU families FlashAttention does not run on (it needs compute capability 8.0; Turing had
FlashAttention 1 only). There Megatron runs its unfused softmax path and PyTorch SDPA its
memory-efficient kernel."""


class PlanError(ConfigError):
    """A plan that cannot run on the given model and cluster."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ResolvedPlan:
    """A TrainingPlan with every field concrete and checked."""

    tp: int
    pp: int
    vpp: int
    dp: int
    cp: int
    ep: int
    etp: int
    expert_dp: int
    """Data-parallel replicas of each expert: tp x cp x dp / (ep x etp)."""
    sequence_parallel: bool
    dp_sharding: str
    shard_group: int
    """Ranks one sharded state is divided over (dp x cp, or the hybrid shard size)."""
    micro_batch_size: int
    global_batch_size: int
    num_microbatches: int
    seq_len: int
    recompute: str
    recompute_num_layers: int | None
    offload_activations: bool
    offload_optimizer: bool
    offload_params: bool
    offload_target: str
    precision: str
    optimizer: str
    schedule: str
    rank_order: str
    chunk_layers: tuple[tuple[int, ...], ...]
    """Decoder-layer indices of each pipeline chunk; chunk c runs on stage c % pp."""
    framework: str
    attention: str
    implementation: str
    """eager, compiled or fused (see TrainingPlan.implementation)."""
    capacity_factor: float | None
    tp_comm_overlap: bool
    moe_dispatcher: str = "alltoall"
    """MoE token dispatcher (see TrainingPlan.moe_dispatcher)."""
    moe_a2a_overlap: bool = False
    """Expert-parallel dispatch overlapped with another micro-batch's compute."""
    method: str = "full"
    """full, lora or qlora (see TrainingPlan.method)."""
    lora_rank: int = 8
    lora_targets: tuple[str, ...] = ()
    """Adapted linear layers (fused names where the framework fuses them); () for full."""
    doc_lengths: str | None = None
    """Document-length spec (None: one document per sequence)."""
    balance: str = "none"
    expert_skew: str | None = None
    """Expert-share spec (None: the fitted dropless imbalance)."""
    moe_balance: str = "none"
    chosen: dict[str, str] = field(default_factory=dict)
    """Fields meshplan filled in, with the reason."""
    warnings: tuple[str, ...] = ()
    """Things the user should know that do not stop the estimate."""

    def stage_layers(self, stage: int) -> list[int]:
        """Decoder layers held by pipeline stage `stage` (all its chunks)."""
        return [i for c, chunk in enumerate(self.chunk_layers) if c % self.pp == stage for i in chunk]


def _nearest_divisors(n: int, near: int) -> str:
    divs = [d for d in range(1, n + 1) if n % d == 0]
    below = [d for d in divs if d <= near]
    above = [d for d in divs if d >= near]
    picks = sorted({*(below[-1:]), *(above[:1])})
    return " or ".join(str(d) for d in picks)


def _resolve_dp(plan: TrainingPlan, world: int) -> int:
    fixed = plan.tp * plan.cp * plan.pp
    factors = f"tp={plan.tp} x cp={plan.cp} x pp={plan.pp}" if plan.dp is not None or world % fixed else ""
    if plan.dp is None:
        if world % fixed:
            raise PlanError(
                f"{factors} = {fixed} does not divide num_gpus={world}; the product of the "
                f"parallel sizes must divide the GPU count (divisors near {fixed}: "
                f"{_nearest_divisors(world, fixed)})")
        return world // fixed
    if fixed * plan.dp != world:
        hint = f"; with {factors} use dp={world // fixed}" if world % fixed == 0 else ""
        raise PlanError(f"{factors} x dp={plan.dp} = {fixed * plan.dp} but num_gpus={world}{hint}")
    return plan.dp


def _check_heads(plan: TrainingPlan, model: ModelSpec) -> None:
    attn = model.layers[0].attention
    kv = attn.num_heads if attn.mla else attn.num_kv_heads
    for what, n in (("num_attention_heads", attn.num_heads), ("num_key_value_heads", kv)):
        if n % plan.tp:
            raise PlanError(f"tp={plan.tp} does not divide {what}={n} of {model.name}; "
                            f"valid tp: {_nearest_divisors(n, plan.tp)} (divisors of {n})")


def _resolve_experts(plan: TrainingPlan, model: ModelSpec, dp: int) -> tuple[int, int]:
    """(etp, expert_dp) after checking EP against the model and the layout."""
    etp = plan.etp or plan.tp
    experts = _routed_experts(model)
    if experts is None:
        if plan.ep > 1 or (plan.etp and plan.etp != plan.tp):
            raise PlanError(f"ep={plan.ep}, etp={plan.etp} need a mixture-of-experts model; "
                            f"{model.name} is dense (use ep=1)")
        return plan.tp, dp * plan.cp
    if experts % plan.ep:
        raise PlanError(f"ep={plan.ep} does not divide the {experts} routed experts of "
                        f"{model.name}; valid ep: {_nearest_divisors(experts, plan.ep)}")
    dense_ranks = plan.tp * plan.cp * dp
    if dense_ranks % (plan.ep * etp):
        raise PlanError(
            f"ep={plan.ep} x etp={etp} = {plan.ep * etp} must divide tp={plan.tp} x cp={plan.cp} "
            f"x dp={dp} = {dense_ranks} (the ranks of one pipeline stage)")
    return etp, dense_ranks // (plan.ep * etp)


_EXPERTS = IdentityMemo(256)
"""id(model) -> (model, routed experts of its first MoE layer, None for a dense model)."""


def _routed_experts(model: ModelSpec) -> int | None:
    """Routed experts per MoE layer (the first one's), None for a dense model: once per model, as
    every plan a search resolves asks."""
    hit = _EXPERTS.find(id(model), model)
    if hit is MISS:
        experts = next(model.layers[k].mlp.num_experts for k in distinct_kinds(model)
                       if hasattr(model.layers[k].mlp, "num_experts")) if model.is_moe else None
        hit = _EXPERTS.keep(id(model), (model,), experts)
    return hit


def balanced_split(num_layers: int, chunks: int) -> tuple[int, ...]:
    """Layers per chunk as even as possible; extra layers go to the middle chunks, away from the
    first and last, which also carry the embedding and the LM head."""
    base, extra = divmod(num_layers, chunks)
    order = sorted(range(chunks), key=lambda c: (abs(c - (chunks - 1) / 2), c))
    bonus = set(order[:extra])
    return tuple(base + (c in bonus) for c in range(chunks))


def edge_split(num_layers: int, chunks: int) -> tuple[int, ...] | None:
    """Even middle chunks of ceil(n / chunks) layers, the remainder on the first and last chunk
    (which also carry the embedding and the LM head): Meta's Llama 3.1 405B layout (126 layers
    on 16 stages: 7, 8 x 14, 7), and Megatron's --decoder-first/last-pipeline-num-layers form.
    None when the first and last chunk cannot both keep a layer."""
    if chunks == 1:
        return (num_layers,)
    middle = -(-num_layers // chunks)
    rest = num_layers - (chunks - 2) * middle
    if rest < 2:
        return None
    first = rest // 2
    return (first,) + (middle,) * (chunks - 2) + (rest - first,)


def _uneven(plan: TrainingPlan, model: ModelSpec, vpp: int, chosen: dict[str, str]) -> tuple[int, ...]:
    """The split meshplan picks when pp x vpp does not divide the layers (reported in `chosen`)."""
    sizes, text = _uneven_split(model.num_layers, plan.pp, vpp, model.name)
    if sizes is None:
        raise PlanError(text)
    chosen["pipeline_split"] = text
    return sizes


@lru_cache(maxsize=512)
def _uneven_split(n: int, pp: int, vpp: int, name: str) -> tuple[tuple[int, ...] | None, str]:
    """(`_uneven`'s split, what `chosen` says of it), or (None, why there is none): once per
    shape, since a search resolves thousands of plans over a few pipeline shapes."""
    chunks = pp * vpp
    sizes = edge_split(n, chunks)
    if sizes is None:
        why = (f"are more than the {n} layers of {name}" if chunks > n else
               f"cannot split the {n} layers of {name} with even middle chunks")
        hint = ("" if chunks > n else
                f", or give --pipeline-split, e.g. {','.join(map(str, balanced_split(n, chunks)))}")
        return None, (f"pp={pp} x vpp={vpp} = {chunks} pipeline chunks {why}; use a chunk "
                      f"count dividing {n} ({_nearest_divisors(n, chunks)}){hint}")
    return sizes, (f"{','.join(map(str, _runs(sizes)))} ({chunks} chunks do not divide "
                   f"the {n} layers: the first and last chunk take the remainder)")


def _runs(sizes: tuple[int, ...]) -> list[str]:
    """Layer counts with repeats folded: 7, 8x14, 7."""
    out: list[list[int]] = []
    for k in sizes:
        if out and out[-1][0] == k:
            out[-1][1] += 1
        else:
            out.append([k, 1])
    return [f"{k}x{c}" if c > 1 else str(k) for k, c in out]


def _chunks(plan: TrainingPlan, model: ModelSpec, vpp: int,
            chosen: dict[str, str]) -> tuple[tuple[int, ...], ...]:
    n, chunks = model.num_layers, plan.pp * vpp
    sizes = plan.pipeline_split
    if sizes is None:
        sizes = _uneven(plan, model, vpp, chosen) if n % chunks else (n // chunks,) * chunks
    if len(sizes) != chunks or sum(sizes) != n or min(sizes) < 1:
        raise PlanError(f"pipeline_split {list(sizes)} must have pp x vpp = {chunks} positive "
                        f"entries summing to the {n} layers of {model.name}")
    return _chunk_layers(tuple(sizes))


@lru_cache(maxsize=512)
def _chunk_layers(sizes: tuple[int, ...]) -> tuple[tuple[int, ...], ...]:
    """Layer indices of chunks of `sizes` layers, built once per split (a search resolves
    thousands of plans over a few splits; sharing the tuples also lets later caches key on them)."""
    starts = [sum(sizes[:c]) for c in range(len(sizes))]
    return tuple(tuple(range(s, s + k)) for s, k in zip(starts, sizes))


def batch_split_refused(global_batch_size: int | None, micro_batch_size: int | None, dp: int,
                        pp: int, vpp: int | None, schedule: str | None) -> bool:
    """True when `resolve_plan` refuses these batch and pipeline fields whatever the others are:
    the global batch does not split into whole micro-batches over the DP ranks, or the
    interleaved schedule gets a batch count that is not a multiple of pp (`_resolve_batch`,
    `_resolve_schedule`). A quick test for a search that enumerates thousands of layouts; False
    says nothing."""
    if global_batch_size is None:
        return False
    per_step = (micro_batch_size or 1) * dp
    if global_batch_size % per_step:
        return True
    vpp = vpp or 1
    interleaved = (schedule or ("interleaved" if vpp > 1 else "1f1b")) == "interleaved"
    return interleaved and pp > 1 and vpp > 1 and (global_batch_size // per_step) % pp != 0


def _resolve_batch(plan: TrainingPlan, dp: int, chosen: dict[str, str]) -> tuple[int, int, int]:
    """(micro_batch_size, global_batch_size, num_microbatches)."""
    mbs = plan.micro_batch_size
    if mbs is None:
        mbs = 1
        chosen["micro_batch_size"] = "1 (the smallest; the step-time model picks the fastest)"
    gbs = plan.global_batch_size
    if gbs is None:
        per_rank = max(mbs, MICROBATCHES_PER_STAGE * plan.pp) if plan.pp > 1 else mbs
        gbs = per_rank * dp
        chosen["global_batch_size"] = (
            f"{gbs} ({per_rank} sequences per DP rank: at one per micro-batch, a 1F1B bubble of "
            f"about 1/{MICROBATCHES_PER_STAGE + 1})" if plan.pp > 1
            else f"{gbs} (one micro-batch per DP rank)")
    per_step = mbs * dp
    if gbs % per_step:
        lower = max(per_step, gbs // per_step * per_step)
        raise PlanError(
            f"global_batch_size={gbs} is not a multiple of micro_batch_size={mbs} x dp={dp} = "
            f"{per_step}; use {lower} or {lower + per_step}, or another micro-batch size")
    if gbs // per_step > MAX_MICROBATCHES:
        raise PlanError(
            f"global_batch_size={gbs} makes {gbs // per_step:,} micro-batches per step on each DP "
            f"rank; meshplan simulates at most {MAX_MICROBATCHES:,}: raise micro_batch_size or "
            f"use at most {MAX_MICROBATCHES * per_step:,} sequences")
    return mbs, gbs, gbs // per_step


def _check_sequence(plan: TrainingPlan, model: ModelSpec, sp: bool) -> list[str]:
    """Sequence-length checks; returns warnings."""
    s = plan.seq_len
    if plan.cp > 1 and s % (2 * plan.cp):
        raise PlanError(f"seq_len={s} must be a multiple of 2 x cp = {2 * plan.cp} for the "
                        f"load-balanced context-parallel split")
    if sp and s % plan.tp:
        raise PlanError(f"seq_len={s} must be a multiple of tp={plan.tp} with sequence parallelism")
    limit = model.max_position_embeddings
    if limit and s > limit:
        return [f"seq_len={s} exceeds {model.name}'s max_position_embeddings={limit}"]
    return []


def _resolve_schedule(plan: TrainingPlan, vpp: int, m: int) -> str:
    schedule = plan.schedule or ("interleaved" if vpp > 1 else "1f1b")
    if schedule == "interleaved":
        if plan.pp == 1 or vpp == 1:
            raise PlanError(f"the interleaved schedule needs pp > 1 and vpp > 1 "
                            f"(got pp={plan.pp}, vpp={vpp})")
        if m % plan.pp:
            raise PlanError(f"the interleaved schedule needs the {m} micro-batches per step to be "
                            f"a multiple of pp={plan.pp}; change global_batch_size")
    elif vpp > 1:
        raise PlanError(f"vpp={vpp} needs the interleaved schedule, not {schedule!r}")
    return schedule


def _check_offload(plan: TrainingPlan) -> None:
    """The NVMe tier holds offloaded states: something must be offloaded to it."""
    if plan.offload_target == "nvme" and not (plan.offload_params or plan.offload_optimizer):
        raise PlanError("offload_target='nvme' holds offloaded parameters or optimizer states: "
                        "turn on offload_params or offload_optimizer, or use offload_target='cpu'")


def _check_precision(plan: TrainingPlan, cluster: Cluster) -> None:
    if plan.precision == "fp4" and "fp4" not in cluster.gpu.dtypes:
        raise PlanError(f"precision='fp4' (NVFP4 GEMMs) needs fp4 tensor cores (Blackwell); "
                        f"{cluster.gpu.name} has none: use fp8 or bf16")


def _resolve_attention(plan: TrainingPlan, cluster: Cluster, chosen: dict[str, str]) -> str:
    """The attention kernel: the plan's, else the framework's usual one that the GPU can run."""
    arch = cluster.gpu.architecture
    if plan.attention == "flash" and arch in NO_FLASH_ARCHITECTURES:
        raise PlanError(f"attention='flash' does not run on {cluster.gpu.name} ({arch}): "
                        f"FlashAttention needs an Ampere or newer GPU; use 'eager' or 'sdpa'")
    if plan.attention:
        return plan.attention
    attention = DEFAULT_ATTENTION.get(plan.framework, "sdpa")
    if attention == "flash" and arch in NO_FLASH_ARCHITECTURES:
        chosen["attention"] = f"eager (no FlashAttention on {arch})"
        return "eager"
    return attention


DEFAULT_DISPATCHER = "alltoall"
"""Token dispatcher when the plan names none, for every framework: Megatron-Core's default and
Megatron-Bridge's model providers' (NVIDIA-NeMo/Megatron-Bridge@v0.3.0
src/megatron/bridge/models/{deepseek,qwen,gpt_oss}/*_provider.py: moe_token_dispatcher_type
"alltoall"). Megatron-Bridge's performance configs opt into flex per model and GPU
(scripts/performance/configs/*/..._workload_base_configs.py set moe_flex_dispatcher_backend
for DeepSeek-V3 and Qwen3-30B-A3B everywhere, Qwen3-235B on GB200/GB300 only, GPT-OSS on none
in V1), so no framework-wide flex default fits; the records state what their run used."""


def _dispatcher(plan: TrainingPlan) -> str:
    """The plan's MoE token dispatcher, else DEFAULT_DISPATCHER."""
    return plan.moe_dispatcher or DEFAULT_DISPATCHER


def _tp_overlap(plan: TrainingPlan, sp: bool, chosen: dict[str, str]) -> bool:
    """The plan's tensor-parallel comm overlap, else the framework's usual one (with SP)."""
    if plan.tp == 1:
        return False
    if plan.tp_comm_overlap is not None:
        return plan.tp_comm_overlap
    on = sp and plan.framework in TP_OVERLAP_FRAMEWORKS
    if on:
        chosen["tp_comm_overlap"] = f"on ({plan.framework}'s tp-comm-overlap with sequence parallel)"
    return on


def _resolve_method(plan: TrainingPlan, model: ModelSpec, chosen: dict[str, str]) -> dict:
    """method, lora_rank and lora_targets, checked against the framework and the model."""
    if plan.method == "full":
        if plan.lora_targets is not None:
            raise PlanError("lora_targets given with method='full': use method lora or qlora")
        return {"method": "full", "lora_rank": plan.lora_rank, "lora_targets": ()}
    supported = frameworks_for(plan.method)
    if plan.framework not in supported:
        raise PlanError(f"method={plan.method!r} with framework={plan.framework!r}: "
                        f"{plan.method} fine-tuning runs on {', '.join(supported)}")
    if plan.offload_params:
        raise PlanError(f"offload_params with method={plan.method!r}: parameter offload of a frozen "
                        f"base is not modelled; offload the optimizer (offload_optimizer) instead")
    targets = plan.lora_targets
    if targets is None:
        targets = lora.default_targets(model)
        chosen["lora_targets"] = f"{','.join(targets)} (PEFT's default for {model.family})"
    lora.check_targets(model, targets)
    if plan.framework in FUSED_ADAPTERS:
        targets = lora.fuse_targets(model, targets)
    return {"method": plan.method, "lora_rank": plan.lora_rank, "lora_targets": tuple(targets)}


RANK_DIMS = ("tp", "cp", "ep", "dp", "pp")


@lru_cache(maxsize=64)
def _check_rank_order(order: str) -> None:
    """Raise unless `order` names each rank dimension once (once per order: it is a constant of
    every plan a search resolves)."""
    if sorted(order.split("-")) != sorted(RANK_DIMS):
        raise PlanError(f"rank_order {order!r} must name each of tp, cp, ep, dp, pp once, "
                        f"innermost first, e.g. tp-cp-ep-dp-pp")


def _workload(plan: TrainingPlan, model: ModelSpec, warnings: list[str]) -> dict:
    """The document-length and expert-skew fields, checked (a spec that cannot be read or does
    not match the model's experts is a ConfigError naming the flag)."""
    docs = None if is_fixed(plan.doc_lengths) else plan.doc_lengths
    check_spec(docs)
    skew = plan.expert_skew
    if skew is not None:
        moe = [layer.mlp for layer in model.layers if isinstance(layer.mlp, MoEMLP)]
        if not moe:
            warnings.append(f"expert_skew is ignored: {model.name} has no routed experts")
            skew = None
        else:
            expert_shares(skew, moe[0].num_experts)
    for field, value, needs in (("balance", plan.balance, docs), ("moe_balance", plan.moe_balance, skew)):
        if value != "none" and needs is None:
            warnings.append(f"{field}={value} is ignored without "
                            f"{'doc_lengths' if field == 'balance' else 'expert_skew'}")
    return {"doc_lengths": docs, "balance": plan.balance if docs else "none",
            "expert_skew": skew, "moe_balance": plan.moe_balance if skew else "none"}


def _check_features(plan: TrainingPlan) -> None:
    """The capability table's verdict: no plan is priced with a recompute, offload or schedule
    its framework does not have (the method is checked with the adapters)."""
    found = feature_problems(plan.framework, plan)
    if found:
        raise PlanError(f"framework={plan.framework!r} cannot run this plan: " + "; ".join(found))


def resolve_plan(plan: TrainingPlan, model: ModelSpec, cluster: Cluster) -> ResolvedPlan:
    """Check `plan` against `model` and `cluster` and fill every open field."""
    chosen: dict[str, str] = {}
    _check_rank_order(plan.rank_order)
    _check_precision(plan, cluster)
    _check_offload(plan)
    _check_features(plan)
    dp = _resolve_dp(plan, cluster.num_gpus)
    _check_heads(plan, model)
    etp, expert_dp = _resolve_experts(plan, model, dp)
    vpp = plan.vpp or 1
    sp = plan.sequence_parallel if plan.sequence_parallel is not None else plan.tp > 1
    if sp and plan.tp == 1:
        sp = False
    warnings = _check_sequence(plan, model, sp)
    mbs, gbs, m = _resolve_batch(plan, dp, chosen)
    sharding = plan.dp_sharding or DEFAULT_SHARDING.get(plan.framework, "none")
    if plan.dp_sharding is None:
        chosen["dp_sharding"] = f"{sharding} ({plan.framework}'s usual choice)"
    _, fallback = profile_for(plan.framework, plan.implementation or "eager")
    if fallback:
        chosen["kernel_profile"] = fallback
    shard_group = plan.dp_shard_size or dp * plan.cp
    if (dp * plan.cp) % shard_group:
        raise PlanError(f"dp_shard_size={shard_group} must divide dp={dp} x cp={plan.cp}")
    return ResolvedPlan(
        tp=plan.tp, pp=plan.pp, vpp=vpp, dp=dp, cp=plan.cp, ep=plan.ep, etp=etp,
        expert_dp=expert_dp, sequence_parallel=sp, dp_sharding=sharding, shard_group=shard_group,
        micro_batch_size=mbs, global_batch_size=gbs, num_microbatches=m, seq_len=plan.seq_len,
        recompute=plan.recompute, recompute_num_layers=plan.recompute_num_layers,
        offload_activations=plan.offload_activations, offload_optimizer=plan.offload_optimizer,
        offload_params=plan.offload_params, offload_target=plan.offload_target,
        precision=plan.precision, optimizer=plan.optimizer,
        schedule=_resolve_schedule(plan, vpp, m), rank_order=plan.rank_order, chunk_layers=_chunks(plan, model, vpp, chosen),
        framework=plan.framework,
        attention=_resolve_attention(plan, cluster, chosen),
        implementation=plan.implementation or DEFAULT_IMPLEMENTATION.get(plan.framework, "eager"),
        capacity_factor=plan.capacity_factor,
        tp_comm_overlap=_tp_overlap(plan, sp, chosen),
        moe_dispatcher=_dispatcher(plan),
        moe_a2a_overlap=bool(plan.moe_a2a_overlap),
        **_resolve_method(plan, model, chosen),
        **_workload(plan, model, warnings),
        chosen=chosen, warnings=tuple(warnings),
    )
