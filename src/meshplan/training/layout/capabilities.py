"""What each training framework can do: one table that resolve, memory, time, the plan search
and the exporters all consult, so no plan is priced, ranked or exported with a feature its
framework lacks.

Each entry names the engine feature it stands for: recompute kinds, offload kinds, fine-tuning
methods, pipeline schedules, sharding and parallel dimensions. `feature_problems()` (asked by
`resolve_plan`, which every estimate passes through) refuses a plan that uses a recompute, offload,
method or schedule its framework does not have; `problems()` adds what an exporter cannot write
(the search skips such plans, the exporters raise them all at once, and re-targeting reports them).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from operator import attrgetter

from meshplan.errors import ConfigError
from meshplan.memo import MISS, IdentityMemo


@dataclass(frozen=True, slots=True, kw_only=True)
class Capability:
    """One framework's launchable plan space."""

    exporter: str | None
    """`train export --target` that writes its launch config; None: no exporter."""
    dp_sharding: tuple[str, ...]
    """Data-parallel sharding it offers (ZeRO stage names)."""
    recompute: tuple[str, ...]
    """Recompute policies it offers."""
    partial_recompute: bool
    """Full recompute of only some layers per chunk (Megatron --recompute-num-layers)."""
    schedules: dict[str, str]
    """Pipeline schedule -> 'flat' (one chunk per rank), 'looped' (vpp > 1) or 'any'."""
    parallel: tuple[str, ...]
    """Parallel dimensions it can make larger than 1."""
    precisions: tuple[str, ...]
    """Compute precisions its config can ask for."""
    offload_optimizer: tuple[bool, ...]
    """Optimizer offload values the search tries (all three exporters can express offload; the
    search tries it only where the framework's users reach for it)."""
    search_dp_sharding: tuple[str, ...] | None = None
    """The sharding values the search tries (default: all of dp_sharding)."""
    fsdp_mesh: bool = False
    """torchtitan 0.3's device mesh (torchtitan/distributed/parallel_dims.py): FSDP over
    dp_replicate x (dp_shard x cp), replication being a shard degree of 1; expert parallelism
    borrowed from the dp_shard x cp x tp ranks (ep divides them), routed experts sharded over EP
    only (etp = 1), or over TP without EP (etp = tp)."""
    hybrid_shard: tuple[str, ...] = ()
    """Sharding values that may shard over fewer than all dp x cp ranks (dp_shard_size)."""
    offload_with: tuple[str, ...] = ()
    """Sharding values that optimizer offload can be combined with."""
    offload_activations_with: tuple[str, ...] = ()
    """Recompute policies that activation offload can be combined with (empty: no such flag)."""
    offload_params_with: tuple[str, ...] = ()
    """Sharding values that parameter offload can be combined with (empty: no such option)."""
    offload_targets: tuple[str, ...] = ("cpu",)
    """Where it can put offloaded states (nvme: ZeRO-Infinity's swap to NVMe)."""
    optimizers: tuple[str, ...] = ("adamw", "adam")
    """Optimizers the exporter writes."""
    rank_orders: tuple[str, ...] | None = None
    """Rank layouts it can be told to use (None: it has one and meshplan does not vary it)."""
    tp_overlap_needs_sp: bool = False
    """TP communication overlap requires sequence parallelism."""
    qk_norms: tuple[str, ...] | None = None
    """Query/key normalisations its model code has (None: the model comes from elsewhere)."""
    gated_activations: tuple[str, ...] | None = None
    """Activations of gated MLPs its model code has (None: any)."""
    methods: tuple[str, ...] = ("full",)
    """Fine-tuning methods it trains with (full, lora, qlora)."""
    offload_kinds: tuple[str, ...] = ("optimizer", "activations", "params")
    """What the framework can offload at all (its exporter may write less: the *_with fields)."""


MEGATRON = Capability(
    exporter="megatron", dp_sharding=("none", "optimizer", "gradients", "full"),
    recompute=("none", "selective", "full"), partial_recompute=True,
    schedules={"1f1b": "any", "interleaved": "looped"},
    parallel=("tp", "pp", "cp", "ep"), precisions=("bf16", "fp16", "fp8", "fp4", "fp32"),
    offload_optimizer=(False,), search_dp_sharding=("optimizer",),
    hybrid_shard=("optimizer",), offload_with=("none", "optimizer", "gradients", "full"),
    rank_orders=("tp-cp-ep-dp-pp", "tp-cp-ep-pp-dp"), tp_overlap_needs_sp=True,
    qk_norms=("none", "per_head"), gated_activations=("silu", "swish"))
"""Megatron-LM (arguments.py): DDP, distributed optimizer, Megatron-FSDP; 1F1B and interleaved
1F1B (--num-virtual-stages-per-pipeline-rank); uneven splits via --pipeline-model-parallel-layout;
--recompute-granularity/--recompute-num-layers; --optimizer-cpu-offload; hybrid sharding only
for the distributed optimizer (--num-distributed-optimizer-instances); --tp-comm-overlap asserts
--sequence-parallel; ranks ordered tp-cp-ep-dp-pp or, with --use-tp-pp-dp-mapping, tp-cp-ep-pp-dp;
--qk-layernorm (per head) and --swiglu are the only qk norm and gated MLP; --optimizer adam only
is written (decoupled weight decay); --cpu-offloading (activations, and weights with
--cpu-offloading-weights) is not whole-input offload, so it is priced but not exported."""

HF = Capability(
    exporter=None, dp_sharding=("none", "optimizer", "gradients", "full"),
    recompute=("none", "full"), partial_recompute=False,
    schedules={"gpipe": "any", "1f1b": "any", "interleaved": "looped", "zero-bubble": "flat"},
    parallel=("tp", "pp", "cp", "ep"), precisions=("bf16", "fp16", "fp8", "fp4", "fp32"),
    offload_optimizer=(False,), search_dp_sharding=("optimizer",),
    hybrid_shard=("optimizer", "gradients", "full"), offload_with=("none", "optimizer", "gradients", "full"),
    offload_params_with=("full",), offload_targets=("cpu", "nvme"),
    optimizers=("adamw", "adam", "sgd", "adafactor"), methods=("full", "lora", "qlora"),
    offload_kinds=("optimizer", "params"))
"""Hugging Face Trainer with PEFT: `gradient_checkpointing=True` wraps whole decoder layers in
torch.utils.checkpoint (transformers' GradientCheckpointingLayer), so recompute is none or full,
never Megatron's selective (attention-core only) policy; optimizer and (ZeRO-3 / FSDP full
shard) parameter offload through its DeepSpeed or FSDP integration, to CPU or NVMe, but no
activation offload; full, LoRA and QLoRA (PEFT, bitsandbytes 4-bit). The layout axes stay those
meshplan can cost for any framework (GENERIC)."""

CAPABILITIES: dict[str, Capability] = {
    "megatron": MEGATRON,
    "nemo": replace(MEGATRON, methods=("full", "lora")),
    "hf": HF,
    "torchtitan": Capability(
        exporter="torchtitan", dp_sharding=("none", "gradients", "full"),
        recompute=("none", "selective", "full"), partial_recompute=False,
        schedules={"gpipe": "flat", "1f1b": "flat", "interleaved": "looped"},
        parallel=("tp", "pp", "cp", "ep"), precisions=("bf16", "fp8", "fp32"),
        offload_optimizer=(False,), search_dp_sharding=("full",), fsdp_mesh=True,
        hybrid_shard=("gradients", "full"), offload_with=("gradients", "full"),
        offload_kinds=("optimizer", "params")),
    "deepspeed": Capability(
        exporter="deepspeed", dp_sharding=("none", "optimizer", "gradients", "full"),
        recompute=("none", "full"), partial_recompute=False, schedules={},
        parallel=(), precisions=("bf16", "fp16", "fp32"), offload_optimizer=(False, True),
        search_dp_sharding=("optimizer", "gradients", "full"),
        offload_with=("gradients", "full"), offload_activations_with=("full",),
        offload_params_with=("full",), offload_targets=("cpu", "nvme"),
        methods=("full", "lora", "qlora")),
}
"""torchtitan 0.3 (torchtitan/config/configs.py, models/*/parallelize.py): FSDP2 (reshard or not
after forward) always, replication as HSDP with shard degree 1 (0.3 has no DDP path); GPipe, 1F1B,
Interleaved1F1B (torch.distributed.pipelining); no partial recompute; HSDP (replicate x shard,
the shard degree a multiple of cp); FSDP CPU offload (enable_cpu_offload, parameters with the
optimizer); no activation-offload key. DeepSpeed 0.19 (config JSON): ZeRO 0-3 with optimizer offload for stages 2-3; no hybrid
ZeRO-3 (MiCS's mics_shard_size was removed in 0.19); cpu_checkpointing offloads what activation_checkpointing
saves, so it needs full recompute; offload_param (ZeRO-3 only) and offload_optimizer take device
cpu or nvme (ZeRO-Infinity); data parallelism only."""
"""Fine-tuning methods (Capability.methods; others: full only): Hugging Face
Trainer, and DeepSpeed or PyTorch FSDP under it (accelerate), run PEFT's LoRA, and QLoRA with
bitsandbytes 4-bit loading (PEFT docs: "DeepSpeed" and "FSDP" guides, QLoRA with ZeRO-3 / FSDP).
NeMo 2 has LoRA (nemo.collections.llm.peft.LoRA on linear_qkv, linear_proj, linear_fc1,
linear_fc2) but no 4-bit base. Megatron-LM and torchtitan train full models only (their
fine-tuning siblings are NeMo/Megatron-Bridge and torchtune)."""
FUSED_ADAPTERS = ("nemo",)
"""Frameworks whose LoRA adapts fused linear_qkv and linear_fc1 (gate and up) layers whole."""


def frameworks_for(method: str) -> tuple[str, ...]:
    """Frameworks that can train with `method` (in the order hf, deepspeed, fsdp, nemo, ...)."""
    names = ("hf", "deepspeed", "fsdp", *CAPABILITIES, *OTHERS)
    return tuple(f for f in dict.fromkeys(names) if method in features(f).methods)


def default_framework(method: str) -> tuple[str, str | None]:
    """The framework a plan takes when none is asked for: Megatron-LM, unless it cannot train
    `method`; then the first that can (Hugging Face PEFT for QLoRA), with a note saying so."""
    if method in features("megatron").methods:
        return "megatron", None
    chosen = frameworks_for(method)[0]
    return chosen, (f"framework {chosen}: megatron has no {method} fine-tuning "
                    "(--framework chooses another)")


EXPORT_TARGETS = {"megatron": "megatron", "torchtitan": "torchtitan", "deepspeed": "deepspeed"}
"""`train export --target` -> the framework a plan is re-targeted to."""
GENERIC = Capability(
    exporter=None, dp_sharding=("none", "optimizer", "gradients", "full"),
    recompute=("none", "selective", "full"), partial_recompute=False,
    schedules={"gpipe": "any", "1f1b": "any", "interleaved": "looped", "zero-bubble": "flat"},
    parallel=("tp", "pp", "cp", "ep"), precisions=("bf16", "fp16", "fp8", "fp4", "fp32"),
    offload_optimizer=(False,), search_dp_sharding=("optimizer",))
"""Frameworks without an entry of their own (maxtext, llm-foundry, other): the search space
meshplan can cost; plans pinned beyond it are priced as given."""
OTHERS = {"fsdp": replace(GENERIC, methods=("full", "lora", "qlora"))}
"""PyTorch FSDP scripts (accelerate): GENERIC's space, with PEFT's LoRA and QLoRA."""


def capability(framework: str) -> Capability | None:
    """The framework's table entry; None for frameworks with none (fsdp, maxtext, ...)."""
    return CAPABILITIES.get(framework)


def features(framework: str) -> Capability:
    """What `framework` can do: its entry, else GENERIC (with fsdp's fine-tuning methods)."""
    return CAPABILITIES.get(framework) or OTHERS.get(framework) or GENERIC


def feature_problems(framework: str, plan) -> list[str]:
    """The recompute kind, offload kinds, method and schedule of `plan` (a TrainingPlan or
    resolved plan) that `framework` does not have, each with the valid choices."""
    cap = capability(framework)
    if cap is None:
        return []
    out = []
    if plan.recompute not in cap.recompute:
        out.append(f"recompute={plan.recompute!r}: {framework} offers {', '.join(cap.recompute)}")
    if plan.recompute_num_layers is not None and not cap.partial_recompute:
        out.append(f"recompute_num_layers={plan.recompute_num_layers}: {framework} recomputes whole "
                   f"chunks only; leave it unset")
    for kind in ("optimizer", "activations", "params"):
        if getattr(plan, f"offload_{kind}") and kind not in cap.offload_kinds:
            out.append(f"offload_{kind}: {framework} has no {kind} offload (it offloads "
                       f"{', '.join(cap.offload_kinds) or 'nothing'}); turn it off")
    if plan.pp > 1 and plan.schedule is not None and plan.schedule not in cap.schedules:
        out.append(f"schedule={plan.schedule!r}: {framework} runs "
                   f"{', '.join(cap.schedules) or 'no pipeline schedule'}")
    return out


def problems(framework: str, plan, model=None) -> list[str]:
    """Every field of resolved `plan` (and of `model`, when given) that `framework` cannot
    express, with what would be valid."""
    cap = capability(framework)
    if cap is None:
        return []
    out = []
    for dim in ("tp", "pp", "cp", "ep"):
        if getattr(plan, dim) > 1 and dim not in cap.parallel:
            out.append(f"{dim}={getattr(plan, dim)}: {framework} has no {dim}; use 1")
    checks = (("dp_sharding", plan.dp_sharding, cap.dp_sharding),
              ("recompute", plan.recompute, cap.recompute),
              ("precision", plan.precision, cap.precisions))
    out += [f"{field}={value!r}: {framework} offers {', '.join(valid)}"
            for field, value, valid in checks if value not in valid]
    if plan.recompute_num_layers is not None and not cap.partial_recompute:
        out.append(f"recompute_num_layers={plan.recompute_num_layers}: {framework} recomputes whole "
                   f"chunks only; leave it unset")
    if plan.pp > 1:
        out += _schedule_problems(framework, cap, plan.schedule, plan.vpp)
    if cap.fsdp_mesh:
        out += _mesh_problems(plan)
    out += _option_problems(framework, cap, plan)
    if model is not None:
        out += _model_problems(framework, cap, model)
    return out


PROBLEM_FIELDS = ("tp", "pp", "cp", "ep", "etp", "dp", "vpp", "dp_sharding", "recompute",
                  "recompute_num_layers", "precision", "schedule", "shard_group",
                  "offload_optimizer", "offload_activations", "offload_params", "offload_target",
                  "optimizer", "rank_order", "tp_comm_overlap", "sequence_parallel")
"""The resolved-plan fields `problems` reads (a test records them on every framework)."""
_PROBLEMS = IdentityMemo(8192)


def cached_problems(framework: str, plan, model) -> list[str]:
    """`problems(framework, plan, model)`, once per framework, model and PROBLEM_FIELDS values:
    a search asks for every plan it resolves, and its plans differ mostly in fields (micro-batch,
    split, batch count) the framework's rules do not read."""
    key = (framework, id(model), attrgetter(*PROBLEM_FIELDS)(plan))
    hit = _PROBLEMS.find(key, model)
    if hit is MISS:
        hit = _PROBLEMS.keep(key, (model,), tuple(problems(framework, plan, model)))
    return list(hit)


def _option_problems(framework: str, cap: Capability, plan) -> list[str]:
    """Sharding groups, offload, optimizer, rank order and overlap rules."""
    out = []
    if plan.shard_group != plan.dp * plan.cp and plan.dp_sharding != "none" \
            and plan.dp_sharding not in cap.hybrid_shard:
        ok = ", ".join(cap.hybrid_shard) or "no sharding"
        out.append(f"dp_shard_size={plan.shard_group} with dp_sharding={plan.dp_sharding!r}: "
                   f"{framework} shards over fewer than all dp x cp = {plan.dp * plan.cp} ranks "
                   f"only with {ok}")
    if plan.offload_optimizer and plan.dp_sharding not in cap.offload_with:
        out.append(f"offload_optimizer with dp_sharding={plan.dp_sharding!r}: {framework} "
                   f"offloads the optimizer with {', '.join(cap.offload_with) or 'no sharding'}")
    if plan.offload_activations and plan.recompute not in cap.offload_activations_with:
        out.append(f"offload_activations with recompute={plan.recompute!r}: "
                   + (f"{framework} offloads activations only with recompute "
                      f"{', '.join(cap.offload_activations_with)}" if cap.offload_activations_with
                      else f"{framework} has no flag for it; turn it off"))
    if plan.offload_params and plan.dp_sharding not in cap.offload_params_with:
        out.append(f"offload_params with dp_sharding={plan.dp_sharding!r}: " + (
            f"{framework} offloads parameters with {', '.join(cap.offload_params_with)}"
            if cap.offload_params_with else f"{framework} has no parameter offload; turn it off"))
    if plan.offload_target not in cap.offload_targets:
        out.append(f"offload_target={plan.offload_target!r}: {framework} offloads to "
                   f"{', '.join(cap.offload_targets)}")
    if plan.optimizer not in cap.optimizers:
        out.append(f"optimizer={plan.optimizer!r}: the {framework} export writes "
                   f"{', '.join(cap.optimizers)}")
    if cap.rank_orders is not None and plan.rank_order not in cap.rank_orders:
        out.append(f"rank_order={plan.rank_order!r}: {framework} lays ranks out as "
                   f"{' or '.join(cap.rank_orders)}")
    if cap.tp_overlap_needs_sp and plan.tp_comm_overlap and not plan.sequence_parallel:
        out.append(f"tp_comm_overlap without sequence_parallel: {framework}'s overlap needs "
                   f"sequence parallelism; turn both on or overlap off")
    return out


_MODEL_PROBLEMS = IdentityMemo(256)
"""(framework, id(cap), id(model)) -> (cap, model, problems): asked once per plan a search
resolves, answered once per model."""


def _model_problems(framework: str, cap: Capability, model) -> list[str]:
    """Model features the framework's model code cannot build (once per framework and model)."""
    key = (framework, id(cap), id(model))
    hit = _MODEL_PROBLEMS.find(key, cap, model)
    if hit is MISS:
        hit = _MODEL_PROBLEMS.keep(key, (cap, model), tuple(_find_model_problems(framework, cap, model)))
    return list(hit)


def _find_model_problems(framework: str, cap: Capability, model) -> list[str]:
    from meshplan.model.spec import DenseMLP, MoEMLP

    out = []
    attn = model.layers[0].attention
    if cap.qk_norms is not None and attn.qk_norm not in cap.qk_norms:
        out.append(f"{model.name} uses qk_norm={attn.qk_norm!r}: {framework}'s model code has "
                   f"{', '.join(cap.qk_norms)}")
    mlps = [layer.mlp for layer in model.layers]
    shape = next((m for m in mlps if isinstance(m, DenseMLP)), None) or next(
        (m.expert for m in mlps if isinstance(m, MoEMLP)), None)
    if cap.gated_activations is not None and shape is not None and shape.gated \
            and shape.activation not in cap.gated_activations:
        out.append(f"{model.name} gates its MLP with {shape.activation!r}: {framework}'s gated MLP "
                   f"is {', '.join(cap.gated_activations)} (SwiGLU)")
    return out


def _mesh_problems(plan) -> list[str]:
    """torchtitan's mesh rules (see Capability.fsdp_mesh)."""
    out = []
    if plan.dp_sharding != "none" and plan.shard_group % plan.cp:
        out.append(f"dp_shard_size={plan.shard_group}: torchtitan's FSDP mesh is shard degree x cp, "
                   f"so it must be a multiple of cp={plan.cp}")
    shard = plan.shard_group if plan.dp_sharding != "none" else plan.cp
    if plan.ep > 1 and (shard * plan.tp) % plan.ep:
        out.append(f"ep={plan.ep}: torchtitan takes EP from the dp_shard x cp x tp = "
                   f"{shard * plan.tp} ranks, so ep must divide {shard * plan.tp}")
    if plan.ep > 1 and plan.etp != 1:
        out.append(f"etp={plan.etp}: torchtitan shards routed experts over EP only (etp = 1)")
    if plan.ep == 1 and plan.etp != plan.tp:
        out.append(f"etp={plan.etp}: without EP torchtitan shards experts with the TP degree "
                   f"(etp = tp = {plan.tp})")
    return out


def _schedule_problems(framework: str, cap: Capability, schedule: str, vpp: int) -> list[str]:
    shape = cap.schedules.get(schedule)
    looped = vpp > 1
    if shape is None or (shape == "flat" and looped) or (shape == "looped" and not looped):
        valid = ", ".join(f"{s} ({'vpp > 1' if k == 'looped' else 'vpp 1' if k == 'flat' else 'any vpp'})"
                          for s, k in cap.schedules.items()) or "none (no pipeline parallelism)"
        return [f"schedule={schedule!r} with vpp={vpp}: {framework} runs {valid}"]
    return []


def check(framework: str, plan, model=None) -> None:
    """Raise one ConfigError listing every problem of `plan` (and `model`) for `framework`."""
    found = problems(framework, plan, model)
    if found:
        raise ConfigError(f"{framework} cannot launch this plan: " + "; ".join(found))


def schedules_for(framework: str) -> tuple[str, ...]:
    """Schedules `train plan --schedule` accepts for `framework`."""
    return tuple((capability(framework) or GENERIC).schedules)
