"""Fit the few engine constants of the step-time model on measured training runs.

Fitted: a compute scale per GPU architecture (bounded below so no GEMM runs faster than the
best measured matmul efficiency of its GPU) and per framework, a sharded-traffic scale per
framework with fully sharded runs, the host cost per MoE layer, the exposed shares of overlapped
tensor-parallel communication and of the flex MoE dispatcher's, the MoE load imbalance and the attention scale.
Robust (soft-L1) least squares on log(predicted / measured) tokens/s with a weak prior pulling
scales to 1; micro-batch size and virtual stages are chosen once with the default constants.
Leave-one-source-out refits without each publication and predicts it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

import numpy as np
from scipy.optimize import least_squares

from meshplan.costs.constants import compute_constants, upper_bound
from meshplan.training.choose import best_plan
from meshplan.training.time.constants import apply_fit
from meshplan.training.estimate import estimate_step
from meshplan.validate.run import error_stats
from meshplan.validate.schema import Record
from meshplan.validate.training_records import training_case

PRIOR_WEIGHT = 0.3
GAUGE_WEIGHT = 10.0
"""Weight of the constraint that the named frameworks' log compute scales average to zero. Only
the product architecture x framework is measured, so where the common factor sits is a choice;
this one makes a scale of 1 mean "as efficient as the average calibrated framework", which is what
a framework no record names (or one left out) falls back to. Predictions of named frameworks do
not depend on it."""
ROBUST_SCALE = 0.15
"""Soft-L1 loss scale in log error: records off by much more than ~15% (software generations
or set-ups a record cannot express) pull on the fit linearly, not quadratically."""
UNNAMED_FRAMEWORKS = {"other"}
"""Framework values that name no framework (a record's own trainer, such as modded-nanogpt's
script or llm.c): a scale fitted on them would be a knob for whichever source is in the set."""
GLOBALS = (("moe_overhead_s", 2e-4, 0.0, 5e-3), ("tp_overlap_exposed", 0.3, 0.0, 1.0),
           ("flex_exposed", 0.7, 0.0, 1.0), ("moe_imbalance", 1.2, 1.0, 2.0),
           ("attention_scale", 1.0, 0.7, 2.5))


@dataclass(frozen=True, slots=True)
class Case:
    """One record with its plan fixed."""

    record: Record
    model: object
    cluster: object
    plan: object
    measured: float


def prepare(records: list[Record]) -> list[Case]:
    """Training records with measured tokens/s, each with its plan chosen once."""
    cases = []
    for r in records:
        if r.kind != "training" or not r.measured.tokens_per_s_per_gpu:
            continue
        c = training_case(r)
        est = best_plan(c.plan, c.model, c.cluster, open_layout=c.open_layout)
        cases.append(Case(r, c.model, c.cluster, est.plan, r.measured.tokens_per_s_per_gpu))
    return cases


@dataclass(frozen=True, slots=True)
class Param:
    """One fitted number: where it goes in the constants table, its start, bounds and whether a
    weak prior pulls it to 0 (log-scales toward 1)."""

    path: tuple[str, ...]
    start: float
    lower: float
    upper: float
    log: bool = False
    """Stored as exp(value): a multiplicative scale fitted in log space."""
    prior: bool = False


def _sharded(case: Case) -> bool:
    p = case.plan
    return p.dp_sharding == "full" and p.pp == 1 and p.shard_group > 1


def parameters(cases: list[Case]) -> list[Param]:
    """The fitted parameters the cases can inform: a compute scale per GPU architecture (bounded
    below by the measured matmul ceiling) and per framework, a sharded-traffic scale per
    framework with fully sharded runs, and the global constants."""
    out = []
    for a in sorted({c.cluster.gpu.architecture for c in cases}):
        c = compute_constants(a)
        ceiling = upper_bound(a, "gemm_efficiency")
        floor = math.log(c.gemm_efficiency / ceiling) if ceiling else math.log(0.5)
        out.append(Param(("architecture", a, "compute_scale"), max(floor, 0.0), floor,
                         math.log(3.0), log=True, prior=True))
    for f in sorted({c.plan.framework for c in cases} - UNNAMED_FRAMEWORKS):
        out.append(Param(("framework", f, "compute_scale"), 0.0, math.log(0.5), math.log(2.0),
                         log=True, prior=True))
    for f in sorted({c.plan.framework for c in cases if _sharded(c)}):
        out.append(Param(("framework", f, "fsdp_comm_scale"), math.log(8.0), 0.0, math.log(30.0),
                         log=True, prior=True))
    out += [Param(("global", name), init, lo, hi) for name, init, lo, hi in GLOBALS]
    return out


def _table(theta: np.ndarray, params: list[Param]) -> dict:
    table: dict = {}
    for x, prm in zip(theta, params):
        node = table
        for key in prm.path[:-1]:
            node = node.setdefault(key, {})
        node[prm.path[-1]] = float(math.exp(x) if prm.log else x)
    return table


def _theta(table: dict, params: list[Param]) -> np.ndarray:
    """The parameter vector of a constants table (inverse of `_table`); missing entries start
    where the parameter starts."""
    values = []
    for prm in params:
        node = table
        for key in prm.path:
            node = node.get(key, {}) if isinstance(node, dict) else {}
        if isinstance(node, (int, float)):
            values.append(math.log(node) if prm.log else float(node))
        else:
            values.append(prm.start)
    return np.array(values)


def predict(case: Case, table: dict) -> float:
    """Tokens/s per GPU of one case under a constants table."""
    k = apply_fit(table, case.plan.framework, case.cluster.gpu.architecture)
    est = estimate_step(case.model, case.cluster, case.plan, constants=k, with_memory=False)
    return est.tokens_per_s_per_gpu


def fit(cases: list[Case], max_nfev: int = 200, start_from: dict | None = None) -> dict:
    """Least-squares fit of the constants table on `cases` (optionally warm-started)."""
    params = parameters(cases)
    lower = np.array([p.lower for p in params])
    upper = np.array([p.upper for p in params])
    start = np.array([p.start for p in params])
    if start_from is not None:
        start = np.clip(_theta(start_from, params), lower, upper)
    prior = np.array([p.prior for p in params])
    frameworks = np.array([p.path[0] == "framework" and p.path[-1] == "compute_scale"
                           for p in params])

    def residuals(theta):
        table = _table(theta, params)
        errs = [math.log(predict(c, table) / c.measured) for c in cases]
        gauge = [GAUGE_WEIGHT * theta[frameworks].mean()] if frameworks.any() else []
        return np.array(errs + list(PRIOR_WEIGHT * theta[prior]) + gauge)

    result = least_squares(residuals, start, bounds=(lower, upper), diff_step=1e-3,
                           max_nfev=max_nfev, loss="soft_l1", f_scale=ROBUST_SCALE)
    return _table(result.x, params)


def errors(cases: list[Case], table: dict) -> list[float]:
    """Relative errors (predicted / measured - 1) of every case."""
    return [predict(c, table) / c.measured - 1 for c in cases]


def leave_one_source_out(cases: list[Case], full_fit: dict,
                         max_nfev: int = 4) -> dict[str, list[float]]:
    """For each source: refit without it (warm-started from the full fit, a few Gauss-Newton
    steps), then predict its records. A GPU family or framework only that source has falls
    back to a scale of 1."""
    out: dict[str, list[float]] = {}
    for source in sorted({c.record.source.get("name", "?") for c in cases}):
        train = [c for c in cases if c.record.source.get("name", "?") != source]
        held = [c for c in cases if c.record.source.get("name", "?") == source]
        table = fit(train, max_nfev=max_nfev, start_from=full_fit)
        out[source] = errors(held, table)
    return out


def summarize(errs: list[float]) -> dict:
    """Median and p90 of absolute relative errors (validate's definition)."""
    return error_stats(errs)


def fit_document(table: dict, cases: list[Case], inputs: list[str], loso: dict | None) -> dict:
    """The fitted-constants file: values, date, inputs and the errors they give."""
    doc = {"fit": {"date": date.today().isoformat(), "inputs": inputs, "records": len(cases),
                   "in_sample": summarize(errors(cases, table))}, **table}
    if loso is not None:
        doc["fit"]["leave_one_source_out"] = summarize([e for v in loso.values() for e in v])
    return doc
