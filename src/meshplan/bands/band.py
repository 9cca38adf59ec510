"""A predicted number's p10-p90 band from the residuals of comparable published runs.

A residual is log(predicted / measured) of one calibration record, predicted by constants fitted
without the record's source. For a question, every record weighs exp(-distance) between their
regimes plus a floor (so no band rests on one or two runs); the band is the weighted p10-p90 of
the residuals around their weighted median, stretched by the fitted `inflation` that makes 80%
of records fall inside under leave-one-source-out. Out of regime, the stretch doubles.
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass
from importlib import resources

from meshplan.bands.regime import Regime, Span, distance, out_of_regime, span_of
from meshplan.yamlread import load_packaged

FLOOR = 0.1
"""Weight every record keeps whatever its distance: the band never rests on a handful of runs."""
WIDEN = 1.0
"""Out of regime the band's half-widths grow by this fraction (1.0: twice as wide)."""
LOW_Q, HIGH_Q = 0.1, 0.9


@dataclass(frozen=True, slots=True)
class Band:
    """The p10-p90 range of a predicted number, and why it extrapolates (empty when inside)."""

    low: float
    high: float
    extrapolating: tuple[str, ...] = ()

    def to_dict(self) -> dict:
        return {"low": self.low, "high": self.high}

    def scaled(self, factor: float) -> Band:
        """The same band for a number proportional to this one (MFU from tokens/s)."""
        return Band(self.low * factor, self.high * factor, self.extrapolating)


@dataclass(frozen=True, slots=True)
class Residual:
    regime: Regime
    residual: float


@functools.cache
def _data() -> dict:
    text = resources.files("meshplan.bands").joinpath("data").joinpath("residuals.yaml").read_text()
    return load_packaged(text)


@functools.cache
def pool(kind: str) -> tuple[Residual, ...]:
    """The residuals of `kind` ("throughput" or "memory") shipped with the package."""
    rows = _data()[kind]
    names = Regime.__dataclass_fields__
    return tuple(Residual(Regime(**{k: v for k, v in row.items() if k in names}), row["residual"])
                 for row in rows)


def weighted_quantile(pairs: list[tuple[float, float]], q: float) -> float:
    """The q-quantile of (value, weight) pairs: the first value whose cumulative weight reaches
    q of the total."""
    pairs = sorted(pairs)
    total, acc = sum(w for _, w in pairs), 0.0
    for value, weight in pairs:
        acc += weight
        if acc >= q * total:
            return value
    return pairs[-1][0]


def residual_range(q: Regime, residuals: tuple[Residual, ...] | list[Residual], inflation: float,
                   span: tuple[Residual, ...] | list[Residual] | Span | None = None,
                   ) -> tuple[float, float, list[str]]:
    """(low, high) of log(predicted / measured) for regime `q`, and the out-of-regime reasons:
    where `q` lies outside the regimes of `span` (default: the residuals themselves)."""
    pairs = [(r.residual, math.exp(-distance(q, r.regime)) + FLOOR) for r in residuals]
    mid = weighted_quantile(pairs, 0.5)
    stretch = inflation
    if not isinstance(span, Span):
        span = [r.regime for r in (residuals if span is None else span)]
    reasons = out_of_regime(q, span)
    if reasons:
        stretch *= 1 + WIDEN
    low = mid + stretch * (weighted_quantile(pairs, LOW_Q) - mid)
    high = mid + stretch * (weighted_quantile(pairs, HIGH_Q) - mid)
    return low, high, reasons


@functools.cache
def _pool_span(kind: str) -> Span:
    return span_of([r.regime for r in pool(kind)])


@functools.lru_cache(maxsize=1024)
def _log_range(q: Regime, kind: str, span_kind: str) -> tuple[float, float, tuple[str, ...]]:
    """residual_range over a shipped pool, once per regime (a search's plans share most)."""
    low, high, reasons = residual_range(q, pool(kind), _data()["inflation"][kind], _pool_span(span_kind))
    return low, high, tuple(reasons)


def throughput_band(q: Regime, tokens_per_s: float) -> Band:
    """The band of tokens/s per GPU (MFU and step time follow: `scaled`, `step_time_band`)."""
    low, high, reasons = _log_range(q, "throughput", "throughput")
    return Band(tokens_per_s * math.exp(-high), tokens_per_s * math.exp(-low), reasons)


def step_time_band(throughput: Band, tokens_per_s: float, step_time_s: float) -> Band:
    """Step time's band from the throughput band (the same run: time = work / throughput)."""
    return Band(step_time_s * tokens_per_s / throughput.high,
                step_time_s * tokens_per_s / throughput.low, throughput.extrapolating)


def memory_band(q: Regime, peak_bytes: float) -> Band:
    """The band of peak memory per GPU, from the runs that published their peak; out of regime
    where the throughput records end (the few memory records span less, and their model has no
    fitted constant to extrapolate)."""
    low, high, reasons = _log_range(q, "memory", "throughput")
    return Band(peak_bytes * math.exp(-high), peak_bytes * math.exp(-low), reasons)


def tie_gap() -> float:
    """The throughput gap below which two plans of one model on one cluster tie: the median
    difference between the residuals of two published layouts of the same model, GPU and GPU
    count from one source (one time in four such a gap is ordered the wrong way round)."""
    return _data()["tie_gap"]
