"""Write src/meshplan/bands/data/residuals.yaml: the residuals and constants of the prediction
bands (meshplan.bands).

- throughput: every training calibration record's log(predicted / measured) tokens/s per GPU,
  predicted by constants refitted without the record's source (warm-started from the shipped
  constants, a few Gauss-Newton steps per source, as `meshplan calibrate --loso` does), with the
  regime of its resolved plan;
- memory: log(predicted / measured) peak memory of the records that measured it (the memory
  model has no fitted constant, so in-sample is out-of-sample);
- inflation: the stretch of the weighted p10-p90 that puts 80% of records inside their band
  when each record's band is built from the other sources' residuals alone;
- tie_gap: the median |difference| of residuals between two layouts of one model on one GPU
  type and count from one source.

Run after refitting the training constants: python scripts/fit_bands.py (about 5 minutes).
"""

from __future__ import annotations

import datetime
import itertools
import math
import statistics
import sys
from pathlib import Path

import yaml

from meshplan.calibration import training as cal
from meshplan.bands.band import Residual, residual_range
from meshplan.bands.regime import regime_of
from meshplan.records import CALIBRATION
from meshplan.training import estimate_memory, resolve_plan
from meshplan.training.time.constants import _fitted
from meshplan.validate.records import load_records
from meshplan.validate.training_records import training_case

OUT = Path(__file__).resolve().parents[1] / "src" / "meshplan" / "bands" / "data" / "residuals.yaml"
TARGET = 0.80


def source(record) -> str:
    return record.source.get("name", "?")


def throughput_rows(cases, table) -> list[dict]:
    """Leave-one-source-out residuals with each record's regime."""
    rows = []
    for name in sorted({source(c.record) for c in cases}):
        held = [c for c in cases if source(c.record) == name]
        refit = cal.fit([c for c in cases if source(c.record) != name], max_nfev=4, start_from=table)
        for c in held:
            residual = math.log(cal.predict(c, refit) / c.measured)
            rows.append(row(c.record, regime_of(c.model, c.cluster, c.plan), residual))
        print(f"  {len(held):3d} records left out: {name[:80]}", flush=True)
    return rows


def memory_rows(records) -> list[dict]:
    rows = []
    for record in records:
        if record.kind != "training" or not record.measured.peak_memory_gib:
            continue
        case = training_case(record)
        plan = resolve_plan(case.plan, case.model, case.cluster)
        predicted = estimate_memory(case.model, case.cluster, plan).peak_stage.allocator_bytes / 2**30
        rows.append(row(record, regime_of(case.model, case.cluster, plan),
                        math.log(predicted / record.measured.peak_memory_gib)))
    return rows


def row(record, regime, residual: float) -> dict:
    return {"id": record.id, "source": source(record), **regime.to_dict(), "residual": round(residual, 5)}


def as_residuals(rows) -> list[tuple[dict, Residual]]:
    from meshplan.bands.regime import Regime

    names = Regime.__dataclass_fields__
    return [(r, Residual(Regime(**{k: v for k, v in r.items() if k in names}), r["residual"])) for r in rows]


def coverage(rows, inflation: float, span_rows=None) -> float:
    """Share of records inside the band built from the other sources' residuals, as a new
    source would see it: out of regime where the other sources' records of `span_rows`
    (default: `rows`) end."""
    pairs = as_residuals(rows)
    span_pairs = as_residuals(span_rows) if span_rows else pairs
    inside = 0
    for r, res in pairs:
        others = [o for q, o in pairs if q["source"] != r["source"]]
        span = [o for q, o in span_pairs if q["source"] != r["source"]]
        low, high, _ = residual_range(res.regime, others, inflation, span)
        inside += low <= res.residual <= high
    return inside / len(pairs)


def fit_inflation(rows, span=None) -> float:
    """The smallest stretch (to 0.01) whose leave-one-source-out coverage reaches TARGET."""
    low, high = 0.5, 4.0
    while high - low > 0.01:
        mid = (low + high) / 2
        low, high = (low, mid) if coverage(rows, mid, span) >= TARGET else (mid, high)
    return round(high, 2)


def tie_gap(rows, records) -> float:
    key = {r.id: (source(r), str(r.model), r.hardware.gpu, r.hardware.num_gpus) for r in records}
    gaps = [abs(a["residual"] - b["residual"]) for a, b in itertools.combinations(rows, 2)
            if key[a["id"]] == key[b["id"]]]
    return round(statistics.median(gaps), 4)


def main() -> None:
    records = load_records(CALIBRATION["training"])
    table = {k: v for k, v in _fitted().items() if k != "fit"}
    cases = cal.prepare(records)
    print(f"throughput: {len(cases)} records, leave-one-source-out", flush=True)
    throughput = throughput_rows(cases, table)
    memory = memory_rows(records)
    inflation = {"throughput": fit_inflation(throughput), "memory": fit_inflation(memory, throughput)}
    doc = {"schema": 1,
           "fit": {"date": datetime.date.today().isoformat(),
                   "constants_fitted": _fitted()["fit"]["date"], "records": CALIBRATION["training"].name,
                   "coverage": {"throughput": round(coverage(throughput, inflation["throughput"]), 3),
                                "memory": round(coverage(memory, inflation["memory"], throughput), 3)}},
           "inflation": inflation, "tie_gap": tie_gap(throughput, records),
           "throughput": throughput, "memory": memory}
    header = ("# Generated by scripts/fit_bands.py; read by meshplan.bands. Residual = log(predicted / measured),\n"
              "# each throughput record predicted by constants fitted without its source.\n")
    OUT.write_text(header + yaml.safe_dump(doc, sort_keys=False, width=200))
    print(f"inflation {inflation}, coverage {doc['fit']['coverage']}, tie gap {doc['tie_gap']} -> {OUT}")


if __name__ == "__main__":
    sys.exit(main())
