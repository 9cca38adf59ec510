"""Split the P99 latency errors of a `meshplan validate --json` report into the operating point
(the error of the mean) and the shape of the tail (the error of P99 / mean), per latency.

A P99 that comes out low can mean a missing tail mechanism (the shape is wrong) or a run at the
wrong point of its latency curve (the mean is wrong by as much); near capacity the second
dominates (docs/serving/simulation.md, "Tail latency under load"). With `--records FILE
--sustained K`, only records whose predicted P99 TTFT stays within K times the record's P99 TTFT
limit (`serving.slo.ttft_ms`) count: the runs the simulation sustains.

Run: meshplan validate FILE --json > report.json
     python scripts/tail_shape.py report.json [--records FILE --sustained 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

from meshplan.validate.records import load_records

LATENCIES = ("ttft", "tpot")
Pairs = dict[str, dict[str, tuple[float, float]]]
"""record id -> metric -> (measured, predicted)."""


def pairs(report: dict) -> Pairs:
    """Measured and predicted value of every metric of every record in a validate report."""
    out: Pairs = {}
    for row in report["records"]:
        if row.get("predicted") is not None and row.get("measured"):
            out.setdefault(row["id"], {})[row["metric"]] = (row["measured"], row["predicted"])
    return out


def _errors(values: Pairs, ids: list[str], latency: str) -> dict[str, list[float]]:
    """Relative errors of the mean, the P99 and the P99/mean ratio of one latency."""
    mean, p99 = f"{latency}_ms_mean", f"{latency}_ms_p99"
    out: dict[str, list[float]] = {"mean": [], "p99": [], "shape": []}
    for i in ids:
        row = values[i]
        if mean not in row or p99 not in row:
            continue
        (m_mean, p_mean), (m_p99, p_p99) = row[mean], row[p99]
        out["mean"].append(p_mean / m_mean - 1)
        out["p99"].append(p_p99 / m_p99 - 1)
        out["shape"].append((p_p99 / p_mean) / (m_p99 / m_mean) - 1)
    return out


def decompose(values: Pairs, ids: list[str] | None = None) -> dict[str, dict[str, float]]:
    """Per latency and part (mean, p99, shape): n, median |error| and median signed error."""
    ids = sorted(values) if ids is None else ids
    table = {}
    for latency in LATENCIES:
        for part, errs in _errors(values, ids, latency).items():
            if errs:
                table[f"{latency} {part}"] = {"n": len(errs),
                                              "median_abs": statistics.median(abs(e) for e in errs),
                                              "median_signed": statistics.median(errs)}
    return table


def sustained(values: Pairs, limits_ms: dict[str, float], k: float) -> list[str]:
    """Records whose predicted P99 TTFT is at most `k` times their P99 TTFT limit."""
    return sorted(i for i, row in values.items()
                  if i in limits_ms and "ttft_ms_p99" in row and row["ttft_ms_p99"][1] <= k * limits_ms[i])


def ttft_limits(path: Path) -> dict[str, float]:
    """The P99 TTFT limit of every record of a records file that states one."""
    return {r.id: r.serving.slo.ttft_ms for r in load_records(path)
            if r.serving is not None and r.serving.slo is not None and r.serving.slo.ttft_ms}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("report", type=Path, help="output of meshplan validate --json")
    parser.add_argument("--records", type=Path, help="the records file validated (for the TTFT limits)")
    parser.add_argument("--sustained", type=float, help="keep records with predicted P99 TTFT <= this x limit")
    args = parser.parse_args(argv)
    values = pairs(json.loads(args.report.read_text()))
    ids = None
    if args.sustained is not None:
        if args.records is None:
            parser.error("--sustained needs --records (the file holding each record's P99 TTFT limit)")
        ids = sustained(values, ttft_limits(args.records), args.sustained)
    for name, row in decompose(values, ids).items():
        print(f"{name:12s} n={row['n']:4d}  median |err| {row['median_abs']:.3f}  signed {row['median_signed']:+.3f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
