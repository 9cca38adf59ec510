"""Predicted peak memory against the training records that measured it (the allocator peak, as the
sources' tools report it), with the plan resolved as `train memory` resolves it. Prints the table,
saves it to benchmarks/results/memory_accuracy.json and re-renders the page block that quotes it.
tests/test_memory_records.py holds the same rows to a bound. Run: python benchmarks/memory_accuracy.py"""

from __future__ import annotations


from meshplan.records import CALIBRATION
from meshplan.validate.memory_records import memory_rows
from meshplan.validate.records import load_records
from meshplan.validate.run import error_stats

import readme_blocks  # benchmarks/readme_blocks.py

RECORDS = CALIBRATION["training"]


def main() -> None:
    rows = memory_rows(load_records(RECORDS))
    print(f"{'record':58s} {'measured':>9s} {'predicted':>9s} {'error':>7s}")
    for r in rows:
        measured = f"{r.measured_gib:9.1f}" if r.measured_gib else f"{'oom' if r.measured_oom else '-':>9s}"
        error = f"{r.rel_error:+7.1%}" if r.rel_error is not None else ""
        print(f"{r.id[:58]:58s} {measured} {r.predicted_gib:9.1f} {error}")
    stats = error_stats([r.rel_error for r in rows if r.rel_error is not None])
    print(f"median |err| {stats['median_abs_rel_error']:.1%}, p90 |err| {stats['p90_abs_rel_error']:.1%}")
    readme_blocks.save("memory_accuracy", {
        "rows": [{"label": f"`{r.id}`", "measured_gib": r.measured_gib, "predicted_gib": r.predicted_gib,
                  "rel_error": r.rel_error, "measured_oom": r.measured_oom, "predicted_fits": r.predicted_fits}
                 for r in rows],
        "median_abs_rel_error": stats["median_abs_rel_error"],
        "p90_abs_rel_error": stats["p90_abs_rel_error"],
        "oom_predicted": sum(bool(r.measured_oom) and not r.predicted_fits for r in rows),
    })


if __name__ == "__main__":
    main()
