"""`meshplan validate`: predict every record's measured quantities and report the errors."""

from __future__ import annotations

import statistics
from dataclasses import asdict, dataclass

from meshplan.bands.serving import VALIDATE_METRICS, band
from meshplan.bands.serving_regime import serving_regime_of
from meshplan.bands.training import estimate_bands
from meshplan.errors import ConfigError
from meshplan.training.choose import best_plan
from meshplan.validate.schema import Record
from meshplan.validate.serving_records import (
    SERVING_METRICS,
    predict_serving,
    serving_case,
)
from meshplan.validate.training_records import training_case

GIB = 2**30
TRAINING_METRICS = ("tokens_per_s_per_gpu", "step_time_s", "peak_memory_gib")


@dataclass(frozen=True, slots=True)
class Row:
    """One measured metric of one record, predicted."""

    id: str
    kind: str
    metric: str
    measured: float
    predicted: float
    rel_error: float
    low: float | None = None
    """The prediction's p10-p90 band (meshplan.bands), or None."""
    high: float | None = None
    extrapolating: tuple[str, ...] = ()
    """Why the record lies outside what the calibration records span (empty when inside)."""
    notes: tuple[str, ...] = ()
    """What meshplan chose because the record did not say (a serving layout, an engine release)."""


@dataclass(frozen=True, slots=True)
class Skip:
    """A record meshplan could not predict, and why."""

    id: str
    reason: str


def training_rows(record: Record) -> list[Row]:
    """Rows for one training record's measured throughput, step time and peak memory."""
    case = training_case(record)
    est = best_plan(case.plan, case.model, case.cluster, open_layout=case.open_layout)
    predicted = {"tokens_per_s_per_gpu": est.tokens_per_s_per_gpu,
                 "step_time_s": est.step_time_s,
                 "peak_memory_gib": est.memory.peak_stage.allocator_bytes / GIB}
    bands = estimate_bands(case.model, case.cluster, est)
    band = {"tokens_per_s_per_gpu": bands.tokens_per_s_per_gpu, "step_time_s": bands.step_time_s,
            "peak_memory_gib": bands.peak_bytes.scaled(predicted["peak_memory_gib"] / est.memory.peak_bytes)}
    rows = []
    for metric in TRAINING_METRICS:
        measured = getattr(record.measured, metric)
        if measured:
            value = predicted[metric]
            rows.append(Row(record.id, "training", metric, measured, value, value / measured - 1,
                            band[metric].low, band[metric].high, bands.extrapolating))
    return rows


def serving_rows(record: Record) -> list[Row]:
    """Rows for one serving record's measured throughputs and latencies (simulated)."""
    measured = {k: getattr(record.measured, k) for k in SERVING_METRICS}
    if not any(measured.values()):
        raise ConfigError("the record measures only max_request_rate_under_slo, which needs "
                          "the capacity search (serve plan), not one simulation")
    case = serving_case(record)
    predicted = predict_serving(case)
    if all(v != v for v in predicted.values()):  # NaN everywhere: not one request finished
        raise ConfigError(f"the simulated engine finished none of the {len(case.workload.requests)} "
                          "requests (its scheduler stalled), so no metric can be compared")
    regime = serving_regime_of(case.model, case.cluster, case.plan, case.workload)
    rows = []
    for k, v in measured.items():
        if v and predicted[k] == predicted[k]:
            metric, stat = VALIDATE_METRICS[k]
            b = band(regime, metric, predicted[k], stat)
            rows.append(Row(record.id, "serving", k, v, predicted[k], predicted[k] / v - 1,
                            b.low, b.high, b.extrapolating, notes=case.notes))
    return rows


MAX_WORKERS = 32
"""Most processes validate forks, whatever --workers asks (one per record at most)."""


def record_rows(record: Record) -> list[Row] | Skip:
    """The rows of one record, or why it cannot be predicted."""
    try:
        return serving_rows(record) if record.kind == "serving" else training_rows(record)
    except ConfigError as exc:
        return Skip(record.id, f"plan not representable: {exc}")


def predict(records: list[Record], progress=None, workers: int = 1) -> tuple[list[Row], list[Skip]]:
    """Rows for every record meshplan can represent; skips with a specific reason otherwise.
    `progress(done, total)` hears of each record. With `workers` > 1 the records are predicted
    in that many forked processes (each record is independent; results keep the input order)."""
    if workers > 1 and len(records) > 1:
        results = _in_processes(records, progress, workers)
    else:
        results = []
        for done, record in enumerate(records):
            if progress is not None:
                progress(done, len(records))
            results.append(record_rows(record))
    rows = [row for r in results if not isinstance(r, Skip) for row in r]
    return rows, [r for r in results if isinstance(r, Skip)]


def _in_processes(records: list[Record], progress, workers: int) -> list:
    """record_rows over forked workers (fork keeps the active site profile and warm caches)."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    results: list = [None] * len(records)
    workers = min(workers, len(records), MAX_WORKERS)
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("fork")) as pool:
        futures = {pool.submit(record_rows, r): i for i, r in enumerate(records)}
        for done, future in enumerate(as_completed(futures)):
            if progress is not None:
                progress(done, len(records))
            results[futures[future]] = future.result()
    return results


def error_stats(rel_errors: list[float]) -> dict:
    """Count, median and p90 of absolute relative errors."""
    errors = sorted(abs(e) for e in rel_errors)
    if not errors:
        return {"n": 0, "median_abs_rel_error": None, "p90_abs_rel_error": None}
    p90 = errors[min(len(errors) - 1, int(round(0.9 * (len(errors) - 1))))]
    return {"n": len(errors), "median_abs_rel_error": statistics.median(errors),
            "p90_abs_rel_error": p90}


def stats_line(s: dict) -> str:
    """`n=.. median |err| ..  p90 |err| ..` of one error_stats dict ("no rows" when empty)."""
    if not s["n"]:
        return "no rows"
    return (f"n={s['n']}  median |err| {s['median_abs_rel_error']:.1%}  "
            f"p90 |err| {s['p90_abs_rel_error']:.1%}")


def _stats(rows: list[Row]) -> dict:
    return error_stats([r.rel_error for r in rows])


def summary(rows: list[Row]) -> dict:
    """Overall and per-kind (and per-metric) error statistics."""
    out = _stats(rows)
    out["by_kind"] = {k: _stats([r for r in rows if r.kind == k]) for k in sorted({r.kind for r in rows})}
    out["by_metric"] = {m: _stats([r for r in rows if r.metric == m])
                        for m in sorted({r.metric for r in rows})}
    return out


def _row_dict(row: Row) -> dict:
    """A row as JSON; `notes` only when there are some."""
    d = asdict(row)
    if not d["notes"]:
        del d["notes"]
    return d


def report(rows: list[Row], skips: list[Skip]) -> dict:
    """The `validate --json` object of SCHEMA.md."""
    return {"records": [_row_dict(r) for r in rows], "skipped": [asdict(s) for s in skips],
            "summary": summary(rows)}
