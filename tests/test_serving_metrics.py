"""Serving metrics (vLLM `bench serve` definitions), the iteration log and the output files.

Hand-built records use times on a 1/64 s grid so every latency is exact in binary.
"""

from __future__ import annotations

import csv
import gzip
import json
import math

import numpy as np
import pytest
from rich.console import Console

from meshplan.errors import ConfigError
from meshplan.serving.engine.iterations import IterationLog
from meshplan.serving.metrics.summary import (
    SLO,
    Percentiles,
    compute_metrics,
    kv_utilization_over_time,
    queue_length_over_time,
)
from meshplan.report.serving_outputs import (
    CSV_COLUMNS,
    iterations_chrome_trace,
    write_iterations_trace,
    write_requests_csv,
)
from meshplan.serving.traffic.request import RequestRecord


def record(id, arrival, times, input_len=100, cached=0, preemptions=0, replica=0, done=True):
    times = np.asarray(times, dtype=float)
    return RequestRecord(id=id, arrival_s=arrival, input_len=input_len, output_len=len(times),
                         replica=replica, cached_tokens=cached, preemptions=preemptions,
                         first_token_s=times[0], finish_s=times[-1] if done else math.nan,
                         token_times_s=times)


def records():
    return [
        record(0, 0.0, [0.125, 0.1875, 0.3125, 0.375], 100, cached=50, preemptions=1),
        record(1, 0.0625, [0.25], 200, replica=1),                       # one token: no TPOT
        record(2, 0.125, [0.5, 0.53125, 0.53125, 0.625], 300, cached=150),  # two share a step
        record(3, 0.25, [0.4375], 1000, cached=1000, preemptions=2, done=False),
    ]


TTFT, E2E = [125.0, 187.5, 375.0], [375.0, 187.5, 500.0]
TPOT = [250.0 / 3, 125.0 / 3]
ITL = [62.5, 125.0, 62.5, 31.25, 93.75]
DURATION = 0.625  # first arrival 0 -> last finish 0.625


def expected(values):
    p50, p90, p99 = np.percentile(values, [50, 90, 99])
    return pytest.approx({"mean": np.mean(values), "p50": p50, "p90": p90, "p99": p99})


def test_latencies_follow_vllm_definitions():
    m = compute_metrics(records())
    assert m.ttft_ms.to_dict() == expected(TTFT)
    assert m.e2e_ms.to_dict() == expected(E2E)
    assert m.tpot_ms.to_dict() == expected(TPOT)  # the one-token request is left out
    assert m.itl_ms.to_dict() == expected(ITL)  # zero gap (same step) dropped
    assert (m.ttft_ms.p50, m.ttft_ms.p90, m.ttft_ms.p99) == (187.5, 337.5, 371.25)


def test_totals_and_throughput_over_the_known_duration():
    m = compute_metrics(records())
    assert m.completed == 3 and m.duration_s == DURATION
    assert (m.total_input_tokens, m.total_output_tokens) == (600, 9)
    assert m.requests_per_s == pytest.approx(3 / DURATION)
    assert m.output_tokens_per_s == pytest.approx(9 / DURATION)
    assert m.total_tokens_per_s == pytest.approx(609 / DURATION)
    assert m.prefix_cache_hit_rate == pytest.approx(200 / 600)
    assert m.preemptions == 3  # unfinished requests' preemptions count too
    assert m.goodput_requests_per_s is None
    assert m.mean_kv_utilization is None and m.max_queue_len is None


@pytest.mark.parametrize(("slo", "good"), [
    (SLO(ttft_ms=187.5), 2),             # the bound itself meets the objective
    (SLO(tpot_ms=50.0), 2),              # a one-token request has TPOT 0
    (SLO(ttft_ms=187.5, tpot_ms=50.0), 1),
    (SLO(e2e_ms=500.0), 3),
    (SLO(e2e_ms=100.0), 0),
])
def test_goodput_counts_requests_meeting_every_slo(slo, good):
    m = compute_metrics(records(), slo=slo)
    assert m.goodput_requests_per_s == pytest.approx(good / DURATION)


@pytest.mark.parametrize("kwargs", [{}, {"ttft_ms": 0.0}, {"tpot_ms": -1.0}])
def test_slo_rejects_empty_or_nonpositive_objectives(kwargs):
    with pytest.raises(ConfigError, match="SLO"):
        SLO(**kwargs)


def test_percentiles_ignore_nan_and_empty_is_all_none():
    p = Percentiles.of(np.array([np.nan, 1.0, 3.0]))
    assert (p.mean, p.p50) == (2.0, 2.0)
    assert Percentiles.of(np.array([])).to_dict() == dict.fromkeys(("mean", "p50", "p90", "p99"))


def test_no_completed_requests_gives_json_nulls():
    m = compute_metrics([record(0, 0.0, [0.5], done=False)], slo=SLO(ttft_ms=1.0))
    d = json.loads(json.dumps(m.to_dict(), allow_nan=False))
    assert d["completed"] == 0 and d["ttft_ms"]["p99"] is None
    assert d["requests_per_s"] is None and d["goodput_requests_per_s"] is None
    assert compute_metrics([]).completed == 0


def test_to_dict_keys_and_json():
    d = compute_metrics(records(), log=small_log(), slo=SLO(ttft_ms=200.0)).to_dict()
    json.dumps(d, allow_nan=False)
    for key in ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms"):
        assert set(d[key]) == {"mean", "p50", "p90", "p99"}
    assert {"output_tokens_per_s", "total_tokens_per_s", "requests_per_s",
            "goodput_requests_per_s", "completed", "duration_s", "total_input_tokens",
            "total_output_tokens", "mean_kv_utilization", "max_queue_len", "preemptions",
            "prefix_cache_hit_rate"} <= set(d)


def test_rich_rendering_names_every_row():
    console = Console(record=True, width=120, color_system=None)
    console.print(compute_metrics(records(), slo=SLO(ttft_ms=200.0)))
    text = console.export_text()
    for row in ("TTFT (ms)", "TPOT (ms)", "ITL (ms)", "E2E (ms)", "Request throughput",
                "Request goodput", "Output token throughput", "Total token throughput"):
        assert row in text
    assert "187.50" in text  # TTFT median


def small_log() -> IterationLog:
    log = IterationLog()
    log.append(0, 0.0, 0.1, 2048, 37, 40, 2, 50, 100)
    log.append(0, 0.1, 0.4, 0, 64, 64, 5, 100, 100, kind="decode")
    log.append(1, 0.0, 0.2, 512, 0, 4, 0, 0, 200, preempted=1, kind="prefill")
    log.append(1, 0.2, 0.3, 0, 0, 0, 9, 200, 200, kind="transfer")  # not an iteration
    return log


def test_iteration_log_columns_and_busy_time():
    log = small_log()
    assert len(log) == 4 and log.replicas() == [0, 1]
    assert log.column("prefill_tokens").tolist() == [2048, 0, 512, 0]
    assert log.column("waiting", replica=0).tolist() == [2, 5]
    assert log.kinds().tolist() == ["mixed", "decode", "prefill", "transfer"]
    assert log.busy_s() == pytest.approx(0.6)
    assert log.busy_s(1) == pytest.approx(0.2)


def test_iteration_log_rejects_bad_rows_without_tearing_columns():
    log = small_log()
    with pytest.raises(ConfigError, match="kind"):
        log.append(0, 0.4, 0.5, 0, 1, 1, 0, 1, 1, kind="verify")
    with pytest.raises(ConfigError, match="num_seqs"):
        log.append(0, 0.4, 0.5, 0, 1, 1.5, 0, 1, 1)
    assert {len(log.column(name)) for name in ("replica", "num_seqs", "kind")} == {4}
    with pytest.raises(ConfigError, match="no column"):
        log.column("tokens")


def test_engine_statistics_from_the_log():
    m = compute_metrics(records(), log=small_log())
    assert m.mean_kv_utilization == pytest.approx((0.5 * 0.1 + 1.0 * 0.3) / 0.6)
    assert m.max_queue_len == 5  # the transfer row's 9 is not a queue


def test_time_series_weight_iterations_by_overlap():
    t, kv = kv_utilization_over_time(small_log(), np.array([0.0, 0.05, 0.15, 0.4]))
    assert t.tolist() == pytest.approx([0.025, 0.1, 0.275])
    assert kv.tolist() == pytest.approx([0.25, 0.375, 0.5])  # busy replicas weigh alike
    t, queue = queue_length_over_time(small_log(), 4)
    assert t.tolist() == pytest.approx([0.05, 0.15, 0.25, 0.35])
    assert queue.tolist() == pytest.approx([2.0, 5.0, 5.0, 5.0])
    with pytest.raises(ConfigError, match="bins"):
        queue_length_over_time(small_log(), 0)


def test_requests_csv_round_trip(tmp_path):
    path = tmp_path / "requests.csv"
    write_requests_csv(records(), path)
    with path.open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert tuple(rows[0]) == CSV_COLUMNS and len(rows) == 4
    assert [int(r["id"]) for r in rows] == [0, 1, 2, 3]
    assert [float(r["ttft_ms"]) for r in rows[:3]] == TTFT
    assert float(rows[0]["tpot_ms"]) == pytest.approx(250 / 3, abs=1e-3)
    assert rows[1]["tpot_ms"] == "" and rows[1]["replica"] == "1"
    assert rows[3]["finish_s"] == "" and rows[3]["e2e_ms"] == ""
    assert (rows[2]["cached_tokens"], rows[3]["preemptions"]) == ("150", "2")


def test_chrome_trace_structure():
    trace = json.loads(json.dumps(iterations_chrome_trace(small_log())))
    events = trace["traceEvents"]
    assert trace["displayTimeUnit"] == "ms"
    assert {e["ph"] for e in events} == {"M", "X", "C"}
    names = {e["pid"]: e["args"]["name"] for e in events if e["name"] == "process_name"}
    assert names == {0: "replica 0", 1: "replica 1"}
    spans = [e for e in events if e["ph"] == "X"]
    assert [e["name"] for e in spans] == ["prefill 2048 + decode 37", "prefill 512",
                                          "decode 64", "kv transfer"]
    first = spans[0]
    assert (first["pid"], first["tid"], first["ts"], first["dur"]) == (0, 0, 0.0, 100000.0)
    assert first["args"]["kv_used_blocks"] == 50 and first["args"]["kind"] == "mixed"
    assert spans[-1]["tid"] == 1  # transfers on their own thread
    counters = {(e["pid"], e["name"]) for e in events if e["ph"] == "C"}
    assert counters == {(r, n) for r in (0, 1) for n in ("kv utilization", "waiting")}
    assert "note" not in trace["otherData"]


def test_chrome_trace_caps_iterations_and_samples_counters(tmp_path):
    log = IterationLog()
    for i in range(10):
        log.append(0, i * 0.01, i * 0.01 + 0.01, 0, 8, 8, 0, i, 10, kind="decode")
    path = tmp_path / "iterations.json.gz"
    write_iterations_trace(log, path, max_iterations=4)
    trace = json.loads(gzip.decompress(path.read_bytes()))
    events = trace["traceEvents"]
    assert sum(e["ph"] == "X" for e in events) == 4
    assert sum(e["name"] == "waiting" for e in events) == 4  # every 3rd of 10 rows
    assert trace["otherData"]["counter_stride"] == 3 and "note" in trace["otherData"]


def test_100k_requests_are_vectorized():
    n, tokens = 100_000, 32
    arrival = np.arange(n) * 0.01
    times = arrival[:, None] + 0.1 + 0.02 * np.arange(tokens)[None, :]
    recs = [RequestRecord(id=i, arrival_s=a, input_len=64, output_len=tokens,
                          first_token_s=t[0], finish_s=t[-1], token_times_s=t)
            for i, (a, t) in enumerate(zip(arrival.tolist(), times))]
    m = compute_metrics(recs, slo=SLO(ttft_ms=150.0))
    assert m.completed == n and m.total_output_tokens == n * tokens
    assert m.ttft_ms.p99 == pytest.approx(100.0)
    assert m.itl_ms.mean == pytest.approx(20.0) and m.tpot_ms.p50 == pytest.approx(20.0)
    assert m.goodput_requests_per_s == pytest.approx(m.requests_per_s)
