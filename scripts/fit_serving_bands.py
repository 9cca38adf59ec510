"""Write src/meshplan/bands/data/serving_residuals.yaml: the residuals and constants of the
serving prediction bands (meshplan.bands.serving).

- calibration records: every measured metric's log(predicted / measured), each source's records
  predicted by engine constants refitted without that source (warm-started from the shipped fit,
  a few steps per source, as `meshplan calibrate --records serving --loso` does);
- held-out records (records/held-out/*.yaml, serving): log(predicted / measured) with the shipped
  constants, which never saw them;
- each with the regime of its plan and workload, pooled by quantity (bands.serving.kind_of);
- inflation: per quantity, the stretch of the weighted p10-p90 that puts 80% of that quantity's
  records inside their band when each band is built from the other sources' residuals alone.

Run after refitting the serving constants or adding serving records:
python scripts/fit_serving_bands.py (the refits take about as long as `calibrate --loso`; see
--help for reusing saved calibration rows and a held-out `validate --json` report).
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import sys
from pathlib import Path

import yaml

from meshplan.bands.serving import KINDS, PREFERENCE, VALIDATE_METRICS, inside_leaving_sources_out, kind_of
from meshplan.bands.serving_regime import serving_regime_of
from meshplan.calibration import serving as cs
from meshplan.errors import ConfigError
from meshplan.records import CALIBRATION, SETS
from meshplan.serving.cost.constants import packaged_fit
from meshplan.validate.records import load_records
from meshplan.validate.serving_records import SERVING_METRICS, predict_serving, serving_case

OUT = Path(__file__).resolve().parents[1] / "src" / "meshplan" / "bands" / "data" / "serving_residuals.yaml"
TARGET = 0.80


def source(record) -> str:
    return record.source.get("key") or record.source.get("name", "?")


def row(record, case, metric: str, residual: float) -> dict:
    regime = serving_regime_of(case.model, case.cluster, case.plan, case.workload)
    return {"id": record.id, "source": source(record), "metric": metric, **regime.to_dict(),
            "residual": round(residual, 5)}


def calibration_rows(loso: bool = True) -> list[dict]:
    """Residuals of the calibration records: leave-one-source-out, or (`loso` False, a quick
    look only) with the shipped constants fitted on them all."""
    cases = cs.prepare(load_records(CALIBRATION["serving"]))
    print(f"calibration: {len(cases)} records, {'leave-one-source-out' if loso else 'in-sample'}", flush=True)
    errors = cs.leave_one_source_out(cases, packaged_fit()) if loso else cs.errors(cases, {})
    return [row(fc.record, fc.case, metric, math.log1p(err)) for fc, metric, err in errors if err > -1]


def held_out_rows(report: dict | None = None) -> list[dict]:
    """Residuals of the held-out serving records; predictions simulated here, or read from the
    `validate --json` report of the same files when one is given (same code, minutes saved)."""
    given = {(r["id"], r["metric"]): r["predicted"] for r in report["records"]} if report else None
    rows = []
    for path in SETS["held-out"]:
        records = [r for r in load_records(path) if r.kind == "serving"]
        for record in records:
            measured = {k: getattr(record.measured, k) for k in SERVING_METRICS if getattr(record.measured, k)}
            try:
                case = serving_case(record)
                predicted = ({m: given.get((record.id, m), math.nan) for m in measured} if given is not None
                             else predict_serving(case))
            except ConfigError as exc:
                print(f"  skipped {record.id}: {exc}", flush=True)
                continue
            keep = measured if sustained(record, measured, predicted) else {
                m: v for m, v in measured.items() if kind_of(*VALIDATE_METRICS[m]) == "throughput"}
            rows += [row(record, case, m, math.log(predicted[m] / v)) for m, v in keep.items()
                     if predicted[m] == predicted[m] and predicted[m] > 0]
        print(f"held out: {path.name}: {len(records)} serving records", flush=True)
    return rows


SUSTAINED = 0.97
"""A timed run whose simulated deployment serves less than this share of the published rate
does not sustain it: its simulated queue grows for as long as the run is simulated, so its
latencies measure the run's length. Their residuals are left out of the latency pools (the
throughput pool keeps the shortfall)."""


def sustained(record, measured: dict, predicted: dict) -> bool:
    if record.serving.workload.mode not in ("poisson", "gamma"):
        return True
    for metric in ("requests_per_s", "output_tokens_per_s"):
        if metric in measured:
            return predicted[metric] >= SUSTAINED * measured[metric]
    return True


def coverage(rows: list[dict], inflation: float) -> float:
    """Share of rows inside the band built from the other sources' residuals of the same pool."""
    inside = inside_leaving_sources_out(rows, inflation)
    return sum(inside) / len(inside)


def fit_inflation(rows: list[dict]) -> float:
    """The smallest stretch (to 0.01) whose leave-one-source-out coverage reaches TARGET."""
    low, high = 0.3, 6.0
    while high - low > 0.01:
        mid = (low + high) / 2
        low, high = (low, mid) if coverage(rows, mid) >= TARGET else (mid, high)
    return round(high, 2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--held-out-json", type=Path, help="`meshplan validate --records held-out --json` "
                        "output to take the held-out predictions from")
    parser.add_argument("--calibration-rows", type=Path, help="calibration residual rows saved by an "
                        "earlier run (--save-calibration-rows), instead of refitting")
    parser.add_argument("--save-calibration-rows", type=Path, help="save the calibration rows here")
    parser.add_argument("--in-sample", action="store_true", help="calibration residuals with the shipped "
                        "constants instead of refitted ones (a quick look: the bands come out too narrow)")
    args = parser.parse_args()
    if args.calibration_rows:
        calibration = json.loads(args.calibration_rows.read_text())
    else:
        calibration = calibration_rows(loso=not args.in_sample)
        if args.save_calibration_rows:
            args.save_calibration_rows.write_text(json.dumps(calibration))
    report = json.loads(args.held_out_json.read_text()) if args.held_out_json else None
    rows = calibration + held_out_rows(report)
    kinds = {k: [] for k in KINDS}
    seen = set()
    for r in sorted(rows, key=lambda r: PREFERENCE.index(r["metric"])):
        kind = kind_of(*VALIDATE_METRICS[r["metric"]])
        if (r["id"], kind) not in seen:  # one value per record and quantity
            seen.add((r["id"], kind))
            kinds[kind].append(r)
    inflation = {k: fit_inflation(v) if len({r["source"] for r in v}) > 1 else 1.0 for k, v in kinds.items()}
    doc = {"schema": 1,
           "fit": {"date": datetime.date.today().isoformat(),
                   "constants_fitted": _fit_date(),
                   "calibration_residuals": "in-sample" if args.in_sample else "leave-one-source-out",
                   "records": [CALIBRATION["serving"].name, *(p.name for p in SETS["held-out"])],
                   "rows": {k: len(v) for k, v in kinds.items()},
                   "coverage": {k: round(coverage(v, inflation[k]), 3) for k, v in kinds.items() if v}},
           "inflation": inflation, "kinds": kinds}
    fold = ("with the shipped constants (in-sample)" if args.in_sample else
            "by constants fitted without their source")
    header = ("# Generated by scripts/fit_serving_bands.py; read by meshplan.bands.serving. Residual =\n"
              f"# log(predicted / measured): calibration records predicted {fold},\n"
              "# held-out records by the shipped constants (which never saw them).\n")
    OUT.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=200))
    print(f"inflation {inflation}, coverage {doc['fit']['coverage']} -> {OUT}")


def _fit_date() -> str:
    from meshplan.serving.cost.constants import _read

    return str(_read("fitted_serving.yaml").get("fit", {}).get("date", "?"))


if __name__ == "__main__":
    sys.exit(main())
