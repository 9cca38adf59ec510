"""Re-target a plan searched for one framework to another framework's exporter.

Every field the target can express is kept. A field the target cannot express is dropped back
to the target's own default when its value was only the source framework's default (Megatron's
distributed optimizer, ZeRO-1, becomes FSDP for torchtitan; Megatron's TP-overlap default is off
elsewhere). Any other such field has no equivalent, and the error lists all of them with the
values that would be valid.
"""

from __future__ import annotations

from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.layout.capabilities import EXPORT_TARGETS, feature_problems, problems
from meshplan.training.plan import TrainingPlan
from meshplan.training.layout.resolve import (
    DEFAULT_SHARDING,
    TP_OVERLAP_FRAMEWORKS,
    ResolvedPlan,
    resolve_plan,
)

FEATURES_OFF = {"recompute": "none", "recompute_num_layers": None, "offload_optimizer": False,
                "offload_activations": False, "offload_params": False, "schedule": None}
"""A plan's optional features turned off, to list what else a re-target lacks."""
SAME_ENGINE = {"megatron": ("megatron", "nemo")}
"""Export targets that run a framework's plans as they are (NeMo runs Megatron-Core)."""


def source_defaults(framework: str, plan: TrainingPlan) -> dict[str, object]:
    """The values `resolve_plan` gives `framework` in the fields a framework defaults."""
    sp = plan.sequence_parallel if plan.sequence_parallel is not None else plan.tp > 1
    return {"dp_sharding": DEFAULT_SHARDING.get(framework, "none"),
            "tp_comm_overlap": plan.tp > 1 and sp and framework in TP_OVERLAP_FRAMEWORKS}


def retarget(plan: TrainingPlan, target: str, model: ModelSpec,
             cluster: Cluster) -> tuple[ResolvedPlan, list[str]]:
    """`plan` resolved for export `target`, and one note per field reset to the target's default.

    Raises ConfigError listing every field with no equivalent in `target`."""
    source = plan.framework
    framework = EXPORT_TARGETS[target]
    if source in SAME_ENGINE.get(target, (framework,)):
        return resolve_plan(plan, model, cluster), []
    moved = plan.model_copy(update={"framework": framework})
    lacking = feature_problems(framework, moved)  # features the target has not at all
    if lacking:
        probe = resolve_plan(moved.model_copy(update=FEATURES_OFF), model, cluster)
        raise ConfigError(f"this {source} plan cannot be re-targeted to {target}: no equivalent for "
                          + "; ".join(lacking + problems(framework, probe, model)))
    cannot = problems(framework, resolve_plan(moved, model, cluster), model)
    reset = sorted(name for name, value in source_defaults(source, plan).items()
                   if getattr(plan, name) == value and any(p.startswith(name) for p in cannot))
    if reset:
        moved = moved.model_copy(update=dict.fromkeys(reset))
    resolved = resolve_plan(moved, model, cluster)
    cannot = problems(framework, resolved, model)
    if cannot:
        raise ConfigError(f"this {source} plan cannot be re-targeted to {target}: no equivalent for "
                          + "; ".join(cannot))
    notes = [f"{name}: {getattr(plan, name)!r} ({source}'s default) -> "
             f"{getattr(resolved, name)!r} ({framework}'s default)" for name in reset]
    return resolved, notes
