"""Generalisation of the step-time model on held-out runs: Megatron-Bridge pre-training rows
(NeMo 26.02, 25.11, 25.09) that are not in the calibration file, predicted with the shipped
constants. Prints overall, per-GPU and per-precision error and every record by |error|.
On the default file, saves the summary the docs quote to benchmarks/results/training_holdout.json.
Run: python benchmarks/training_holdout.py [RECORDS.yaml]"""

from __future__ import annotations

import statistics
import sys
import time
from pathlib import Path

from meshplan.calibration import training as cal
from meshplan.records import HELD_OUT
from meshplan.training.time.constants import _fitted
from meshplan.validate.records import load_records
from meshplan.validate.run import error_stats

import readme_blocks  # benchmarks/readme_blocks.py

HOLDOUT = HELD_OUT / "megatron-bridge.yaml"


def grouped(title: str, keyed: list[tuple[str, float]]) -> None:
    """Median |err|, signed median and count of each group."""
    print(f"by {title} (median |err|, signed median, n):")
    for key in sorted({k for k, _ in keyed}):
        errs = [e for k, e in keyed if k == key]
        s = error_stats(errs)
        print(f"  {key:16s} {s['median_abs_rel_error']:6.1%}  {statistics.median(errs):+7.1%}  n={s['n']}")


def main() -> None:
    start = time.perf_counter()
    path = Path(sys.argv[1]) if len(sys.argv) > 1 else HOLDOUT
    records = load_records(path)
    cases = cal.prepare(records)
    errs = cal.errors(cases, _fitted())
    s = error_stats(errs)
    print(f"{path.name}: {len(records)} records, {s['n']} predicted (tokens/s per GPU, shipped "
          f"constants): median |err| {s['median_abs_rel_error']:.1%}, p90 |err| {s['p90_abs_rel_error']:.1%}")
    grouped("GPU", [(c.record.hardware.gpu, e) for c, e in zip(cases, errs)])
    grouped("precision", [(c.record.training.precision, e) for c, e in zip(cases, errs)])
    print("every record by |error| (positive: the model is too fast):")
    for e, c in sorted(zip(errs, cases), key=lambda x: -abs(x[0])):
        p = c.plan
        print(f"  {e:+7.1%}  {c.record.id:48s} measured {c.measured:>7g}  tp{p.tp} pp{p.pp} vpp{p.vpp} "
              f"cp{p.cp} ep{p.ep} mbs{p.micro_batch_size}")
    if path == HOLDOUT:
        readme_blocks.save("training_holdout", {"records": len(records), "summary": s})
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
