"""Accuracy of the step-time model on the calibration records: in-sample, leave-one-source-out,
and the ten worst records. Run: python benchmarks/training_accuracy.py [--loso]"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from meshplan import calibrate as cal
from meshplan.training.constants import _fitted
from meshplan.validate.records import load_records

RECORDS = Path(__file__).resolve().parents[1].parent / "shared" / "run-records" / "training-calibration.yaml"


def main() -> None:
    start = time.perf_counter()
    cases = cal.prepare(load_records(RECORDS))
    table = _fitted()
    errs = cal.errors(cases, table)
    s = cal.summarize(errs)
    print(f"tokens/s per GPU, {s['n']} records, shipped constants: median |err| "
          f"{s['median_abs_rel_error']:.1%}, p90 |err| {s['p90_abs_rel_error']:.1%}")
    print("worst ten:")
    for e, c in sorted(zip(errs, cases), key=lambda x: -abs(x[0]))[:10]:
        p = c.plan
        print(f"  {e:+7.1%}  {c.record.id:58s} {c.cluster.gpu.name} {p.framework} "
              f"tp{p.tp} pp{p.pp} vpp{p.vpp} cp{p.cp} ep{p.ep} mbs{p.micro_batch_size}")
    if "--loso" in sys.argv:
        folds = cal.leave_one_source_out(cases, table)
        all_errs = [e for v in folds.values() for e in v]
        s = cal.summarize(all_errs)
        print(f"leave-one-source-out: median |err| {s['median_abs_rel_error']:.1%}, "
              f"p90 |err| {s['p90_abs_rel_error']:.1%}")
        for source, v in folds.items():
            print(f"  {cal.summarize(v)['median_abs_rel_error']:6.1%}  n={len(v):3d}  {source[:70]}")
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
