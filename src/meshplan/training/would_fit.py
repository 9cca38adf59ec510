""""Would fit with ...": when a training plan does not fit in GPU memory, try the usual levers
(recompute, sharding, a smaller micro-batch, more tensor or pipeline parallelism, offload,
QLoRA for a LoRA run, more GPUs) with the same memory estimator, alone and then in pairs, and
name the cheapest ones that fit as flags to add to the command (#34 item 6). Levers are tried
alone, then on top of the one that lowered the peak most, and so on (at most MAX_DEPTH).

The work is bounded: at most MAX_MEMORY_ESTIMATES memory estimates (about a millisecond each)
and one step-time estimate per fitting answer, to rank them by GPU-seconds per step (the tokens
per step are the same for all of them).
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Any

from meshplan.errors import MeshplanError
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.layout.resolve import ResolvedPlan, resolve_plan
from meshplan.training.memory.total import estimate_memory
from meshplan.training.plan import TrainingPlan

MAX_MEMORY_ESTIMATES = 48
"""Most plans tried per hint (about a dozen levers per round)."""
MAX_DEPTH = 4
"""Most levers combined in one answer."""
MAX_ANSWERS = 2
"""Hints printed: the cheapest fitting answers."""
SHARDING = ("none", "optimizer", "gradients", "full")
Lever = dict[str, Any]
"""Flag values to add to the command: parameter name -> value (True for a switch)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class FitHint:
    """One set of flags that makes the plan fit, with what it costs."""

    flags: tuple[tuple[str, Any], ...]
    peak_bytes: float
    gpu_memory_bytes: float
    num_gpus: int
    step_time_s: float

    @property
    def text(self) -> str:
        """The flags as a user pastes them: `--recompute full --tp 8`."""
        return " ".join(f"--{k.replace('_', '-')}" + ("" if v is True else f" {v}") for k, v in self.flags)

    def to_dict(self) -> dict[str, Any]:
        return {"flags": self.text, "peak_bytes": self.peak_bytes, "gpu_memory_bytes": self.gpu_memory_bytes,
                "num_gpus": self.num_gpus, "step_time_s": self.step_time_s}


def levers(model: ModelSpec, cluster: Cluster, plan: TrainingPlan, resolved: ResolvedPlan,
           peak_bytes: float) -> list[Lever]:
    """Single changes that lower the memory per GPU, each valid on its own when resolved."""
    out: list[Lever] = []
    if resolved.recompute != "full":
        out.append({"recompute": "full"})
    if resolved.recompute == "none":
        out.append({"recompute": "selective"})
    stronger = SHARDING[SHARDING.index(resolved.dp_sharding) + 1:]
    # full sharding is offered on one data-parallel rank too: it pays off once more GPUs are added
    out += [{"dp_sharding": s} for s in stronger if resolved.dp * resolved.cp > 1 or s == "full"]
    if resolved.micro_batch_size > 1:
        out.append({"micro_batch_size": 1})
    heads = model.layers[0].attention.num_heads
    if resolved.tp * 2 <= cluster.gpus_per_node and heads % (resolved.tp * 2) == 0:
        out.append({"tp": resolved.tp * 2})
    if model.num_layers % (resolved.pp * 2) == 0:
        out.append({"pp": resolved.pp * 2})
    out += [{name: True} for name in ("offload_optimizer", "offload_activations") if not getattr(resolved, name)]
    if resolved.method == "lora":
        out.append({"method": "qlora"})
    grow = 2 ** max(1, math.ceil(math.log2(max(peak_bytes / cluster.usable_gpu_memory_bytes, 1.0))))
    out.append({"num_gpus": cluster.num_gpus * grow})
    return out


def _apply(plan: TrainingPlan, cluster: Cluster, lever: Lever) -> tuple[TrainingPlan, Cluster, Lever]:
    """The plan and cluster with `lever` applied (a pinned --dp follows the new layout)."""
    lever = dict(lever)
    gpus = lever.get("num_gpus", cluster.num_gpus)
    new = {k: v for k, v in lever.items() if k != "num_gpus"}
    if plan.dp is not None and {"tp", "pp", "num_gpus"} & lever.keys():
        tp, pp = lever.get("tp", plan.tp), lever.get("pp", plan.pp)
        new["dp"] = lever["dp"] = max(1, gpus // (tp * pp * plan.cp))
    if gpus != cluster.num_gpus:
        cluster = dataclasses.replace(cluster, num_gpus=gpus)
    return plan.model_copy(update=new), cluster, lever


def _try(model: ModelSpec, plan: TrainingPlan, cluster: Cluster, lever: Lever):
    """(memory estimate, resolved plan, cluster, lever) of the changed plan; None when invalid."""
    try:
        changed, where, lever = _apply(plan, cluster, lever)
        resolved = resolve_plan(TrainingPlan(**changed.model_dump()), model, where)
        return estimate_memory(model, where, resolved), resolved, where, lever
    except (MeshplanError, ValueError):
        return None


def would_fit_with(model: ModelSpec, cluster: Cluster, plan: TrainingPlan, resolved: ResolvedPlan,
                   peak_bytes: float) -> list[FitHint]:
    """The cheapest flag sets (at most MAX_ANSWERS) that make `plan` fit on `cluster`; [] when
    MAX_DEPTH levers do not. Greedy: each round tries every lever on top of the changes so far;
    the first round with a fitting answer gives the answers, else the change that lowered the
    peak most is kept for the next round."""
    from meshplan.training.estimate import estimate_step

    kept: Lever = {}
    tried = 0
    for _ in range(MAX_DEPTH):
        fitting, best = [], None
        for lever in levers(model, cluster if "num_gpus" not in kept else
                            dataclasses.replace(cluster, num_gpus=kept["num_gpus"]),
                            plan, resolved, peak_bytes):
            if tried >= MAX_MEMORY_ESTIMATES:
                break
            tried += 1
            hit = _try(model, plan, cluster, {**kept, **lever})
            if hit is None:
                continue
            if hit[0].fits:
                fitting.append(hit)
            elif best is None or hit[0].peak_bytes < best[0].peak_bytes:
                best = hit
        if fitting or best is None or best[0].peak_bytes >= peak_bytes:
            return _cheapest(model, fitting, estimate_step)
        memory, resolved, _, kept = best
        peak_bytes = memory.peak_bytes
    return []


def _cheapest(model: ModelSpec, fitting: list, estimate_step) -> list[FitHint]:
    """FitHints of the fitting changes, fewest GPU-seconds per step first."""
    hints = []
    for memory, resolved, where, lever in fitting:
        step = estimate_step(model, where, resolved, with_memory=False).step_time_s
        hints.append(FitHint(flags=tuple(lever.items()), peak_bytes=memory.peak_bytes,
                             gpu_memory_bytes=memory.gpu_memory_bytes, num_gpus=where.num_gpus,
                             step_time_s=step))
    hints.sort(key=lambda h: (h.step_time_s * h.num_gpus, len(h.flags)))
    return hints[:MAX_ANSWERS]
