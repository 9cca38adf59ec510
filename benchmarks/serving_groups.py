"""Serving accuracy per engine and GPU generation (issue #32): for each quantity (throughput,
TTFT, TPOT and their tails), the error of three kinds of prediction side by side:

- in-sample: the calibration records predicted by the shipped constants, fitted on them;
- leave-one-source-out: the same records, each source predicted by constants refitted without it
  (the calibration rows of bands/data/serving_residuals.yaml, written by
  scripts/fit_serving_bands.py);
- held-out: the held-out records (records/held-out/), which the fit never reads, predicted by the
  shipped constants (the other rows of that file).

Pure grouping and statistics; serving_accuracy.py feeds it and saves what it returns. A row is a
dict with the record's id, the measured metric's key (ttft_ms_p99, output_tokens_per_s, ...), the
regime's engine and architecture (GPU generation) and the relative error predicted / measured - 1.
"""

from __future__ import annotations

import math
import statistics
from collections import defaultdict

from meshplan.bands.serving import KINDS, PREFERENCE, VALIDATE_METRICS, kind_of
from meshplan.validate.run import error_stats

SETS = ("in_sample", "loso", "held_out")
"""The three kinds of prediction, in the order the table shows them."""
ALL = "all"
"""The group of every engine and GPU generation."""


def quantity(metric: str) -> str:
    """The quantity (bands.serving.KINDS) a measured metric's key reports: output_tokens_per_s ->
    throughput, ttft_ms_p50 -> ttft, itl_ms_p50 -> tpot, tpot_ms_p99 -> tpot_tail."""
    return kind_of(*VALIDATE_METRICS[metric])


def one_per_record(rows: list[dict]) -> list[dict]:
    """One value per record and quantity, chosen as the bands' pools choose it (PREFERENCE), so
    a run publishing a mean and a median, or tokens/s and requests/s, counts once."""
    seen, out = set(), []
    for r in sorted(rows, key=lambda r: PREFERENCE.index(r["metric"])):
        key = (r["id"], quantity(r["metric"]))
        if key not in seen:
            seen.add(key)
            out.append(r)
    return out


def residual_rows(kinds: dict[str, list[dict]], calibration_ids: set[str]) -> dict[str, list[dict]]:
    """The residual file's rows (log(predicted / measured) per pool) as error rows: those of
    calibration records are leave-one-source-out, the others held-out."""
    out = {"loso": [], "held_out": []}
    for rows in kinds.values():
        for r in rows:
            which = "loso" if r["id"] in calibration_ids else "held_out"
            out[which].append({"id": r["id"], "metric": r["metric"], "engine": r["engine"],
                               "architecture": r["architecture"], "error": math.expm1(r["residual"])})
    return out


def cell(errors: list[float]) -> dict:
    """n, median and p90 of |error|, and the signed median (positive: predicted too high)."""
    if not errors:
        return {"n": 0}
    return {**error_stats(errors), "signed_median": statistics.median(errors)}


def group_of(row: dict) -> str:
    return f"{row['engine']}, {row['architecture']}"


def table(sets: dict[str, list[dict]]) -> dict[str, dict[str, dict[str, dict]]]:
    """group ('engine, generation' and 'all') -> quantity -> set (SETS) -> cell; quantities and
    sets no record of the group publishes are absent."""
    errors: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for name in SETS:
        for r in one_per_record(sets.get(name, [])):
            q = quantity(r["metric"])
            errors[group_of(r)][q][name].append(r["error"])
            errors[ALL][q][name].append(r["error"])
    return {g: {q: {s: cell(v) for s, v in by_set.items()} for q, by_set in sorted(by_q.items(), key=_kind_order)}
            for g, by_q in sorted(errors.items())}


def metrics_of(sets: dict[str, list[dict]]) -> dict[str, list[str]]:
    """quantity -> the measured keys its values come from (does 'TTFT tail' mean p99 or p90?)."""
    out = defaultdict(set)
    for rows in sets.values():
        for r in one_per_record(rows):
            out[quantity(r["metric"])].add(r["metric"])
    return {q: sorted(v) for q, v in out.items()}


def _kind_order(item) -> int:
    return KINDS.index(item[0])
