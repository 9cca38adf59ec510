"""ITL (inter-token latency) of a run without sorting every gap of every request.

ITL pools every nonzero gap between successive token times of each request (see
meshplan.serving.metrics.summary). A simulated request's token times are, in the common case, its
prefill's token then one token per decode step over a contiguous run of its replica's steps
(`SimulatedRecord.decode_run`): its gaps are a first gap (first step's end - prefill) and a
slice of the differences of the replica's step end times, the very floats `np.diff` of its own
times gives. So the pooled multiset of gaps is each step difference counted once per request
whose run covers it, plus the first gaps and the gaps of any other record: percentiles come
from that weighted multiset (sorting one value per decode step, not one per token), by numpy's
linear-interpolation arithmetic (`weighted_percentiles`, tested against `np.percentile`). The
mean still sums the pooled gaps in request order, as `np.mean` of the pool does, so every float
equals the one the straightforward pooling gives.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from meshplan.serving.traffic.request import RequestRecord
from meshplan.serving.metrics.token_times import SimulatedRecord

QUANTILES = (50, 90, 99)


def weighted_percentiles(values: np.ndarray, counts: np.ndarray,
                         q: Sequence[float] = QUANTILES) -> list[float]:
    """`np.percentile(np.repeat(values, counts), q)` (linear method) without the repeat: the
    same virtual indices, neighbouring order statistics and interpolation as numpy's
    `_quantile`/`_lerp`. `values` must hold no nan; `counts` are positive with a positive sum."""
    order = np.argsort(values, kind="stable")
    ranked, cum = values[order], np.cumsum(counts[order])
    n = int(cum[-1])
    virtual = (n - 1) * np.true_divide(q, 100)
    prev = np.floor(virtual)
    nxt = prev + 1
    above, below = virtual >= n - 1, virtual < 0
    prev[above], nxt[above] = -1, -1
    prev[below], nxt[below] = 0, 0
    prev, nxt = prev.astype(np.intp), nxt.astype(np.intp)
    a = ranked[np.searchsorted(cum, np.where(prev < 0, n + prev, prev), side="right")]
    b = ranked[np.searchsorted(cum, np.where(nxt < 0, n + nxt, nxt), side="right")]
    gamma = np.asanyarray(virtual - prev, dtype=virtual.dtype)
    diff_b_a = b - a
    out = np.add(a, diff_b_a * gamma)
    np.subtract(b, diff_b_a * (1 - gamma), out=out, where=gamma >= 0.5, casting="unsafe",
                dtype=type(out.dtype))
    return out.tolist()


def _gaps_of_arrays(times: list[np.ndarray]) -> np.ndarray:
    """Every gap within each of `times` (zeros kept), pooled in order."""
    if not times:
        return np.empty(0)
    lengths = np.fromiter(map(len, times), dtype=np.int64, count=len(times))
    gaps = np.diff(np.concatenate(times))
    keep = np.ones(gaps.size, dtype=bool)
    ends = np.cumsum(lengths)[:-1] - 1  # gap from a request's last token to the next's first
    keep[ends[(ends >= 0) & (ends < gaps.size)]] = False
    return gaps[keep]


class GapPool:
    """Every gap (s) between successive token times of each of some records, zeros and nan
    kept, described rather than built: the slices [starts[i], stops[i]) of `source` (each
    replica's step-to-step differences, then the records' first gaps, then the gaps of records
    without a decode run), concatenated in order, are the pooled gaps."""

    __slots__ = ("source", "starts", "stops")

    def __init__(self, source: np.ndarray, starts: np.ndarray, stops: np.ndarray) -> None:
        self.source, self.starts, self.stops = source, starts, stops

    def multiset(self) -> tuple[np.ndarray, np.ndarray]:
        """(values, counts): the pooled gaps as distinct source entries and their multiplicity
        (entries no slice covers left out)."""
        size = self.source.size + 1
        delta = np.bincount(self.starts, minlength=size) - np.bincount(self.stops, minlength=size)
        counts = np.cumsum(delta)[:-1]
        used = counts > 0
        return self.source[used], counts[used]

    def pooled(self) -> np.ndarray:
        """The gaps themselves, in record order."""
        src = self.source
        return np.concatenate([src[a:b] for a, b in zip(self.starts.tolist(), self.stops.tolist())]
                              or [np.empty(0)])


def gap_pool(records: Sequence[RequestRecord]) -> GapPool | None:
    """The `GapPool` of `records`; None when no record has a decode run to share (pooling
    their token-time arrays directly is then as cheap)."""
    runs = [r.decode_run() if isinstance(r, SimulatedRecord) else None for r in records]
    if all(run is None for run in runs):
        return None
    steps: dict[int, tuple[int, np.ndarray]] = {}  # id(ends) -> (offset in source, differences)
    for run in runs:
        if run is not None and id(run[0]) not in steps:
            ends = np.frombuffer(run[0], float).copy() if len(run[0]) else np.empty(0)
            steps[id(run[0])] = (sum(d.size for _, d in steps.values()), np.diff(ends))
    firsts_at = sum(d.size for _, d in steps.values())
    others = [r.token_times_s for r, run in zip(records, runs) if run is None]
    firsts, starts, stops = [], [], []
    others_at = firsts_at + sum(1 for run in runs if run is not None and run[3] >= 2)
    for record, run in zip(records, runs):
        if run is None:
            gaps = max(len(record.token_times_s) - 1, 0)
            starts.append(others_at)
            others_at += gaps
            stops.append(others_at)
        elif run[3] >= 2:
            ends, first, c0, tokens = run
            at = steps[id(ends)][0] + c0
            starts += (firsts_at + len(firsts), at)
            stops += (firsts_at + len(firsts) + 1, at + tokens - 2)
            firsts.append(ends[c0] - first)
    source = np.concatenate([*(d for _, d in steps.values()), np.array(firsts, dtype=float),
                             _gaps_of_arrays(others)])
    return GapPool(source, np.array(starts, dtype=np.int64), np.array(stops, dtype=np.int64))
