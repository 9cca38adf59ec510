"""Files a serving simulation writes: a per-request CSV and a Chrome trace of iterations.

The trace (open in ui.perfetto.dev or chrome://tracing) has one process per replica
("replica N"): thread 0 shows the engine iterations as complete events, thread 1 the KV
transfers of disaggregated serving, and two counter tracks follow the KV-cache utilization and
the waiting queue. Times are microseconds, as the Chrome JSON format expects.
"""

from __future__ import annotations

import csv
import math
from collections.abc import Sequence
from os import PathLike
from pathlib import Path

import numpy as np

from meshplan.errors import ConfigError
from meshplan.report.trace import write_trace
from meshplan.serving.engine.iterations import KINDS, TRANSFER, IterationLog
from meshplan.serving.traffic.request import RequestRecord

CSV_COLUMNS = ("id", "replica", "arrival_s", "input_len", "output_len", "cached_tokens",
               "first_token_s", "finish_s", "ttft_ms", "tpot_ms", "e2e_ms", "preemptions")
MAX_TRACE_ITERATIONS = 200_000
"""Iterations drawn as events at most; beyond it the trace keeps the first ones and samples
the counters evenly over the whole run, noting it in "otherData"."""
ITERATIONS, TRANSFERS = 0, 1


def _num(x: float, digits: int) -> str:
    """Fixed-point text; nan (unfinished requests) as an empty cell."""
    return "" if math.isnan(x) else f"{x:.{digits}f}"


def _csv_row(r: RequestRecord) -> list:
    return [r.id, r.replica, _num(r.arrival_s, 6), r.input_len, r.output_len, r.cached_tokens,
            _num(r.first_token_s, 6), _num(r.finish_s, 6), _num(r.ttft_s * 1e3, 3),
            _num(r.tpot_s * 1e3, 3), _num(r.e2e_s * 1e3, 3), r.preemptions]


def write_requests_csv(records: Sequence[RequestRecord], path: str | PathLike[str]) -> None:
    """One row per request (`CSV_COLUMNS`): times in s to the microsecond, latencies in ms to
    the microsecond; empty cells for what did not happen (unfinished, one-token TPOT)."""
    from meshplan.outfiles import open_atomic

    with open_atomic(path, "--csv", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(CSV_COLUMNS)
        writer.writerows(_csv_row(r) for r in records)


def _us(seconds: np.ndarray) -> list[float]:
    return np.round(seconds * 1e6, 3).tolist()


def _iteration_name(prefill: int, decode: int, kind: int) -> str:
    if kind == TRANSFER:
        return "kv transfer"
    if prefill and decode:
        return f"prefill {prefill} + decode {decode}"
    if prefill:
        return f"prefill {prefill}"
    return f"decode {decode}" if decode else "idle"


def _metadata(replicas: list[int], with_transfers: set[int]) -> list[dict]:
    """Process names "replica N" and thread names (the transfer thread only where used)."""
    out: list[dict] = []
    for pid in replicas:
        out.append({"name": "process_name", "ph": "M", "pid": pid, "tid": 0,
                    "args": {"name": f"replica {pid}"}})
        out.append({"name": "process_sort_index", "ph": "M", "pid": pid, "tid": 0,
                    "args": {"sort_index": pid}})
        threads = [(ITERATIONS, "iterations")]
        threads += [(TRANSFERS, "kv transfers")] if pid in with_transfers else []
        for tid, name in threads:
            out.append({"name": "thread_name", "ph": "M", "pid": pid, "tid": tid,
                        "args": {"name": name}})
    return out


def _complete_events(cols: dict[str, np.ndarray], rows: np.ndarray) -> list[dict]:
    """One "X" event per row in `rows`, args holding the row's columns."""
    arg_names = ("prefill_tokens", "decode_seqs", "num_seqs", "waiting", "kv_used_blocks",
                 "kv_total_blocks", "preempted")
    values = {name: cols[name][rows].tolist() for name in (*arg_names, "replica", "kind")}
    ts, dur = _us(cols["start_s"][rows]), _us((cols["end_s"] - cols["start_s"])[rows])
    out = []
    for i in range(rows.size):
        kind = values["kind"][i]
        args = {name: values[name][i] for name in arg_names}
        args["kind"] = KINDS[kind]
        out.append({"name": _iteration_name(args["prefill_tokens"], args["decode_seqs"], kind),
                    "cat": KINDS[kind], "ph": "X", "pid": values["replica"][i],
                    "tid": TRANSFERS if kind == TRANSFER else ITERATIONS,
                    "ts": ts[i], "dur": dur[i], "args": args})
    return out


def _counter_events(cols: dict[str, np.ndarray], util: np.ndarray,
                    rows: np.ndarray) -> list[dict]:
    """KV utilization and waiting-queue counters at the start of each iteration in `rows`."""
    rows = rows[cols["kind"][rows] != TRANSFER]
    pids, ts = cols["replica"][rows].tolist(), _us(cols["start_s"][rows])
    kv = np.round(util[rows], 6).tolist()
    waiting = cols["waiting"][rows].tolist()
    out = []
    for pid, t, u, w in zip(pids, ts, kv, waiting):
        if u == u:  # skip nan (no KV blocks)
            out.append({"name": "kv utilization", "ph": "C", "pid": pid, "ts": t,
                        "args": {"kv": u}})
        out.append({"name": "waiting", "ph": "C", "pid": pid, "ts": t,
                    "args": {"waiting": w}})
    return out


def iterations_chrome_trace(log: IterationLog, *,
                            max_iterations: int = MAX_TRACE_ITERATIONS) -> dict:
    """Chrome trace of `log` ({"traceEvents": [...], "displayTimeUnit": "ms"}): pid = replica,
    iterations as "X" events, KV utilization and queue as "C" counters, "replica N" names.
    Past `max_iterations` rows only the first ones become events and the counters are sampled
    evenly over the run; "otherData" then says so."""
    if max_iterations < 1:
        raise ConfigError(f"max_iterations={max_iterations!r} must be at least 1")
    cols, n = log.columns(), len(log)
    order = np.argsort(cols["start_s"], kind="stable")
    shown, stride = order[:max_iterations], max(1, math.ceil(n / max_iterations))
    transfers = set(cols["replica"][cols["kind"] == TRANSFER].tolist())
    events = _metadata(log.replicas(), transfers)
    events += _complete_events(cols, shown)
    events += _counter_events(cols, log.kv_utilization(), order[::stride])
    other: dict = {"iterations_total": n, "iterations_shown": int(shown.size),
                   "counter_stride": stride}
    if shown.size < n:
        other["note"] = (f"log has {n} iterations; the first {shown.size} are drawn and the "
                         f"counters keep one iteration in {stride}")
    return {"traceEvents": events, "displayTimeUnit": "ms", "otherData": other}


def write_iterations_trace(log: IterationLog, path: str | PathLike[str], *,
                           max_iterations: int = MAX_TRACE_ITERATIONS) -> None:
    """Write `iterations_chrome_trace(log)` as JSON (gzip-compressed when the name ends .gz)."""
    write_trace(path, iterations_chrome_trace(log, max_iterations=max_iterations))
