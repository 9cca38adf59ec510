"""A day of traffic in bounded memory (#32 item 7): the log-bucket quantile sketch, streamed
workloads generated a chunk at a time, and streamed simulations whose metrics match the exact
(per-request) ones within the sketch's stated accuracy while keeping no per-request state."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
from typer.testing import CliRunner

from meshplan import Cluster, load_model
from meshplan.cli.app import app
from meshplan.errors import ConfigError
from meshplan.serving.metrics import stream as metrics_stream
from meshplan.serving.metrics.sketch import RELATIVE_ACCURACY, LogHistogram
from meshplan.serving.metrics.summary import SLO, Percentiles
from meshplan.serving.plan import ServingPlan
from meshplan.serving.simulate import Simulation, simulate
from meshplan.serving.traffic import stream as traffic_stream
from meshplan.serving.traffic.stream import stream_workload
from meshplan.serving.traffic.workload import MAX_REQUESTS, WorkloadSpec, synthesize

MODEL, CLUSTER = load_model("llama-3.1-8b"), Cluster.build("h100-sxm-80gb", 2)
BOUND = RELATIVE_ACCURACY * (1 + 1e-9)


@pytest.mark.parametrize("data", [
    np.random.default_rng(0).lognormal(3, 1.5, 50_001), np.random.default_rng(1).exponential(5, 7),
    np.array([3.0]), np.concatenate([np.zeros(10), np.random.default_rng(2).uniform(0, 1, 50)])])
def test_sketched_percentiles_are_within_the_stated_accuracy_of_numpys(data):
    sketch = LogHistogram()
    sketch.add(data[: data.size // 2])
    sketch.add(data[data.size // 2:])
    exact = np.percentile(data, [1, 50, 90, 99, 100])
    got = np.array(sketch.percentiles([1, 50, 90, 99, 100]))
    assert np.all(np.abs(got - exact) <= BOUND * np.abs(exact))
    assert sketch.mean() == pytest.approx(data.mean(), rel=1e-12)


def test_weights_count_a_value_that_many_times_and_nan_is_ignored():
    values, counts = np.array([1.0, 10.0, 100.0, np.nan]), np.array([3, 1, 6, 5])
    weighted, repeated = LogHistogram(), LogHistogram()
    weighted.add(values, counts)
    repeated.add(np.repeat(values[:3], counts[:3]))
    assert weighted.percentiles([10, 50, 95]) == repeated.percentiles([10, 50, 95])
    assert weighted.n == 10 and math.isnan(LogHistogram().percentiles([50])[0])
    assert LogHistogram().counts.size < 5000  # bounded, whatever is added


def _metrics_match(exact, streamed) -> None:
    a, b = exact.to_dict(), streamed.to_dict()
    assert a.keys() == b.keys()
    for name, value in a.items():
        if isinstance(value, dict):  # percentiles: sketched; means: exact sums
            assert b[name]["mean"] == pytest.approx(value["mean"], rel=1e-9), name
            for q in ("p50", "p90", "p99"):
                assert abs(b[name][q] - value[q]) <= BOUND * value[q], (name, q)
        elif isinstance(value, float):
            assert b[name] == pytest.approx(value, rel=1e-9), name
        else:
            assert b[name] == value, name


@pytest.mark.parametrize(("plan", "spec"), [
    (ServingPlan(), WorkloadSpec(arrival="poisson", request_rate=25, num_requests=1500, dataset="sharegpt")),
    (ServingPlan(replicas=2), WorkloadSpec(arrival="poisson", request_rate=40, num_requests=1500,
                                           input_len=1024, output_len=128, range_ratio=0.5)),
    (ServingPlan(), WorkloadSpec(arrival="concurrency", concurrency=48, num_requests=1200, dataset="sharegpt")),
])
def test_a_streamed_run_matches_the_exact_metrics_within_the_sketch_bound(monkeypatch, plan, spec):
    monkeypatch.setattr(metrics_stream, "FOLD_ROWS", 300)  # fold (and trim) many times in a small run
    monkeypatch.setattr(metrics_stream.StreamingMetrics.add, "__defaults__", (100,))
    workload = synthesize(spec, seed=0)
    slo = SLO(ttft_ms=150, tpot_ms=30)
    exact = simulate(MODEL, CLUSTER, plan, workload, slo=slo)
    streamed = simulate(MODEL, CLUSTER, plan, workload, slo=slo, streaming=True)
    assert streamed.streamed and not streamed.records and not exact.streamed
    _metrics_match(exact.metrics, streamed.metrics)
    assert streamed.iterations == exact.iterations
    assert streamed.log.busy_s() == pytest.approx(exact.log.busy_s(), rel=1e-9)
    series = streamed.timeseries()
    assert 0 < len(series["t_s"]) <= 50 and max(v for v in series["kv_utilization"] if v is not None) > 0


def test_a_streamed_run_keeps_no_per_request_state(monkeypatch):
    monkeypatch.setattr(metrics_stream, "FOLD_ROWS", 500)
    monkeypatch.setattr(metrics_stream.StreamingMetrics.add, "__defaults__", (200,))
    spec = WorkloadSpec(arrival="poisson", request_rate=30, num_requests=4000, input_len=512, output_len=200)
    sim = Simulation(MODEL, CLUSTER, ServingPlan(), stream_workload(spec, seed=1))
    result = sim.run()
    replica = sim.groups[0][0]
    assert result.metrics.completed == 4000 and sim.records == []
    assert len(sim.log) < 500 and sim.log.rows >= result.iterations
    assert replica.step_base > 0  # decode-step times of finished requests were dropped
    assert len(replica.decode_end_s) < replica.decode.step / 10


def test_stream_workload_chunks_are_reproducible_and_follow_the_spec(monkeypatch):
    monkeypatch.setattr(traffic_stream, "CHUNK", 1000)
    spec = WorkloadSpec(arrival="poisson", request_rate=50, num_requests=4500, dataset="openorca")
    w = stream_workload(spec, seed=3)
    again = stream_workload(spec, seed=3)
    reqs = list(w.requests)
    assert [(r.id, r.arrival_s, r.input_len) for r in reqs] == [
        (r.id, r.arrival_s, r.input_len) for r in again.requests]
    assert w.requests[2999].arrival_s == reqs[2999].arrival_s  # random access rebuilds a chunk
    times = np.array([r.arrival_s for r in reqs])
    assert times[0] == 0 and np.all(np.diff(times) >= 0)
    assert (len(times) - 1) / times[-1] == pytest.approx(50, rel=0.05)
    assert w.last_arrival == times[-1] and len(w) == 4500
    assert w.total_input_tokens == sum(r.input_len for r in reqs)
    assert w.longest_kv == max(r.input_len + r.output_len for r in reqs)
    assert np.mean([r.input_len for r in reqs]) == pytest.approx(222, rel=0.05)


def test_stream_workload_refuses_what_it_cannot_stream():
    with pytest.raises(ConfigError, match="single-turn requests without a shared prefix"):
        stream_workload(WorkloadSpec(turns=2, num_requests=10))
    with pytest.raises(ConfigError, match="is over 1,000,000, the most a workload holds in memory"):
        synthesize(WorkloadSpec(num_requests=MAX_REQUESTS + 1))


def test_a_streamed_workload_is_checked_against_the_kv_cache():
    w = stream_workload(WorkloadSpec(dataset="fixed", input_len=3_000_000, output_len=8, num_requests=3))
    with pytest.raises(ConfigError, match="needs KV for 3,000,008 tokens"):
        simulate(MODEL, CLUSTER, ServingPlan(), w)


def test_serve_simulate_streams_on_request_and_refuses_per_request_outputs(tmp_path):
    runner = CliRunner()
    base = ["serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--num-requests", "300",
            "--request-rate", "10", "--stream", "--quiet"]
    out = runner.invoke(app, [*base, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    assert data["simulation"]["streamed"] is True and data["metrics"]["completed"] == 300
    bad = runner.invoke(app, [*base, "--requests-csv", str(tmp_path / "r.csv")])
    assert bad.exit_code == 2 and "--requests-csv with a streamed run" in bad.output


def test_percentiles_type_is_unchanged_for_streamed_metrics():
    w = stream_workload(WorkloadSpec(num_requests=50, input_len=128, output_len=16))
    m = simulate(MODEL, CLUSTER, ServingPlan(), w).metrics
    assert isinstance(m.ttft_ms, Percentiles) and m.completed == 50


def test_serve_simulate_streams_a_workload_over_a_million_requests_by_itself():
    from meshplan.cli.commands.serve import build_workload
    from meshplan.serving.traffic.stream import StreamWorkload

    big = build_workload(None, None, "stop", 1.0, 0, arrival="poisson", request_rate=100.0,
                         num_requests=MAX_REQUESTS + 1, input_len=64, output_len=8)
    assert isinstance(big, StreamWorkload) and len(big) == MAX_REQUESTS + 1
    assert big.requests[MAX_REQUESTS].arrival_s == big.last_arrival
    small = build_workload(None, None, "stop", 1.0, 0, num_requests=10, input_len=64, output_len=8)
    assert not isinstance(small, StreamWorkload)
