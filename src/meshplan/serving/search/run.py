"""Run the serving plan search: enumerate, bound, simulate survivors in parallel, verify."""

from __future__ import annotations

import dataclasses
import time
from collections import Counter
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass

from meshplan.errors import ConfigError
from meshplan.hardware import Cluster
from meshplan.model.spec import ModelSpec
from meshplan.serving.search.capacity import Targets, at_rate, keeps_up, margins
from meshplan.serving.search.candidates import (
    OBJECTIVES, Candidate, Space, best_case, colocated, deployment_plan, disaggregated, portable, quantized,
    rebuilt, score, whole_replicas,
)
from meshplan.serving.search.screening import Screening
from meshplan.serving.search.trials import MIN_TRIAL_REQUESTS
from meshplan.serving.simulate import simulate
from meshplan.serving.traffic.workload import Workload


@dataclass(slots=True, kw_only=True)
class SearchResult:
    """Ranked feasible plans, the closest infeasible ones, and what the search did."""

    ranked: list[Candidate]
    infeasible: list[Candidate]
    rate: float
    targets: Targets
    objective: str
    prices: dict[str, float]
    simulated: int
    simulations: int
    pruned: dict[str, int]
    wall_s: float
    max_gpus: int = 0
    quantize: bool = False
    """Whether quantized plans were allowed (then both precisions are shown)."""
    smallest_beyond: Candidate | None = None
    """When no plan fits: the smallest deployment that could, beyond --max-gpus (its replicas
    from its simulated capacity, or from the analytical bound when it was not simulated)."""
    trial_window_s: float | None = None
    """Seconds of arrivals each capacity trial spans (meshplan.serving.search.trials); None:
    every trial replays the whole unit workload."""
    requests_per_trial: tuple[int, int] = (0, 0)
    """Fewest and most requests a trial simulates (the most: the verification at the target rate)."""


def search(model: ModelSpec, clusters: list[Cluster], unit: Workload, rate: float, t: Targets, *,
           max_gpus: int, objective: str = "min-gpus", prices: dict[str, float] | None = None,
           space: Space | None = None, top: int = 5, workers: int = 2,
           window: float | None = None) -> SearchResult:
    """The best deployments serving `rate` requests/s of `unit`'s traffic within `t`; each
    capacity trial's arrivals span `window` seconds when given (trials.sized_unit gives it)."""
    start, prices, space = time.perf_counter(), prices or {}, space or Space()
    if objective not in OBJECTIVES:
        raise ConfigError(f"--objective {objective!r}: use one of {', '.join(OBJECTIVES)}")
    if objective == "min-cost" and any(c.gpu.name not in prices for c in clusters):
        raise ConfigError("--objective min-cost needs --price GPU=USD_PER_GPU_HOUR for every --gpu")
    pruned: Counter[str] = Counter()
    cands: list[Candidate] = []
    hopeless: list[Candidate] = []
    beyond: list[Candidate] = []
    for cluster in clusters:
        reps = colocated(model, cluster, unit, t, space, rate, max_gpus, pruned, hopeless, beyond)
        cands += reps
        if space.disaggregate:
            cands += disaggregated(reps, rate, max_gpus, pruned)
    cands.sort(key=lambda c: best_case(c, rate, objective, prices.get(c.gpu)))
    pool = ProcessPoolExecutor(workers) if workers > 1 else None
    try:
        screening = Screening(model, {c.gpu.name: c for c in clusters}, unit, rate, t, window, pool)
        done = _evaluate(screening, cands, objective, prices, top, pruned, space.quantize, max(workers, 1))
        ranked, infeasible, smallest = _answer(screening, done, hopeless, beyond, objective, prices, top,
                                               max_gpus, space.quantize)
    finally:
        if pool:
            pool.shutdown()
    return SearchResult(ranked=ranked, infeasible=infeasible, rate=rate, targets=t, objective=objective,
                        prices=prices, simulated=len(done), simulations=screening.simulations, pruned=dict(pruned),
                        wall_s=time.perf_counter() - start, max_gpus=max_gpus,
                        quantize=space.quantize, smallest_beyond=smallest, trial_window_s=window,
                        requests_per_trial=_trial_sizes(len(unit), window))


def _answer(screening, done, hopeless, beyond, objective, prices, top, max_gpus, quantize):
    """(ranked, closest infeasible, smallest beyond --max-gpus): the plans shown are verified at
    the target rate; every plan shown has a sized capacity (screening.settle)."""
    model, clusters, unit, rate, t = screening.model, screening.clusters, screening.unit, screening.rate, screening.t
    key = lambda c: score(c, objective, prices.get(c.gpu))
    fits_gpus = lambda cs: [c for c in cs if c.capacity.rate > 0 and c.gpus <= max_gpus]
    screening.settle(done, lambda cs: _shown(sorted(fits_gpus(cs), key=key), top, quantize))
    chosen = _shown(sorted(fits_gpus(done), key=key), top, quantize)
    closest = lambda cs, shown: sorted([c for c in cs + hopeless if c not in shown],
                                       key=lambda c: max(c.capacity.margins.values(), default=9e9))[:top]
    verified = _verify(model, clusters, unit, rate, t, chosen, max_gpus)
    ranked = sorted((c for c in verified if _meets(c)), key=key)
    if ranked:  # the closest among the sized plans: sizing the others only for this list costs most
        infeasible = closest([c for c in done if screening.is_sized(c)], ranked)
    else:  # nothing else to show: the closest of all, each sized
        screening.settle(done, lambda cs: closest(cs, ranked))
        infeasible = closest(done, ranked)
    over = lambda cs: [c for c in cs if c.capacity.rate > 0 and c.gpus > max_gpus] + beyond
    smallest = lambda cs: min(over(cs), key=lambda c: (c.gpus, c.capacity is None), default=None)
    if not ranked:
        screening.settle(done, lambda cs: [c for c in [smallest(cs)] if c in cs])
    smallest_beyond = None if ranked else smallest(done)
    return ranked, infeasible, smallest_beyond


def _trial_sizes(size: int, window: float | None) -> tuple[int, int]:
    """(fewest, most) requests a trial simulates: the whole unit without a window."""
    return (size, size) if window is None else (min(size, MIN_TRIAL_REQUESTS), size)


def _shown(feasible: list[Candidate], top: int, quantize: bool) -> list[Candidate]:
    """The best `top` plans; with quantization allowed, also the best plan at the model's own
    precision and the best quantized one when neither is among them (both are always shown)."""
    chosen = feasible[:top]
    if quantize:
        for wanted in (False, True):
            if not any(quantized(c) == wanted for c in chosen):
                chosen += [c for c in feasible if quantized(c) == wanted][:1]
    return chosen


def _evaluate(screening, cands, objective, prices, top, pruned, by_precision, per_batch):
    """Capacity of candidates in best-case order, `per_batch` at a time, skipping those whose
    best case cannot enter the current top `top` (of their own precision class with
    `by_precision`: or cannot beat the best plan found of their own precision, so the best at
    the model's own dtypes and the best quantized one are both found). Capacities come from
    short trials, sized for the plans in those places first (meshplan.serving.search.screening):
    the thresholds are sized scores."""
    done, i, rate = [], 0, screening.rate
    group = quantized if by_precision else (lambda c: None)
    key = lambda c: score(c, objective, prices.get(c.gpu))
    leaders = lambda cs: _leaders([c for c in cs if c.capacity.rate > 0], key, top, group)
    while i < len(cands):
        screening.settle(done, leaders)
        found = [(key(c)[0], group(c)) for c in done if c.capacity.rate > 0]
        ranked = sorted(v for v, _ in found)
        worst_kept = ranked[top - 1] if len(ranked) >= top else None
        best_of = {g: min(v for v, h in found if h == g) for _, g in found}
        batch = []
        while i < len(cands) and len(batch) < per_batch:
            c = cands[i]
            i += 1
            bound = best_case(c, rate, objective, prices.get(c.gpu))
            beaten = worst_kept is not None and bound > worst_kept
            if beaten and by_precision:
                beaten = group(c) in best_of and bound > best_of[group(c)]
            if beaten:
                pruned["bound: cannot beat the plans found"] += 1
                continue
            batch.append(c)
        screening.screen(batch)
        done += batch
    screening.settle(done, leaders)
    return done


def _leaders(cands: list[Candidate], key, top: int, group) -> list[Candidate]:
    """The best `top` of `cands` by `key` and the best of each `group`: the places that matter."""
    ordered = sorted(cands, key=key)
    out = ordered[:top]
    for g in {group(c) for c in ordered}:
        out += [c for c in ordered if group(c) == g][:1]
    return out


def _meets(c: Candidate) -> bool:
    """Verified at the target rate: every SLO met, and the run kept up with the arrivals
    (judged over the arrival window: the drain after the last arrival does not count)."""
    return all(v <= 1 for v in c.verified_margins.values()) and keeps_up(c.verified) is not False


def _verify(model, clusters, unit, rate, t, cands, max_gpus) -> list[Candidate]:
    """Simulate each plan's full deployment at the target rate; add a replica if the split
    traffic misses an SLO (up to --max-gpus)."""
    for c in cands:
        c.replicas, c.verified, c.verified_margins = _verify_one(
            (model, portable(clusters[c.gpu]), unit, rate, t, c, max_gpus))
    return cands


def _verify_one(args) -> tuple:
    """(replicas, simulation, margins) of one plan verified at the target rate (_verify)."""
    model, hw, unit, rate, t, c, max_gpus = args
    c = dataclasses.replace(c)
    while True:
        plan = deployment_plan(c)
        res = simulate(model, rebuilt(hw, plan.num_gpus), plan, at_rate(unit, rate), slo=t.slo())
        c.verified, c.verified_margins = res, margins(res.records, t)
        more = whole_replicas(c, c.replicas + 1)
        if _meets(c) or more * c.unit_gpus > max_gpus:
            return c.replicas, res, c.verified_margins
        c.replicas = more
