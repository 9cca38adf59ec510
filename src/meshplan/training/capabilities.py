"""What each training framework can launch: one table that the plan search enumerates from and
the exporters check against, so a searched plan always exports.

Each entry names the engine feature it stands for. `problems()` lists every field of a resolved
plan the framework cannot express, with the valid values; the exporters raise them all at once
and the search skips such plans (and re-targeting a plan to another framework reports them).
"""

from __future__ import annotations

from dataclasses import dataclass

from meshplan.errors import ConfigError


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
    """torchtitan's device mesh: DDP only without tp/pp/cp, expert parallelism borrowed from the
    FSDP x CP ranks (cp <= ep <= shard group), experts sharded with the TP degree (etp = tp)."""


MEGATRON = Capability(
    exporter="megatron", dp_sharding=("none", "optimizer", "gradients", "full"),
    recompute=("none", "selective", "full"), partial_recompute=True,
    schedules={"1f1b": "any", "interleaved": "looped"},
    parallel=("tp", "pp", "cp", "ep"), precisions=("bf16", "fp16", "fp8", "fp4", "fp32"),
    offload_optimizer=(False,), search_dp_sharding=("optimizer",))
"""Megatron-LM (arguments.py): DDP, distributed optimizer, Megatron-FSDP; 1F1B and interleaved
1F1B (--num-virtual-stages-per-pipeline-rank); uneven splits via --pipeline-model-parallel-layout;
--recompute-granularity/--recompute-num-layers; --optimizer-cpu-offload."""

CAPABILITIES: dict[str, Capability] = {
    "megatron": MEGATRON,
    "nemo": MEGATRON,
    "torchtitan": Capability(
        exporter="torchtitan", dp_sharding=("none", "gradients", "full"),
        recompute=("none", "selective", "full"), partial_recompute=False,
        schedules={"gpipe": "flat", "1f1b": "flat", "interleaved": "looped"},
        parallel=("tp", "pp", "cp", "ep"), precisions=("bf16", "fp8", "fp32"),
        offload_optimizer=(False,), search_dp_sharding=("full",), fsdp_mesh=True),
    "deepspeed": Capability(
        exporter="deepspeed", dp_sharding=("none", "optimizer", "gradients", "full"),
        recompute=("none", "full"), partial_recompute=False, schedules={},
        parallel=(), precisions=("bf16", "fp16", "fp32"), offload_optimizer=(False, True),
        search_dp_sharding=("optimizer", "gradients", "full")),
}
"""torchtitan (job_config.py): FSDP2 (reshard or not after forward) or 1-D DDP; GPipe, 1F1B,
Interleaved1F1B (torch.distributed.pipelining); no partial recompute. DeepSpeed (config JSON):
ZeRO 0-3 with optimizer offload for stages 2-3; data parallelism only."""
EXPORT_TARGETS = {"megatron": "megatron", "torchtitan": "torchtitan", "deepspeed": "deepspeed"}
"""`train export --target` -> the framework a plan is re-targeted to."""
GENERIC = Capability(
    exporter=None, dp_sharding=("none", "optimizer", "gradients", "full"),
    recompute=("none", "selective", "full"), partial_recompute=False,
    schedules={"gpipe": "any", "1f1b": "any", "interleaved": "looped", "zero-bubble": "flat"},
    parallel=("tp", "pp", "cp", "ep"), precisions=("bf16", "fp16", "fp8", "fp4", "fp32"),
    offload_optimizer=(False,), search_dp_sharding=("optimizer",))
"""Frameworks without an exporter (fsdp, hf, maxtext, ...): the search space meshplan can cost."""


def capability(framework: str) -> Capability | None:
    """The framework's table entry; None for frameworks meshplan cannot export (hf, fsdp, ...)."""
    return CAPABILITIES.get(framework)


def problems(framework: str, plan) -> list[str]:
    """Every field of resolved `plan` that `framework` cannot express, with what would be valid."""
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
    return out


def _mesh_problems(plan) -> list[str]:
    """torchtitan's mesh rules (see Capability.fsdp_mesh)."""
    out = []
    if plan.dp_sharding == "none" and plan.tp * plan.pp * plan.cp > 1:
        out.append("dp_sharding='none': torchtitan's DDP is 1-D only (no tp, pp or cp); use 'full'")
    shard = plan.shard_group if plan.dp_sharding != "none" else plan.cp
    if plan.ep > 1 and not plan.cp <= plan.ep <= shard:
        out.append(f"ep={plan.ep}: torchtitan takes EP from the FSDP x CP ranks: "
                   f"cp={plan.cp} <= ep <= {shard}")
    if plan.ep > 1 and plan.etp != plan.tp:
        out.append(f"etp={plan.etp}: torchtitan shards experts with the TP degree (etp = tp = {plan.tp})")
    return out


def _schedule_problems(framework: str, cap: Capability, schedule: str, vpp: int) -> list[str]:
    shape = cap.schedules.get(schedule)
    looped = vpp > 1
    if shape is None or (shape == "flat" and looped) or (shape == "looped" and not looped):
        valid = ", ".join(f"{s} ({'vpp > 1' if k == 'looped' else 'vpp 1' if k == 'flat' else 'any vpp'})"
                          for s, k in cap.schedules.items()) or "none (no pipeline parallelism)"
        return [f"schedule={schedule!r} with vpp={vpp}: {framework} runs {valid}"]
    return []


def check(framework: str, plan) -> None:
    """Raise one ConfigError listing every problem of `plan` for `framework`."""
    found = problems(framework, plan)
    if found:
        raise ConfigError(f"{framework} cannot launch this plan: " + "; ".join(found))


def schedules_for(framework: str) -> tuple[str, ...]:
    """Schedules `train plan --schedule` accepts for `framework`."""
    return tuple((capability(framework) or GENERIC).schedules)
