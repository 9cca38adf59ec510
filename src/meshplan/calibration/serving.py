"""Fit the serving engines' constants on measured serving benchmarks.

Fitted per engine: the fixed per-iteration time, the per-request time, the per-layer kernel
gaps, and the fractions of HBM bandwidth that weight-streaming GEMMs and paged decode attention
reach (bounded by the defaults file's measured ceilings). Least squares on log(predicted /
measured) of every measured metric.

Offline benchmarks (all requests queued at t=0) are replayed, not re-simulated: with no
arrivals in flight the scheduler's decisions do not depend on how long iterations take, so the
batch of every iteration is recorded once and each trial of the constants only re-prices the
recorded iterations (vectorised). Closed-loop and timed workloads are simulated again.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, replace
from datetime import date

import numpy as np
from scipy.optimize import least_squares

from meshplan.serving.cost.constants import (EngineConstants, constants_key, engine_constants, packaged_fit, resolve,
                                        upper_bound)
from meshplan.serving.cost.iteration import IterationCost
from meshplan.serving.simulate import Simulation
from meshplan.validate.run import error_stats
from meshplan.validate.schema import Record
from meshplan.validate.serving_records import (SERVING_METRICS, ServingCase, predict_serving,
                                               serving_case)

BOUNDS = {"iteration_s": (0.0, 5e-3), "per_seq_s": (0.0, 5e-5), "layer_s": (0.0, 1e-4),
          "collective_s": (0.0, 2e-4), "grouped_gemm_efficiency": (0.1, None),
          "kv_read_efficiency": (0.3, None), "weight_read_efficiency": (0.4, None)}
"""Fit ranges; None: the ceiling from serving_constants.yaml."""
NAMES = tuple(f.name for f in fields(EngineConstants))


@dataclass(slots=True)
class FitCase:
    """A serving record, with its offline schedule recorded when it can be replayed."""

    record: Record
    case: ServingCase
    measured: dict[str, float]
    calls: list[np.ndarray] | None = None
    """Per replica: the cost-model arguments of every iteration, in order."""
    first_iter: list[np.ndarray] | None = None
    """Per replica: the iteration index of each request's first token."""
    costs: list[IterationCost] | None = None

    @property
    def engine(self) -> str:
        """The constants row this case is priced with (engine generation)."""
        return constants_key(self.case.plan.engine, self.case.plan.engine_version)


def prepare(records: list[Record]) -> list[FitCase]:
    """Serving records with measured metrics, offline ones with their schedule recorded."""
    out = []
    for r in records:
        if r.kind != "serving":
            continue
        measured = {k: getattr(r.measured, k) for k in SERVING_METRICS if getattr(r.measured, k)}
        if not measured or r.serving.workload.output_len is None:
            continue
        fc = FitCase(r, serving_case(r), measured)
        if fc.case.workload.concurrency is None and all(q.arrival_s == 0 for q in fc.case.workload.requests):
            _record_schedule(fc)
        out.append(fc)
    return out


def _record_schedule(fc: FitCase) -> None:
    c = fc.case
    sim = Simulation(c.model, c.cluster, c.plan, c.workload)
    replicas = [r for group in sim.groups for r in group]
    if len(sim.groups) > 1:
        return  # disaggregated pools wait on each other: simulate instead
    for r in replicas:
        r.recorded = []
    res = sim.run()
    fc.calls, fc.first_iter, fc.costs = [], [], []
    for r in replicas:
        fc.calls.append(np.array(r.recorded, dtype=float).reshape(-1, 7))
        ends = res.log.column("end_s", replica=r.index)
        firsts = np.array([x.first_token_s for x in res.records if x.replica == r.index])
        fc.first_iter.append(np.searchsorted(ends, firsts - 1e-12))
        fc.costs.append(r.cost)
        r.recorded = None


def replay(fc: FitCase, k: EngineConstants, device: float | None = None) -> dict[str, float]:
    """The offline metrics of a recorded schedule priced with constants `k` (and, when given,
    another device-time multiplier than the recorded one: a site profile's)."""
    makespan, ttft = 0.0, []
    for calls, firsts, cost in zip(fc.calls, fc.first_iter, fc.costs):
        priced = IterationCost(cost.model, cost.cluster, cost.plan, cost.kv, k, cost.graphs,
                               cost.device if device is None else device, two_batch_overlap=cost.tbo,
                               two_batch_above=cost.tbo_above)
        ends = np.cumsum(priced.batch(calls)) if len(calls) else np.zeros(0)
        makespan = max(makespan, float(ends[-1]) if len(ends) else 0.0)
        ttft.append(ends[firsts] if len(firsts) else np.zeros(0))
    reqs = fc.case.workload.requests
    out_tokens, in_tokens = sum(q.output_len for q in reqs), sum(q.input_len for q in reqs)
    t = np.concatenate(ttft) * 1e3
    return {"output_tokens_per_s": out_tokens / makespan, "total_tokens_per_s": (out_tokens + in_tokens) / makespan,
            "requests_per_s": len(reqs) / makespan, "ttft_ms_mean": float(t.mean()),
            "ttft_ms_p50": float(np.percentile(t, 50)), "ttft_ms_p99": float(np.percentile(t, 99))}


def predict(fc: FitCase, k: EngineConstants) -> dict[str, float]:
    """Every metric of one case under constants `k` (replayed when possible)."""
    if fc.calls is not None:
        return replay(fc, k)
    return predict_serving(fc.case, engine=k)


def _constants(theta: np.ndarray, engines: list[str]) -> dict[str, EngineConstants]:
    n = len(NAMES)
    return {e: EngineConstants(**{name: float(theta[i * n + j]) for j, name in enumerate(NAMES)})
            for i, e in enumerate(engines)}


def _bounds(engines: list[str], start_from: dict | None):
    start, lower, upper = [], [], []
    for e in engines:
        base = engine_constants(e)
        for name in NAMES:
            lo, hi = BOUNDS[name]
            hi = hi if hi is not None else (upper_bound(e, name) or 1.0)
            value = (start_from or {}).get(e, {}).get(name, getattr(base, name))
            start.append(min(max(value, lo), hi)); lower.append(lo); upper.append(hi)
    return np.array(start), (np.array(lower), np.array(upper))


def residuals(cases: list[FitCase], consts: dict[str, EngineConstants]) -> list[float]:
    """log(predicted / measured) of every measured metric of every case."""
    out = []
    for fc in cases:
        pred = predict(fc, consts[fc.engine])
        out += [math.log(pred[m] / v) for m, v in fc.measured.items()]
    return out


MIN_METRICS = 20
"""An engine's constants are fitted only with at least this many measured metrics; below that
its defaults stand (five constants on a handful of numbers would only be memorised)."""
ROBUST_SCALE = 0.15
"""Soft-L1 loss scale in log error: records off by much more than ~15% (transcription doubts,
undisclosed set-ups) pull on the fit linearly, not quadratically."""


def fitted_engines(cases: list[FitCase]) -> list[str]:
    """Engines with enough measured metrics to fit."""
    count: dict[str, int] = {}
    for fc in cases:
        count[fc.engine] = count.get(fc.engine, 0) + len(fc.measured)
    return sorted(e for e, n in count.items() if n >= MIN_METRICS)


def fit(cases: list[FitCase], max_nfev: int = 60, start_from: dict | None = None) -> dict:
    """Robust least-squares fit of each engine's constants; returns {engine: {name: value}}.
    Engines share no constant, so each is fitted alone on its own cases (a Jacobian column
    then re-prices only that engine's records)."""
    table = {}
    for engine in fitted_engines(cases):
        own = [fc for fc in cases if fc.engine == engine]
        table[engine] = _fit_engine(engine, own, max_nfev, (start_from or {}).get(engine))
    return table


def _fit_engine(engine: str, cases: list[FitCase], max_nfev: int, start_from: dict | None) -> dict:
    start, bounds = _bounds([engine], {engine: start_from} if start_from else None)
    scale = np.maximum(np.abs(start), 1e-6)

    def fun(x):
        return np.array(residuals(cases, _constants(x * scale, [engine])))

    result = least_squares(fun, start / scale, bounds=(bounds[0] / scale, bounds[1] / scale),
                           diff_step=1e-3, max_nfev=max_nfev, loss="soft_l1", f_scale=ROBUST_SCALE)
    k = _constants(result.x * scale, [engine])[engine]
    return {name: getattr(k, name) for name in NAMES}


def errors(cases: list[FitCase], table: dict, packaged: bool = True) -> list[tuple[FitCase, str, float]]:
    """(case, metric, predicted / measured - 1) for every measured metric, with the constants
    of `table` over (when `packaged`) the shipped fit, else over the defaults file alone."""
    fitted = {**packaged_fit(), **table} if packaged else table
    consts = {e: resolve(e, fitted) for e in {fc.engine for fc in cases}}
    out = []
    for fc in cases:
        pred = predict(fc, consts[fc.engine])
        out += [(fc, m, pred[m] / v - 1) for m, v in fc.measured.items()]
    return out


def _source(fc: FitCase) -> str:
    return fc.record.source.get("key") or fc.record.source.get("name", "?")


def leave_one_source_out(cases: list[FitCase], full: dict, max_nfev: int = 4) -> list[tuple[FitCase, str, float]]:
    """Refit without each source (warm-started from the full fit) and predict it."""
    out = []
    for source in sorted({_source(fc) for fc in cases}):
        train = [fc for fc in cases if _source(fc) != source]
        held = [fc for fc in cases if _source(fc) == source]
        engines = {fc.engine for fc in train}
        table = fit(train, max_nfev=max_nfev, start_from=full) if train else {}
        table = {e: v for e, v in table.items() if e in engines}
        out += errors(held, table, packaged=False)  # nothing fitted on the held-out source
    return out


def fit_document(table: dict, cases: list[FitCase], inputs: list[str], loso=None) -> dict:
    """The fitted-constants file: values, date, inputs and the errors they give."""
    ins = errors(cases, table)
    doc = {"fit": {"date": date.today().isoformat(), "inputs": inputs, "records": len(cases),
                   "in_sample": error_stats([e for _, _, e in ins])}, "engines": table}
    if loso is not None:
        doc["fit"]["leave_one_source_out"] = error_stats([e for _, _, e in loso])
    return doc
