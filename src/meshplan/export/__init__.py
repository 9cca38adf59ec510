"""Exporters: turn a resolved plan into the launch config a real training engine accepts.

One module per engine, each a pure `export(model, cluster, plan, run) -> str` with the engine version
it was checked against in `TARGET_VERSION` and the source of every flag in its docstring.
Adding an engine is one module and one line in `EXPORTERS`.
"""

from __future__ import annotations

from collections.abc import Callable

from meshplan.errors import ConfigError, UnknownNameError
from meshplan.export import deepspeed, megatron, torchtitan
from meshplan.export.run import RunSettings
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.layout.capabilities import EXPORT_TARGETS, check
from meshplan.training.layout.resolve import ResolvedPlan

Exporter = Callable[[ModelSpec, Cluster, ResolvedPlan, RunSettings], str]

EXPORTERS: dict[str, Exporter] = {
    "megatron": megatron.export,
    "torchtitan": torchtitan.export,
    "deepspeed": deepspeed.export,
}

__all__ = ["EXPORTERS", "RunSettings", "export_plan"]


def export_plan(target: str, model: ModelSpec, cluster: Cluster, plan: ResolvedPlan,
                run: RunSettings | None = None) -> str:
    """The config text of `plan` for the engine `target` (a key of EXPORTERS); `run` gives the
    training length and launcher (default: a placeholder length, torchrun)."""
    if target not in EXPORTERS:
        raise UnknownNameError("export target", target, EXPORTERS)
    if plan.method != "full":  # the engines' configs have no adapters; PEFT lives in the script
        raise ConfigError(f"method={plan.method!r}: the {target} export writes full training only; "
                          f"launch LoRA/QLoRA with PEFT (framework hf) or NeMo's LoRA recipe")
    check(EXPORT_TARGETS[target], plan, model)  # every field the engine has no equivalent for, at once
    return EXPORTERS[target](model, cluster, plan, run or RunSettings())
