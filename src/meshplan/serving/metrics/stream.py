"""Serving metrics in memory that does not grow with the number of requests (a streamed run).

`StreamingMetrics` takes finished requests in batches, folds them into quantile sketches
(meshplan.serving.metrics.sketch: TTFT, TPOT, ITL and E2E within 0.5% of the exact percentiles,
exact means) and running totals, and drops them. `StreamingLog` is an `IterationLog` whose rows
are folded, every `FOLD_ROWS`, into the engine statistics the metrics and the time series need:
time-weighted KV utilization, the longest queue, busy time, and per-replica sums over time bins
that double in width as the run grows. Definitions are those of meshplan.serving.metrics.summary.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Sequence

import numpy as np

from meshplan.serving.engine.iterations import COLUMNS, TRANSFER, IterationLog, _pieces
from meshplan.serving.metrics.itl import gap_pool
from meshplan.serving.metrics.sketch import LogHistogram
from meshplan.serving.metrics.summary import SLO, Percentiles, ServingMetrics, _itl_ms, _ratio
from meshplan.serving.traffic.request import RequestRecord

FOLD_ROWS = 1 << 16
"""Iteration-log rows kept before they are folded into the running statistics."""
BINS = 1024
"""Time bins of the folded series (their width doubles whenever the run outgrows them)."""
_TYPECODES = {"start_s": "d", "end_s": "d", "kind": "b"}


class StreamingLog(IterationLog):
    """An IterationLog that keeps at most FOLD_ROWS rows, folding older ones into totals."""

    __slots__ = ("rows", "busy", "util_area", "util_time", "util_plain", "util_plain_n", "max_waiting",
                 "num_seqs_sum", "iterations", "width", "series", "end")

    def __init__(self) -> None:
        super().__init__()
        self.rows = 0
        """Rows appended over the run (folded or not)."""
        self.busy = 0.0
        self.util_area, self.util_time = 0.0, 0.0
        self.util_plain, self.util_plain_n = 0.0, 0
        self.max_waiting: int | None = None
        self.num_seqs_sum, self.iterations = 0, 0
        self.width = 0.0
        """Seconds per time bin (0 until the first fold)."""
        self.series: dict[int, np.ndarray] = {}
        """Per replica: (3, BINS) sums per bin of KV utilization x s, waiting x s, busy s."""
        self.end = 0.0

    def maybe_fold(self) -> None:
        """Fold the kept rows once there are FOLD_ROWS of them."""
        if len(self) >= FOLD_ROWS:
            self.fold()

    def fold(self) -> None:
        """Fold every kept row into the running statistics and forget the rows."""
        if len(self) == 0:
            return
        cols = {name: np.frombuffer(col, dtype={"d": np.float64, "q": np.int64, "b": np.int8}[col.typecode])
                for name, col in self._cols.items()}
        self.rows += cols["kind"].size
        it = cols["kind"] != TRANSFER
        start, end = cols["start_s"][it], cols["end_s"][it]
        dur = end - start
        with np.errstate(divide="ignore", invalid="ignore"):
            util = np.where(cols["kv_total_blocks"][it] > 0,
                            cols["kv_used_blocks"][it] / cols["kv_total_blocks"][it], np.nan)
        ok = ~np.isnan(util)
        self.busy += float(dur.sum())
        self.util_area += float((util[ok] * dur[ok]).sum())
        self.util_time += float(dur[ok].sum())
        self.util_plain += float(util[ok].sum())
        self.util_plain_n += int(ok.sum())
        if it.any():
            top = int(cols["waiting"][it].max())
            self.max_waiting = top if self.max_waiting is None else max(self.max_waiting, top)
        self.num_seqs_sum += int(cols["num_seqs"][it].sum())
        self.iterations += int(it.sum())
        self.end = max(self.end, float(cols["end_s"].max()))
        self._bin(cols["replica"][it], start, end, util, cols["waiting"][it].astype(float))
        self._cols = {name: array(_TYPECODES.get(name, "q")) for name in COLUMNS}
        self._push = tuple(self._cols[name].append for name in COLUMNS)

    def _bin(self, replica: np.ndarray, start: np.ndarray, end: np.ndarray, util: np.ndarray,
             waiting: np.ndarray) -> None:
        if start.size == 0:
            return
        if self.width == 0.0:
            self.width = max(float(end.max()), 1e-9) * 4 / BINS  # room to grow 4x before doubling
        while float(end.max()) > self.width * BINS:
            for key, sums in self.series.items():
                self.series[key] = np.concatenate((sums.reshape(3, BINS // 2, 2).sum(axis=2),
                                                   np.zeros((3, BINS // 2))), axis=1)
            self.width *= 2
        edges = np.arange(BINS + 1) * self.width
        row, bin_, seconds = _pieces(start, end, edges)
        util_w = np.where(np.isnan(util[row]), 0.0, util[row]) * seconds
        busy_w = np.where(np.isnan(util[row]), 0.0, seconds)
        for rep in np.unique(replica).tolist():
            mine = replica[row] == rep
            sums = self.series.setdefault(rep, np.zeros((3, BINS)))
            for i, weights in enumerate((util_w, waiting[row] * seconds, busy_w)):
                sums[i] += np.bincount(bin_[mine], weights=weights[mine], minlength=BINS)

    def busy_s(self, replica: int | None = None) -> float:
        """Seconds spent in iterations, over every replica (folded rows included)."""
        if replica is not None:
            raise ValueError("a streamed log keeps busy time over all replicas only")
        self.fold()
        return self.busy

    def stats(self) -> tuple[float | None, int | None]:
        """(time-weighted mean KV utilization, longest queue), as summary._log_stats."""
        self.fold()
        if self.max_waiting is None:
            return None, None
        mean = _ratio(self.util_area, self.util_time)
        if math.isnan(mean) and self.util_plain_n:
            mean = self.util_plain / self.util_plain_n
        return mean, self.max_waiting

    def timeseries(self, bins: int = 50) -> dict:
        """KV utilization (mean over busy replicas) and waiting requests (summed) per time bin:
        the folded bins grouped into at most `bins` (edges on the folded grid)."""
        self.fold()
        if not self.series:
            return {"t_s": [], "kv_utilization": [], "waiting": []}
        used = max(1, math.ceil(self.end / self.width - 1e-9))
        group = math.ceil(used / bins)
        count = math.ceil(used / group)
        sums = np.stack([s[:, :count * group].reshape(3, count, group).sum(axis=2) if count * group <= BINS
                         else np.pad(s, ((0, 0), (0, count * group - BINS))).reshape(3, count, group).sum(axis=2)
                         for s in self.series.values()])
        with np.errstate(divide="ignore", invalid="ignore"):
            per = np.where(sums[:, 2] > 0, sums[:, 0] / sums[:, 2], np.nan)
            busy = ~np.isnan(per)
            kv = np.where(busy, per, 0.0).sum(axis=0) / busy.sum(axis=0)
            waiting = np.where(sums[:, 2] > 0, sums[:, 1] / sums[:, 2], 0.0).sum(axis=0)
        t = (np.arange(count) + 0.5) * group * self.width
        clean = lambda a: [None if v != v else round(float(v), 4) for v in a]  # noqa: E731
        return {"t_s": clean(t), "kv_utilization": clean(kv), "waiting": clean(waiting)}


class StreamingMetrics:
    """vLLM-benchmark metrics of requests added in batches, kept as sketches and totals."""

    QUANTILES = (50, 90, 99)

    def __init__(self, slo: SLO | None = None, window_end: float | None = None) -> None:
        self.slo = slo
        self.sketch = {name: LogHistogram() for name in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms")}
        self.window_end = window_end
        """The last arrival when known in advance (open loop); else the latest seen so far."""
        self.served = self.served_good = 0
        """Completed requests whose first token came by the last arrival (the steady figures)."""
        self.undecided = np.empty(0)
        self.undecided_good = np.empty(0, dtype=bool)
        """First-token times (and SLO verdicts) later than every arrival seen yet: served or not
        is known only at the end of a closed loop, whose last arrival is its last send."""
        self.completed = self.good = self.seen = 0
        self.total_in = self.total_out = self.preemptions = 0
        self.cached = 0.0
        self.first_arrival, self.last_arrival, self.last_finish = math.inf, -math.inf, -math.inf
        self.pending: list[RequestRecord] = []

    def add(self, records: Sequence[RequestRecord], flush_at: int = 8192) -> bool:
        """Queue finished records; folds them in (and returns True) once `flush_at` are queued."""
        self.pending.extend(records)
        if len(self.pending) >= flush_at:
            self.flush()
            return True
        return False

    def flush(self) -> None:
        """Fold every queued record into the sketches and totals, and drop them."""
        records, self.pending = self.pending, []
        if not records:
            return
        cols = np.array([(r.arrival_s, r.first_token_s, r.finish_s, r.input_len, r.output_len,
                          r.cached_tokens, r.preemptions) for r in records], dtype=float).reshape(-1, 7)
        arrival, first, finish, n_in, n_out, cached, preempt = cols.T
        self.seen += arrival.size
        self.first_arrival = min(self.first_arrival, float(arrival.min()))
        self.last_arrival = max(self.last_arrival, float(arrival.max()))
        self.preemptions += int(preempt.sum())
        done = np.isfinite(finish)
        if not done.any():
            return
        ttft, e2e = (first - arrival)[done] * 1e3, (finish - arrival)[done] * 1e3
        out = n_out[done]
        with np.errstate(divide="ignore", invalid="ignore"):
            tpot = np.where(out > 1, (e2e - ttft) / (out - 1), np.nan)
        for name, values in (("ttft_ms", ttft), ("tpot_ms", tpot), ("e2e_ms", e2e)):
            self.sketch[name].add(values)
        self._add_itl([r for r, ok in zip(records, done) if ok])
        self.completed += int(done.sum())
        self.total_in += int(n_in[done].sum())
        self.total_out += int(out.sum())
        self.cached += float(cached[done].sum())
        self.last_finish = max(self.last_finish, float(finish[done].max()))
        good = self.slo.met(ttft, tpot, e2e) if self.slo is not None else np.zeros(ttft.size, dtype=bool)
        self.good += int(good.sum())
        self._settle(first[done], good)

    def _settle(self, first: np.ndarray, good: np.ndarray) -> None:
        """Count as served the first tokens by the window's end (known or seen so far)."""
        end = self.window_end if self.window_end is not None else self.last_arrival
        first = np.concatenate((self.undecided, first))
        good = np.concatenate((self.undecided_good, good))
        within = first <= end
        self.served += int(within.sum())
        self.served_good += int((within & good).sum())
        if self.window_end is None:  # a later arrival may still take them in
            self.undecided, self.undecided_good = first[~within], good[~within]

    def _add_itl(self, records: list[RequestRecord]) -> None:
        pool = gap_pool(records)
        if pool is None:
            gaps = _itl_ms([r.token_times_s for r in records])
            self.sketch["itl_ms"].add(gaps)
            return
        values, counts = pool.multiset()
        keep = (values != 0) & ~np.isnan(values)
        self.sketch["itl_ms"].add(values[keep] * 1e3, counts[keep])

    def _percentiles(self, name: str) -> Percentiles:
        sketch = self.sketch[name]
        p50, p90, p99 = sketch.percentiles(self.QUANTILES)
        return Percentiles(mean=sketch.mean(), p50=p50, p90=p90, p99=p99)

    def _steady(self) -> tuple[float | None, float | None]:
        """summary._steady: requests whose first token came by the last arrival, per second of
        the arrival window."""
        start, end = self.first_arrival, self.last_arrival
        if self.seen < 2 or not end > start:
            return None, None
        steady = self.served / (end - start)
        if self.slo is None:
            return steady, None
        return steady, self.served_good / (end - start)

    def metrics(self, log: StreamingLog | None) -> ServingMetrics:
        """The ServingMetrics of everything added (flushing what is queued)."""
        self.flush()
        duration = self.last_finish - self.first_arrival if self.completed else math.nan
        mean_util, max_queue = log.stats() if log is not None else (None, None)
        steady, steady_good = self._steady()
        return ServingMetrics(
            ttft_ms=self._percentiles("ttft_ms"), tpot_ms=self._percentiles("tpot_ms"),
            itl_ms=self._percentiles("itl_ms"), e2e_ms=self._percentiles("e2e_ms"),
            output_tokens_per_s=_ratio(self.total_out, duration),
            total_tokens_per_s=_ratio(self.total_in + self.total_out, duration),
            input_tokens_per_s=_ratio(self.total_in, duration),
            requests_per_s=_ratio(self.completed, duration),
            goodput_requests_per_s=None if self.slo is None else _ratio(self.good, duration),
            steady_requests_per_s=steady, steady_goodput_requests_per_s=steady_good,
            completed=self.completed, duration_s=duration, total_input_tokens=self.total_in,
            total_output_tokens=self.total_out, mean_kv_utilization=mean_util, max_queue_len=max_queue,
            preemptions=self.preemptions, prefix_cache_hit_rate=_ratio(self.cached, self.total_in))
