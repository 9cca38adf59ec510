"""Serving prediction bands (meshplan.bands.serving): the promise (80% +- 5% of published serving
metrics inside their band under leave-one-source-out, per quantity), the tail quantities' own
pools, the out-of-regime flag, and the bands in `serve simulate`, `serve plan` and `validate`.
Also the timed-arrival records of validate: one round-robin replica's exact share."""

from __future__ import annotations

import dataclasses
import json

import pytest
from typer.testing import CliRunner

from meshplan.bands.serving import KINDS, band, coverage, kind_of, log_range, pool
from meshplan.bands.serving_regime import ServingRegime
from meshplan.cli.app import app
from meshplan.validate.records import parse_record
from meshplan.validate.serving_records import one_replica, predict_serving, serving_case

runner = CliRunner()
H100_VLLM = ServingRegime(moe=False, architecture="hopper", engine="vllm", precision="bf16",
                          disaggregated=False, load="offline", input_len=1024, output_len=256)


@pytest.mark.parametrize("kind", KINDS)
def test_leave_one_source_out_coverage_is_80_percent(kind):
    # Each record's band from the other sources' residuals of its quantity, as a new source sees it.
    inside, n = coverage(kind)
    tolerance = 0.05 if n >= 50 else 0.15
    assert abs(inside / n - 0.80) <= tolerance, f"{kind}: {inside} of {n} inside ({inside / n:.0%})"


def test_tails_have_their_own_pools():
    assert kind_of("ttft_ms", "p99") == "ttft_tail" and kind_of("ttft_ms", "mean") == "ttft"
    assert kind_of("tpot_ms", "p90") == "tpot_tail" and kind_of("itl_ms", "p50") == "tpot"
    assert kind_of("output_tokens_per_s") == "throughput"
    assert len(pool("ttft_tail")) >= 50 and len(pool("tpot_tail")) >= 50
    timed = dataclasses.replace(H100_VLLM, engine="tensorrt-llm", load="timed", input_len=300, output_len=300)
    assert log_range(timed, "ttft_tail")[:2] != log_range(timed, "ttft")[:2]


def test_bands_are_ordered_and_out_of_regime_is_wider():
    inside = band(H100_VLLM, "output_tokens_per_s", 1000.0)
    assert inside.low < inside.high
    # int8 weights: no published serving value in the pools (int4 has one since Kimi K2 Thinking's
    # INT4 checkpoint joined the held-out records)
    odd = dataclasses.replace(H100_VLLM, engine="sglang", precision="int8", architecture="ampere", moe=True)
    outside = band(odd, "output_tokens_per_s", 1000.0)
    assert any("int8" in r for r in outside.extrapolating)
    assert outside.high / outside.low > inside.high / inside.low


def test_simulate_json_and_table_carry_bands():
    args = ["serve", "simulate", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb", "--input-len", "512",
            "--output-len", "128", "--num-requests", "64", "--request-rate", "4"]
    out = runner.invoke(app, [*args, "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.stdout)
    iv, metrics = data["intervals"], data["metrics"]
    for name in ("output_tokens_per_s", "requests_per_s"):
        assert iv[name]["low"] < metrics[name] * 1.5 and iv[name]["low"] < iv[name]["high"]
    for name in ("ttft_ms", "tpot_ms"):
        for stat in ("mean", "p99"):
            assert iv[name][stat]["low"] < iv[name][stat]["high"]
    assert isinstance(data["extrapolating"], list)
    table = runner.invoke(app, args)
    assert table.exit_code == 0, table.output
    assert "p10-p90" in table.stdout and "P99 p10-p90" in table.stdout


def test_serve_plan_json_plans_carry_bands():
    out = runner.invoke(app, ["serve", "plan", "--model", "llama-3.1-8b", "--gpu", "h100-sxm-80gb",
                              "--request-rate", "4", "--slo-ttft-ms", "1000", "--num-requests", "100",
                              "--max-gpus", "1", "--top", "1", "--json"])
    assert out.exit_code == 0, out.output
    best = json.loads(out.stdout)["plans"][0]
    assert best["intervals"]["ttft_ms"]["p99"]["low"] < best["intervals"]["ttft_ms"]["p99"]["high"]
    assert isinstance(best["extrapolating"], list)


TIMED = {"id": "timed", "kind": "serving", "source": {"name": "test"}, "model": "llama-3.1-8b",
         "hardware": {"gpu": "h100-sxm-80gb", "num_gpus": 4, "gpus_per_node": 8},
         "serving": {"engine": "vllm", "tp": 1, "workload": {"mode": "poisson", "input_len": 256,
                                                             "output_len": 64, "request_rate": 16.0,
                                                             "num_requests": 2400}},
         "measured": {"output_tokens_per_s": 1000.0}}


def test_a_timed_record_is_simulated_as_one_round_robin_replica():
    case = serving_case(parse_record(TIMED, "test"))
    assert case.plan.replicas == 4 and len(case.workload.requests) == 2400
    alone, replicas = one_replica(case)
    assert replicas == 4 and alone.plan.replicas == 1
    assert [r.arrival_s for r in alone.workload.requests] == [r.arrival_s for r in case.workload.requests[::4]]
    # A sustained rate serves rate x output tokens/s; the whole 2,400-request run's drain is short.
    predicted = predict_serving(case)["output_tokens_per_s"]
    assert predicted == pytest.approx(16.0 * 64, rel=0.05)
    offline = parse_record({**TIMED, "serving": {**TIMED["serving"], "workload": {
        **TIMED["serving"]["workload"], "mode": "offline", "request_rate": None}}}, "test")
    assert one_replica(serving_case(offline))[1] == 1


def test_mlperf_records_cite_their_log_and_derivation():
    from meshplan.records import HELD_OUT
    from meshplan.validate.records import load_records

    records = load_records(HELD_OUT / "mlperf-inference-v5.1.yaml")
    assert len(records) >= 250
    for r in records:
        assert r.source["repo"] == "mlcommons/inference_results_v5.1" and len(r.source["commit"]) == 40
        assert r.source["path"].endswith("mlperf_log_summary.txt") and "output_len" in r.notes
    timed = [r for r in records if r.serving.workload.mode == "poisson"]
    assert timed and all(r.serving.slo.percentile == 99 and r.measured.ttft_ms_p99 for r in timed)
