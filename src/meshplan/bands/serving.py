"""The p10-p90 bands of serving predictions (throughput, TTFT, TPOT and their tails).

The same machinery as training's (band.residual_range): a residual is log(predicted / measured)
of one published serving metric, from two kinds of records neither of which the predicting
constants saw: the serving calibration records, each source predicted by constants refitted
without it (leave-one-source-out), and the held-out records, which the fit never reads. Each
quantity has its own pool of residuals: throughput, TTFT and TPOT (means and medians), and the
tails (p90, p99) of TTFT and TPOT, which queueing and scheduling move differently. The pools and
their fitted stretch come from `scripts/fit_serving_bands.py` (data/serving_residuals.yaml).
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources

from meshplan.bands.band import Band, Residual, residual_range
from meshplan.bands.regime import Span, span_of
from meshplan.bands.serving_regime import ServingRegime, serving_regime_of
from meshplan.yamlread import load_packaged

KINDS = ("throughput", "ttft", "ttft_tail", "tpot", "tpot_tail")
FALLBACK = {"ttft_tail": "ttft", "tpot_tail": "tpot", "ttft": "throughput", "tpot": "throughput"}
"""The pool a quantity borrows when its own has fewer than MIN_POOL residuals."""
MIN_POOL = 10
LABEL = {"throughput": "throughput", "ttft": "TTFT", "ttft_tail": "TTFT tail percentiles",
         "tpot": "TPOT", "tpot_tail": "TPOT tail percentiles"}

LATENCIES = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")
THROUGHPUTS = ("output_tokens_per_s", "total_tokens_per_s", "input_tokens_per_s", "requests_per_s")
STATS = ("mean", "p50", "p90", "p99")


def kind_of(metric: str, stat: str | None = None) -> str:
    """The residual pool of a metric: a throughput, or a latency (ttft_ms, tpot_ms, itl_ms,
    e2e_ms) at a statistic. ITL and E2E use TPOT's pools (decode sets both for outputs of more
    than a few tokens); p90 and p99 use the tail pools."""
    if metric in THROUGHPUTS:
        return "throughput"
    base = "ttft" if metric == "ttft_ms" else "tpot"
    return f"{base}_tail" if stat in ("p90", "p99") else base


VALIDATE_METRICS = {**{m: (m, None) for m in THROUGHPUTS},
                    **{f"{lat}_{stat}": (lat, stat) for lat in LATENCIES for stat in STATS}}
"""A run record's measured key -> (metric, statistic) (itl_ms_p50 -> ("itl_ms", "p50"))."""

PREFERENCE = ("output_tokens_per_s", "total_tokens_per_s", "input_tokens_per_s", "requests_per_s",
              "ttft_ms_mean", "ttft_ms_p50", "ttft_ms_p99", "ttft_ms_p90", "tpot_ms_mean", "tpot_ms_p50",
              "itl_ms_mean", "itl_ms_p50", "e2e_ms_mean", "e2e_ms_p50", "tpot_ms_p99", "tpot_ms_p90",
              "itl_ms_p99", "itl_ms_p90", "e2e_ms_p99", "e2e_ms_p90")
"""Which of a record's values of one quantity its pool keeps: the earliest in this order (the
requests/s of a fixed-length run repeats its tokens/s; a mean and a median of one run are not two
measurements)."""


@functools.cache
def _data() -> dict:
    text = resources.files("meshplan.bands").joinpath("data").joinpath("serving_residuals.yaml").read_text()
    return load_packaged(text)


def pooled_files() -> tuple[str, ...]:
    """Names of the record files whose residuals are in the pools (the fit's `records` list): a
    held-out file not named here has bands that never saw it."""
    return tuple(_data()["fit"]["records"])


def rows_to_residuals(rows: list[dict]) -> tuple[Residual, ...]:
    names = ServingRegime.__dataclass_fields__
    return tuple(Residual(ServingRegime(**{k: v for k, v in row.items() if k in names}), row["residual"])
                 for row in rows)


@functools.cache
def pool(kind: str) -> tuple[Residual, ...]:
    """The shipped residuals of one quantity (KINDS)."""
    return rows_to_residuals(_data()["kinds"].get(kind, []))


def pool_kind(kind: str) -> tuple[str, list[str]]:
    """The pool a quantity's band is drawn from, and a reason when it had to borrow one."""
    reasons = []
    while len(pool(kind)) < MIN_POOL and kind in FALLBACK:
        reasons.append(f"fewer than {MIN_POOL} published {LABEL[kind]}: band from {LABEL[FALLBACK[kind]]}")
        kind = FALLBACK[kind]
    return kind, reasons


def inside_leaving_sources_out(rows: list[dict], inflation: float) -> list[bool]:
    """Per row (a residual with its regime and source): whether it falls inside the band built
    from the other sources' rows alone, as a new source would see it."""
    residuals = rows_to_residuals(rows)
    out = []
    for row, res in zip(rows, residuals):
        others = [o for q, o in zip(rows, residuals) if q["source"] != row["source"]]
        low, high, _ = residual_range(res.regime, others, inflation) if others else (0.0, 0.0, [])
        out.append(low <= res.residual <= high)
    return out


def coverage(kind: str) -> tuple[int, int]:
    """(inside, total) of a shipped pool under leave-one-source-out: the promise is 80%."""
    inside = inside_leaving_sources_out(_data()["kinds"].get(kind, []), _data()["inflation"][kind])
    return sum(inside), len(inside)


@functools.cache
def _span(kind: str) -> Span:
    return span_of([r.regime for r in pool(kind)])


@functools.lru_cache(maxsize=1024)
def log_range(q: ServingRegime, kind: str) -> tuple[float, float, tuple[str, ...]]:
    """(low, high) of log(predicted / measured) for quantity `kind` in regime `q`, and why `q`
    extrapolates (outside the regimes of the pool's records)."""
    used, borrowed = pool_kind(kind)
    low, high, reasons = residual_range(q, pool(used), _data()["inflation"][used], _span(used))
    return low, high, tuple(borrowed + reasons)


def band(q: ServingRegime, metric: str, value: float, stat: str | None = None) -> Band:
    """The p10-p90 band of `value`, the prediction of `metric` (at `stat` for a latency)."""
    low, high, reasons = log_range(q, kind_of(metric, stat))
    return Band(value * math.exp(-high), value * math.exp(-low), reasons)


@dataclass(frozen=True, slots=True)
class ServingBands:
    """Bands of one simulation's metrics and why the question extrapolates."""

    bands: dict
    """{metric: Band} for throughputs, {metric: {stat: Band}} for latencies."""
    extrapolating: tuple[str, ...]

    def to_dict(self) -> dict:
        """`{"intervals": {...shaped like metrics, each value {low, high}}, "extrapolating": [...]}`."""
        intervals = {k: (v.to_dict() if isinstance(v, Band) else {s: b.to_dict() for s, b in v.items()})
                     for k, v in self.bands.items()}
        return {"intervals": intervals, "extrapolating": list(self.extrapolating)}

    def pairs(self) -> dict:
        """{"output_tokens_per_s": (low, high), ("ttft_ms", "p99"): (low, high), ...} for tables."""
        out = {}
        for k, v in self.bands.items():
            if isinstance(v, Band):
                out[k] = (v.low, v.high)
            else:
                out.update({(k, s): (b.low, b.high) for s, b in v.items()})
        return out


def _finite(x) -> bool:
    return x is not None and x == x and x > 0


def metrics_bands(regime: ServingRegime, metrics) -> ServingBands:
    """Bands of every finite metric of a ServingMetrics, computed once per call."""
    bands: dict = {}
    for name in THROUGHPUTS:
        value = getattr(metrics, name)
        if _finite(value):
            bands[name] = band(regime, name, value)
    for name in LATENCIES:
        p = getattr(metrics, name)
        stats = {s: band(regime, name, getattr(p, s), s) for s in STATS if _finite(getattr(p, s))}
        if stats:
            bands[name] = stats
    return ServingBands(bands, extrapolating(regime))


def extrapolating(regime: ServingRegime) -> tuple[str, ...]:
    """Why `regime` lies outside the published runs: the throughput pool's reasons (it spans
    every record), then, named by quantity, what only a latency pool lacks."""
    reasons = list(log_range(regime, "throughput")[2])
    for kind in KINDS[1:]:
        reasons += [f"{LABEL[kind]}: {r}" for r in log_range(regime, kind)[2] if r not in reasons]
    return tuple(reasons)


def simulation_bands(model, cluster, plan, workload, metrics) -> ServingBands:
    """Bands of a simulation's metrics for `plan` of `model` on `cluster` under `workload`."""
    return metrics_bands(serving_regime_of(model, cluster, plan, workload), metrics)
