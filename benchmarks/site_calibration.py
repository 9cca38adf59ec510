"""How few runs a site profile needs (issue #19): for every (source, GPU) group of the calibration
files with at least 6 usable runs, treat the group as another lab's cluster:

1. the packaged constants are refitted without the group's source (leave-one-source-out), so the
   base model has never seen this lab;
2. "uncalibrated" is that base model's error on every run of the group;
3. for k = 1, 3, 5 and DRAWS random draws, a site profile is fitted on k runs
   (meshplan.calibration.site_fit) and the group's other runs are predicted with it.

Runs whose own source flags the measurement (their notes say a fit may set them aside: the 26
TRT-LLM 0.13 GH200 TP2 rows) are set aside and counted. Prints and saves the median and p90
absolute error per k beside the uncalibrated figure
(benchmarks/results/site_calibration.json, and the page block that quotes it).
Run: python benchmarks/site_calibration.py [--draws N] (about ten minutes on two cores)."""

from __future__ import annotations

import argparse
import math
import random
import statistics
import sys
import time
from collections import defaultdict

import readme_blocks  # benchmarks/readme_blocks.py

import meshplan.serving.cost.constants as serving_constants
import meshplan.serving.engine.deployment as deployment
import meshplan.training.time.constants as training_constants
from meshplan.calibration import training as cal
from meshplan.calibration import serving as cs
from meshplan.calibration.site import use_site
from meshplan.calibration.site_fit import Runs, fit_site, prepare, run_errors
from meshplan.records import CALIBRATION
from meshplan.validate.records import load_records
from meshplan.validate.run import error_stats

KS = (1, 3, 5)
MIN_RUNS = 6
MAX_HELD = 12
"""Serving groups: predict at most this many held-out runs per draw (each a simulation)."""


def group_of(record) -> tuple[str, str]:
    return record.source.get("name", "?"), record.hardware.gpu


def training_base(source: str, cases: list, full: dict):
    """Make the packaged training constants the fit without `source`."""
    table = cal.fit([c for c in cases if c.record.source.get("name", "?") != source],
                    max_nfev=4, start_from=full)
    training_constants._fitted = lambda: table


def serving_base(source: str, cases: list, full: dict):
    """Make the packaged serving constants the fit without `source` (engines only it has keep
    the defaults file)."""
    train = [fc for fc in cases if fc.record.source.get("name", "?") != source]
    table = cs.fit(train, max_nfev=4, start_from=full) if train else {}
    table = {e: v for e, v in table.items() if e in {fc.engine for fc in train}}
    lookup = lambda engine: serving_constants.resolve(engine, table)
    serving_constants.engine_constants = deployment.engine_constants = lookup


def kshot(runs: list, kind: str, draws: int, rng: random.Random) -> dict:
    """{k: [abs errors of the held-out runs]} over the draws, the uncalibrated errors, and the
    log errors of the uncalibrated model per run (for the spreads)."""
    use_site(None)
    as_runs = lambda rs: Runs(rs, [], []) if kind == "training" else Runs([], rs, [])
    base = run_errors(as_runs(runs))
    per_run = defaultdict(list)
    for rid, metric, e in base:  # in speed direction: a time predicted too long is too slow
        per_run[rid].append(math.log(1 + e) * (-1 if "_ms" in metric or metric == "step_time_s" else 1))
    out = {"uncalibrated": [abs(e) for _, _, e in base],
           "run_log_errors": [statistics.fmean(v) for v in per_run.values()]}
    for k in KS:
        errs = []
        for _ in range(draws):
            picked = rng.sample(runs, k)
            held = [r for r in runs if r not in picked]
            if kind == "serving":
                held = rng.sample(held, min(MAX_HELD, len(held)))
            profile = fit_site(as_runs(picked))
            use_site(profile)
            errs += [abs(e) for _, _, e in run_errors(as_runs(held))]
            use_site(None)
        out[k] = errs
    return out


FLAGGED = "a fit may set it aside"
"""The phrase run records carry when their own source flags the measurement (the 26 TRT-LLM 0.13
GH200 TP2 rows): such runs are set aside here and counted."""


def run_kind(kind: str, draws: int, rng: random.Random) -> tuple[dict, int]:
    every = load_records(CALIBRATION[kind])
    records = [r for r in every if FLAGGED not in (r.notes or "")]
    if kind == "training":
        cases = cal.prepare(records)
        full = training_constants._fitted()
        runs = prepare(records).training
        set_base = lambda src: training_base(src, cases, full)
    else:
        runs = prepare(records).serving
        cases = runs
        full = serving_constants.packaged_fit()
        set_base = lambda src: serving_base(src, cases, full)
    groups = defaultdict(list)
    for r in runs:
        groups[group_of(r.record)].append(r)
    result = {}
    for (source, gpu), members in sorted(groups.items()):
        if len(members) < MIN_RUNS:
            continue
        start = time.time()
        set_base(source)
        result[f"{source[:60]} / {gpu}"] = kshot(members, kind, draws, rng)
        print(f"{kind} {source[:50]} / {gpu}: {len(members)} runs, {time.time() - start:.0f} s", file=sys.stderr)
    return result, len(every) - len(records)


def summarise(groups: dict) -> dict:
    """Median / p90 absolute error per k (and uncalibrated) over all groups' held-out runs."""
    keys = ["uncalibrated", *KS]
    return {str(k): error_stats([e for g in groups.values() for e in g[k]]) for k in keys}


def spreads(groups: dict) -> dict:
    """The empirical-Bayes scales of the site fit: the spread of a run's log error within its
    group (median over groups of the standard deviation) and between groups (standard deviation
    of the group means), of the uncalibrated model, each run's metrics taken in the speed
    direction (times negated) and averaged."""
    within = [statistics.pstdev(g["run_log_errors"]) for g in groups.values()]
    means = [statistics.fmean(g["run_log_errors"]) for g in groups.values()]
    return {"within": statistics.median(within), "between": statistics.pstdev(means)}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--draws", type=int, default=4)
    args = parser.parse_args()
    rng = random.Random(0)
    saved = (training_constants._fitted, serving_constants.engine_constants, deployment.engine_constants)
    data = {"draws": args.draws, "ks": list(KS), "min_runs": MIN_RUNS}
    try:
        for kind in ("training", "serving"):
            groups, set_aside = run_kind(kind, args.draws, rng)
            data[kind] = {"groups": len(groups), "summary": summarise(groups), "spreads": spreads(groups),
                          "set_aside": set_aside}
            print(f"{kind} spreads of the log error: {data[kind]['spreads']}")
            for k, s in data[kind]["summary"].items():
                print(f"{kind} k={k}: median {s['median_abs_rel_error']:.1%} p90 {s['p90_abs_rel_error']:.1%} "
                      f"(n={s['n']})")
    finally:
        training_constants._fitted, serving_constants.engine_constants, deployment.engine_constants = saved
    readme_blocks.save("site_calibration", data)


if __name__ == "__main__":
    main()
