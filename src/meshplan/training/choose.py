"""Fill plan fields a user (or a run record) left open the way a competent engineer would:
the micro-batch size and virtual pipeline stages that give the highest throughput that fits."""

from __future__ import annotations

from dataclasses import replace

from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.plan import TrainingPlan
from meshplan.training.layout.resolve import resolve_plan

MICRO_BATCHES = (1, 2, 4, 8, 16)
VIRTUAL_STAGES = (1, 2, 3, 4, 6, 8)


def _candidates(plan: TrainingPlan, model: ModelSpec) -> list[TrainingPlan]:
    mbs = [plan.micro_batch_size] if plan.micro_batch_size else MICRO_BATCHES
    vpps = [plan.vpp] if plan.vpp or plan.pp == 1 or plan.pipeline_split else VIRTUAL_STAGES
    out = []
    for m in mbs:
        for v in vpps:
            if plan.vpp is None and v and v > 1 and not plan.pipeline_split and model.num_layers % (plan.pp * v):
                continue  # interleaving over an uneven split: only when the user asks for it
            out.append(plan.model_copy(update={"micro_batch_size": m, "vpp": v}))
    return out


def _layouts(plan: TrainingPlan, model: ModelSpec, cluster: Cluster) -> list[TrainingPlan]:
    """tp x pp layouts to try when the parallel sizes were left open (non-interleaved)."""
    world = cluster.num_gpus // plan.cp
    out = []
    for tp in (1, 2, 4, 8):
        for pp in (1, 2, 4, 8, 16, 32):
            if tp > cluster.gpus_per_node or world % (tp * pp) or model.num_layers % pp:
                continue
            out.append(plan.model_copy(update={"tp": tp, "pp": pp, "dp": None, "vpp": None}))
    return out


def best_plan(plan: TrainingPlan, model: ModelSpec, cluster: Cluster, open_layout: bool = False):
    """The fastest fitting resolution of `plan` over open micro-batch size and vpp (and, with
    `open_layout`, tp and pp), with its estimate; when nothing fits, the candidate needing the
    least memory."""
    from meshplan.training.estimate import estimate_step

    results = []
    first_error: ConfigError | None = None
    layouts = _layouts(plan, model, cluster) if open_layout else [plan]
    for candidate in (c for layout in layouts for c in _candidates(layout, model)):
        try:
            resolved = resolve_plan(candidate, model, cluster)
        except ConfigError as exc:
            first_error = first_error or exc
            continue
        results.append(estimate_step(model, cluster, resolved))
    if not results:
        raise first_error or ConfigError("no valid micro-batch size for this plan")
    fitting = [r for r in results if r.memory.fits]
    if fitting:
        best = max(fitting, key=lambda r: r.tokens_per_s_per_gpu)
        return _note(best, plan, "fastest that fits")
    return _note(min(results, key=lambda r: r.memory.peak_bytes), plan,
                 "no candidate fits; the one needing the least memory")


def _note(est, asked: TrainingPlan, why: str):
    """Record in the estimate's plan what was chosen for the open fields, and why."""
    resolved = est.plan
    chosen = dict(resolved.chosen)
    if asked.micro_batch_size is None:
        chosen["micro_batch_size"] = f"{resolved.micro_batch_size} ({why})"
    if asked.vpp is None and resolved.pp > 1 and not asked.pipeline_split:
        chosen["vpp"] = f"{resolved.vpp} ({why})"
    if (resolved.tp, resolved.pp) != (asked.tp, asked.pp):
        chosen["tp, pp"] = f"{resolved.tp}, {resolved.pp} ({why})"
    plan = replace(resolved, chosen=chosen)
    return replace(est, plan=plan, memory=replace(est.memory, plan=plan))
