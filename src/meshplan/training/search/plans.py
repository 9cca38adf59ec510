"""Search the parallel layout of a training run: enumerate plans the framework supports, prune
invalid and out-of-memory ones cheaply, estimate the rest, rank by the objective."""

from __future__ import annotations

import itertools
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

from meshplan.errors import ConfigError
from meshplan.gcpause import cyclic_gc_paused
from meshplan.goodput import Resilience
from meshplan.goodput.summary import wall_clock_factor
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.training.estimate import StepEstimate, estimate_from_parts
from meshplan.training.memory.total import estimate_memory
from meshplan.training.plan import TrainingPlan
from meshplan.training.layout.capabilities import GENERIC, capability
from meshplan.training.imbalance.doclengths import is_fixed
from meshplan.training.imbalance.packing import BALANCE
from meshplan.training.imbalance.routing import MOE_BALANCE
from meshplan.training.search.sweep import (
    Fit, Task, default_workers, parts_of, resolve_candidate, sweep,
)

POWERS = (1, 2, 4, 8, 16, 32, 64)


@dataclass(frozen=True, slots=True)
class SearchResult:
    """Ranked feasible plans and what the search did."""

    ranked: tuple[StepEstimate, ...]
    evaluated: int
    rejected_invalid: int
    rejected_memory: int
    seconds: float
    objective: str
    scores: tuple[float, ...] = field(default=())
    closest: tuple = ()
    """When nothing fits: the plans needing the least memory (MemoryEstimate each)."""
    invalid_reasons: tuple[str, ...] = ()
    """A few distinct reasons layouts were invalid (divisibility), for the user."""


def _axis(pinned, default):
    return (pinned,) if pinned is not None else default


def offload_axes(cap, pinned: dict) -> dict:
    """The offload tiers beyond the optimizer's (activations, parameters, NVMe) the framework
    offers: searched only when no plan fits without them (see `search`)."""
    return {
        "offload_activations": _axis(pinned.get("offload_activations"),
                                     (False, True) if cap.offload_activations_with else (False,)),
        "offload_params": _axis(pinned.get("offload_params"),
                                (False, True) if cap.offload_params_with else (False,)),
        "offload_target": _axis(pinned.get("offload_target"), cap.offload_targets),
    }


def _offload_tier(fields: dict, cap) -> bool:
    """The combination uses a tier of `offload_axes` and the framework can launch it."""
    if fields["offload_activations"] and fields["recompute"] not in cap.offload_activations_with:
        return False
    if fields["offload_params"] and fields["dp_sharding"] not in cap.offload_params_with:
        return False
    if fields["offload_target"] == "nvme" and not (fields["offload_params"] or fields["offload_optimizer"]):
        return False
    return fields["offload_activations"] or fields["offload_params"] or fields["offload_target"] == "nvme"


LAYOUT_AXES = frozenset({"tp", "pp", "vpp", "cp", "ep", "etp"})
"""Axes that fix the parallel layout: `candidates` filters their combinations before pairing
each with the other axes' (the leading axes of `_axes`, so the enumeration order is kept)."""


def candidates(base: TrainingPlan, model: ModelSpec, cluster: Cluster,
               pinned: dict, offload: bool = False) -> Iterator[TrainingPlan]:
    """Every combination of open fields the framework supports (validity checked later); with
    `offload`, only those that use an offload tier of `offload_axes`."""
    for update in candidate_updates(base, model, cluster, pinned, offload):
        yield base.model_copy(update=update)


def candidate_updates(base: TrainingPlan, model: ModelSpec, cluster: Cluster,
                      pinned: dict, offload: bool = False) -> Iterator[dict]:
    """The field updates of `candidates`, in its order (each plan is `base` with the update)."""
    cap = capability(base.framework) or GENERIC
    axes = _axes(base, model, cluster, pinned, cap, offload)
    names = list(axes)
    lead = next((i for i, name in enumerate(names) if name not in LAYOUT_AXES), len(names))
    inner = [dict(zip(names[lead:], values)) for values in itertools.product(*list(axes.values())[lead:])]
    for values in itertools.product(*list(axes.values())[:lead]):
        layout = dict(zip(names[:lead], values))
        if not _layout_ok(layout, model, cluster.num_gpus):
            continue
        for rest in inner:
            fields = {**layout, **rest}
            if not _fields_ok(fields, cap, offload):
                continue
            update = {**fields, "dp": None, "pipeline_split": None}
            yield update
            if cap.partial_recompute and fields["recompute"] == "full":
                per_chunk = model.num_layers // (fields["pp"] * fields["vpp"])
                if per_chunk >= 2:  # Megatron's block method: recompute only half of each chunk
                    yield {**update, "recompute_num_layers": per_chunk // 2}


def _layout_ok(fields: dict, model: ModelSpec, world: int) -> bool:
    """The layout divides the GPUs and the layers, and folds experts only onto fewer TP ranks."""
    if world % (fields["tp"] * fields["pp"] * fields["cp"]) or (fields["vpp"] > 1 and fields["pp"] == 1):
        return False
    if fields["pp"] * fields["vpp"] > model.num_layers:
        return False
    # etp defaults to tp; folding searches experts on fewer TP ranks (etp < tp)
    return fields["etp"] is None or (fields["etp"] < fields["tp"] and fields["ep"] != 1)


def _fields_ok(fields: dict, cap, offload: bool) -> bool:
    """The schedule, sharding and offload fields fit the layout and the framework."""
    if fields["schedule"] == "zero-bubble" and (fields["pp"] == 1 or fields["vpp"] > 1):
        return False
    if fields["offload_optimizer"] and fields["dp_sharding"] == "optimizer":
        return False  # ZeRO-Offload needs ZeRO-2 or 3
    return not offload or _offload_tier(fields, cap)


def _axes(base: TrainingPlan, model: ModelSpec, cluster: Cluster, pinned: dict, cap,
          offload: bool) -> dict[str, tuple]:
    """The values each open field of the search takes (pinned fields take their pin)."""
    node = cluster.gpus_per_node
    layer_divisors = tuple(d for d in range(3, 129) if model.num_layers % d == 0)
    cps = tuple(c for c in (1, 2, 4, 8, 16, 32) if c == 1 or base.seq_len // c >= 4096)

    def sizes(dim: str, default: tuple) -> tuple:
        return _axis(pinned.get(dim), default if dim in cap.parallel else (1,))

    return {
        "tp": sizes("tp", tuple(t for t in POWERS if t <= node)),
        "pp": sizes("pp", tuple(sorted({*POWERS, *layer_divisors}))),
        "vpp": _axis(pinned.get("vpp"), (1, 2, 4, 8) if "pp" in cap.parallel else (1,)),
        "cp": sizes("cp", cps),
        "ep": sizes("ep", (1, 2, 4, 8, 16, 32, 64) if model.is_moe else (1,)),
        "etp": _axis(pinned.get("etp"), (None, *(e for e in POWERS if e <= node))
                     if model.is_moe and "ep" in cap.parallel else (None,)),
        "micro_batch_size": _axis(pinned.get("micro_batch_size"), (1, 2, 4, 8)),
        "recompute": _axis(pinned.get("recompute"), cap.recompute),
        "dp_sharding": _axis(pinned.get("dp_sharding"), cap.search_dp_sharding or cap.dp_sharding),
        "schedule": _axis(pinned.get("schedule"), (None,)),
        "offload_optimizer": _axis(pinned.get("offload_optimizer"), cap.offload_optimizer),
        **_balance_axes(base, model, pinned),
        **{k: v for k, v in offload_axes(cap, pinned).items() if offload or k in pinned},
    }


def _balance_axes(base: TrainingPlan, model: ModelSpec, pinned: dict) -> dict:
    """Balancing strategies to search: only with a document-length distribution (document
    balance) or an expert skew on a MoE model (MoE balance), unless pinned."""
    axes = {}
    if not is_fixed(base.doc_lengths):
        axes["balance"] = _axis(pinned.get("balance"), BALANCE)
    if base.expert_skew is not None and model.is_moe:
        axes["moe_balance"] = _axis(pinned.get("moe_balance"), MOE_BALANCE)
    return axes


OBJECTIVE_UNITS = {"throughput": "-tokens/s/GPU", "cost": "USD per million tokens",
                   "time-to-train": "days"}
"""What `score` measures for each objective (lower is better); cost and time-to-train count
goodput (failures, checkpoints, restarts, stragglers: `meshplan.goodput`)."""


def score(est: StepEstimate, objective: str, price_per_gpu_hour: float | None,
          gpus: int, train_tokens: float | None) -> float:
    """Lower is better: negative tokens/s per GPU, USD per million tokens, or days to train."""
    return score_step(est.step_time_s, est.plan, objective, price_per_gpu_hour, gpus, train_tokens)


def score_step(step_s: float, plan, objective: str, price_per_gpu_hour: float | None,
               gpus: int, train_tokens: float | None) -> float:
    """`score` of a plan whose step takes `step_s` (every objective grows with the step time)."""
    per_gpu = plan.global_batch_size * plan.seq_len / step_s / gpus
    tokens_per_s = per_gpu * gpus
    if objective == "cost":
        if price_per_gpu_hour is None:
            raise ConfigError("--objective cost needs --price-per-gpu-hour (USD per GPU-hour)")
        return price_per_gpu_hour * gpus / 3600 / tokens_per_s * 1e6
    if objective == "time-to-train":
        if train_tokens is None:
            raise ConfigError("--objective time-to-train needs --train-tokens (tokens in the run)")
        return train_tokens / tokens_per_s / 86_400
    return -per_gpu


def search(model: ModelSpec, cluster: Cluster, base: TrainingPlan, pinned: dict, *,
           objective: str = "throughput", top: int = 5, price_per_gpu_hour: float | None = None,
           train_tokens: float | None = None,
           progress: Callable[[int, int], None] | None = None,
           workers: int | None = None, resilience: Resilience | None = None) -> SearchResult:
    """Evaluate every supported plan, keep those that fit, rank them by `objective`;
    `progress(done, total)` is told how far the enumeration is; a large search is shared by
    `workers` processes (`search_sweep`; None: `default_workers()`), with the same result.
    Offload tiers beyond the optimizer's (activations, parameters, NVMe) are searched only when
    nothing fits without them, which keeps the search's size; a plan they enable could
    occasionally win where others fit (a larger micro-batch whose copies hide); a tier pinned in
    `pinned` is used in both. Cost and time-to-train rank by the effective wall clock of
    `resilience` (None: the cited defaults), so a plan with a smaller checkpoint can win."""
    with cyclic_gc_paused():
        return _search(model, cluster, base, pinned, objective, top, price_per_gpu_hour,
                       train_tokens, progress, default_workers() if workers is None else workers,
                       resilience)


def _search(model: ModelSpec, cluster: Cluster, base: TrainingPlan, pinned: dict, objective: str,
            top: int, price_per_gpu_hour: float | None, train_tokens: float | None,
            progress: Callable[[int, int], None] | None, workers: int,
            resilience: Resilience | None = None) -> SearchResult:
    start = time.perf_counter()
    goodput_of = (wall_clock_factor(model, cluster, resilience)
                  if objective in ("cost", "time-to-train") else None)

    def key_of(step_s: float, plan) -> float:
        raw = score_step(step_s, plan, objective, price_per_gpu_hour, cluster.num_gpus,
                         train_tokens)
        return raw if goodput_of is None else raw * goodput_of(plan, objective)

    task = Task(base, list(candidate_updates(base, model, cluster, pinned)), model, cluster, key_of)
    found = sweep(task, progress, workers)
    too_big = [(task, i) for i in found.too_big]
    if not found.fitting:  # the offload tiers, then; what fits comes from this task alone
        task = Task(base, list(candidate_updates(base, model, cluster, pinned, offload=True)),
                    model, cluster, key_of)
        more = sweep(task, progress, workers)
        too_big += [(task, i) for i in more.too_big]
        found.add(more)
    ranked = _best(model, cluster, task, found.fitting, key_of, top)
    scores = tuple(key_of(e.step_time_s, e.plan) for e in ranked)
    closest = () if ranked else _closest(model, cluster, too_big)
    return SearchResult(ranked, found.evaluated, found.invalid, len(too_big),
                        time.perf_counter() - start, objective, scores, closest=closest,
                        invalid_reasons=tuple(found.reasons))


def _best(model: ModelSpec, cluster: Cluster, task: Task, fitting: list[Fit],
          key_of: Callable[[float, object], float], top: int) -> tuple[StepEstimate, ...]:
    """The `top` plans by score, each with its full estimate and memory. A plan whose step-time
    lower bound already scores worse than the top-th plan simulated so far cannot rank, so the
    pipeline is simulated in order of the bound and only while one still can; ties keep the
    enumeration order, so the ranking is the one costing every plan gives."""
    if top < 1:
        return ()
    bounds = sorted((fit.bound, i) for i, fit in enumerate(fitting))
    done: list[tuple[float, int, StepEstimate]] = []
    for bound, i in bounds:
        if len(done) >= top and bound > done[top - 1][0]:
            break
        est = estimate_from_parts(parts_of(task, fitting[i]), with_memory=False)
        done = sorted([*done, (key_of(est.step_time_s, est.plan), i, est)], key=lambda d: d[:2])
    return tuple(_with_memory(e, estimate_memory(model, cluster, e.plan)) for _, _, e in done[:top])


def _closest(model: ModelSpec, cluster: Cluster, too_big: list, n: int = 3) -> tuple:
    """The `n` plans that miss the GPU's memory by the least (their MemoryEstimates), from
    (task, candidate index) pairs."""
    memories = (estimate_memory(model, cluster, resolve_candidate(task, i)) for task, i in too_big)
    return tuple(sorted(memories, key=lambda m: m.peak_bytes)[:n])


def _with_memory(est: StepEstimate, memory) -> StepEstimate:
    return replace(est, memory=memory)


def why_winner(result: SearchResult) -> str:
    """One line: by how much the best plan beats the runner-up, and the biggest reason."""
    if len(result.ranked) < 2:
        fitting = result.evaluated - result.rejected_memory
        if not result.ranked:
            return "no plan fits"
        return "only one plan fits" if fitting < 2 else f"the best of {fitting} plans that fit"
    return why_better(result.ranked[0], result.ranked[1])


def time_saved(a: StepEstimate, b: StepEstimate) -> dict[str, float]:
    """Per breakdown part: the time per token (per GPU) plan `a` saves there against plan `b`,
    as a fraction of b's time per token. Shares of a step would hide a win made of the same
    mix done faster (two compute-bound plans both spend ~99% computing); these add up to
    1 - b's throughput / a's."""
    def per_token(est: StepEstimate, key: str) -> float:
        return est.breakdown.get(key, 0.0) / (est.tokens_per_s_per_gpu * est.step_time_s)

    return {k: (per_token(b, k) - per_token(a, k)) * b.tokens_per_s_per_gpu
            for k in a.breakdown.keys() | b.breakdown.keys()}


def why_better(a: StepEstimate, b: StepEstimate) -> str:
    """One line: by how much plan `a` beats plan `b` per GPU, and where most of it comes from."""
    margin = a.tokens_per_s_per_gpu / b.tokens_per_s_per_gpu - 1
    saved = time_saved(a, b)
    key = max(sorted(saved), key=saved.get)
    return (f"the best plan is {margin:.1%} faster than the runner-up; its largest edge: "
            f"{saved[key]:.1%} of the runner-up's time per token saved in {key.replace('_', ' ')}")
