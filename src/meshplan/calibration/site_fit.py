"""Fit a site profile (meshplan.calibration.site) on a few of a user's measured runs.

Maximum a posteriori in log space, robust (soft-L1) in the runs: each run's log error
log(predicted / measured) counts with weight 1/SIGMA_RUN (the model's error on one run that no
site constant explains), each constant's log with weight 1/SIGMA_SITE (how far sites sit from
the packaged fit), so one run moves a constant about 30% of the way to matching it, three runs
about 55%, five about 70%, and a constant no run informs stays at 1. Both scales are the
empirical-Bayes spreads that benchmarks/site_calibration.py prints for the leave-one-source-out
model on the calibration files: within a (source, GPU) group and between groups. The plan of
each training run is chosen once with the packaged model; offline serving runs are replayed
from their recorded schedule (meshplan.calibration.serving), others simulated.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from datetime import date

import numpy as np
from scipy.optimize import least_squares

from meshplan import __version__
from meshplan.errors import ConfigError
from meshplan.calibration.site import LIMITS, SiteProfile, use_site
from meshplan.validate.run import error_stats
from meshplan.validate.schema import Record

SIGMA_RUN = 0.15
"""Spread of one run's log error around its site's mean (the leave-one-source-out model on the
training calibration groups: median within-group standard deviation 0.16)."""
SIGMA_SITE = 0.10
"""Prior spread of a site constant's log around 1 (the same groups' means spread ~0.05-0.12)."""
IMPLAUSIBLE = 4.0
"""A run the packaged model misses by more than this factor is not a site difference but a
broken record (MFU above 100%, faster than the weights can stream, a wrong unit): skipped."""
TRAINING_METRICS = ("tokens_per_s_per_gpu", "step_time_s")
LOSS = "soft_l1"
"""Robust loss on the scaled residuals: a run off by much more than SIGMA_RUN (a model error
specific to that run, which the model's heavy-tailed errors make common: p90 ~35% against a
median ~7%) pulls linearly, not quadratically, so one odd run cannot drag a site constant."""


@dataclass(frozen=True, slots=True)
class TrainingRun:
    """A training record with its plan fixed."""

    record: Record
    model: object
    cluster: object
    plan: object
    measured: dict


@dataclass(frozen=True, slots=True)
class Runs:
    """What a fit uses, and what it set aside with the reason."""

    training: list
    serving: list
    skipped: list[tuple[str, str]]


def prepare(records: list[Record]) -> Runs:
    """The usable runs of `records`; a run that cannot be modelled or is implausible is skipped."""
    from meshplan.calibration import serving as cs
    from meshplan.training.choose import best_plan
    from meshplan.validate.training_records import training_case

    training, serving, skipped = [], [], []
    for r in records:
        try:
            if r.kind == "training":
                measured = {m: getattr(r.measured, m) for m in TRAINING_METRICS if getattr(r.measured, m)}
                if not measured:
                    raise ConfigError("measured: no tokens_per_s_per_gpu or step_time_s to fit on")
                c = training_case(r)
                est = best_plan(c.plan, c.model, c.cluster, open_layout=c.open_layout)
                training.append(TrainingRun(r, c.model, c.cluster, est.plan, measured))
            else:
                cases = cs.prepare([r])
                if not cases:
                    raise ConfigError("measured: no serving metric with a fixed output length to fit on")
                serving += cases
        except ConfigError as exc:
            skipped.append((r.id, str(exc)))
    runs = Runs(training, serving, skipped)
    return _drop_implausible(runs)


def _drop_implausible(runs: Runs) -> Runs:
    keep_t, keep_s, skipped = [], [], list(runs.skipped)
    use_site(None)
    for run, errs in [(t, training_errors(t)) for t in runs.training] + [(s, serving_errors(s)) for s in runs.serving]:
        worst = max(errs.items(), key=lambda kv: abs(math.log(kv[1] + 1)))
        if abs(math.log(worst[1] + 1)) > math.log(IMPLAUSIBLE):
            why = (f"measured.{worst[0]}: the packaged model is off by {worst[1] + 1:.1f}x, beyond "
                   f"any site difference; check the record")
            skipped.append((run.record.id, why))
        else:
            (keep_t if isinstance(run, TrainingRun) else keep_s).append(run)
    return Runs(keep_t, keep_s, skipped)


def training_errors(run: TrainingRun) -> dict[str, float]:
    """predicted / measured - 1 per measured metric, under the active site profile."""
    from meshplan.training.estimate import estimate_step

    est = estimate_step(run.model, run.cluster, run.plan, with_memory=False)
    predicted = {"tokens_per_s_per_gpu": est.tokens_per_s_per_gpu, "step_time_s": est.step_time_s}
    return {m: predicted[m] / v - 1 for m, v in run.measured.items()}


def serving_errors(fc) -> dict[str, float]:
    """predicted / measured - 1 per measured metric, under the active site profile."""
    from meshplan.calibration import serving as cs
    from meshplan.serving.cost.constants import engine_constants
    from meshplan.serving.engine.deployment import with_site

    engine, device = with_site(engine_constants(fc.engine), fc.case.cluster.gpu.name)
    if fc.calls is not None:
        predicted = cs.replay(fc, engine, device)
    else:
        predicted = cs.predict_serving(fc.case)
    return {m: predicted[m] / v - 1 for m, v in fc.measured.items() if predicted.get(m) == predicted.get(m)}


@dataclass(frozen=True, slots=True)
class Param:
    """One fitted multiplier: kind ("training"/"serving"), name, and the GPU it is kept for."""

    kind: str
    name: str
    gpu: str | None = None


def parameters(runs: Runs) -> list[Param]:
    """The multipliers the runs can inform: per GPU model the compute (training) and device
    (serving) time, the networks training runs cross, the serving step time."""
    out = [Param("training", "compute", g) for g in sorted({t.cluster.gpu.name for t in runs.training})]
    if any(t.cluster.num_gpus > 1 for t in runs.training):
        out.append(Param("training", "intra_network"))
    if any(t.cluster.num_gpus > t.cluster.gpus_per_node for t in runs.training):
        out.append(Param("training", "inter_network"))
    out += [Param("serving", "device", g) for g in sorted({s.case.cluster.gpu.name for s in runs.serving})]
    if runs.serving:
        out.append(Param("serving", "step"))
    return out


def profile_of(theta: np.ndarray, params: list[Param], name: str = "fit") -> SiteProfile:
    """The site profile of a parameter vector (log multipliers)."""
    kinds: dict = {"training": {}, "serving": {}}
    for x, p in zip(theta, params):
        value = float(math.exp(x))
        if p.gpu is None:
            kinds[p.kind][p.name] = value
        else:
            kinds[p.kind].setdefault(p.name, {})[p.gpu] = value
    return SiteProfile(name=name, path=None, **kinds)


def run_errors(runs: Runs) -> list[tuple[str, str, float]]:
    """(record id, metric, predicted / measured - 1) of every run under the active profile."""
    out = []
    for t in runs.training:
        out += [(t.record.id, m, e) for m, e in training_errors(t).items()]
    for s in runs.serving:
        out += [(s.record.id, m, e) for m, e in serving_errors(s).items()]
    return out


def fit_site(runs: Runs, max_nfev: int = 30) -> SiteProfile:
    """The MAP site profile of `runs` (see the module docstring)."""
    params = parameters(runs)
    if not params:
        raise ConfigError("no usable run to fit a site profile on (every record was skipped)")

    def residuals(theta: np.ndarray) -> np.ndarray:
        use_site(profile_of(theta, params))
        per_run: dict[str, list[float]] = {}
        for rid, _, e in run_errors(runs):
            per_run.setdefault(rid, []).append(math.log(max(e + 1, 1e-6)))
        # a run counts once however many metrics it measured (each weighted 1/sqrt(n))
        errs = [x / SIGMA_RUN / math.sqrt(len(v)) for v in per_run.values() for x in v]
        return np.array(errs + list(theta / SIGMA_SITE))

    bound = math.log(LIMITS[1])
    try:
        result = least_squares(residuals, np.zeros(len(params)), bounds=(-bound, bound),
                               diff_step=1e-3, max_nfev=max_nfev, loss=LOSS)
    finally:
        use_site(None)
    return profile_of(result.x, params)


def profile_document(name: str, profile: SiteProfile, runs: Runs, inputs: list[str],
                     before: list, after: list) -> dict:
    """The YAML document of a fitted profile: the constants, how they were fitted, and the
    errors on its own runs before and after."""
    stats = lambda rows: error_stats([e for _, _, e in rows])
    return {
        "site": name, "meshplan_version": __version__,
        "fitted": {"date": date.today().isoformat(), "inputs": inputs,
                   "runs": len(runs.training) + len(runs.serving),
                   "method": f"MAP in log space: run weight 1/{SIGMA_RUN}, prior weight 1/{SIGMA_SITE} at 1",
                   "skipped": [{"id": i, "reason": why} for i, why in runs.skipped]},
        "constants": {k: v for k, v in (("training", profile.training), ("serving", profile.serving)) if v},
        "errors": {"before": stats(before), "after": stats(after),
                   "runs": [{"id": i, "metric": m, "before": round(b, 4), "after": round(a, 4)}
                            for (i, m, b), (_, _, a) in zip(before, after)]},
    }


def calibrate_site(records: list[Record], name: str, inputs: list[str], max_nfev: int = 30) -> dict:
    """Prepare, fit and document a site profile for `records`."""
    runs = prepare(records)
    use_site(None)
    before = run_errors(runs)
    profile = fit_site(runs, max_nfev)
    use_site(profile)
    try:
        after = run_errors(runs)
    finally:
        use_site(None)
    return profile_document(name, profile, runs, inputs, before, after)
