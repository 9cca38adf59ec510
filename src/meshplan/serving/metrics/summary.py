"""Serving metrics of a simulated run, defined as vLLM's `vllm bench serve` reports them.

Per request (completed ones: finite `finish_s`): TTFT = first token - arrival; E2E = finish -
arrival; TPOT = (E2E - TTFT) / (output_len - 1), only for output_len > 1. ITL pools every gap
between successive output-token emission times of each request; tokens sharing one emission
time (speculative decoding) would stream as one chunk, which vLLM's client times once, so zero
gaps are dropped. Percentiles use numpy's default linear interpolation, as vLLM does.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, fields

import numpy as np
from rich.console import Group
from rich.table import Table

from meshplan.errors import ConfigError
from meshplan.serving.engine.iterations import TRANSFER, IterationLog, binned_means, time_bins
from meshplan.serving.metrics.itl import GapPool, gap_pool, weighted_percentiles
from meshplan.serving.traffic.request import RequestRecord


def _json_float(x: float | None) -> float | None:
    return None if x is None or math.isnan(x) else float(x)


@dataclass(frozen=True, slots=True, kw_only=True)
class Percentiles:
    """Mean and percentiles of one latency (nan values ignored; all nan when nothing is left)."""

    mean: float
    p50: float
    p90: float
    p99: float

    @classmethod
    def of(cls, values: np.ndarray) -> Percentiles:
        """Summarize `values` (numpy.percentile, linear interpolation)."""
        return cls._of_scratch(np.array(values, dtype=float))

    @classmethod
    def _of_scratch(cls, values: np.ndarray) -> Percentiles:
        """Like `of`, but may reorder `values` in place (saves a copy of big arrays)."""
        nan = np.isnan(values)
        if nan.any():
            values = values[~nan]
        if values.size == 0:
            return cls(mean=math.nan, p50=math.nan, p90=math.nan, p99=math.nan)
        mean = float(values.mean())
        p50, p90, p99 = np.percentile(values, [50, 90, 99], overwrite_input=True).tolist()
        return cls(mean=mean, p50=p50, p90=p90, p99=p99)

    def to_dict(self) -> dict[str, float | None]:
        """{"mean", "p50", "p90", "p99"}; nan becomes None (JSON null)."""
        return {f.name: _json_float(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True, slots=True, kw_only=True)
class SLO:
    """Service-level objectives for goodput (vLLM --goodput): a request is good when it meets
    every objective given (latency <= objective). One-token requests count as TPOT 0."""

    ttft_ms: float | None = None
    """Largest acceptable time to first token, ms."""
    tpot_ms: float | None = None
    """Largest acceptable time per output token, ms."""
    e2e_ms: float | None = None
    """Largest acceptable end-to-end latency, ms."""

    def __post_init__(self) -> None:
        given = {f.name: getattr(self, f.name) for f in fields(self)}
        if all(v is None for v in given.values()):
            raise ConfigError("SLO needs at least one of ttft_ms, tpot_ms, e2e_ms")
        for name, value in given.items():
            if value is not None and not value > 0:
                raise ConfigError(f"SLO {name}={value!r} must be a positive number of ms")

    def met(self, ttft_ms: np.ndarray, tpot_ms: np.ndarray, e2e_ms: np.ndarray) -> np.ndarray:
        """Per request: True when every given objective is met (nan TPOT counts as 0)."""
        good = np.ones(len(ttft_ms), dtype=bool)
        pairs = ((self.ttft_ms, ttft_ms), (self.tpot_ms, np.nan_to_num(tpot_ms, nan=0.0)),
                 (self.e2e_ms, e2e_ms))
        for slo, values in pairs:
            if slo is not None:
                good &= values <= slo
        return good


@dataclass(frozen=True, slots=True, kw_only=True)
class ServingMetrics:
    """Latencies (ms), throughputs and engine statistics of one simulated serving run.

    Duration runs from the first arrival (the benchmark start, 0 for generated workloads) to
    the last finish; throughputs are totals over completed requests / duration (vLLM's
    benchmark definitions), so a finite run's figures include the drain after the last arrival.
    The steady_* figures count only the arrival window, where the deployment faces the offered
    rate: they are what "keeps up with the rate" is judged by.
    """

    ttft_ms: Percentiles
    tpot_ms: Percentiles
    itl_ms: Percentiles
    e2e_ms: Percentiles
    output_tokens_per_s: float
    total_tokens_per_s: float
    """(input + output tokens) / duration."""
    input_tokens_per_s: float
    """Prompt tokens / duration (a prefill pool's throughput)."""
    requests_per_s: float
    """Completed requests / duration, the drain after the last arrival included (vLLM's request
    throughput)."""
    goodput_requests_per_s: float | None
    """Requests meeting every SLO / duration, the drain included; None when no SLO was given."""
    steady_requests_per_s: float | None = None
    """Requests taken into service (first token out) over the arrival window, first to last
    arrival: the offered rate while the deployment keeps up, less when a queue builds (the
    requests still waiting at the last arrival are missing). None without an arrival window
    (offline runs)."""
    steady_goodput_requests_per_s: float | None = None
    """Those of `steady_requests_per_s` that meet every SLO, per second of the arrival window;
    None without an SLO or an arrival window."""
    completed: int
    duration_s: float
    total_input_tokens: int
    total_output_tokens: int
    mean_kv_utilization: float | None
    """KV blocks used / total, averaged over iteration time; None without an iteration log."""
    max_queue_len: int | None
    """Longest waiting queue of any replica after scheduling; None without an iteration log."""
    preemptions: int
    prefix_cache_hit_rate: float
    """Cached prompt tokens / prompt tokens of completed requests."""

    def to_dict(self) -> dict:
        """Plain JSON-safe dict: latencies as {"mean", "p50", "p90", "p99"}, nan as None."""
        out: dict = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Percentiles):
                out[f.name] = value.to_dict()
            elif isinstance(value, float):
                out[f.name] = _json_float(value)
            else:
                out[f.name] = value
        return out

    def __rich__(self) -> Group:
        return self.tables()

    def tables(self, bands: dict | None = None) -> Group:
        """The latency and throughput tables; with `bands` ({"output_tokens_per_s": (low, high),
        ("ttft_ms", "p99"): (low, high), ...}) a p10-p90 column beside the mean, the p99 and
        each throughput."""
        return Group(_latency_table(self, bands), _summary_table(self, bands))


def _fmt(x: float | int | None, digits: int = 2) -> str:
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return "-"
    return f"{x:,}" if isinstance(x, int) else f"{x:,.{digits}f}"


def _span(bands: dict, key, digits: int = 2) -> str:
    """A band as 'low-high' ('-' when the metric has none)."""
    low_high = bands.get(key)
    return "-" if low_high is None else f"{_fmt(low_high[0], digits)}-{_fmt(low_high[1], digits)}"


LATENCY_ROWS = (("TTFT (ms)", "ttft_ms"), ("TPOT (ms)", "tpot_ms"), ("ITL (ms)", "itl_ms"), ("E2E (ms)", "e2e_ms"))


def _latency_table(m: ServingMetrics, bands: dict | None = None) -> Table:
    table = Table(title="Serving latency")
    table.add_column("Metric")
    for col in ("Mean", "P50", "P90", "P99"):
        table.add_column(col, justify="right")
    if bands is not None:
        table.add_column("Mean p10-p90", justify="right")
        table.add_column("P99 p10-p90", justify="right")
    for label, name in LATENCY_ROWS:
        p = getattr(m, name)
        cells = [_fmt(v) for v in (p.mean, p.p50, p.p90, p.p99)]
        if bands is not None:
            cells += [_span(bands, (name, "mean")), _span(bands, (name, "p99"))]
        table.add_row(label, *cells)
    return table


def _summary_table(m: ServingMetrics, bands: dict | None = None) -> Table:
    table = Table(title="Serving throughput")
    table.add_column("Metric")
    table.add_column("Value", justify="right")
    if bands is not None:
        table.add_column("p10-p90", justify="right")
    rows = [("Successful requests", _fmt(m.completed)),
            ("Duration (s)", _fmt(m.duration_s, 3)),
            ("Total input tokens", _fmt(m.total_input_tokens)),
            ("Total generated tokens", _fmt(m.total_output_tokens)),
            ("Request throughput, incl. drain (req/s)", _fmt(m.requests_per_s), "requests_per_s"),
            ("Request goodput, incl. drain (req/s)", _fmt(m.goodput_requests_per_s)),
            ("Request throughput, steady (req/s)", _fmt(m.steady_requests_per_s)),
            ("Request goodput, steady (req/s)", _fmt(m.steady_goodput_requests_per_s)),
            ("Output token throughput (tok/s)", _fmt(m.output_tokens_per_s), "output_tokens_per_s"),
            ("Total token throughput (tok/s)", _fmt(m.total_tokens_per_s), "total_tokens_per_s"),
            ("Prefix cache hit rate", _fmt(m.prefix_cache_hit_rate, 3)),
            ("Mean KV-cache utilization", _fmt(m.mean_kv_utilization, 3)),
            ("Max queue length", _fmt(m.max_queue_len)),
            ("Preemptions", _fmt(m.preemptions))]
    for label, value, *key in rows:
        cells = [label, value]
        if bands is not None:
            cells.append(_span(bands, key[0]) if key else "")
        table.add_row(*cells)
    return table


_CHUNK_TOKENS = 1 << 20
"""Token times handled at once by `_itl_ms`: bounds its scratch memory (~8 MB a buffer)."""


def _chunk_gaps(token_times: list[np.ndarray], lengths: np.ndarray) -> np.ndarray:
    """Nonzero gaps within each request of a few requests, pooled, in ms."""
    times = np.concatenate(token_times)
    gaps = np.diff(times)
    keep = gaps != 0
    ends = np.cumsum(lengths)[:-1] - 1  # gap from a request's last token to the next's first
    keep[ends[(ends >= 0) & (ends < gaps.size)]] = False
    return gaps[keep] * 1e3


def _itl_ms(token_times: list[np.ndarray]) -> np.ndarray:
    """ITL samples in ms: every nonzero gap between successive emission times of a request,
    pooled over requests; computed a chunk of ~1M tokens at a time into one output array."""
    lengths = np.fromiter(map(len, token_times), dtype=np.int64, count=len(token_times))
    out = np.empty(int(np.maximum(lengths - 1, 0).sum()))
    if out.size == 0:
        return out
    cum = np.cumsum(lengths)
    cuts = np.searchsorted(cum, np.arange(_CHUNK_TOKENS, cum[-1], _CHUNK_TOKENS), "right")
    bounds = np.unique(np.concatenate(([0], cuts, [len(token_times)]))).tolist()
    filled = 0
    for lo, hi in zip(bounds[:-1], bounds[1:]):
        gaps = _chunk_gaps(token_times[lo:hi], lengths[lo:hi])
        out[filled:filled + gaps.size] = gaps
        filled += gaps.size
    return out[:filled]


def _itl_percentiles(records: Sequence[RequestRecord]) -> Percentiles:
    """ITL of completed `records`: from the gaps' weighted multiset when simulated records
    share their replicas' decode steps (meshplan.serving.metrics.itl; the same floats), else from the
    pooled gaps of their token-time arrays."""
    pool = gap_pool(records)
    if pool is None:
        return Percentiles._of_scratch(_itl_ms([r.token_times_s for r in records]))
    values, counts = pool.multiset()
    keep = (values != 0) & ~np.isnan(values)
    if not keep.any():
        return Percentiles(mean=math.nan, p50=math.nan, p90=math.nan, p99=math.nan)
    p50, p90, p99 = weighted_percentiles(values[keep] * 1e3, counts[keep])
    return _PooledPercentiles.of_pool(pool, bool(keep.all()), p50, p90, p99)


class _PooledPercentiles(Percentiles):
    """ITL percentiles whose mean is summed only when first read. The mean must add every
    pooled gap in request order (numpy's pairwise sum, for the same float): that pass over
    every token costs several times the percentiles of the weighted multiset, and most callers
    (validate) never read it. Equal to, and printed as, the `Percentiles` of the same values."""

    __slots__ = ("_clean", "_pool")

    @classmethod
    def of_pool(cls, pool: GapPool, clean: bool, p50: float, p90: float,
                p99: float) -> _PooledPercentiles:
        """`mean` left unset until read (`__getattr__`); `clean`: no gap is zero or nan."""
        made = cls.__new__(cls)
        for name, value in (("p50", p50), ("p90", p90), ("p99", p99), ("_pool", pool),
                            ("_clean", clean)):
            object.__setattr__(made, name, value)
        return made

    def __getattr__(self, name: str) -> float:
        """Called only for an unset slot: the mean, as `Percentiles._of_scratch` computes it."""
        if name != "mean":
            raise AttributeError(name)
        gaps = self._pool.pooled()
        if not self._clean:
            gaps = gaps[(gaps != 0) & ~np.isnan(gaps)]
        mean = float(np.multiply(gaps, 1e3, out=gaps).mean())
        object.__setattr__(self, "mean", mean)
        object.__setattr__(self, "_pool", None)
        return mean

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Percentiles):
            return NotImplemented
        return all(getattr(self, f.name) == getattr(other, f.name) for f in fields(Percentiles))

    __hash__ = Percentiles.__hash__

    def __repr__(self) -> str:
        return repr(Percentiles(**{f.name: getattr(self, f.name) for f in fields(Percentiles)}))


def _ratio(num: float, den: float) -> float:
    return num / den if den > 0 else math.nan


def _log_stats(log: IterationLog | None) -> tuple[float | None, int | None]:
    """(time-weighted mean KV utilization, longest queue) over engine iterations."""
    if log is None or len(log) == 0:
        return None, None
    iteration = log.column("kind") != TRANSFER
    if not iteration.any():
        return None, None
    util = log.kv_utilization()[iteration]
    dur = (log.column("end_s") - log.column("start_s"))[iteration]
    ok = ~np.isnan(util)
    mean_util = _ratio(float((util[ok] * dur[ok]).sum()), float(dur[ok].sum()))
    if math.isnan(mean_util) and ok.any():
        mean_util = float(util[ok].mean())  # every iteration took zero time
    return mean_util, int(log.column("waiting")[iteration].max())


def compute_metrics(records: Sequence[RequestRecord], log: IterationLog | None = None,
                    slo: SLO | None = None) -> ServingMetrics:
    """vLLM-benchmark metrics of `records`; engine statistics from `log` when given."""
    cols = np.array([(r.arrival_s, r.first_token_s, r.finish_s, r.input_len, r.output_len,
                      r.cached_tokens, r.preemptions) for r in records], dtype=float)
    cols = cols.reshape(-1, 7)
    arrival, first, finish, n_in, n_out, cached, preempt = cols.T
    done = np.isfinite(finish)
    ttft = (first - arrival)[done] * 1e3
    e2e = (finish - arrival)[done] * 1e3
    out_done = n_out[done]
    with np.errstate(divide="ignore", invalid="ignore"):
        tpot = np.where(out_done > 1, (e2e - ttft) / (out_done - 1), np.nan)
    duration = float(finish[done].max() - arrival.min()) if done.any() else math.nan
    total_in, total_out = int(n_in[done].sum()), int(out_done.sum())
    goodput = good = None
    if slo is not None:
        good = slo.met(ttft, tpot, e2e)
        goodput = _ratio(int(good.sum()), duration)
    steady, steady_good = _steady(arrival, first, done, good)
    mean_util, max_queue = _log_stats(log)
    return ServingMetrics(
        ttft_ms=Percentiles.of(ttft), tpot_ms=Percentiles.of(tpot),
        itl_ms=_itl_percentiles([r for r, ok in zip(records, done) if ok]), e2e_ms=Percentiles.of(e2e),
        output_tokens_per_s=_ratio(total_out, duration),
        total_tokens_per_s=_ratio(total_in + total_out, duration),
        input_tokens_per_s=_ratio(total_in, duration),
        requests_per_s=_ratio(int(done.sum()), duration),
        goodput_requests_per_s=goodput, steady_requests_per_s=steady, steady_goodput_requests_per_s=steady_good,
        completed=int(done.sum()), duration_s=duration,
        total_input_tokens=total_in, total_output_tokens=total_out,
        mean_kv_utilization=mean_util, max_queue_len=max_queue,
        preemptions=int(preempt.sum()),
        prefix_cache_hit_rate=_ratio(float(cached[done].sum()), total_in))


def _steady(arrival: np.ndarray, first: np.ndarray, done: np.ndarray,
            good: np.ndarray | None) -> tuple[float | None, float | None]:
    """(steady request throughput, steady goodput): requests whose first token came out within
    the arrival window, per second of that window (None when all requests arrive at once)."""
    if arrival.size < 2:
        return None, None
    start, end = float(arrival.min()), float(arrival.max())
    if end <= start:
        return None, None
    served = done & (first <= end)
    steady = float(served.sum()) / (end - start)
    if good is None:
        return steady, None
    return steady, float((good & served[done]).sum()) / (end - start)


def kv_utilization_over_time(log: IterationLog,
                             bins: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bin centers s, KV utilization): per bin, each replica's iteration-time-weighted mean of
    used/total blocks, averaged over the replicas busy in that bin (nan when none is).
    `bins` is a count of equal bins over [0, last iteration end] or the edges in seconds."""
    edges = time_bins(log, bins)
    means = binned_means(log, log.kv_utilization(), edges)
    busy = ~np.isnan(means)
    with np.errstate(divide="ignore", invalid="ignore"):
        values = np.where(busy, means, 0.0).sum(axis=0) / busy.sum(axis=0)
    return (edges[:-1] + edges[1:]) / 2, values


def queue_length_over_time(log: IterationLog,
                           bins: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bin centers s, waiting requests): per bin, each replica's iteration-time-weighted mean
    queue length after scheduling, summed over replicas (an idle replica counts 0)."""
    return summed_over_time(log, "waiting", bins)


def summed_over_time(log: IterationLog, column: str,
                     bins: int | np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(bin centers s, values): per bin, each replica's iteration-time-weighted mean of a log
    column (e.g. "waiting", "num_seqs"), summed over replicas (an idle replica counts 0)."""
    edges = time_bins(log, bins)
    means = binned_means(log, log.column(column).astype(float), edges)
    return (edges[:-1] + edges[1:]) / 2, np.nan_to_num(means, nan=0.0).sum(axis=0)
