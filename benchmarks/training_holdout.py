"""Generalisation of the training model on held-out runs: every file of the package's held-out
set (src/meshplan/records/held-out/: Megatron-Bridge pre-training rows that are not calibration
records; small models; MoE; Blackwell runs of other labs), predicted with the shipped constants
as `meshplan validate --records held-out` predicts them. Prints per file and per regime the error
of tokens/s per GPU and how many measured values fall inside their p10-p90 band (meshplan.bands),
in and out of the calibrated regimes, and every record by |error|. Saves the figures the docs
quote to benchmarks/results/training_holdout.json.
Run: python benchmarks/training_holdout.py"""

from __future__ import annotations

import os
import statistics
import time

from meshplan.bands.band import _data as band_data
from meshplan.records import SETS
from meshplan.validate.records import load_records
from meshplan.validate.run import error_stats, predict

import readme_blocks  # benchmarks/readme_blocks.py


def coverage(rows) -> dict:
    """Measured values inside their band: all rows, rows in regime, rows extrapolating."""
    def share(sub):
        inside = sum(r.low <= r.measured <= r.high for r in sub)
        return {"n": len(sub), "inside": inside, "share": inside / len(sub) if sub else None}
    return {"all": share(rows), "in_regime": share([r for r in rows if not r.extrapolating]),
            "extrapolating": share([r for r in rows if r.extrapolating])}


def file_figures(records, workers: int) -> tuple[dict, list]:
    rows, skips = predict(records, workers=workers)
    tokens = [r for r in rows if r.metric == "tokens_per_s_per_gpu"]
    errs = [r.rel_error for r in tokens]
    figures = {"records": len({r.id for r in rows}) + len(skips), "skipped": len(skips),
               "summary": error_stats(errs), "signed_median": statistics.median(errs),
               "band": coverage(tokens)}
    return figures, tokens


def main() -> None:
    start = time.perf_counter()
    workers = min(2, os.cpu_count() or 1)
    files, every = {}, []
    for path in SETS["held-out"]:
        records = [r for r in load_records(path) if r.kind == "training"]
        if not records:  # a serving file: benchmarks/serving_holdout.py
            continue
        figures, tokens = file_figures(records, workers)
        files[path.stem], every = figures, every + tokens
        s, band = figures["summary"], figures["band"]
        print(f"{path.name}: {s['n']} tokens/s values, median |err| {s['median_abs_rel_error']:.1%}, "
              f"p90 {s['p90_abs_rel_error']:.1%}, signed median {figures['signed_median']:+.1%}; "
              f"inside p10-p90: {band['all']['inside']} of {band['all']['n']} "
              f"({band['in_regime']['inside']} of {band['in_regime']['n']} in regime, "
              f"{band['extrapolating']['inside']} of {band['extrapolating']['n']} extrapolating)")
    print("every record by |error| (positive: the model is too fast; * extrapolating):")
    for r in sorted(every, key=lambda r: -abs(r.rel_error)):
        inside = "in band " if r.low <= r.measured <= r.high else "outside"
        print(f"  {r.rel_error:+7.1%} {inside} {'*' if r.extrapolating else ' '} {r.id}")
    total = error_stats([r.rel_error for r in every])
    loso = band_data()["fit"]["coverage"]
    readme_blocks.save("training_holdout", {"records": sum(f["records"] for f in files.values()),
                                            "summary": total, "band": coverage(every),
                                            "calibration_band_coverage": loso, "files": files})
    print(f"all held-out: median |err| {total['median_abs_rel_error']:.1%}; leave-one-source-out "
          f"band coverage on the calibration set: {loso} ({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
